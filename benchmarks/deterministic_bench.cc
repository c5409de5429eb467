// deterministic_bench.cc: what SessionConfig::deterministic costs.
//
// On the CPU backend the kernels and the sparse gradient path are deterministic anyway (fixed
// reduction orders whatever the thread count), so the cost is in the key stage: in deterministic
// mode its window moves only at KeyStage::Next, and after each step KeyStage::WaitForWindow (which
// MonitoredSession calls before the hooks) waits until the window is prepared
// (src/session/key_stage/key_stage.cc). The loop here calls WaitForWindow the same way.
//
// BM_DeterministicVsDefault: two live training loops (dataset + key stage, 26 sum-pooled features
// of one table, dim 16, MLP 256-128-1, Adam + Adagrad), one with deterministic on, one off, run in
// alternating blocks of steps. Counter deterministic_vs_default = median over blocks of
// (deterministic block time / default block time); *_wait_ms: time per step spent in Next (and
// in WaitForWindow for the deterministic loop).
// Args: key stage threads, compute threads (intra_op_parallelism; 0 = every core).
#include <algorithm>
#include <chrono>

#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

constexpr int kFeatures = 26;
constexpr int64_t kBatch = 2048;

using bench::Check;

std::vector<Batch> MakeBatches(int64_t num_batches) {
  SyntheticOptions d;
  d.num_rows = num_batches * kBatch;
  d.vocabulary_sizes = std::vector<int64_t>(kFeatures, 100000);
  d.num_dense = 13;
  d.block_rows = kBatch;
  auto ds = Check(BatchRows(Check(SyntheticDataset(d)), kBatch, {.drop_remainder = true}));
  std::vector<Batch> out;
  Batch b;
  while (Check(ds->GetNext(&b))) out.push_back(b);
  return out;
}

struct Model {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
};

Model BuildModel() {
  Model m;
  Scope s(m.graph.get());
  TableConfig tc;
  tc.name = "sparse_embeddings";
  tc.dim = 16;
  tc.device_vocabulary_size = 4 << 20;
  SparseTable table = Check(create_table(s, tc, SparseOptimizerConfig::Adagrad(0.01f)));
  std::vector<Output> ids;
  for (int f = 1; f <= kFeatures; ++f) {
    ids.push_back(DatasetColumn(s, "C" + std::to_string(f), DType::kInt64, Shape{kBatch, 1}));
  }
  SparseLookupOptions lo;
  lo.modify_graph = true;
  lo.combiner = Combiner::kSum;
  std::vector<Output> emb = Check(sparse_lookup(s, table, ids, lo));
  emb.push_back(DatasetColumn(s, "dense", DType::kFloat32, Shape{kBatch, 13}));
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{kBatch, 1});
  layers::MlpOptions mlp;
  mlp.hidden_units = {256, 128};
  mlp.output_units = 1;
  Output logits = layers::Mlp(s, ops::Concat(s, emb, 1), mlp);
  m.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptimizer adam;
  Node* dense = Check(adam.Minimize(s, m.loss));
  Node* sparse = Check(SparseMinimize(s, m.loss));
  m.train = ops::Group(s, {dense, sparse});
  m.init = GlobalVariablesInitializer(s);
  if (!s.ok()) std::abort();
  Check(ModifyGraph(m.graph.get()));
  return m;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Loop {
  Model model = BuildModel();
  std::unique_ptr<Session> session;
  std::unique_ptr<KeyStage> stage;
  double wait = 0;

  Loop(SessionConfig config, const std::vector<Batch>& batches, KeyStageOptions options) {
    session = Check(Session::Create(*model.graph, config));
    Check(session->Run({}, {}, {model.init}));
    stage = Check(StartAscPipeline(*session, Check(InMemoryDatasetFromBatches(batches)), options));
  }
  void Step() {
    FeedList feeds;
    const auto w0 = std::chrono::steady_clock::now();
    if (!Check(stage->Next(&feeds))) std::abort();
    wait += Seconds(w0, std::chrono::steady_clock::now());
    Check(session->Run(feeds, {model.loss}, {model.train}));
    if (session->config().deterministic) {  // as MonitoredSession does before the hooks
      const auto q0 = std::chrono::steady_clock::now();
      stage->WaitForWindow();
      wait += Seconds(q0, std::chrono::steady_clock::now());
    }
  }
};

void BM_DeterministicVsDefault(benchmark::State& state) {
  constexpr int kWarmup = 2, kBlocks = 6, kBlockSteps = 4;
  SessionConfig config;
  config.intra_op_parallelism = static_cast<int>(state.range(1));
  SessionConfig det_config = config;
  det_config.deterministic = true;
  const std::vector<Batch> batches = MakeBatches(kWarmup + kBlocks * kBlockSteps);
  const KeyStageOptions options{.key_process_thread_num = static_cast<int>(state.range(0)),
                                .prefetch_batches = 2};
  std::vector<double> ratios;
  double det_total = 0, def_total = 0, det_wait = 0, def_wait = 0;
  for (auto _ : state) {
    Loop def(config, batches, options), det(det_config, batches, options);
    for (int i = 0; i < kWarmup; ++i) {
      def.Step();
      det.Step();
    }
    def.wait = det.wait = 0;
    for (int block = 0; block < kBlocks; ++block) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kBlockSteps; ++i) def.Step();
      const auto t1 = std::chrono::steady_clock::now();
      for (int i = 0; i < kBlockSteps; ++i) det.Step();
      const auto t2 = std::chrono::steady_clock::now();
      def_total += Seconds(t0, t1);
      det_total += Seconds(t1, t2);
      ratios.push_back(Seconds(t1, t2) / Seconds(t0, t1));
    }
    det_wait += det.wait;
    def_wait += def.wait;
  }
  std::sort(ratios.begin(), ratios.end());
  const double steps = static_cast<double>(state.iterations()) * kBlocks * kBlockSteps;
  state.counters["deterministic_vs_default"] = ratios[ratios.size() / 2];
  state.counters["ratio_of_totals"] = det_total / def_total;
  state.counters["default_step_ms"] = def_total / steps * 1e3;
  state.counters["deterministic_step_ms"] = det_total / steps * 1e3;
  state.counters["default_wait_ms"] = def_wait / steps * 1e3;
  state.counters["deterministic_wait_ms"] = det_wait / steps * 1e3;
}
BENCHMARK(BM_DeterministicVsDefault)
    ->ArgNames({"key_threads", "compute_threads"})
    ->Args({2, 0})
    ->Args({1, 1})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace recsdk

BENCHMARK_MAIN();
