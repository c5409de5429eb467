// tier_e2e_bench.cc: steps/s of a little_demo-sized model trained through the key stage with its
// tables' device tier at 100%, 25% and 10% of the key space (the rest in host memory), and at 10%
// with host at 10% and the rest on SSD, on Zipf(1.05) ids (issue 14's end-to-end figures). The
// four layouts run one after another inside each iteration, on the same batches, so the ratios
// are side by side:
//   tier25_vs_full_device, tier10_vs_full_device (goal >= 0.7), ssd_vs_full_device (goal >= 0.4)
// and the device hit rates (batch keys found on the device / batch keys looked up) of the "user"
// table, hit25 / hit10 / hit_ssd; ssd_reads_cached: the share of the SSD layout's row reads
// that the page cache answered (the rest came from the disk). ssd_cold_vs_full_device: the SSD
// layout again with the SSD files' clean cached pages dropped before every step (an SSD tier much
// larger than the page cache: only rows written since are still cached), and
// ssd_cold_reads_cached its share of reads from the cache.
//
// The model: "user" (dim 32, two features) and "item" (dim 8, one feature) tables with LazyAdam,
// a 256-128 MLP on top, batch 512, 2 ids per feature, each feature's ids Zipf over 20000 keys;
// modify_graph moves the lookups to the key stage (2 threads, 2 batches ahead).
// Run: build/benchmarks/tier_e2e_bench (about 30 s; SSD files under $RECSDK_TIER_BENCH_DIR,
// default /tmp). Not thread-safe; a benchmark, never a test.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "recsdk/recsdk.h"
#include "src/table/tier_lease.h"

namespace recsdk {
namespace {

constexpr int64_t kBatch = 512;
constexpr int64_t kVocab = 20000;  // per feature: the key space of a table is features x this
constexpr int kSteps = 200;

template <typename T>
T OrDie(StatusOr<T> v) {
  if (!v.ok()) {
    fprintf(stderr, "tier_e2e_bench: %s\n", std::string(v.status().message()).c_str());
    std::abort();
  }
  return *std::move(v);
}

struct Layout {
  double device = 1.0;  // fraction of the table's key space on the device
  double host = 0.0;    // fraction in host memory (0: device only)
  bool ssd = false;     // the rest on SSD
  // cold: before each step, the SSD files' clean cached pages are dropped (rows written since
  // stay cached until written back), as for an SSD tier much larger than the page cache.
  bool cold = false;
};

struct Result {
  double steps_per_s = 0;
  double hit_rate = 1;
  double ssd_cached = 0;  // share of the SSD rows read that came from the page cache
};

std::string BenchDir() {
  const char* d = std::getenv("RECSDK_TIER_BENCH_DIR");
  const std::string dir = std::string(d != nullptr ? d : "/tmp") + "/tier_e2e_bench";
  std::filesystem::create_directories(dir);
  return dir;
}

TableConfig Table(const char* name, int dim, int features, const Layout& l) {
  const int64_t keys = features * kVocab;
  TableConfig c;
  c.name = name;
  c.dim = dim;
  c.initializer = Initializer::TruncatedNormal(0, 0.05, 0);
  if (l.host == 0) {
    c.device_vocabulary_size = keys;
    return c;
  }
  c.device_vocabulary_size = static_cast<int64_t>(l.device * static_cast<double>(keys));
  c.host_vocabulary_size = l.ssd ? static_cast<int64_t>(l.host * static_cast<double>(keys))
                                 : keys - c.device_vocabulary_size;
  if (l.ssd) {
    c.ssd_vocabulary_size = keys;
    c.ssd_data_path = {BenchDir()};
  }
  return c;
}

Result Run(const Layout& l) {
  Graph g;
  Scope s(&g);
  g.set_random_seed(3);
  const auto opt = SparseOptimizerConfig::LazyAdam(0.01f);
  SparseTable user = OrDie(create_table(s, Table("user", 32, 2, l), opt));
  SparseTable item = OrDie(create_table(s, Table("item", 8, 1, l), opt));
  std::vector<Output> ids;
  for (int f = 1; f <= 3; ++f) {
    ids.push_back(DatasetColumn(s, "C" + std::to_string(f), DType::kInt64, Shape{kBatch, 2}));
  }
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{kBatch, 1});
  SparseLookupOptions o;
  o.modify_graph = true;
  o.combiner = Combiner::kSum;
  std::vector<Output> parts = OrDie(sparse_lookup(s, user, {ids[0], ids[1]}, o));
  parts.push_back(OrDie(sparse_lookup(s, item, ids[2], o)));
  Output x = ops::Concat(s, parts, 1);
  Output logits = layers::Mlp(s, x, {.hidden_units = {256, 128}, .output_units = 1});
  Output loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptimizer adam(AdamOptions{.learning_rate = 0.01});
  Node* train = ops::Group(s, {OrDie(adam.Minimize(s, loss)), OrDie(SparseMinimize(s, loss))});
  Node* init = GlobalVariablesInitializer(s);
  if (!s.ok()) std::abort();
  OrDie(ModifyGraph(&g));
  auto session = OrDie(Session::Create(g));
  if (!session->Run({}, {}, {init}).ok()) std::abort();
  SyntheticOptions d;
  d.num_rows = kBatch * (kSteps + 10);
  d.vocabulary_sizes = std::vector<int64_t>(3, kVocab);
  d.ids_per_feature = 2;
  d.seed = 7;
  auto data = OrDie(BatchRows(OrDie(SyntheticDataset(d)), kBatch, {.drop_remainder = true}));
  KeyStageOptions ko;
  ko.key_process_thread_num = 2;
  ko.prefetch_batches = 2;
  auto stage = OrDie(StartAscPipeline(*session, std::move(data), ko));
  FeedList feeds;
  // 10 warm-up steps fill the device tier; the timed steps follow.
  for (int i = 0; i < 10 && OrDie(stage->Next(&feeds)); ++i) {
    if (!session->Run(feeds, {}, {train}).ok()) std::abort();
  }
  EmbeddingTable* t = OrDie(LookupTable(*session, "user"));
  const internal::TierStats before = internal::GetTierStats(*t);
  const auto start = std::chrono::steady_clock::now();
  int steps = 0;
  EmbeddingTable* item_table = OrDie(LookupTable(*session, "item"));
  while (steps < kSteps && OrDie(stage->Next(&feeds))) {
    if (l.cold) {
      internal::DropSsdCleanPages(*t);
      internal::DropSsdCleanPages(*item_table);
    }
    if (!session->Run(feeds, {}, {train}).ok()) std::abort();
    ++steps;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stage->Stop();
  const internal::TierStats after = internal::GetTierStats(*t);
  Result r;
  r.steps_per_s = steps / secs;
  const int64_t cached = after.ssd_cached_reads - before.ssd_cached_reads;
  const int64_t disk = after.ssd_disk_reads - before.ssd_disk_reads;
  if (cached + disk > 0)
    r.ssd_cached = static_cast<double>(cached) / static_cast<double>(cached + disk);
  const int64_t looked = after.device_lookups - before.device_lookups;
  if (looked > 0) {
    r.hit_rate =
        static_cast<double>(after.device_hits - before.device_hits) / static_cast<double>(looked);
  }
  return r;
}

void BM_TierEndToEnd(benchmark::State& state) {
  double full = 0, t25 = 0, t10 = 0, ssd = 0, h25 = 0, h10 = 0, hssd = 0, cached = 0, cold = 0,
         cold_cached = 0;
  int n = 0;
  for (auto _ : state) {
    full += Run({1.0, 0.0, false}).steps_per_s;
    const Result a = Run({0.25, 0.75, false});
    const Result b = Run({0.10, 0.90, false});
    const Result c = Run({0.10, 0.10, true});
    const Result d = Run({0.10, 0.10, true, /*cold=*/true});
    cold += d.steps_per_s;
    cold_cached += d.ssd_cached;
    t25 += a.steps_per_s;
    t10 += b.steps_per_s;
    ssd += c.steps_per_s;
    h25 += a.hit_rate;
    h10 += b.hit_rate;
    hssd += c.hit_rate;
    cached += c.ssd_cached;
    ++n;
  }
  state.counters["full_steps_per_s"] = full / n;
  state.counters["tier25_vs_full_device"] = t25 / full;
  state.counters["tier10_vs_full_device"] = t10 / full;
  state.counters["ssd_vs_full_device"] = ssd / full;
  state.counters["hit25"] = h25 / n;
  state.counters["hit10"] = h10 / n;
  state.counters["hit_ssd"] = hssd / n;
  state.counters["ssd_reads_cached"] = cached / n;
  state.counters["ssd_cold_vs_full_device"] = cold / full;
  state.counters["ssd_cold_reads_cached"] = cold_cached / n;
}
BENCHMARK(BM_TierEndToEnd)->Iterations(3)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace recsdk

BENCHMARK_MAIN();
