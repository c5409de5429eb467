// pipeline_e2e_bench.cc: does the pipeline hide behind compute?
//
// BM_LiveVsPrematerialized: a training loop (26 sparse features of one table, dim 16, sum-pooled,
// MLP 256-128-1, Adam + Adagrad) fed by the live pipeline (dataset + key stage running ahead on
// its threads) against the same loop fed by batches the key stage prepared beforehand. Counter
// live_vs_prematerialized = live step time / pre-materialised step time, the median over
// alternating blocks (goal <= 1.05); ratio_of_totals is the plain ratio of the summed times.
// BM_KeyStage: key stage throughput alone for batch 4096 x 26 Zipf(1.05) ids (dedup, admission,
// resolve, restore index) on 1 and 2 threads: keys_per_s and keys_per_s_per_thread.
//
// Run: build-integ/benchmarks/pipeline_e2e_bench [--benchmark_filter=...]
// Single-threaded driver; the library's threads are the ones measured.
#include <algorithm>
#include <chrono>
#include <thread>

#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

constexpr int kFeatures = 26;
constexpr int64_t kBatch = 4096;

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
  // Offset each feature's ids so the shared table sees distinct keys per feature.
  for (Batch& batch : out) {
    for (int f = 1; f <= kFeatures; ++f) {
      Tensor t = batch.column("C" + std::to_string(f))->Copy();
      for (int64_t& v : t.flat<int64_t>()) v += int64_t{f} << 32;
      (void)batch.SetColumn("C" + std::to_string(f), t);
    }
  }
  return out;
}

struct Model {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
};

Model BuildModel(bool with_dense_model) {
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
  if (with_dense_model) {
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
  } else {
    m.loss = ops::ReduceSum(s, ops::AddN(s, emb));
  }
  m.init = GlobalVariablesInitializer(s);
  if (!s.ok()) std::abort();
  Check(ModifyGraph(m.graph.get()));
  return m;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Both loops run side by side in alternating blocks of kBlockSteps steps, so a drift in the
// machine's speed (other tenants, frequency) hits both alike; before each pre-materialised
// block the loop waits until the live stage has filled its prefetch queue and stopped, so the
// pre-materialised steps run without its threads. The counter is the median over blocks of
// (live block time / pre-materialised block time).
void BM_LiveVsPrematerialized(benchmark::State& state) {
  constexpr int kWarmup = 4, kBlocks = 8, kBlockSteps = 4;
  const int threads = static_cast<int>(state.range(0));
  SessionConfig config;
  config.intra_op_parallelism = static_cast<int>(state.range(1));
  const std::vector<Batch> batches = MakeBatches(kWarmup + kBlocks * kBlockSteps);
  const KeyStageOptions stage_options{.key_process_thread_num = threads, .prefetch_batches = 2};
  std::vector<double> ratios;
  double live_total = 0, pre_total = 0, wait_total = 0;
  for (auto _ : state) {
    Model pre_model = BuildModel(true), live_model = BuildModel(true);
    auto pre_session = Check(Session::Create(*pre_model.graph, config));
    auto live_session = Check(Session::Create(*live_model.graph, config));
    Check(pre_session->Run({}, {}, {pre_model.init}));
    Check(live_session->Run({}, {}, {live_model.init}));
    // Pre-materialised: the key stage prepares every batch first.
    std::vector<FeedList> prepared;
    {
      auto stage = Check(StartAscPipeline(*pre_session, Check(InMemoryDatasetFromBatches(batches)),
                                          stage_options));
      FeedList feeds;
      while (Check(stage->Next(&feeds))) prepared.push_back(feeds);
    }
    auto live = Check(
        StartAscPipeline(*live_session, Check(InMemoryDatasetFromBatches(batches)), stage_options));
    FeedList feeds;
    size_t next_pre = 0;
    auto pre_step = [&] {
      Check(pre_session->Run(prepared[next_pre++], {pre_model.loss}, {pre_model.train}));
    };
    auto live_step = [&] {
      const auto w0 = std::chrono::steady_clock::now();
      if (!Check(live->Next(&feeds))) std::abort();
      wait_total += Seconds(w0, std::chrono::steady_clock::now());
      Check(live_session->Run(feeds, {live_model.loss}, {live_model.train}));
    };
    for (int i = 0; i < kWarmup; ++i) {
      pre_step();
      live_step();
    }
    for (int block = 0; block < kBlocks; ++block) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the live stage fills up
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kBlockSteps; ++i) pre_step();
      const auto t1 = std::chrono::steady_clock::now();
      for (int i = 0; i < kBlockSteps; ++i) live_step();
      const auto t2 = std::chrono::steady_clock::now();
      pre_total += Seconds(t0, t1);
      live_total += Seconds(t1, t2);
      ratios.push_back(Seconds(t1, t2) / Seconds(t0, t1));
    }
  }
  std::sort(ratios.begin(), ratios.end());
  const double steps = static_cast<double>(state.iterations()) * kBlocks * kBlockSteps;
  state.counters["live_step_ms"] = live_total / steps * 1e3;
  state.counters["prematerialized_step_ms"] = pre_total / steps * 1e3;
  state.counters["live_vs_prematerialized"] = ratios[ratios.size() / 2];
  state.counters["ratio_of_totals"] = live_total / pre_total;
  // live_wait_ms: time per live step spent waiting for the key stage (Next); the rest of the
  // difference is compute slowed by the stage's threads.
  state.counters["live_wait_ms"] = wait_total / steps * 1e3;
}
// Args: key stage threads, compute threads (intra_op_parallelism; 0 = every core). With every
// core computing, the key stage's threads take their CPU time from the compute; with one core
// left free (compute_threads 1 on this 2-core machine) they run beside it.
BENCHMARK(BM_LiveVsPrematerialized)
    ->ArgNames({"key_threads", "compute_threads"})
    ->Args({1, 0})
    ->Args({2, 0})
    ->Args({1, 1})
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

void BM_KeyStage(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const std::vector<Batch> batches = MakeBatches(32);
  int64_t keys = 0;
  double seconds = 0;
  for (auto _ : state) {
    Model m = BuildModel(false);
    auto session = Check(Session::Create(*m.graph));
    auto stage = Check(
        StartAscPipeline(*session, Check(InMemoryDatasetFromBatches(batches)),
                         {.key_process_thread_num = threads, .prefetch_batches = 2 * threads}));
    const auto start = std::chrono::steady_clock::now();
    FeedList feeds;
    while (Check(stage->Next(&feeds))) {
    }
    seconds += Seconds(start, std::chrono::steady_clock::now());
    keys += stage->keys_processed();
  }
  state.counters["keys_per_s"] = keys / seconds;
  state.counters["keys_per_s_per_thread"] = keys / seconds / threads;
}
BENCHMARK(BM_KeyStage)->Arg(1)->Arg(2)->Iterations(3)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace recsdk

BENCHMARK_MAIN();
