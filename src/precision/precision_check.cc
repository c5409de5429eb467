// precision_check.cc: see precision_check.h. Threading: pure functions.
#include "src/precision/precision_check.h"

#include <exception>
#include <set>

#include "fmt/format.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {
namespace {

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

bool IsLossOp(std::string_view op, std::string_view type) {
  return Contains(type, "CrossEntropy") || EndsWith(type, "Loss") || op == "loss";
}

}  // namespace

std::string_view PrecisionStage(std::string_view op, std::string_view type,
                                std::string_view direction, bool after_loss) {
  if (Contains(op, "Initializer") || StartsWith(type, "Random") || type == "TruncatedNormal") {
    return "init";
  }
  if (StartsWith(op, "gradients") || StartsWith(op, "sparse_gradients") || EndsWith(type, "Grad") ||
      type == "TableGradAggregate") {
    return "gradients";
  }
  if (StartsWith(type, "Apply") || type == "TableApply" || type == "AssignAdd" ||
      type == "AssignSub") {
    return "updates";
  }
  if (type == "TableGather" || Contains(type, "Lookup")) {
    return direction == "input" ? "batch_ids" : "lookups";
  }
  if (IsLossOp(op, type) || after_loss) return "loss";
  return "dense";
}

std::string PrecisionCheckReport::Text() const {
  std::string out;
  for (const std::string& note : notes) out += fmt::format("note: {}\n", note);
  if (!first.has_value()) {
    out += fmt::format("no divergence: {} steps, {} tensors compared; the runs agree bit for bit\n",
                       steps_compared, tensors_compared);
    return out;
  }
  auto line = [](std::string_view what, const Divergence& d) {
    const TensorComparison& t = d.tensor;
    return fmt::format(
        "{}: step {}, stage {}: op \"{}\" ({}) {} {}: {} elements, max_abs {:g}, cosine {:.6f}, "
        "first differing element {}{}\n",
        what, d.step, d.stage, t.op, t.type, t.direction, t.port, t.elements, t.max_abs, t.cosine,
        t.first_diff, t.note.empty() ? "" : fmt::format(" ({})", t.note));
  };
  out += line("first divergence", *first);
  if (first_training.has_value()) {
    out += line("first divergence in a training step", *first_training);
  }
  return out;
}

StatusOr<PrecisionCheckReport> PrecisionCheck(Env* env, const std::string& run_a,
                                              const std::string& run_b) {
  try {
    // Threshold 1 only sets CompareDumps' agree flag; the verdict below is exact (max_abs).
    RECSDK_ASSIGN_OR_RETURN(DumpComparison c, CompareDumps(env, run_a, run_b, 1.0));
    PrecisionCheckReport report;
    report.notes = c.notes;
    // Two passes: which steps train (hold gradients or updates), then the first differences.
    std::set<int64_t> steps, training;
    std::vector<std::string_view> stages;
    stages.reserve(c.rows.size());
    bool after_loss = false;
    int64_t current_step = -1;
    for (const TensorComparison& row : c.rows) {
      if (row.step != current_step) {
        current_step = row.step;
        after_loss = false;
      }
      steps.insert(row.step);
      stages.push_back(PrecisionStage(row.op, row.type, row.direction, after_loss));
      if (IsLossOp(row.op, row.type)) after_loss = true;
      if (stages.back() == "gradients" || stages.back() == "updates") training.insert(row.step);
    }
    report.steps_compared = static_cast<int64_t>(steps.size());
    report.tensors_compared = static_cast<int64_t>(c.rows.size());
    for (size_t i = 0; i < c.rows.size(); ++i) {
      const TensorComparison& row = c.rows[i];
      const bool differs = row.max_abs != 0 || row.first_diff >= 0 || !row.note.empty();
      if (!differs) continue;
      const Divergence d{row.step, std::string(stages[i]), row};
      if (!report.first.has_value()) report.first = d;
      if (training.contains(row.step)) {
        if (report.first->step != row.step) report.first_training = d;
        break;
      }
    }
    return report;
  } catch (const std::exception& e) {
    return absl::InternalError(
        fmt::format("precision-check \"{}\" vs \"{}\": {}", run_a, run_b, e.what()));
  }
}

}  // namespace recsdk::internal
