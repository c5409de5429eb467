// fuzz_model.h: the small model the checkpoint and predictor fuzz targets save and load: one
// table (dim 4, Adagrad, admission and eviction, so every table payload exists) looked up by a
// [2, 2] int64 placeholder "ids" with a sum combiner, and a dense variable "w" [4, 1] on top
// ("out" = lookup x w). Each input restores into a fresh copy, so a failed restore can be checked
// to have changed nothing; FileUnder lists a saved directory's files, the inputs' targets.
// Threading: single-threaded harness code.
#ifndef RECSDK_TESTS_FUZZ_FUZZ_MODEL_H_
#define RECSDK_TESTS_FUZZ_FUZZ_MODEL_H_

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "recsdk/recsdk.h"
#include "tests/fuzz/fuzz_util.h"

namespace recsdk::fuzz {

struct FuzzModel {
  Graph graph;
  std::unique_ptr<Session> session;
  Output ids, out;
  Variable w;
  EmbeddingTable* table = nullptr;
};

// Die: the harness (not the input) is broken.
template <typename T>
T Die(StatusOr<T> v) {
  if (!v.ok()) std::abort();
  return *std::move(v);
}

inline std::unique_ptr<FuzzModel> BuildFuzzModel() {
  auto m = std::make_unique<FuzzModel>();
  Scope s(&m->graph);
  m->graph.set_random_seed(3);
  TableConfig tc;
  tc.name = "fuzz_table";
  tc.dim = 4;
  tc.device_vocabulary_size = 64;
  tc.access_threshold = 0;
  tc.eviction_threshold = 100;
  SparseTable table = Die(create_table(s, tc, SparseOptimizerConfig::Adagrad(0.1f)));
  m->ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{2, 2});
  SparseLookupOptions lo;
  lo.combiner = Combiner::kSum;
  Output emb = Die(sparse_lookup(s, table, m->ids, lo));
  m->w = Variable::Make(s, "w", Shape{4, 1});
  m->out = ops::MatMul(s.WithOpName("out"), emb, m->w);
  Node* init = GlobalVariablesInitializer(s);
  if (!s.ok()) std::abort();
  m->session = Die(Session::Create(m->graph, SessionConfig{}));
  if (!m->session->Run({}, {}, {init}).ok()) std::abort();
  m->table = Die(LookupTable(*m->session, "fuzz_table"));
  return m;
}

// TrainRows: inserts `keys` into the table (train mode) and moves their rows by one update, so
// a checkpoint has rows, timestamps and optimizer slots to read back.
inline void TrainRows(FuzzModel& m, std::vector<int64_t> keys, int64_t time) {
  std::vector<int64_t> ts(keys.size(), time);
  std::vector<uint32_t> rows(keys.size());
  if (!m.table->Resolve(keys, {}, ts, LookupMode::kTrain, absl::MakeSpan(rows)).ok()) std::abort();
  std::vector<float> grads(keys.size() * 4, 0.5f);
  if (!m.table->ApplyGradients(rows, grads, time).ok()) std::abort();
}

inline std::vector<float> WeightValues(FuzzModel& m) {
  auto v = m.session->Run({}, {m.w.value()});
  if (!v.ok()) std::abort();
  const auto f = (*v)[0].flat<float>();
  return std::vector<float>(f.begin(), f.end());
}

}  // namespace recsdk::fuzz

#endif  // RECSDK_TESTS_FUZZ_FUZZ_MODEL_H_
