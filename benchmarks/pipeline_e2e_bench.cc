// pipeline_e2e_bench.cc: does the pipeline hide behind compute?
//
// BM_LiveVsPrematerialized: a training loop (26 sparse features of one table, dim 16, sum-pooled,
// MLP 256-128-1, Adam + Adagrad) fed by the live pipeline (dataset + key stage running ahead on
// its threads) against the same loop fed by batches the key stage prepared beforehand. Counter
// live_vs_prematerialized = live step time / pre-materialised step time (goal <= 1.05).
// BM_KeyStage: key stage throughput alone for batch 4096 x 26 Zipf(1.05) ids (dedup, admission,
// resolve, restore index) on 1 and 2 threads: keys_per_s and keys_per_s_per_thread.
//
// Run: build-integ/benchmarks/pipeline_e2e_bench [--benchmark_filter=...]
// Single-threaded driver; the library's threads are the ones measured.
#include <chrono>

#include "benchmark/benchmark.h"
#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

constexpr int kFeatures = 26;
constexpr int64_t kBatch = 4096;

template <typename T>
T Check(StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", v.status().ToString().c_str());
    std::abort();
  }
  return *std::move(v);
}

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

void BM_LiveVsPrematerialized(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const std::vector<Batch> batches = MakeBatches(24);
  const int warmup = 4;
  double live = 0, pre = 0;
  for (auto _ : state) {
    // Pre-materialised: the key stage prepares every batch first; then only compute is timed.
    {
      Model m = BuildModel(true);
      auto session = Check(Session::Create(*m.graph));
      Check(session->Run({}, {}, {m.init}));
      auto stage =
          Check(StartAscPipeline(*session, Check(InMemoryDatasetFromBatches(batches)),
                                 {.key_process_thread_num = threads, .prefetch_batches = 2}));
      std::vector<FeedList> all;
      FeedList feeds;
      while (Check(stage->Next(&feeds))) all.push_back(feeds);
      std::chrono::steady_clock::time_point start;
      for (size_t i = 0; i < all.size(); ++i) {
        if (static_cast<int>(i) == warmup) start = std::chrono::steady_clock::now();
        Check(session->Run(all[i], {m.loss}, {m.train}));
      }
      pre = Seconds(start, std::chrono::steady_clock::now()) / (all.size() - warmup);
    }
    // Live: the dataset and the key stage run ahead while the loop computes.
    {
      Model m = BuildModel(true);
      auto session = Check(Session::Create(*m.graph));
      Check(session->Run({}, {}, {m.init}));
      auto stage =
          Check(StartAscPipeline(*session, Check(InMemoryDatasetFromBatches(batches)),
                                 {.key_process_thread_num = threads, .prefetch_batches = 2}));
      FeedList feeds;
      int step = 0;
      std::chrono::steady_clock::time_point start;
      while (Check(stage->Next(&feeds))) {
        Check(session->Run(feeds, {m.loss}, {m.train}));
        if (++step == warmup) start = std::chrono::steady_clock::now();
      }
      live = Seconds(start, std::chrono::steady_clock::now()) / (step - warmup);
    }
  }
  state.counters["live_step_ms"] = live * 1e3;
  state.counters["prematerialized_step_ms"] = pre * 1e3;
  state.counters["live_vs_prematerialized"] = live / pre;
}
BENCHMARK(BM_LiveVsPrematerialized)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);

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
