// dump_compare.cc: comparing two dumps op by op (see dump_compare.h).
#include "src/precision/dump_compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <type_traits>
#include <utility>

#include "fmt/format.h"
#include "recsdk/dtype.h"
#include "src/common/status_macros.h"
#include "src/precision/dump_reader.h"

namespace recsdk::internal {

namespace {

// DumpElementAt: element i of a payload as a double, for every dtype dumps write.
template <typename T>
double DumpElementAt(const char* p, size_t i) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
    T v;
    std::memcpy(&v.bits, p + i * 2, 2);
    return v.ToFloat();
  } else {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    return static_cast<double>(v);
  }
}

// VisitDumpElements: calls f(std::type_identity<T>()) with T the C type of `dtype` (bool and uint8
// as one byte); one dispatch per tensor, so the loops inside are typed (DumpElementAt<T> inlines).
template <typename F>
void VisitDumpElements(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(std::type_identity<float>());
    case DType::kFloat64:
      return f(std::type_identity<double>());
    case DType::kFloat16:
      return f(std::type_identity<float16>());
    case DType::kBFloat16:
      return f(std::type_identity<bfloat16>());
    case DType::kInt32:
      return f(std::type_identity<int32_t>());
    case DType::kInt64:
      return f(std::type_identity<int64_t>());
    default:  // bool, uint8: one byte
      return f(std::type_identity<unsigned char>());
  }
}

// ToDoubles: a payload's elements as doubles (every dtype dumps write).
std::vector<double> ToDoubles(DType dtype, const std::string& payload) {
  const size_t item = DTypeSize(dtype);
  const size_t n = item == 0 ? 0 : payload.size() / item;
  std::vector<double> out(n);
  VisitDumpElements(dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    for (size_t i = 0; i < n; ++i) out[i] = DumpElementAt<T>(payload.data(), i);
  });
  return out;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

// Compare: fills the numbers of `row` from two tensors' payloads.
void Compare(const DumpTensor& lt, const std::string& lp, const DumpTensor& rt,
             const std::string& rp, double threshold, TensorComparison* row) {
  if (lt.shape != rt.shape || lt.dtype != rt.dtype) {
    row->agree = false;
    row->cosine = 0;
    row->note =
        fmt::format("{} {} vs {} {}", lt.dtype, ShapeText(lt.shape), rt.dtype, ShapeText(rt.shape));
    return;
  }
  const DType dtype = *ParseDType(lt.dtype);  // ReadDumpTensor checked it; both sides agree
  const size_t item = DTypeSize(dtype);
  const size_t n = item == 0 ? 0 : std::min(lp.size(), rp.size()) / item;
  row->elements = static_cast<int64_t>(item == 0 ? 0 : lp.size() / item);
  double dot = 0, na = 0, nb = 0;
  int64_t special_mismatch = 0;
  // One pass over both payloads, read in their own type (no copy as doubles). Only float64 can
  // overflow (or underflow) a sum of squares: its sums run over values divided by the largest
  // finite magnitude, found first, so values past 1e154 do not turn the cosine into NaN.
  VisitDumpElements(dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    const auto at = [](const char* p, size_t i) { return DumpElementAt<T>(p, i); };
    const char* pa = lp.data();
    const char* pb = rp.data();
    double inv = 1.0;
    if (dtype == DType::kFloat64) {
      double scale = 0;
      for (size_t i = 0; i < n; ++i) {
        const double x = at(pa, i), y = at(pb, i);
        if (std::isfinite(x) && std::isfinite(y)) {
          scale = std::max({scale, std::fabs(x), std::fabs(y)});
        }
      }
      if (scale > 0) inv = 1.0 / scale;
    }
    double max_abs = 0, max_rel = 0;
    int64_t first_diff = -1;
    for (size_t i = 0; i < n; ++i) {
      const double x = at(pa, i), y = at(pb, i);
      if (!std::isfinite(x) || !std::isfinite(y)) {
        // NaN/Inf agree only with the same kind at the same place.
        const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
        if (!same) {
          ++special_mismatch;
          if (first_diff < 0) first_diff = static_cast<int64_t>(i);
        }
        continue;
      }
      const double d = std::fabs(x - y);
      if (d > 0) {
        if (first_diff < 0) first_diff = static_cast<int64_t>(i);
        max_abs = std::max(max_abs, d);
        max_rel = std::max(max_rel, d / std::max(std::fabs(y), 1e-12));
      }
      const double sa = x * inv, sb = y * inv;
      dot += sa * sb;
      na += sa * sa;
      nb += sb * sb;
    }
    row->max_abs = max_abs;
    row->max_rel = max_rel;
    row->first_diff = first_diff;
  });
  if (na == 0 && nb == 0) {
    row->cosine = 1;
  } else if (na == 0 || nb == 0) {
    row->cosine = 0;
  } else {
    row->cosine = dot / (std::sqrt(na) * std::sqrt(nb));
  }
  row->agree = special_mismatch == 0 && row->cosine >= threshold;
  if (special_mismatch > 0) {
    row->note = fmt::format("{} NaN/Inf at different places", special_mismatch);
  }
}

// CompareDumpChecksums: two dump_checksums tensors: equal when dtype, shape and the elements'
// CRC-32C match (cosine 1); otherwise the numbers come from the samples (the first values), and
// the note says so.
void CompareDumpChecksums(const DumpTensor& l, const DumpTensor& r, TensorComparison* row) {
  int64_t elements = 1;
  for (int64_t d : l.shape) elements = d > 0 && elements < (int64_t{1} << 50) ? elements * d : 0;
  row->elements = elements;
  if (l.shape != r.shape || l.dtype != r.dtype) {
    row->agree = false;
    row->cosine = 0;
    row->note =
        fmt::format("{} {} vs {} {}", l.dtype, ShapeText(l.shape), r.dtype, ShapeText(r.shape));
    return;
  }
  if (l.payload_crc32c == r.payload_crc32c) return;  // agree, cosine 1
  row->agree = false;
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < l.sample.size() && i < r.sample.size(); ++i) {
    const double x = l.sample[i], y = r.sample[i];
    const bool same = (std::isnan(x) && std::isnan(y)) || x == y;
    if (!same && row->first_diff < 0) row->first_diff = static_cast<int64_t>(i);
    if (std::isnan(x) || std::isnan(y)) continue;
    const double d = std::fabs(x - y);
    row->max_abs = std::max(row->max_abs, d);
    row->max_rel = std::max(row->max_rel, d / std::max(std::fabs(y), 1e-12));
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  row->cosine = na > 0 && nb > 0 ? dot / (std::sqrt(na) * std::sqrt(nb)) : (na == nb ? 1 : 0);
  row->note =
      fmt::format("checksums differ; cosine, max_abs and first over the first {} values only{}",
                  std::min(l.sample.size(), r.sample.size()),
                  row->first_diff < 0 ? " (they agree: the difference is further on)" : "");
}

// Steps: step number -> the first dump of that step under `root` (FindStepDirs' order); a note
// for each other dump of a step number already taken (another session or graph id).
StatusOr<std::map<int64_t, DumpStep>> ReadSteps(Env* env, const std::string& root,
                                                std::vector<std::string>* notes) {
  RECSDK_ASSIGN_OR_RETURN(std::vector<std::string> dirs, FindStepDirs(env, root));
  std::map<int64_t, DumpStep> steps;
  for (const std::string& dir : dirs) {
    RECSDK_ASSIGN_OR_RETURN(DumpStep step, ReadDumpManifest(env, dir));
    const int64_t n = step.step;
    if (auto [it, fresh] = steps.try_emplace(n, std::move(step)); !fresh) {
      notes->push_back(
          fmt::format("step {}: \"{}\" left out, \"{}\" compared (give the "
                      "graph's directory to choose)",
                      n, dir, it->second.dir));
    }
  }
  return steps;
}

// FirstReadOf: the first dumped (written) input tensor of `step` whose producer is `producer`; null
// when none.
const DumpTensor* FirstReadOf(const DumpStep& step, const std::string& producer) {
  for (const DumpOp& op : step.ops) {
    for (const DumpTensor& t : op.inputs) {
      if (t.producer == producer && !t.file.empty()) return &t;
    }
  }
  return nullptr;
}

// FusedOpList: "MatMul \"mm\" + BiasAdd \"ba\"" for a fused op's fused_from.
std::string FusedOpList(const DumpOp& op) {
  std::vector<std::string> parts;
  for (const FusedOp& f : op.fused_from) {
    parts.push_back(f.type.empty() ? fmt::format("\"{}\"", f.name)
                                   : fmt::format("{} \"{}\"", f.type, f.name));
  }
  return fmt::format("{}", fmt::join(parts, " + "));
}

// FusedPairText: TensorComparison::fused for a pair of ops of one name.
std::string FusedPairText(const DumpOp& l, const DumpOp& r) {
  const bool lf = !l.fused_from.empty(), rf = !r.fused_from.empty();
  if (lf && rf && l.type == r.type && FusedOpList(l) == FusedOpList(r)) {
    return fmt::format("both {} replaces {}", l.type, FusedOpList(l));
  }
  std::string text;
  if (lf) text = fmt::format("LEFT {} replaces {}", l.type, FusedOpList(l));
  if (rf) {
    text += fmt::format("{}RIGHT {} replaces {}", lf ? "; " : "", r.type, FusedOpList(r));
  }
  return text;
}

}  // namespace

std::vector<double> DumpValues(const std::string& dtype, const std::string& payload) {
  const StatusOr<DType> parsed = ParseDType(dtype);
  return parsed.ok() ? ToDoubles(*parsed, payload) : std::vector<double>();
}

bool DumpComparison::all_agree() const {
  return std::all_of(rows.begin(), rows.end(), [](const TensorComparison& r) { return r.agree; });
}

StatusOr<DumpComparison> CompareDumps(Env* env, const std::string& left, const std::string& right,
                                      double threshold) {
  if (!(threshold >= -1 && threshold <= 1)) {
    return absl::InvalidArgumentError(
        fmt::format("--threshold {}: a cosine similarity is in [-1, 1]; the spec's default is 0.98",
                    threshold));
  }
  DumpComparison result;
  RECSDK_ASSIGN_OR_RETURN(auto lsteps, ReadSteps(env, left, &result.notes));
  RECSDK_ASSIGN_OR_RETURN(auto rsteps, ReadSteps(env, right, &result.notes));
  result.threshold = threshold;
  bool any_common = false;
  for (const auto& [n, step] : rsteps) {
    if (!lsteps.contains(n)) result.notes.push_back(fmt::format("step {}: only in RIGHT", n));
  }
  for (const auto& entry : lsteps) {
    // Not a structured binding: clang 14 (the fuzz build's compiler) cannot capture one in the
    // lambda below.
    const int64_t n = entry.first;
    const DumpStep& lstep = entry.second;
    auto rit = rsteps.find(n);
    if (rit == rsteps.end()) {
      result.notes.push_back(fmt::format("step {}: only in LEFT", n));
      continue;
    }
    any_common = true;
    const DumpStep& rstep = rit->second;
    std::map<std::string, const DumpOp*> rops;
    for (const DumpOp& op : rstep.ops) rops.emplace(op.name, &op);
    // The ops a fused op of RIGHT replaced: name -> that fused op.
    std::map<std::string, const DumpOp*> fused_in_right;
    for (const DumpOp& op : rstep.ops) {
      for (const FusedOp& f : op.fused_from) fused_in_right.emplace(f.name, &op);
    }
    std::map<std::string, bool> output_agrees;  // "node:port" -> compared and agreed
    for (const DumpOp& lop : lstep.ops) {
      auto found = rops.find(lop.name);
      if (found == rops.end()) {
        auto by = fused_in_right.find(lop.name);
        result.notes.push_back(
            by == fused_in_right.end()
                ? fmt::format("step {}: op \"{}\" only in LEFT", n, lop.name)
                : fmt::format(
                      "step {}: op \"{}\" ({}) only in LEFT: RIGHT fused it into \"{}\" ({})", n,
                      lop.name, lop.type, by->second->name, by->second->type));
        continue;
      }
      const DumpOp& rop = *found->second;
      const std::string fused = FusedPairText(lop, rop);
      // One side's fused op stands for a chain whose last op the other side ran: their inputs do
      // not pair up by port. The fused side's inputs are the chain's; each is compared with the
      // same producer's tensor as the other side's chain read it (any dumped input of that
      // producer in its step), else judged through the producer's compared output.
      const bool fused_pair =
          lop.type != rop.type && (!lop.fused_from.empty() || !rop.fused_from.empty());
      const std::vector<DumpTensor>& judged =
          fused_pair && lop.fused_from.empty() ? rop.inputs : lop.inputs;
      auto compare_pair = [&](const char* direction, const DumpTensor* l, const DumpTensor* r,
                              int port) -> StatusOr<int> {
        // -1: not compared (missing on a side); 0: differ; 1: agree.
        if (l != nullptr && r != nullptr && l->has_checksum && r->has_checksum) {
          TensorComparison row;  // dump_checksums on both sides: compared by checksum
          row.step = n;
          row.op = lop.name;
          row.type = lop.type;
          row.direction = direction;
          row.port = port;
          row.fused = fused;
          CompareDumpChecksums(*l, *r, &row);
          result.rows.push_back(row);
          return row.agree ? 1 : 0;
        }
        if (l == nullptr || r == nullptr || l->file.empty() || r->file.empty()) return -1;
        RECSDK_ASSIGN_OR_RETURN(std::string lp, ReadDumpTensor(env, lstep, *l));
        RECSDK_ASSIGN_OR_RETURN(std::string rp, ReadDumpTensor(env, rstep, *r));
        TensorComparison row;
        row.step = n;
        row.op = lop.name;
        row.type = lop.type;
        row.direction = direction;
        row.port = port;
        row.fused = fused;
        Compare(*l, lp, *r, rp, threshold, &row);
        result.rows.push_back(row);
        return row.agree ? 1 : 0;
      };
      auto compare = [&](const char* direction, const std::vector<DumpTensor>& ls,
                         const std::vector<DumpTensor>& rs, size_t i) -> StatusOr<int> {
        return compare_pair(direction, &ls[i], i < rs.size() ? &rs[i] : nullptr, ls[i].port);
      };
      bool inputs_agree = true;
      std::vector<std::string> outside;  // differing or unknown inputs from outside the dump
      for (size_t i = 0; i < judged.size(); ++i) {
        const DumpTensor& in = judged[i];
        if (in.dtype == "resource") continue;
        int direct = -1;
        if (!fused_pair) {
          RECSDK_ASSIGN_OR_RETURN(direct, compare("input", lop.inputs, rop.inputs, i));
        } else {
          const bool left_fused = &judged == &lop.inputs;
          const DumpTensor* other = FirstReadOf(left_fused ? rstep : lstep, in.producer);
          RECSDK_ASSIGN_OR_RETURN(direct, compare_pair("input", left_fused ? &in : other,
                                                       left_fused ? other : &in, in.port));
        }
        auto produced = output_agrees.find(in.producer);
        const int via_producer = produced == output_agrees.end() ? -1 : (produced->second ? 1 : 0);
        const int state = direct >= 0 ? direct : via_producer;
        if (state != 1) inputs_agree = false;
        if (state == -1 || (state == 0 && via_producer == -1)) {
          outside.push_back(fmt::format("input {} from \"{}\" ({})", in.port, in.producer,
                                        state == -1 ? "not in both dumps" : "differs"));
        }
      }
      bool outputs_agree = true;
      for (size_t o = 0; o < lop.outputs.size(); ++o) {
        RECSDK_ASSIGN_OR_RETURN(int state, compare("output", lop.outputs, rop.outputs, o));
        if (state >= 0) {
          output_agrees[fmt::format("{}:{}", lop.name, lop.outputs[o].port)] = state == 1;
        }
        if (state == 0) outputs_agree = false;
      }
      if (outputs_agree || result.culprit) continue;
      if (inputs_agree) {
        result.culprit = fmt::format("step {}: op \"{}\" ({})", n, lop.name, lop.type);
        result.culprit_at = DumpCulprit{n, lop.name, lop.type, lstep.dir, rstep.dir};
      } else if (!outside.empty() && result.notes.size() < 100) {
        result.notes.push_back(fmt::format(
            "step {}: op \"{}\" ({}) differs, but so does what it was given from outside the "
            "dump: {}",
            n, lop.name, lop.type, fmt::join(outside, "; ")));
      }
    }
  }
  if (!any_common) {
    return absl::InvalidArgumentError(
        fmt::format("\"{}\" and \"{}\" share no dumped step; dump the same dump_step in both runs",
                    left, right));
  }
  return result;
}

std::string DumpComparison::Text() const {
  std::string text =
      fmt::format("{:>5}  {:<40} {:<18} {:<10} {:>9} {:>11} {:>11} {:>9}  {}\n", "step", "op",
                  "type", "tensor", "cosine", "max_abs", "max_rel", "first", "");
  for (const TensorComparison& r : rows) {
    const std::string op = r.op.size() > 40 ? "..." + r.op.substr(r.op.size() - 37) : r.op;
    text += fmt::format("{:>5}  {:<40} {:<18} {:<10} {:>9.6f} {:>11.4g} {:>11.4g} {:>9}  {}{}{}\n",
                        r.step, op, r.type.substr(0, 18),
                        fmt::format("{}:{}", r.direction == "input" ? "in" : "out", r.port),
                        r.cosine, r.max_abs, r.max_rel,
                        r.first_diff < 0 ? std::string("-") : std::to_string(r.first_diff),
                        r.agree ? "" : "DIFF", r.note.empty() ? "" : " (" + r.note + ")",
                        r.fused.empty() ? "" : " [fused: " + r.fused + "]");
  }
  for (const std::string& n : notes) text += "note: " + n + "\n";
  const int64_t differ =
      std::count_if(rows.begin(), rows.end(), [](const TensorComparison& r) { return !r.agree; });
  if (differ == 0) {
    text += fmt::format("all {} compared tensors agree (cosine >= {})\n", rows.size(), threshold);
  } else {
    text += fmt::format("{} of {} compared tensors differ (cosine < {} or NaN/Inf placement)\n",
                        differ, rows.size(), threshold);
    text += culprit ? "first op whose inputs agree but outputs differ: " + *culprit + "\n"
                    : std::string(
                          "no op with agreeing inputs and differing outputs: the first "
                          "difference comes from outside the dump (see the notes)\n");
  }
  return text;
}

std::string DumpComparison::Csv() const {
  std::string csv =
      "step,op,type,direction,port,elements,cosine,max_abs,max_rel,first_diff,agree,fused\n";
  // Quoted: a CSV field in double quotes, quotes doubled (op names and fused_from lists).
  auto quoted = [](const std::string& text) {
    std::string q = "\"";
    for (char c : text) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  for (const TensorComparison& r : rows) {
    csv += fmt::format("{},{},{},{},{},{},{:.9g},{:.9g},{:.9g},{},{},{}\n", r.step, quoted(r.op),
                       r.type, r.direction, r.port, r.elements, r.cosine, r.max_abs, r.max_rel,
                       r.first_diff, r.agree ? 1 : 0, r.fused.empty() ? "" : quoted(r.fused));
  }
  return csv;
}

void CompareTensors(const DumpTensor& left, const std::string& left_payload,
                    const DumpTensor& right, const std::string& right_payload, double threshold,
                    TensorComparison* row) {
  Compare(left, left_payload, right, right_payload, threshold, row);
}

}  // namespace recsdk::internal
