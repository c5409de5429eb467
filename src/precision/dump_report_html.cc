// dump_report_html.cc: the HTML report of compare-dumps (see dump_report_html.h).
#include "src/precision/dump_report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/precision/dump_reader.h"

namespace recsdk::internal {

namespace {

constexpr int kGraphHops = 2;
constexpr int kHistogramBins = 40;

constexpr char kStyle[] = R"(body{font-family:sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.5em}
table#rows{border-collapse:collapse;font-size:.85em}
#rows th,#rows td{border:1px solid #ccc;padding:2px 6px;text-align:right}
#rows td.s{text-align:left}#rows th{cursor:pointer;background:#eee;position:sticky;top:0}
tr.ok{background:#e6f4e6}tr.near{background:#fff3cd}tr.bad{background:#f8d7da}
tr.culprit td{font-weight:bold}.legend span{padding:0 .5em;margin-right:.5em}
.node rect{fill:#f4f4f4;stroke:#666}.node.external rect{stroke-dasharray:4 3;fill:#fff}
.node.culprit rect{fill:#f8d7da;stroke:#c00;stroke-width:3}
svg text{font-family:monospace;font-size:11px}.edge{stroke:#888;fill:none}
.histogram{border:1px solid #ddd;margin-right:1em}.hist-bar.left{fill:#1f77b4}
.hist-bar.right{fill:#ff7f0e})";

// Click a header to sort by that column; numbers by the cell's data-v, text otherwise.
constexpr char kScript[] = R"(document.querySelectorAll('#rows th').forEach(function(th,i){
th.addEventListener('click',function(){var tb=th.closest('table').tBodies[0];
var d=th.dataset.dir==='asc'?-1:1;th.dataset.dir=d===1?'asc':'desc';var n='num' in th.dataset;
Array.from(tb.rows).sort(function(a,b){var x=a.cells[i],y=b.cells[i];return d*(n?
parseFloat(x.dataset.v)-parseFloat(y.dataset.v):x.textContent.localeCompare(y.textContent));})
.forEach(function(r){tb.appendChild(r);});});});)";

// Shorten: at most `max` bytes of `s`, cut on a UTF-8 character boundary, "..." when cut.
std::string Shorten(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t end = max - 3;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end) + "...";
}

// ProducerNode: the node of a manifest's "node:index".
std::string ProducerNode(const std::string& producer) {
  const size_t colon = producer.rfind(':');
  return colon == std::string::npos ? producer : producer.substr(0, colon);
}

// FusedSummaryText: what the summary says of a row's op: the recorded fused_from (compare-dumps'
// `fused`), or, for a fused type in a dump written before manifests recorded it, that it is fused.
std::string FusedSummaryText(const TensorComparison& r) {
  if (!r.fused.empty()) return r.fused;
  if (r.type.rfind("Fused", 0) == 0 || r.type == "TableGatherConcat") {
    return "fused by a fusion pass (this dump does not record the ops it replaced: dumped before "
           "manifests had fused_from)";
  }
  return "";
}

std::string Summary(const DumpComparison& c, const std::string& left, const std::string& right) {
  std::set<int64_t> steps;
  std::set<std::pair<int64_t, std::string>> ops;
  std::map<std::pair<std::string, std::string>, std::string> fused;  // (op, type) -> text
  int64_t differ = 0;
  for (const TensorComparison& r : c.rows) {
    steps.insert(r.step);
    ops.emplace(r.step, r.op);
    if (std::string text = FusedSummaryText(r); !text.empty())
      fused.emplace(std::pair(r.op, r.type), text);
    if (!r.agree) ++differ;
  }
  std::string html = "<h2>Summary</h2>\n<table class=\"summary\">\n";
  html += fmt::format("<tr><th>LEFT</th><td>{}</td></tr>\n<tr><th>RIGHT</th><td>{}</td></tr>\n",
                      HtmlEscape(left), HtmlEscape(right));
  html += fmt::format(
      "<tr><th>compared</th><td>steps: {}, ops: {}, tensors: {}; {} differ (cosine &lt; {} "
      "or NaN/Inf placement)</td></tr>\n",
      steps.size(), ops.size(), c.rows.size(), differ, c.threshold);
  std::string verdict;
  if (differ == 0) {
    verdict = "all compared tensors agree";
  } else if (c.culprit) {
    verdict = "<span class=\"culprit-name\">" + HtmlEscape(*c.culprit) + "</span>";
  } else {
    verdict =
        "no op with agreeing inputs and differing outputs: the first difference comes from outside "
        "the dump (see the notes)";
  }
  html += "<tr><th>first op whose inputs agree but outputs differ</th><td id=\"culprit\">" +
          verdict + "</td></tr>\n";
  std::string fused_text = "none";
  if (!fused.empty()) {
    fused_text.clear();
    for (const auto& [op, text] : fused) {
      fused_text += fmt::format("<div class=\"fused\">\"{}\" ({}): {}</div>", HtmlEscape(op.first),
                                HtmlEscape(op.second), HtmlEscape(text));
    }
  }
  html += "<tr><th>fused ops</th><td>" + fused_text + "</td></tr>\n</table>\n";
  if (!c.notes.empty()) {
    html += "<h2>Notes</h2>\n<ul>\n";
    for (const std::string& n : c.notes) html += "<li>" + HtmlEscape(n) + "</li>\n";
    html += "</ul>\n";
  }
  return html;
}

std::string RowsTable(const DumpComparison& c) {
  std::string html =
      "<h2>Tensors</h2>\n<p class=\"legend\"><span style=\"background:#e6f4e6\">"
      "agree</span><span style=\"background:#fff3cd\">differ, cosine &ge; 0.9</span>"
      "<span style=\"background:#f8d7da\">differ, cosine &lt; 0.9</span> Click a column to "
      "sort.</p>\n<table id=\"rows\">\n<thead><tr><th data-num>step</th><th>op</th><th>type</th>"
      "<th>direction</th><th data-num>port</th><th data-num>elements</th><th data-num>cosine</th>"
      "<th data-num>max_abs</th><th data-num>max_rel</th><th data-num>first_diff</th>"
      "<th data-num>agree</th><th>note</th><th>fused</th></tr></thead>\n<tbody>\n";
  const std::optional<DumpCulprit>& at = c.culprit_at;
  for (const TensorComparison& r : c.rows) {
    std::string cls = r.agree ? "ok" : (r.cosine >= 0.9 ? "near" : "bad");
    if (at && r.step == at->step && r.op == at->op) cls += " culprit";
    html += fmt::format(
        "<tr class=\"row {}\"><td data-v=\"{}\">{}</td><td class=\"s\">{}</td><td class=\"s\">{}"
        "</td><td class=\"s\">{}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td>"
        "<td data-v=\"{:.17g}\">{:.6f}</td><td data-v=\"{:.17g}\">{:.4g}</td>"
        "<td data-v=\"{:.17g}\">{:.4g}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td>"
        "<td class=\"s\">{}</td><td class=\"s\">{}</td></tr>\n",
        cls, r.step, r.step, HtmlEscape(r.op), HtmlEscape(r.type), HtmlEscape(r.direction), r.port,
        r.port, r.elements, r.elements, r.cosine, r.cosine, r.max_abs, r.max_abs, r.max_rel,
        r.max_rel, r.first_diff, r.first_diff, r.agree ? 1 : 0, r.agree ? "yes" : "no",
        HtmlEscape(r.note), HtmlEscape(r.fused));
  }
  return html + "</tbody>\n</table>\n";
}

struct GraphNode {
  std::string name, type;
  int64_t seq = -1;  // -1: not an op of the manifest (a feed, a variable)
  const DumpOp* op = nullptr;
  int layer = 0;
};

// NeighbourhoodSvg: the culprit's producers and consumers up to kGraphHops out, from `step`.
std::string NeighbourhoodSvg(const DumpStep& step, const DumpCulprit& at) {
  std::map<std::string, const DumpOp*> by_name;  // a repeated name: the first one
  std::map<std::string, std::vector<const DumpOp*>> consumers;
  for (const DumpOp& op : step.ops) {
    by_name.emplace(op.name, &op);
    for (const DumpTensor& in : op.inputs) consumers[ProducerNode(in.producer)].push_back(&op);
  }
  if (!by_name.contains(at.op)) {
    return "<p>The culprit is not in LEFT's manifest of its step any more; no graph.</p>\n";
  }
  // Breadth first, both directions at once, so the nearest ops are kept when the cap bites.
  std::map<std::string, int> chosen;  // name -> index in nodes
  std::vector<GraphNode> nodes;
  std::set<std::string> left_out;  // each counted once, however many ops reach it
  auto add = [&](const std::string& name) -> bool {
    if (chosen.contains(name)) return false;
    if (static_cast<int>(nodes.size()) >= kMaxReportGraphNodes) {
      left_out.insert(name);
      return false;
    }
    GraphNode n;
    n.name = name;
    if (auto it = by_name.find(name); it != by_name.end()) {
      n.op = it->second;
      n.type = n.op->type;
      n.seq = n.op->seq;
    }
    chosen.emplace(name, static_cast<int>(nodes.size()));
    nodes.push_back(std::move(n));
    return true;
  };
  add(at.op);
  // (name, hops, direction: -1 upstream, +1 downstream)
  std::deque<std::tuple<std::string, int, int>> queue = {{at.op, 0, -1}, {at.op, 0, 1}};
  while (!queue.empty()) {
    auto [name, hops, dir] = queue.front();
    queue.pop_front();
    if (hops == kGraphHops) continue;
    std::vector<std::string> next;
    if (dir < 0) {
      if (auto it = by_name.find(name); it != by_name.end()) {
        for (const DumpTensor& in : it->second->inputs) next.push_back(ProducerNode(in.producer));
      }
    } else if (auto it = consumers.find(name); it != consumers.end()) {
      for (const DumpOp* op : it->second) next.push_back(op->name);
    }
    for (const std::string& n : next) {
      if (add(n)) queue.emplace_back(n, hops + 1, dir);
    }
  }
  // Edges among the chosen nodes, each producer -> consumer pair once.
  std::set<std::pair<int, int>> edges;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].op == nullptr) continue;
    for (const DumpTensor& in : nodes[i].op->inputs) {
      auto it = chosen.find(ProducerNode(in.producer));
      if (it != chosen.end() && it->second != static_cast<int>(i)) {
        edges.emplace(it->second, static_cast<int>(i));
      }
    }
  }
  // Layers: in execution order (outside ops first), one below the lowest chosen producer.
  std::vector<int> order(nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return nodes[a].seq < nodes[b].seq; });
  std::vector<bool> placed(nodes.size(), false);
  for (int i : order) {
    for (const auto& [p, c] : edges) {
      if (c == i && placed[p]) nodes[i].layer = std::max(nodes[i].layer, nodes[p].layer + 1);
    }
    placed[i] = true;
  }
  std::map<int, std::vector<int>> layers;  // layer -> nodes, in execution order
  for (int i : order) layers[nodes[i].layer].push_back(i);
  // A wide layer (an op with many consumers) wraps onto several rows of kPerRow boxes.
  constexpr int kW = 200, kH = 40, kGapX = 24, kGapY = 48, kMargin = 12, kPerRow = 6;
  std::vector<std::vector<int>> rows;
  for (const auto& [layer, members] : layers) {
    for (size_t k = 0; k < members.size(); k += kPerRow) {
      rows.emplace_back(members.begin() + k,
                        members.begin() + std::min(members.size(), k + kPerRow));
    }
  }
  size_t widest = 1;
  for (const std::vector<int>& r : rows) widest = std::max(widest, r.size());
  const int width = kMargin * 2 + static_cast<int>(widest) * (kW + kGapX) - kGapX;
  const int height = kMargin * 2 + static_cast<int>(rows.size()) * (kH + kGapY) - kGapY;
  std::vector<std::pair<int, int>> xy(nodes.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const int row_width = static_cast<int>(rows[r].size()) * (kW + kGapX) - kGapX;
    int x = (width - row_width) / 2;
    for (int i : rows[r]) {
      xy[i] = {x, kMargin + static_cast<int>(r) * (kH + kGapY)};
      x += kW + kGapX;
    }
  }
  std::string svg = fmt::format(
      "<svg class=\"graph\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\">\n<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" "
      "refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0L10,5L0,10z\" "
      "fill=\"#888\"/></marker></defs>\n",
      width, height, width, height);
  for (const auto& [p, c] : edges) {
    svg += fmt::format(
        "<line class=\"edge\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" "
        "marker-end=\"url(#arrow)\"/>\n",
        xy[p].first + kW / 2, xy[p].second + kH, xy[c].first + kW / 2, xy[c].second);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const GraphNode& n = nodes[i];
    const bool culprit = n.name == at.op;
    const std::string type = n.op == nullptr ? std::string("not in the dump (a feed?)") : n.type;
    svg += fmt::format(
        "<g class=\"node{}\"><title>{} ({})</title><rect x=\"{}\" y=\"{}\" width=\"{}\" "
        "height=\"{}\" rx=\"4\"/><text x=\"{}\" y=\"{}\">{}</text><text x=\"{}\" y=\"{}\" "
        "fill=\"#555\">{}</text></g>\n",
        culprit ? " culprit" : (n.op == nullptr ? " external" : ""), HtmlEscape(n.name),
        HtmlEscape(type), xy[i].first, xy[i].second, kW, kH, xy[i].first + 6, xy[i].second + 16,
        HtmlEscape(Shorten(n.name, 30)), xy[i].first + 6, xy[i].second + 32,
        HtmlEscape(Shorten(type, 30)));
  }
  svg += "</svg>\n";
  if (!left_out.empty()) {
    svg += fmt::format("<p>{} more ops within {} hops left out (at most {} shown).</p>\n",
                       left_out.size(), kGraphHops, kMaxReportGraphNodes);
  }
  return svg;
}

struct Histogram {
  std::vector<int64_t> counts = std::vector<int64_t>(kHistogramBins, 0);
  int64_t nan = 0, inf = 0, elements = 0;
};

std::string HistogramSvg(const char* side, const std::string& dir, const Histogram& h, double lo,
                         double hi, int64_t ymax) {
  constexpr int kW = 420, kH = 200, kLeft = 48, kBottom = 28, kTop = 24;
  const double bar = static_cast<double>(kW - kLeft - 8) / kHistogramBins;
  std::string svg = fmt::format(
      "<svg class=\"histogram\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\">\n<title>{}: {}</title>\n<text x=\"{}\" y=\"16\">{} ({} elements, "
      "{} NaN, {} Inf)</text>\n",
      kW, kH, kW, kH, side, HtmlEscape(dir), kLeft, side, h.elements, h.nan, h.inf);
  const int plot_h = kH - kTop - kBottom;
  const std::string cls = side[0] == 'L' ? "left" : "right";
  for (int b = 0; b < kHistogramBins; ++b) {
    if (h.counts[b] == 0) continue;
    const double bh =
        ymax > 0 ? static_cast<double>(h.counts[b]) / static_cast<double>(ymax) * plot_h : 0;
    svg += fmt::format(
        "<rect class=\"hist-bar {}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\">"
        "<title>{}</title></rect>\n",
        cls, kLeft + b * bar, kTop + plot_h - bh, std::max(bar - 1, 1.0), bh, h.counts[b]);
  }
  svg += fmt::format(
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/>\n<text x=\"{}\" "
      "y=\"{}\">{:.4g}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.4g}</text>"
      "<text x=\"2\" y=\"{}\">{}</text><text x=\"2\" y=\"{}\">0</text>\n</svg>\n",
      kLeft, kTop + plot_h, kW - 8, kTop + plot_h, kLeft, kH - 8, lo, kW - 8, kH - 8, hi, kTop + 10,
      ymax, kTop + plot_h);
  return svg;
}

// Histograms: the culprit's first differing output in LEFT and RIGHT, same bins and scale.
StatusOr<std::string> Histograms(Env* env, const DumpComparison& c, const DumpStep& lstep,
                                 const DumpStep& rstep) {
  const DumpCulprit& at = *c.culprit_at;
  int port = -1;
  for (const TensorComparison& r : c.rows) {
    if (r.step == at.step && r.op == at.op && r.direction == "output" && !r.agree) {
      port = r.port;
      break;
    }
  }
  auto find = [&](const DumpStep& step) -> const DumpTensor* {
    for (const DumpOp& op : step.ops) {
      if (op.name != at.op) continue;
      for (const DumpTensor& t : op.outputs) {
        if (t.port == port && !t.file.empty()) return &t;
      }
      return nullptr;
    }
    return nullptr;
  };
  const DumpTensor* lt = find(lstep);
  const DumpTensor* rt = find(rstep);
  if (lt == nullptr || rt == nullptr) {
    return std::string("<p>The culprit's differing output is not in both dumps any more.</p>\n");
  }
  RECSDK_ASSIGN_OR_RETURN(std::string lp, ReadDumpTensor(env, lstep, *lt));
  RECSDK_ASSIGN_OR_RETURN(std::string rp, ReadDumpTensor(env, rstep, *rt));
  const std::vector<double> lv = DumpValues(lt->dtype, lp);
  const std::vector<double> rv = DumpValues(rt->dtype, rp);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const std::vector<double>* v : {&lv, &rv}) {
    for (double x : *v) {
      if (std::isfinite(x)) {
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
    }
  }
  if (!(lo <= hi)) lo = hi = 0;  // no finite value on either side
  if (lo == hi) {
    lo -= 0.5;
    hi += 0.5;
  }
  auto fill = [&](const std::vector<double>& v) {
    Histogram h;
    h.elements = static_cast<int64_t>(v.size());
    for (double x : v) {
      if (std::isnan(x)) {
        ++h.nan;
      } else if (std::isinf(x)) {
        ++h.inf;
      } else {
        // Halves, so values near the double range do not overflow to Inf - Inf; a NaN position
        // (lo == hi after widening a huge value) goes to the first bin, never through the cast.
        const double f = (x / 2 - lo / 2) / (hi / 2 - lo / 2) * kHistogramBins;
        const double bin = f >= 0 ? std::min(f, kHistogramBins - 1.0) : 0.0;
        ++h.counts[static_cast<int>(bin)];
      }
    }
    return h;
  };
  const Histogram lh = fill(lv), rh = fill(rv);
  int64_t ymax = 0;
  for (int b = 0; b < kHistogramBins; ++b) ymax = std::max({ymax, lh.counts[b], rh.counts[b]});
  return fmt::format(
             "<p>Output {} of \"{}\", {} bins over [{:.6g}, {:.6g}] on both sides, the same "
             "count scale.</p>\n<div class=\"histograms\">\n",
             port, HtmlEscape(at.op), kHistogramBins, lo, hi) +
         HistogramSvg("LEFT", lstep.dir, lh, lo, hi, ymax) +
         HistogramSvg("RIGHT", rstep.dir, rh, lo, hi, ymax) + "</div>\n";
}

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n') {
          out += "&#xFFFD;";
        } else {
          out += ch;
        }
    }
  }
  return out;
}

StatusOr<std::string> DumpReportHtml(Env* env, const DumpComparison& comparison,
                                     const std::string& left, const std::string& right) {
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>recsdk "
      "compare-dumps: {} vs {}</title>\n<style>\n{}\n</style>\n</head>\n<body>\n<h1>recsdk "
      "compare-dumps</h1>\n",
      HtmlEscape(left), HtmlEscape(right), kStyle);
  html += Summary(comparison, left, right);
  html += "<h2>Graph around the culprit</h2>\n";
  std::string histograms;
  if (comparison.culprit_at) {
    const DumpCulprit& at = *comparison.culprit_at;
    RECSDK_ASSIGN_OR_RETURN(DumpStep lstep, ReadDumpManifest(env, at.left_dir));
    RECSDK_ASSIGN_OR_RETURN(DumpStep rstep, ReadDumpManifest(env, at.right_dir));
    html += fmt::format(
        "<p>Step {}, from LEFT's manifest: producers above, consumers below, up to {} hops; the "
        "culprit in red, ops not in the dump dashed. Hover a box for its full name.</p>\n",
        at.step, kGraphHops);
    html += NeighbourhoodSvg(lstep, at);
    RECSDK_ASSIGN_OR_RETURN(histograms, Histograms(env, comparison, lstep, rstep));
  } else {
    html += "<p>No culprit (no op whose inputs agree and outputs differ), so no graph.</p>\n";
    histograms = "<p>No culprit, so no histograms.</p>\n";
  }
  html += "<h2>The culprit's output in LEFT and RIGHT</h2>\n" + histograms;
  html += RowsTable(comparison);
  html += fmt::format("<script>\n{}\n</script>\n</body>\n</html>\n", kScript);
  return html;
}

Status WriteDumpReportHtml(Env* env, const DumpComparison& comparison, const std::string& left,
                           const std::string& right, const std::string& path) {
  Status status;
  try {
    StatusOr<std::string> html = DumpReportHtml(env, comparison, left, right);
    status = html.ok() ? WriteStringToFileAtomic(env, path, *html) : html.status();
  } catch (const std::exception& e) {  // e.g. out of memory
    status = absl::InternalError(std::string("unexpected exception: ") + e.what());
  }
  if (status.ok()) return status;
  return Status(status.code(),
                fmt::format("HTML report \"{}\" not written: {}", path, status.message()));
}

}  // namespace recsdk::internal
