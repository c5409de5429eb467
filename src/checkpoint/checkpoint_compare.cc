// checkpoint_compare.cc: compare-ckpt (see checkpoint_compare.h).
#include "src/checkpoint/checkpoint_compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <tuple>
#include <utility>

#include "fmt/format.h"
#include "recsdk/dtype.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/checkpoint/session_state.h"
#include "src/common/status_macros.h"

namespace recsdk::internal {

namespace {

// Accumulates the cosine similarity and max abs difference of two sequences of values.
class Similarity {
 public:
  void Add(double a, double b) {
    dot_ += a * b;
    left_ += a * a;
    right_ += b * b;
    // A NaN against a number is an infinite difference; NaN against NaN, or an infinity against
    // the same infinity (whose difference is NaN), none.
    double d = std::fabs(a - b);
    if (std::isnan(d)) d = (a == b || (std::isnan(a) && std::isnan(b))) ? 0 : HUGE_VAL;
    max_abs_ = std::max(max_abs_, d);
    ++count_;
  }
  void Fill(CheckpointDifference* row) const {
    row->elements = count_;
    row->max_abs = max_abs_;
    // Equal values are exactly 1 (the sum's rounding would make it 0.9999...), and so are two
    // sides of zeros.
    if (max_abs_ == 0) {
      row->cosine = 1;
    } else if (left_ == 0 || right_ == 0) {
      row->cosine = 0;
    } else {
      row->cosine = dot_ / (std::sqrt(left_) * std::sqrt(right_));
    }
  }

 private:
  double dot_ = 0, left_ = 0, right_ = 0, max_abs_ = 0;
  int64_t count_ = 0;
};

// Element `i` of a variable's payload as a double; false for dtypes without numbers.
bool ElementAt(DType dtype, const std::string& bytes, int64_t i, double* out) {
  auto load = [&](auto tag) {
    decltype(tag) v;
    std::memcpy(&v, bytes.data() + static_cast<size_t>(i) * sizeof v, sizeof v);
    return v;
  };
  switch (dtype) {
    case DType::kFloat32:
      *out = load(float{});
      return true;
    case DType::kFloat64:
      *out = load(double{});
      return true;
    case DType::kFloat16:
      *out = load(float16{}).ToFloat();
      return true;
    case DType::kBFloat16:
      *out = load(bfloat16{}).ToFloat();
      return true;
    case DType::kInt32:
      *out = load(int32_t{});
      return true;
    case DType::kInt64:
      *out = static_cast<double>(load(int64_t{}));
      return true;
    case DType::kUInt8:
      *out = load(uint8_t{});
      return true;
    case DType::kBool:
      *out = load(uint8_t{}) != 0 ? 1 : 0;
      return true;
    default:
      return false;
  }
}

CheckpointDifference CompareVariable(const VarSnapshot& a, const VarSnapshot& b) {
  CheckpointDifference row;
  row.kind = CheckpointDifference::Kind::kVariable;
  row.name = a.name;
  if (a.dtype != b.dtype) {
    row.note = fmt::format("dtype {} vs {}", DTypeName(a.dtype), DTypeName(b.dtype));
    return row;
  }
  if (a.shape != b.shape) {
    row.note = fmt::format("shape {} vs {}", a.shape.ToString(), b.shape.ToString());
    return row;
  }
  const int64_t n = a.shape.num_elements();
  const uint64_t item = DTypeSize(a.dtype);
  // The reader checked each payload against its shape; a disagreement here is refused rather
  // than read past.
  if (n < 0 || item == 0 || a.bytes.size() != static_cast<uint64_t>(n) * item ||
      b.bytes.size() != a.bytes.size()) {
    row.note = fmt::format("payload of {} and {} bytes for shape {} of {}", a.bytes.size(),
                           b.bytes.size(), a.shape.ToString(), DTypeName(a.dtype));
    return row;
  }
  Similarity sim;
  for (int64_t i = 0; i < n; ++i) {
    double x = 0, y = 0;
    if (!ElementAt(a.dtype, a.bytes, i, &x) || !ElementAt(a.dtype, b.bytes, i, &y)) {
      row.note = fmt::format("dtype {} has no numbers to compare", DTypeName(a.dtype));
      return row;
    }
    sim.Add(x, y);
  }
  sim.Fill(&row);
  return row;
}

// TableRows: a table's rows after its full snapshot and its deltas: key -> the row's first
// float. The pointers point into `snapshots`, which must outlive the map.
struct TableRows {
  int dim = 0;
  std::map<int64_t, const float*> rows;
};

StatusOr<TableRows> MergeSnapshots(const std::vector<TableSnapshot>& snapshots,
                                   const std::string& table, const std::string& dir) {
  TableRows out;
  if (snapshots.empty()) return out;
  out.dim = snapshots[0].dim;
  for (const TableSnapshot& s : snapshots) {
    const uint64_t width = static_cast<uint64_t>(s.dim) + static_cast<uint64_t>(s.num_slots);
    if (s.dim != out.dim || s.dim <= 0 || s.num_slots < 0 ||
        s.rows.size() != s.keys.size() * width) {
      return absl::DataLossError(fmt::format(
          "checkpoint \"{}\": table \"{}\" has {} row values for {} keys of dim {} and {} slots "
          "(or a dim that changes along its chain); compare another checkpoint",
          dir, table, s.rows.size(), s.keys.size(), s.dim, s.num_slots));
    }
    for (int64_t k : s.removed_keys) out.rows.erase(k);
    for (size_t i = 0; i < s.keys.size(); ++i) out.rows[s.keys[i]] = s.rows.data() + i * width;
  }
  return out;
}

CheckpointDifference CompareTable(const std::string& name, const TableRows& a, const TableRows& b) {
  CheckpointDifference row;
  row.kind = CheckpointDifference::Kind::kTable;
  row.name = name;
  if (a.dim != b.dim) {
    row.note = fmt::format("dim {} vs {}", a.dim, b.dim);
    return row;
  }
  Similarity sim;
  auto ia = a.rows.begin();
  auto ib = b.rows.begin();
  while (ia != a.rows.end() || ib != b.rows.end()) {
    if (ib == b.rows.end() || (ia != a.rows.end() && ia->first < ib->first)) {
      ++row.only_left;
      ++ia;
    } else if (ia == a.rows.end() || ib->first < ia->first) {
      ++row.only_right;
      ++ib;
    } else {
      for (int d = 0; d < a.dim; ++d) sim.Add(ia->second[d], ib->second[d]);
      ++ia;
      ++ib;
    }
  }
  sim.Fill(&row);
  return row;
}

Status CheckIsCheckpoint(Env* env, const std::string& dir) {
  if (!env->FileExists(dir)) {
    return absl::NotFoundError(fmt::format(
        "checkpoint directory \"{}\" does not exist; give a checkpoint directory such as "
        "MODEL_DIR/ckpt-N",
        dir));
  }
  if (!env->FileExists(JoinPath(dir, kManifestFile)) &&
      env->FileExists(JoinPath(dir, kIndexFile))) {
    return absl::InvalidArgumentError(fmt::format(
        "\"{}\" is a model directory (it holds the `{}` index), not a checkpoint; give one of its "
        "checkpoints, \"{}/ckpt-N\"",
        dir, kIndexFile, dir));
  }
  return absl::OkStatus();
}

StatusOr<LoadedCheckpoint> Load(Env* env, const std::string& dir) {
  RECSDK_RETURN_IF_ERROR(CheckIsCheckpoint(env, dir));
  try {
    return LoadCheckpoint(env, dir);
  } catch (const std::exception& e) {  // a malformed manifest the reader did not foresee
    return absl::DataLossError(fmt::format(
        "checkpoint \"{}\" is corrupt ({}); compare another checkpoint", dir, e.what()));
  }
}

}  // namespace

bool CheckpointDifference::same() const {
  return note.empty() && only_left == 0 && only_right == 0 && max_abs == 0;
}

bool CheckpointComparison::all_same() const {
  return std::all_of(rows.begin(), rows.end(),
                     [](const CheckpointDifference& r) { return r.same(); });
}

StatusOr<CheckpointComparison> CompareCheckpoints(Env* env, const std::string& left,
                                                  const std::string& right) {
  RECSDK_ASSIGN_OR_RETURN(LoadedCheckpoint a, Load(env, left));
  RECSDK_ASSIGN_OR_RETURN(LoadedCheckpoint b, Load(env, right));
  CheckpointComparison out;
  out.left = left;
  out.right = right;
  out.left_step = a.step;
  out.right_step = b.step;
  auto only = [](CheckpointDifference::Kind kind, const std::string& name, const char* side) {
    CheckpointDifference row;
    row.kind = kind;
    row.name = name;
    row.cosine = 0;
    row.note = fmt::format("only in {}", side);
    return row;
  };
  for (const auto& [name, var] : a.vars) {
    auto it = b.vars.find(name);
    out.rows.push_back(it == b.vars.end()
                           ? only(CheckpointDifference::Kind::kVariable, name, "LEFT")
                           : CompareVariable(var, it->second));
  }
  for (const auto& [name, var] : b.vars) {
    if (!a.vars.contains(name)) {
      out.rows.push_back(only(CheckpointDifference::Kind::kVariable, name, "RIGHT"));
    }
  }
  for (const auto& [name, snapshots] : a.tables) {
    auto it = b.tables.find(name);
    if (it == b.tables.end()) {
      out.rows.push_back(only(CheckpointDifference::Kind::kTable, name, "LEFT"));
      continue;
    }
    RECSDK_ASSIGN_OR_RETURN(TableRows ra, MergeSnapshots(snapshots, name, left));
    RECSDK_ASSIGN_OR_RETURN(TableRows rb, MergeSnapshots(it->second, name, right));
    out.rows.push_back(CompareTable(name, ra, rb));
  }
  for (const auto& [name, snapshots] : b.tables) {
    if (!a.tables.contains(name)) {
      out.rows.push_back(only(CheckpointDifference::Kind::kTable, name, "RIGHT"));
    }
  }
  // NaN cosines (a NaN value) sort first: they are as bad as a difference gets.
  auto cosine_key = [](double c) { return std::isnan(c) ? -2.0 : c; };
  std::sort(out.rows.begin(), out.rows.end(),
            [&](const CheckpointDifference& x, const CheckpointDifference& y) {
              return std::make_tuple(x.note.empty(), cosine_key(x.cosine),
                                     -(x.only_left + x.only_right), -x.max_abs, x.kind, x.name) <
                     std::make_tuple(y.note.empty(), cosine_key(y.cosine),
                                     -(y.only_left + y.only_right), -y.max_abs, y.kind, y.name);
            });
  return out;
}

std::string CheckpointComparison::Text() const {
  std::string text =
      fmt::format("LEFT  {} (step {})\nRIGHT {} (step {})\n", left, left_step, right, right_step);
  text += fmt::format("{:<9} {:<32} {:>10} {:>12} {:>12} {:>10} {:>10}  {}\n", "kind", "name",
                      "cosine", "max_abs", "compared", "only_left", "only_right", "note");
  int64_t differ = 0;
  for (const CheckpointDifference& r : rows) {
    if (!r.same()) ++differ;
    const bool table = r.kind == CheckpointDifference::Kind::kTable;
    text += fmt::format("{:<9} {:<32} {:>10.6f} {:>12.6g} {:>12} {:>10} {:>10}  {}\n",
                        table ? "table" : "variable", r.name, r.cosine, r.max_abs, r.elements,
                        table ? fmt::format("{}", r.only_left) : std::string("-"),
                        table ? fmt::format("{}", r.only_right) : std::string("-"),
                        r.same() ? "same" : (r.note.empty() ? "differs" : r.note));
  }
  text += differ == 0
              ? fmt::format("verdict: the checkpoints hold the same values ({} compared)\n",
                            rows.size())
              : fmt::format("verdict: {} of {} differ (worst first above)\n", differ, rows.size());
  return text;
}

}  // namespace recsdk::internal
