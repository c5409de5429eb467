// dump_report_html.h: the single-file HTML report of `recsdk compare-dumps ... --html OUT`.
//
// One self-contained page (inline CSS, a few lines of vanilla JavaScript, inline SVG; nothing
// fetched from elsewhere, so it can be mailed or attached to an issue): the summary (the dumps, the
// steps, ops and tensors compared, the culprit as CompareDumps names it, the fused ops among the
// compared ones with the ops they replace, the notes); the per-tensor table with the CSV's columns,
// rows coloured by agreement and cosine similarity, sortable by a click on a column's header; the
// graph around the culprit (its producers and consumers up to two hops out, from LEFT's manifest
// of the culprit's step, laid out in layers by execution order, the culprit highlighted); and
// histograms of the culprit's first differing output in LEFT and RIGHT over the same bins and
// scale. Without a culprit the graph and histograms are replaced by a sentence saying why.
//
// Everything read from the dumps (op names and types, paths, notes) is HTML-escaped: op names come
// from files that may be hostile. The neighbourhood is capped at kMaxReportGraphNodes nodes, so a
// node with thousands of consumers still gives a readable picture (the ones left out are counted).
//
// Cost: reads the culprit step's two manifests and the culprit's output tensor on both sides once;
// the page is O(compared tensors). Threading: pure functions over the Env.
#ifndef RECSDK_PRECISION_DUMP_REPORT_HTML_H_
#define RECSDK_PRECISION_DUMP_REPORT_HTML_H_

#include <string>
#include <string_view>

#include "recsdk/status.h"
#include "src/common/env.h"
#include "src/precision/dump_compare.h"

namespace recsdk::internal {

inline constexpr int kMaxReportGraphNodes = 40;

// HtmlEscape: `text` safe in HTML text and quoted attributes (& < > " ' as entities, control
// characters other than tab and newline as U+FFFD).
std::string HtmlEscape(std::string_view text);

// DumpReportHtml: the page for `comparison` of the dumps `left` and `right` (the paths given to
// CompareDumps). Errors: reading the culprit's step again failed (a dump changed or vanished since
// the comparison), named as the reader names it.
[[nodiscard]] StatusOr<std::string> DumpReportHtml(Env* env, const DumpComparison& comparison,
                                                   const std::string& left,
                                                   const std::string& right);

// WriteDumpReportHtml: DumpReportHtml written to `path` atomically (`path`.tmp renamed onto it, so
// a reader sees the old file or the whole new one). Errors name `path`; an exception on the way
// (out of memory) is returned as Internal.
[[nodiscard]] Status WriteDumpReportHtml(Env* env, const DumpComparison& comparison,
                                         const std::string& left, const std::string& right,
                                         const std::string& path);

}  // namespace recsdk::internal

#endif  // RECSDK_PRECISION_DUMP_REPORT_HTML_H_
