// dlrm: the DLRM reference model of the speed race (issue 15), as a user writes it with recsdk's
// public API, and its benchmark mode.
//
// Model: 26 categorical features, one id each, 26 tables of 1,000,000 rows x dim 16; 13 dense
// features through a bottom MLP 13-512-256-16 (ReLU on every layer); the DLRM dot interaction of
// the 27 16-d vectors (351 pairwise dots below the diagonal + the dense vector = 367 features); a
// top MLP 367-512-256-1; sigmoid cross-entropy; batch 4096; SGD for tables and dense in one
// variant, Adagrad for both in the other (initial accumulator 0.1, epsilon 1e-10), lr 0.01.
//
// --mode little_demo races the little_demo sample's model (samples/little_demo, built by its own
// little_demo::MakeModelFn with the lookups in the graph) at its batch of 512: user ids are the
// first 8 tables' ids mod 200,000, item ids the next 16 tables' mod 80,000, and both heads take
// the file's label; each file batch gives batch/512 steps. Adam and LazyAdam, lr 0.01, as the
// sample (the --optimizer flag does not apply).
//
// Data: synthetic, Criteo-shaped, generated before timing starts and kept in one binary file that
// the PyTorch peer (benchmarks/peers/dlrm_torch.py) reads too, so both sides train on the same
// bytes. Ids are Zipf(1.05) over ranks 0..vocab-1, mapped to rows by a per-table bijective affine
// hash (row = (a_t * rank + b_t) mod vocab, a_t coprime with vocab) so hot rows are scattered.
// The label has a planted signal (two dense features and four tables' rows), so a model learns.
//
// File layout (little endian): header of 8 int64 {magic, num_batches, batch, tables, dense,
// vocab, seed, 0}, then per batch: ids int64 [tables][batch], dense float32 [batch][dense],
// labels float32 [batch].
//
// Usage:
//   dlrm [--data FILE] [--batches N] [--batch B] [--optimizer sgd|adagrad] [--threads T]
//        [--warmup W] [--windows K] [--window_steps S] [--loss_steps L] [--breakdown]
//        [--interaction fused|composed] [--mode dlrm|embedding|little_demo] [--write_data_only]
//        [--precision_mode MODE]  (SessionConfig::precision_mode, e.g. allow_mix_precision)
//        [--inter_op N]  (SessionConfig::stream_max_parallel_num "DNN_V100:N": ops run at once)
//        [--fusion PASSES]  (SessionConfig::enable_scope_fusion_passes; default "fuse_dense",
//                            "none" for no fusion pass)
//        [--device NAME]  (SessionConfig::device, e.g. cuda when this build links recsdk_cuda;
//                          any device but cpu runs with mix_compile_mode on: the ops without a
//                          kernel there, the tables' and the key stage's, run on the host)
//        [--session_config FILE]  (or SESSION_CONFIG=FILE; the flag wins: any session option,
//                                  the format `recsdk validate-config` checks; --threads,
//                                  --precision_mode, --inter_op and --fusion override the file's
//                                  values only when given)
//        [--tiered [--device_rows N]]  (--mode dlrm or embedding, one process: see below)
//
// --tiered gives every table a device tier of N rows (default min(vocab, max(2 x batch,
// vocab / 4))) over a host tier of vocab rows, and moves the lookups' key work to the key stage
// (sparse_lookup's modify_graph, ModifyGraph, StartAscPipeline over the file's batches, repeated):
// the hot rows live in the device tier, the rest on the host, and the key stage swaps them
// between the two ahead of the step. On --device cuda the device tier is GPU memory, so the
// tables' gathers and updates run on the GPU (untiered, their rows and row ops stay on the host);
// on cpu it is the host slab, on separate_memory that device's arena. The timed steps include
// the wait for the key stage's next batch. --breakdown does not apply (it runs sub-graphs on fed
// batches).
// It prints one JSON line: samples/s (median of the timing windows after the warm-up), every
// window's rate, the mean loss of the first batch and of the steps (loss_steps-4..loss_steps],
// losses_fnv (FNV-1a of every step's loss bits: equal on two devices = bitwise the same losses;
// with SessionConfig::deterministic for --tiered, e.g. a --session_config file), the
// minor page faults and fresh step buffers per timed step (both ~0 in a steady step), the CPU
// time per timed step (all threads; steadier than wall time on a shared machine), with --tiered
// the device rows and the tiers' swap bytes and host waits (SessionStats), and with --breakdown the
// step split into parts measured by running sub-graphs (see Breakdown()).
//
// Under mpirun (--mode dlrm only; docs/distributed.md) every rank trains its slice of each global
// batch (rows [rank x B/N, (rank + 1) x B/N) of the file's batch of B), the 26 tables sharded over
// the ranks, the dense gradients averaged (npu_distributed_optimizer_wrapper), the initial
// variables broadcast from rank 0; rank 0 prints the line, samples/s counting the global batch.
// `mpirun -np 2 dlrm --threads 1` against `dlrm --threads 2` is scripts/dist_figures.sh's
// ranks_vs_threads.
//
// Threading: single-threaded driver; the Session uses `--threads` threads inside kernels.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "recsdk/config_file.h"
#include "recsdk/recsdk.h"
#include "samples/common/precision_check.h"
#include "samples/little_demo/little_demo.h"
#if defined(DLRM_WITH_MPI)
#include "src/dist/mpi/mpi_communicator.h"
#endif

namespace {

using namespace recsdk;

constexpr int64_t kMagic = 0x4d524c44'52434552;  // "RECSDLRM"
constexpr int kTables = 26;
constexpr int kDense = 13;
constexpr int kDim = 16;
// little_demo's shapes (samples/little_demo/little_demo.cc).
constexpr int64_t kDemoBatch = 512, kDemoUserIds = 8, kDemoItemIds = 16;
constexpr int64_t kDemoUserVocab = 200000, kDemoItemVocab = 80000;

template <typename T>
T Check(StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "dlrm: %s: %s\n", what, std::string(v.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(v);
}
void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "dlrm: %s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

struct Flags {
  std::string data = "dlrm_data.bin";
  int64_t batches = 32;
  int64_t batch = 4096;
  int64_t vocab = 1'000'000;
  std::string optimizer = "sgd";
  int threads = 1;
  int warmup = 3;
  int windows = 3;
  int window_steps = 4;
  int loss_steps = 0;  // 0: warmup + windows * window_steps
  bool breakdown = false;
  std::string interaction = "fused";
  std::string fusion = "fuse_dense";
  bool write_data_only = false;
  std::string mode = "dlrm";    // or "embedding" (the sparse path alone) or "little_demo"
  std::string precision_mode;   // SessionConfig::precision_mode, e.g. allow_mix_precision
  int inter_op = 1;             // SessionConfig::stream_max_parallel_num DNN_V100:N
  std::string session_config;   // a session config file ("": SESSION_CONFIG, else none)
  std::string device = "cpu";   // SessionConfig::device
  bool tiered = false;          // device/host tiers, key work in the key stage
  int64_t device_rows = 0;      // --tiered: device tier rows per table (0: the default)
  std::set<std::string> given;  // the flags on the command line
  int rank = 0, ranks = 1;      // under mpirun: this rank and the world size
};

// RaceData: the pre-generated batches, as laid out in the file.
struct RaceData {
  int64_t num_batches = 0, batch = 0, vocab = 0;
  std::vector<int64_t> ids;   // [num_batches][kTables][batch]
  std::vector<float> dense;   // [num_batches][batch][kDense]
  std::vector<float> labels;  // [num_batches][batch]
};

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

RaceData Generate(int64_t num_batches, int64_t batch, int64_t vocab, uint64_t seed) {
  RaceData d{num_batches, batch, vocab, {}, {}, {}};
  d.ids.resize(num_batches * kTables * batch);
  d.dense.resize(num_batches * batch * kDense);
  d.labels.resize(num_batches * batch);
  // Zipf(1.05) over ranks by inverse CDF.
  std::vector<double> cdf(vocab);
  double sum = 0;
  for (int64_t r = 0; r < vocab; ++r) cdf[r] = sum += std::pow(static_cast<double>(r + 1), -1.05);
  for (double& c : cdf) c /= sum;
  // Per-table bijection rank -> row: a_t coprime with vocab (odd and not a multiple of 5 covers
  // every vocab of the form 2^i 5^j, such as 10^6; checked below for others).
  std::vector<int64_t> mul(kTables), add(kTables);
  for (int t = 0; t < kTables; ++t) {
    int64_t a = static_cast<int64_t>(Mix(seed * 131 + t) % static_cast<uint64_t>(vocab)) | 1;
    while (std::gcd(a, vocab) != 1) a += 2;
    mul[t] = a;
    add[t] = static_cast<int64_t>(Mix(seed * 137 + t + 1000) % static_cast<uint64_t>(vocab));
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t b = 0; b < num_batches; ++b) {
    std::vector<double> logit(batch, -0.5);
    for (int t = 0; t < kTables; ++t) {
      int64_t* ids = &d.ids[(b * kTables + t) * batch];
      for (int64_t i = 0; i < batch; ++i) {
        const int64_t rank = std::upper_bound(cdf.begin(), cdf.end() - 1, uni(rng)) - cdf.begin();
        const int64_t row =
            static_cast<int64_t>((static_cast<__int128>(mul[t]) * rank + add[t]) % vocab);
        ids[i] = row;
        // Planted signal: the rows of the first four tables carry a +-0.6 effect each.
        if (t < 4) logit[i] += (Mix(row * 31 + t) & 1) ? 0.6 : -0.6;
      }
    }
    for (int64_t i = 0; i < batch; ++i) {
      float* x = &d.dense[(b * batch + i) * kDense];
      for (int j = 0; j < kDense; ++j) x[j] = normal(rng);
      logit[i] += 0.8 * x[0] - 0.6 * x[1];
      d.labels[b * batch + i] = uni(rng) < 1.0 / (1.0 + std::exp(-logit[i])) ? 1.0f : 0.0f;
    }
  }
  return d;
}

bool ReadData(const std::string& path, int64_t batches, int64_t batch, int64_t vocab, RaceData* d) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  int64_t h[8];
  if (!in.read(reinterpret_cast<char*>(h), sizeof(h))) return false;
  if (h[0] != kMagic || h[1] != batches || h[2] != batch || h[3] != kTables || h[4] != kDense ||
      h[5] != vocab)
    return false;
  *d = RaceData{batches, batch, vocab, {}, {}, {}};
  d->ids.resize(batches * kTables * batch);
  d->dense.resize(batches * batch * kDense);
  d->labels.resize(batches * batch);
  for (int64_t b = 0; b < batches; ++b) {
    in.read(reinterpret_cast<char*>(&d->ids[b * kTables * batch]),
            kTables * batch * sizeof(int64_t));
    in.read(reinterpret_cast<char*>(&d->dense[b * batch * kDense]), batch * kDense * sizeof(float));
    in.read(reinterpret_cast<char*>(&d->labels[b * batch]), batch * sizeof(float));
  }
  return static_cast<bool>(in);
}

void WriteData(const std::string& path, const RaceData& d, uint64_t seed) {
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  const int64_t h[8] = {kMagic, d.num_batches, d.batch, kTables, kDense, d.vocab, int64_t(seed), 0};
  out.write(reinterpret_cast<const char*>(h), sizeof(h));
  for (int64_t b = 0; b < d.num_batches; ++b) {
    out.write(reinterpret_cast<const char*>(&d.ids[b * kTables * d.batch]),
              kTables * d.batch * sizeof(int64_t));
    out.write(reinterpret_cast<const char*>(&d.dense[b * d.batch * kDense]),
              d.batch * kDense * sizeof(float));
    out.write(reinterpret_cast<const char*>(&d.labels[b * d.batch]), d.batch * sizeof(float));
  }
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "dlrm: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// ComposedInteraction: the DLRM dot interaction from general ops, as a user wrote it before the
// fused op existed: Concat -> [B,27,16] -> BatchMatMul -> [B,729] -> the 351 entries below the
// diagonal (Gather on axis 1). Kept to compare against ops::DotInteraction.
Output ComposedInteraction(const Scope& s, const std::vector<Output>& vecs) {
  const int64_t f = static_cast<int64_t>(vecs.size());
  Output t = ops::Reshape(s, ops::Concat(s, vecs, 1), {-1, f, kDim});
  Output z =
      ops::Reshape(s, ops::BatchMatMul(s, t, t, {.adj_x = false, .adj_y = true}), {-1, f * f});
  std::vector<int32_t> index;
  for (int64_t i = 1; i < f; ++i)
    for (int64_t j = 0; j < i; ++j) index.push_back(static_cast<int32_t>(i * f + j));
  Output idx = ops::Const(s, Tensor::Vector<int32_t>(index));
  Output picked = ops::Transpose(s, ops::Gather(s, ops::Transpose(s, z, {1, 0}), idx), {1, 0});
  return picked;
}

struct Model {
  Graph graph;
  std::vector<Output> ids;
  Output dense, label, loss;
  std::vector<Output> lookups;
  Output logits;
  Node* dense_train = nullptr;
  Node* train = nullptr;
  Node* init = nullptr;
  Output user_ids, item_ids, label_1;  // --mode little_demo (label is label_0)
};

// BuildLittleDemo: little_demo's model from its own model_fn, its lookups in the graph.
void BuildLittleDemo(Model* m) {
  m->graph.set_random_seed(17);
  Scope s(&m->graph);
  m->user_ids =
      ops::Placeholder(s.WithOpName("user_ids"), DType::kInt64, Shape{kDemoBatch, kDemoUserIds});
  m->item_ids =
      ops::Placeholder(s.WithOpName("item_ids"), DType::kInt64, Shape{kDemoBatch, kDemoItemIds});
  m->label = ops::Placeholder(s.WithOpName("label_0"), DType::kFloat32, Shape{kDemoBatch, 1});
  m->label_1 = ops::Placeholder(s.WithOpName("label_1"), DType::kFloat32, Shape{kDemoBatch, 1});
  little_demo::DemoOptions o;
  o.use_modify_graph = false;
  o.batch_size = kDemoBatch;
  EstimatorSpec spec =
      Check(little_demo::MakeModelFn(o)(s, {{"user_ids", m->user_ids}, {"item_ids", m->item_ids}},
                                        {{"label_0", m->label}, {"label_1", m->label_1}},
                                        ModeKeys::kTrain, {}),
            "little_demo's model_fn");
  m->loss = spec.loss;
  m->train = spec.train_op;
  m->dense_train = spec.train_op;
  m->init = GlobalVariablesInitializer(s);
  Check(s.status(), "building little_demo's model");
}

// MakeDemoFeeds: batch/512 little_demo steps per file batch (ids mapped as the file comment says).
std::vector<FeedList> MakeDemoFeeds(const RaceData& d, const Model& m) {
  std::vector<FeedList> out;
  for (int64_t b = 0; b < d.num_batches; ++b) {
    const int64_t* ids = &d.ids[b * kTables * d.batch];
    for (int64_t q = 0; q + kDemoBatch <= d.batch; q += kDemoBatch) {
      Tensor user(DType::kInt64, Shape{kDemoBatch, kDemoUserIds});
      Tensor item(DType::kInt64, Shape{kDemoBatch, kDemoItemIds});
      Tensor label(DType::kFloat32, Shape{kDemoBatch, 1});
      for (int64_t r = 0; r < kDemoBatch; ++r) {
        for (int64_t i = 0; i < kDemoUserIds; ++i) {
          user.flat<int64_t>()[r * kDemoUserIds + i] = ids[i * d.batch + q + r] % kDemoUserVocab;
        }
        for (int64_t j = 0; j < kDemoItemIds; ++j) {
          item.flat<int64_t>()[r * kDemoItemIds + j] =
              ids[(kDemoUserIds + j) * d.batch + q + r] % kDemoItemVocab;
        }
        label.flat<float>()[r] = d.labels[b * d.batch + q + r];
      }
      out.push_back({{m.user_ids, user}, {m.item_ids, item}, {m.label, label}, {m.label_1, label}});
    }
  }
  return out;
}

void Build(const Flags& flags, Model* m) {
  m->graph.set_random_seed(17);
  Scope s(&m->graph);
  const bool adagrad = flags.optimizer == "adagrad";
  const float lr = 0.01f;
  std::vector<Output> vecs;
  const int64_t batch = flags.batch / flags.ranks;  // this rank's slice of the global batch
  // --tiered: every input is a dataset column the key stage feeds (MakeTieredBatches).
  auto input = [&](const std::string& name, DType dtype, const Shape& shape) {
    return flags.tiered ? DatasetColumn(s, name, dtype, shape)
                        : ops::Placeholder(s.WithOpName(name), dtype, shape);
  };
  m->dense = input("dense", DType::kFloat32, Shape{batch, kDense});
  m->label = input("label", DType::kFloat32, Shape{batch, 1});
  layers::MlpOptions bottom;
  bottom.name = "bottom";
  bottom.hidden_units = {512, 256, kDim};
  vecs.push_back(layers::Mlp(s, m->dense, bottom));
  for (int t = 0; t < kTables; ++t) {
    TableConfig c;
    c.name = "table" + std::to_string(t);
    c.dim = kDim;
    c.device_vocabulary_size = flags.tiered ? flags.device_rows : flags.vocab;
    // Tiered: every key fits on the host; the device tier caches the hot ones.
    if (flags.tiered) c.host_vocabulary_size = flags.vocab;
    c.initializer = Initializer::Uniform(-0.05, 0.05, 100 + t);
    // Under mpirun each rank's loss is the mean over its share of the global batch: dividing the
    // summed sparse gradients by the ranks trains like one process on the global batch.
    c.all2all_gradients_op = "sum_gradients_and_div_by_ranksize";
    SparseOptimizerConfig opt =
        adagrad ? SparseOptimizerConfig::Adagrad(lr, 0.1f, 1e-10f) : SparseOptimizerConfig::SGD(lr);
    SparseTable table = Check(create_table(s, c, opt), "create_table");
    Output ids = input("ids" + std::to_string(t), DType::kInt64, Shape{batch, 1});
    m->ids.push_back(ids);
    SparseLookupOptions lo;
    lo.combiner = Combiner::kSum;
    lo.modify_graph = flags.tiered;
    Output e = Check(sparse_lookup(s, table, ids, lo), "sparse_lookup");
    m->lookups.push_back(e);
    vecs.push_back(e);
  }
  if (flags.mode == "embedding") {
    // The embedding-only race: loss = sum over tables of sum(lookup * w) for a fixed random w, so
    // the pooled gradient of each lookup is w; tables trained by sparse Adagrad.
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Tensor w(DType::kFloat32, Shape{flags.batch, kDim});
    for (float& v : w.flat<float>()) v = normal(rng);
    Output wc = ops::Const(s, w);
    std::vector<Output> parts;
    for (size_t t = 1; t < vecs.size(); ++t)
      parts.push_back(ops::ReduceSum(s, ops::Mul(s, vecs[t], wc)));
    m->loss = ops::AddN(s.WithOpName("loss"), parts);
    m->dense_train = ops::NoOp(s);
    m->train = Check(SparseMinimize(s, m->loss), "sparse optimizer");
    m->init = GlobalVariablesInitializer(s);
    Check(s.status(), "building the model");
    if (flags.tiered) Check(ModifyGraph(&m->graph), "ModifyGraph");
    return;
  }
  const Scope is = s.NewSubScope("interaction");
  Output inter = flags.interaction == "composed"
                     ? ComposedInteraction(is, vecs)
                     : ops::DotInteraction(
                           is, ops::Reshape(is, ops::Concat(is, vecs, 1), {-1, kTables + 1, kDim}));
  layers::MlpOptions top;
  top.name = "top";
  top.hidden_units = {512, 256};
  top.output_units = 1;
  m->logits = layers::Mlp(s, ops::Concat(s, {vecs[0], inter}, 1), top);
  m->loss = ops::ReduceMean(s.WithOpName("loss"),
                            ops::SigmoidCrossEntropyWithLogits(s, m->label, m->logits));
  std::shared_ptr<Optimizer> dense_opt;
  if (adagrad) {
    AdagradOptions o;
    o.learning_rate = lr;
    o.initial_accumulator_value = 0.1;
    o.epsilon = 1e-10;
    dense_opt = std::make_shared<AdagradOptimizer>(o);
  } else {
    dense_opt = std::make_shared<SgdOptimizer>(SgdOptions{lr});
  }
  if (flags.ranks > 1) dense_opt = npu_distributed_optimizer_wrapper(dense_opt);
  m->dense_train = Check(dense_opt->Minimize(s, m->loss), "dense optimizer");
  Node* sparse_train = Check(SparseMinimize(s, m->loss), "sparse optimizer");
  m->train = ops::Group(s.WithOpName("train"), {m->dense_train, sparse_train});
  m->init = GlobalVariablesInitializer(s);
  Check(s.status(), "building the model");
  if (flags.tiered) Check(ModifyGraph(&m->graph), "ModifyGraph");
}

// MakeTieredBatches: the file's batches as the key stage's dataset (--tiered): the columns the
// model's DatasetColumns name, each batch once; the caller repeats them.
std::vector<Batch> MakeTieredBatches(const RaceData& d) {
  std::vector<Batch> out;
  for (int64_t b = 0; b < d.num_batches; ++b) {
    Batch batch;
    for (int t = 0; t < kTables; ++t) {
      Tensor ids(DType::kInt64, Shape{d.batch, 1});
      std::memcpy(ids.raw_data(), &d.ids[(b * kTables + t) * d.batch], d.batch * sizeof(int64_t));
      Check(batch.AddColumn("ids" + std::to_string(t), std::move(ids)), "batch column");
    }
    Tensor dense(DType::kFloat32, Shape{d.batch, kDense});
    std::memcpy(dense.raw_data(), &d.dense[b * d.batch * kDense], d.batch * kDense * sizeof(float));
    Check(batch.AddColumn("dense", std::move(dense)), "batch column");
    Tensor label(DType::kFloat32, Shape{d.batch, 1});
    std::memcpy(label.raw_data(), &d.labels[b * d.batch], d.batch * sizeof(float));
    Check(batch.AddColumn("label", std::move(label)), "batch column");
    batch.set_num_valid(d.batch);
    out.push_back(std::move(batch));
  }
  return out;
}

// Fnv1a: FNV-1a over the bits of the losses (two runs with the same value trained bitwise alike).
uint64_t Fnv1a(const std::vector<double>& losses) {
  uint64_t h = 1469598103934665603ull;
  for (double l : losses) {
    const float f = static_cast<float>(l);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    for (int i = 0; i < 4; ++i) {
      h ^= (bits >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

// Feeds: the tensors of batch b (copied once, before timing).
// Under mpirun: rank r's slice of each batch, rows [r x B/N, (r + 1) x B/N).
std::vector<FeedList> MakeFeeds(const RaceData& d, const Model& m, int rank, int ranks) {
  std::vector<FeedList> out;
  const int64_t lb = d.batch / ranks, first = rank * lb;
  for (int64_t b = 0; b < d.num_batches; ++b) {
    FeedList f;
    for (int t = 0; t < kTables; ++t) {
      Tensor ids(DType::kInt64, Shape{lb, 1});
      std::memcpy(ids.raw_data(), &d.ids[(b * kTables + t) * d.batch + first],
                  lb * sizeof(int64_t));
      f.emplace_back(m.ids[t], ids);
    }
    Tensor dense(DType::kFloat32, Shape{lb, kDense});
    std::memcpy(dense.raw_data(), &d.dense[(b * d.batch + first) * kDense],
                lb * kDense * sizeof(float));
    f.emplace_back(m.dense, dense);
    Tensor label(DType::kFloat32, Shape{lb, 1});
    std::memcpy(label.raw_data(), &d.labels[b * d.batch + first], lb * sizeof(float));
    f.emplace_back(m.label, label);
    out.push_back(std::move(f));
  }
  return out;
}

// MinorFaults: the process's minor page faults so far (each is a fresh page the kernel zeroed).
int64_t MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// CpuSeconds: user + system CPU time of the process so far, all threads. On a shared machine it
// moves far less than wall time when other work takes the cores, so A/B runs compare it too.
double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * t.tv_usec; };
  return s(u.ru_utime) + s(u.ru_stime);
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
#if defined(DLRM_WITH_MPI)
  recsdk::dist::RegisterMpiCommunicator();
#endif
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dlrm: %s needs a value\n", f.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    flags.given.insert(f);
    if (f == "--data")
      flags.data = next();
    else if (f == "--batches")
      flags.batches = std::atoll(next().c_str());
    else if (f == "--batch")
      flags.batch = std::atoll(next().c_str());
    else if (f == "--vocab")
      flags.vocab = std::atoll(next().c_str());
    else if (f == "--optimizer")
      flags.optimizer = next();
    else if (f == "--threads")
      flags.threads = std::atoi(next().c_str());
    else if (f == "--warmup")
      flags.warmup = std::atoi(next().c_str());
    else if (f == "--windows")
      flags.windows = std::atoi(next().c_str());
    else if (f == "--window_steps")
      flags.window_steps = std::atoi(next().c_str());
    else if (f == "--loss_steps")
      flags.loss_steps = std::atoi(next().c_str());
    else if (f == "--interaction")
      flags.interaction = next();
    else if (f == "--fusion")
      flags.fusion = next();
    else if (f == "--breakdown")
      flags.breakdown = true;
    else if (f == "--mode")
      flags.mode = next();
    else if (f == "--precision_mode")
      flags.precision_mode = next();
    else if (f == "--inter_op")
      flags.inter_op = std::atoi(next().c_str());
    else if (f == "--write_data_only")
      flags.write_data_only = true;
    else if (f == "--session_config")
      flags.session_config = next();
    else if (f == "--device")
      flags.device = next();
    else if (f == "--tiered")
      flags.tiered = true;
    else if (f == "--device_rows")
      flags.device_rows = std::atoll(next().c_str());
    else {
      std::fprintf(stderr, "dlrm: unknown flag %s (see the usage in samples/dlrm/main.cc)\n",
                   f.c_str());
      return 2;
    }
  }
  if (flags.batches <= 0 || flags.batch <= 0 || flags.vocab <= 1 || flags.threads <= 0 ||
      flags.warmup < 0 || flags.windows <= 0 || flags.window_steps <= 0 ||
      (flags.optimizer != "sgd" && flags.optimizer != "adagrad" &&
       !(flags.mode == "little_demo" && flags.optimizer == "adam")) ||
      (flags.mode != "dlrm" && flags.mode != "embedding" && flags.mode != "little_demo") ||
      (flags.mode == "little_demo" && flags.batch % kDemoBatch != 0) ||
      (flags.interaction != "fused" && flags.interaction != "composed")) {
    std::fprintf(stderr,
                 "dlrm: --batches, --batch, --threads, --windows, --window_steps must be > 0, "
                 "--vocab > 1, --optimizer sgd|adagrad, --interaction fused|composed, --mode "
                 "dlrm|embedding|little_demo (with --batch a multiple of 512)\n");
    return 2;
  }
  flags.ranks = Check(get_rank_size(), "get_rank_size");
  flags.rank = Check(get_rank_id(), "get_rank_id");
  if (flags.ranks > 1 && (flags.mode != "dlrm" || flags.batch % flags.ranks != 0)) {
    std::fprintf(stderr,
                 "dlrm: under mpirun only --mode dlrm runs, with --batch a multiple of the %d "
                 "ranks\n",
                 flags.ranks);
    return 2;
  }
  if (flags.tiered) {
    if (flags.device_rows == 0) {
      flags.device_rows = std::min(flags.vocab, std::max(2 * flags.batch, flags.vocab / 4));
    }
    if (flags.mode == "little_demo" || flags.ranks > 1 || flags.breakdown ||
        flags.device_rows < 1 || flags.device_rows > flags.vocab) {
      std::fprintf(stderr,
                   "dlrm: --tiered runs --mode dlrm or embedding in one process, without "
                   "--breakdown, with --device_rows in [1, --vocab] (got %lld of %lld)\n",
                   static_cast<long long>(flags.device_rows), static_cast<long long>(flags.vocab));
      return 2;
    }
  } else if (flags.given.contains("--device_rows")) {
    std::fprintf(stderr, "dlrm: --device_rows needs --tiered\n");
    return 2;
  }
  if (flags.ranks > 1) Check(InitDistributed(), "InitDistributed");
  if (flags.mode == "embedding") flags.optimizer = "adagrad";
  if (flags.mode == "little_demo") flags.optimizer = "adam";
  const bool demo = flags.mode == "little_demo";
  const uint64_t seed = 2026;
  RaceData data;
  if (!ReadData(flags.data, flags.batches, flags.batch, flags.vocab, &data)) {
    data = Generate(flags.batches, flags.batch, flags.vocab, seed);
    WriteData(flags.data, data, seed);
  }
  if (flags.write_data_only) return 0;

  Model m;
  if (demo) {
    BuildLittleDemo(&m);
  } else {
    Build(flags, &m);
  }
  // --session_config FILE or SESSION_CONFIG=FILE: any session option; dlrm's own session flags
  // override the file's values only when given (without a file, their defaults apply).
  std::string config_file = flags.session_config;
  if (const char* env = std::getenv("SESSION_CONFIG"); config_file.empty() && env != nullptr) {
    config_file = env;
  }
  SessionConfig config;
  if (!config_file.empty()) config = Check(SessionConfigFromFile(config_file), "--session_config");
  auto use_flag = [&](const char* flag) {
    return config_file.empty() || flags.given.contains(flag);
  };
  if (use_flag("--threads")) config.intra_op_parallelism = flags.threads;
  if (use_flag("--precision_mode")) config.precision_mode = flags.precision_mode;
  if (use_flag("--inter_op")) {
    config.stream_max_parallel_num = fmt::format("DNN_V100:{}", flags.inter_op);
  }
  if (use_flag("--fusion")) {
    config.enable_scope_fusion_passes = flags.fusion == "none" ? "" : flags.fusion;
  }
  if (use_flag("--device")) {
    config.device = flags.device;
    config.mix_compile_mode = flags.device != "cpu";
  }
  // PRECISION_CHECK=1 traces the steps (samples/common/precision_check.h); its line goes to
  // stderr, stdout is the JSON line.
  const samples::PrecisionCheckOptions precision_check =
      Check(samples::PrecisionCheckFromEnv("dlrm"), "PRECISION_CHECK");
  Check(samples::ApplyPrecisionCheck("dlrm", precision_check, &config, stderr), "PRECISION_CHECK");
  auto session = Check(Session::Create(m.graph, config), "Session::Create");
  Check(session->Run({}, {}, {m.init}).status(), "init");
  if (flags.ranks > 1) Check(broadcast_global_variables(*session, 0), "broadcast_global_variables");
  // --tiered: the key stage feeds the steps (its key work ahead of them, on its own threads).
  std::unique_ptr<KeyStage> stage;
  std::vector<FeedList> feeds;
  if (flags.tiered) {
    std::unique_ptr<Dataset> batches =
        Check(InMemoryDatasetFromBatches(MakeTieredBatches(data)), "the tiered batches");
    stage = Check(StartAscPipeline(*session, Check(Repeat(std::move(batches), -1), "Repeat")),
                  "StartAscPipeline");
  } else {
    feeds = demo ? MakeDemoFeeds(data, m) : MakeFeeds(data, m, flags.rank, flags.ranks);
  }

  // Samples per step for the model; ids per step for the embedding-only race.
  const double per_step =
      demo ? static_cast<double>(kDemoBatch)
           : static_cast<double>(flags.batch) * (flags.mode == "embedding" ? kTables : 1);
  const int total = flags.warmup + flags.windows * flags.window_steps;
  const int loss_steps = flags.loss_steps > 0 ? flags.loss_steps : total;
  std::vector<double> losses;
  std::vector<double> rates;
  int64_t step = 0;
  std::vector<Tensor> out;
  FeedList staged;
  auto run_step = [&]() {
    if (stage != nullptr && !Check(stage->Next(&staged), "the key stage's next batch")) {
      std::fprintf(stderr, "dlrm: the key stage ended before step %lld\n",
                   static_cast<long long>(step));
      std::exit(1);
    }
    Check(session->Run(stage != nullptr ? staged : feeds[static_cast<size_t>(step) % feeds.size()],
                       {m.loss}, {m.train}, &out),
          "train step");
    losses.push_back(out[0].scalar<float>());
    ++step;
  };
  for (int i = 0; i < flags.warmup; ++i) run_step();
  // Page faults and fresh buffers of the timed steps: a steady step should make neither.
  const int64_t faults0 = MinorFaults();
  const int64_t fresh0 = session->stats().graph_fresh_allocations;
  const double cpu0 = CpuSeconds();
  for (int w = 0; w < flags.windows; ++w) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < flags.window_steps; ++i) run_step();
    const auto t1 = std::chrono::steady_clock::now();
    rates.push_back(flags.window_steps * per_step / Seconds(t0, t1));
  }
  const double timed_steps = static_cast<double>(flags.windows) * flags.window_steps;
  const double faults_per_step = (MinorFaults() - faults0) / timed_steps;
  const double fresh_per_step = (session->stats().graph_fresh_allocations - fresh0) / timed_steps;
  const double cpu_ms_per_step = (CpuSeconds() - cpu0) * 1e3 / timed_steps;
  while (step < loss_steps) run_step();
  const int tail_begin = std::max(0, loss_steps - 5);
  double tail = 0;
  for (int i = tail_begin; i < loss_steps; ++i) tail += losses[i];
  tail /= (loss_steps - tail_begin);

  // Breakdown: each part's time is the difference between running a smaller and a larger
  // sub-graph on the same batch (median of 3 runs each): lookups only; + dense forward,
  // interaction and loss; + backward and dense update (dense train op alone); + sparse gradient
  // aggregation and table update (the full step). It runs after the measured steps.
  std::string breakdown = "null";
  if (flags.breakdown && !demo) {
    auto time_of = [&](const std::vector<TensorName>& fetches,
                       const std::vector<TensorName>& targets) {
      std::vector<double> t;
      for (int r = 0; r < 4; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        Check(session->Run(feeds[r % data.num_batches], fetches, targets, &out), "breakdown");
        if (r > 0) t.push_back(Seconds(t0, std::chrono::steady_clock::now()) * 1e3);
      }
      return Median(t);
    };
    std::vector<TensorName> lookups(m.lookups.begin(), m.lookups.end());
    const double lookup = time_of(lookups, {});
    const double forward = time_of({m.loss}, {});
    const double dense_step = time_of({m.loss}, {m.dense_train});
    const double full = time_of({m.loss}, {m.train});
    breakdown = fmt::format(
        "{{\"method\":\"sub-graph differences, ms\",\"embedding_lookup\":{:.2f},"
        "\"dense_forward_interaction_loss\":{:.2f},\"backward_and_dense_update\":{:.2f},"
        "\"sparse_grad_and_update\":{:.2f},\"full_step\":{:.2f}}}",
        lookup, forward - lookup, dense_step - forward, full - dense_step, full);
  }
  if (flags.rank != 0) return 0;  // rank 0 reports for the job
  std::string windows;
  for (double r : rates) windows += (windows.empty() ? "" : ",") + fmt::format("{:.1f}", r);
  std::string tiers = "null";
  if (stage != nullptr) {
    stage->Stop();
    const SessionStats st = session->stats();
    tiers = fmt::format(
        "{{\"device_rows\":{},\"host_rows\":{},\"swap_in_bytes\":{},\"swap_out_bytes\":{},"
        "\"swap_in_host_waits\":{},\"swap_out_host_waits\":{}}}",
        flags.device_rows, flags.vocab, st.tier_swap_in_bytes, st.tier_swap_out_bytes,
        st.tier_swap_in_host_waits, st.tier_swap_out_host_waits);
  }
  std::printf(
      "{\"impl\":\"recsdk\",\"model\":\"%s\",\"device\":\"%s\",\"ranks\":%d,\"threads\":%d,"
      "\"optimizer\":\"%s\","
      "\"interaction\":\"%s\",\"fusion\":\"%s\",\"batch\":%lld,\"%s\":%.1f,\"windows\":[%s],"
      "\"first_loss\":%.6f,\"loss_steps\":%d,\"loss\":%.6f,\"page_faults_per_step\":%.1f,"
      "\"fresh_buffers_per_step\":%.1f,\"cpu_ms_per_step\":%.2f,\"losses_fnv\":\"%016llx\","
      "\"tiers\":%s,\"breakdown\":%s}\n",
      flags.mode.c_str(), config.device.c_str(), flags.ranks, flags.threads,
      flags.optimizer.c_str(), flags.interaction.c_str(), flags.fusion.c_str(),
      static_cast<long long>(demo ? kDemoBatch : flags.batch),
      flags.mode == "embedding" ? "ids_per_s" : "samples_per_s", Median(rates), windows.c_str(),
      losses[0], loss_steps, tail, faults_per_step, fresh_per_step, cpu_ms_per_step,
      static_cast<unsigned long long>(Fnv1a(losses)), tiers.c_str(), breakdown.c_str());
  return 0;
}
