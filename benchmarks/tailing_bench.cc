// tailing_bench.cc: is_tailing_optimization's figure, run under mpirun (docs/distributed.md):
//
//   tailing_vs_buckets: the step time of a small DLRM-like model (13 dense features -> bottom MLP;
//     two sharded tables of dim 16, 4 ids each; top MLP of width `range(0)`; Adam on the dense
//     variables, Adagrad on the tables) trained with hcom_parallel's buckets, with and without
//     is_tailing_optimization, on `range(1)` streams (stream_max_parallel_num DNN_V100:N).
//     The two Sessions step alternately in one run (so a busy host slows both alike); the
//     counter `ratio` is tailing time / buckets time (below 1: tailing is faster).
//
// Every rank runs the same fixed number of iterations (collectives must match); rank 0 prints.
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "benchmarks/mpi_bench_main.h"
#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

constexpr int kDense = 13;
constexpr int kIds = 4;
constexpr int kDim = 16;
constexpr int64_t kRows = 256;  // per rank

struct Dlrm {
  Graph g;
  Scope s{&g};
  Node* train = nullptr;
  std::unique_ptr<Session> session;
  FeedList feeds;

  Dlrm(int64_t width, bool tailing, int streams) {
    g.set_random_seed(3);
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{kRows, kDense});
    Output y = ops::Placeholder(s.WithOpName("y"), DType::kFloat32, Shape{kRows, 1});
    std::vector<Output> parts;
    auto dense = [&](Output in, int64_t units, const std::string& name, bool relu) {
      layers::DenseOptions o;
      o.units = units;
      o.name = name;
      if (relu) o.activation = layers::Activation::kRelu;
      return layers::Dense(s, in, o);
    };
    parts.push_back(dense(dense(x, 64, "bot1", true), kDim, "bot2", true));
    for (int t = 0; t < 2; ++t) {
      const std::string name = "ids" + std::to_string(t);
      Output ids = ops::Placeholder(s.WithOpName(name), DType::kInt64, Shape{kRows, kIds});
      TableConfig table;
      table.name = "emb" + std::to_string(t);
      table.dim = kDim;
      table.device_vocabulary_size = 1 << 16;
      table.initializer = Initializer::Uniform(-0.05, 0.05, 7 + t);
      StatusOr<SparseTable> created = create_table(s, table, SparseOptimizerConfig::Adagrad(0.05f));
      if (!created.ok()) std::abort();
      SparseLookupOptions lo;
      lo.combiner = Combiner::kMean;
      parts.push_back(*sparse_lookup(s, *created, ids, lo));
      std::vector<int64_t> values;
      for (int64_t i = 0; i < kRows * kIds; ++i) values.push_back((i * 7919 + t * 31) % 50000);
      feeds.emplace_back(name, *Tensor::FromValues<int64_t>(Shape{kRows, kIds}, values));
    }
    Output h = ops::Concat(s, parts, 1);
    Output logits =
        dense(dense(dense(h, width, "top1", true), width / 2, "top2", true), 1, "top3", false);
    Output loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, y, logits));
    DistributedOptimizerOptions o;
    o.is_tailing_optimization = tailing;
    auto opt = npu_distributed_optimizer_wrapper(std::make_shared<AdamOptimizer>(), o);
    StatusOr<Node*> d = opt->Minimize(s, loss);
    StatusOr<Node*> sp = SparseMinimize(s, loss);
    if (!d.ok() || !sp.ok()) std::abort();
    train = ops::Group(s, {*d, *sp});
    Node* init = GlobalVariablesInitializer(s);
    SessionConfig config;
    config.hcom_parallel = true;
    config.is_tailing_optimization = tailing;
    config.stream_max_parallel_num = "DNN_V100:" + std::to_string(streams);
    StatusOr<std::unique_ptr<Session>> created = Session::Create(g, config);
    if (!created.ok()) {
      std::fprintf(stderr, "tailing_bench: %s\n", std::string(created.status().message()).c_str());
      std::abort();
    }
    session = std::move(*created);
    if (!session->Run({}, {}, {init->name()}, nullptr).ok()) std::abort();
    std::vector<float> xs, ys;
    for (int64_t i = 0; i < kRows * kDense; ++i) xs.push_back(std::sin(0.01f * i));
    for (int64_t i = 0; i < kRows; ++i) ys.push_back(i % 3 == 0 ? 1.0f : 0.0f);
    feeds.emplace_back("x", *Tensor::FromValues<float>(Shape{kRows, kDense}, xs));
    feeds.emplace_back("y", *Tensor::FromValues<float>(Shape{kRows, 1}, ys));
  }

  double StepSeconds() {
    const auto t0 = std::chrono::steady_clock::now();
    if (const Status st = session->Run(feeds, {}, {train->name()}, nullptr); !st.ok()) {
      std::fprintf(stderr, "tailing_bench: %s\n", std::string(st.message()).c_str());
      std::abort();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

void BM_TailingVsBuckets(benchmark::State& state) {
  const int64_t width = state.range(0);
  const int streams = static_cast<int>(state.range(1));
  Dlrm buckets(width, false, streams);
  Dlrm tailing(width, true, streams);
  for (int i = 0; i < 5; ++i) {  // warm-up: first steps admit keys and allocate
    buckets.StepSeconds();
    tailing.StepSeconds();
  }
  double t_buckets = 0, t_tailing = 0;
  int64_t n = 0;
  for (auto _ : state) {
    // Alternate which goes first, so neither always follows the other's cache footprint.
    if (n % 2 == 0) {
      t_buckets += buckets.StepSeconds();
      t_tailing += tailing.StepSeconds();
    } else {
      t_tailing += tailing.StepSeconds();
      t_buckets += buckets.StepSeconds();
    }
    ++n;
  }
  state.counters["ms_buckets"] = 1e3 * t_buckets / static_cast<double>(n);
  state.counters["ms_tailing"] = 1e3 * t_tailing / static_cast<double>(n);
  state.counters["ratio"] = t_tailing / t_buckets;
}
BENCHMARK(BM_TailingVsBuckets)
    ->Args({256, 1})
    ->Args({1024, 1})
    ->Args({1024, 4})
    ->Iterations(200)
    ->UseRealTime();

}  // namespace
}  // namespace recsdk

int main(int argc, char** argv) {
  return recsdk::bench::RunUnderMpi(argc, argv, "tailing_bench", /*share_cores=*/false);
}
