// cuda_device_test.cc: the "cuda" Device behind the device seam (src/device/cuda/cuda_device.h).
// Without a GPU (every CI machine): the registration that linking recsdk_cuda performs (the
// device, its memory kind, its kernels and copies, the table ops' kernels), the Session's error
// naming the missing GPU and the fix, the pinned allocator's refusal, and the placement pass's
// decisions for a DLRM-shaped training graph given the registered kernel set (dense ops on the
// GPU; the row ops of tiered tables on the GPU, of untiered tables on the host; key stage and
// initialisers on the host; a copy on every edge between them). With a GPU: the same model
// trained on "cuda" and on "cpu" gives the same losses (tolerance); the table kernels
// (cuda_table_kernels.cc) against the CPU's loops and a tiered table trained through the key
// stage on "cuda" against "cpu", bit for bit; the no-GPU test skips. Without one the GPU tests
// skip, saying so. With a GPU also CounterChecks (bad-index counts read off the step's path).
// Also the device tier's RowStore in GPU memory (CudaRowStore): its option
// checks and no-GPU error everywhere, its swaps with the host tier on a GPU; the device tier's
// asynchronous swap-outs (CudaTierMemory::ReadAsync / WaitRead) on a GPU. Labels: cuda, quick.
#include "src/device/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "recsdk/recsdk.h"
#include "src/device/cuda/cuda_row_store.h"
#include "src/device/kernel.h"
#include "src/session/passes/pass_manager.h"
#include "src/session/runtime.h"
#include "src/table/pooled_gather.h"
#include "src/table/tiers/memory_store.h"

namespace recsdk::cuda {
namespace {

using internal::DeviceRegistry;
using internal::KernelRegistry;

// DlrmLike: two tables looked up by ids, a dense input through a bottom MLP, the joined vector
// through a top MLP, sigmoid cross-entropy, SGD on the dense variables and the tables: the op mix
// of the DLRM sample at a small size.
struct DlrmLike {
  Graph graph;
  Output dense, label, loss;
  std::vector<Output> ids;
  Node* train = nullptr;
  Node* init = nullptr;
  static constexpr int64_t kBatch = 8;

  // tiered: the tables keep host rows too (host_vocabulary_size), so their device tier lives in
  // the device's memory (placement only: tiered lookups need the key stage to run).
  explicit DlrmLike(bool tiered = false) {
    graph.set_random_seed(3);
    Scope s(&graph);
    dense = ops::Placeholder(s.WithOpName("dense"), DType::kFloat32, Shape{kBatch, 5});
    label = ops::Placeholder(s.WithOpName("label"), DType::kFloat32, Shape{kBatch, 1});
    layers::MlpOptions bottom;
    bottom.name = "bottom";
    bottom.hidden_units = {16, 4};
    std::vector<Output> vecs = {layers::Mlp(s, dense, bottom)};
    for (int t = 0; t < 2; ++t) {
      TableConfig c;
      c.name = "table" + std::to_string(t);
      c.dim = 4;
      c.device_vocabulary_size = 100;
      if (tiered) c.host_vocabulary_size = 200;
      c.initializer = Initializer::Uniform(-0.05, 0.05, 10 + t);
      auto table = create_table(s, c, SparseOptimizerConfig::SGD(0.05f));
      EXPECT_TRUE(table.ok()) << table.status();
      Output id = ops::Placeholder(s.WithOpName("ids" + std::to_string(t)), DType::kInt64,
                                   Shape{kBatch, 1});
      ids.push_back(id);
      SparseLookupOptions lo;
      lo.combiner = Combiner::kSum;
      auto e = sparse_lookup(s, *table, id, lo);
      EXPECT_TRUE(e.ok()) << e.status();
      vecs.push_back(*e);
    }
    layers::MlpOptions top;
    top.name = "top";
    top.hidden_units = {8};
    top.output_units = 1;
    Output logits = layers::Mlp(s, ops::Concat(s, vecs, 1), top);
    loss =
        ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, label, logits));
    auto dense_train = SgdOptimizer(SgdOptions{0.05}).Minimize(s, loss);
    EXPECT_TRUE(dense_train.ok()) << dense_train.status();
    auto sparse_train = SparseMinimize(s, loss);
    EXPECT_TRUE(sparse_train.ok()) << sparse_train.status();
    train = ops::Group(s.WithOpName("train"), {*dense_train, *sparse_train});
    init = GlobalVariablesInitializer(s);
    EXPECT_TRUE(s.status().ok()) << s.status();
  }

  FeedList Feeds(int step) const {
    std::mt19937 rng(static_cast<uint32_t>(100 + step));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    FeedList f;
    Tensor d(DType::kFloat32, Shape{kBatch, 5});
    for (float& v : d.flat<float>()) v = u(rng);
    Tensor l(DType::kFloat32, Shape{kBatch, 1});
    for (float& v : l.flat<float>()) v = u(rng) > 0 ? 1.0f : 0.0f;
    f.emplace_back(dense, d);
    f.emplace_back(label, l);
    for (const Output& o : ids) {
      Tensor t(DType::kInt64, Shape{kBatch, 1});
      for (int64_t& v : t.flat<int64_t>()) v = static_cast<int64_t>(rng() % 100);
      f.emplace_back(o, t);
    }
    return f;
  }
};

SessionConfig CudaConfig(bool mix) {
  SessionConfig c;
  c.device = kCudaDeviceType;
  c.mix_compile_mode = mix;
  c.intra_op_parallelism = 1;
  return c;
}

TEST(CudaDeviceTest, LinkingRecsdkCudaRegistersTheDeviceAndItsKernels) {
  const std::vector<std::string> types = DeviceRegistry::Global().Types();
  ASSERT_NE(std::find(types.begin(), types.end(), "cuda"), types.end())
      << "linking recsdk_cuda must register the \"cuda\" device (static initializer in "
         "cuda_device.cc, kept by --undefined=recsdk_cuda_backend_anchor)";
  auto memory = DeviceRegistry::Global().Memory("cuda");
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(*memory, MemoryKind::kDevice);

  const KernelRegistry& r = KernelRegistry::Global();
  ASSERT_FALSE(CudaKernelOps().empty());
  for (const std::string& op : CudaKernelOps()) {
    EXPECT_NE(r.Find(op, "cuda", DType::kFloat32, ""), nullptr) << op;
  }
  for (const char* op :
       {"MatMul",       "BiasAdd",        "BiasAddGrad",        "Relu",
        "ReluGrad",     "DotInteraction", "DotInteractionGrad", "SigmoidCrossEntropyWithLogits",
        "ReduceMean",   "Concat",         "ConcatGrad",         "ApplyGradientDescent",
        "ApplyAdagrad", "ApplyAdam",      "ReadVariable",       "Assign",
        "OnesLike",     "ReduceSumGrad",  "CopyHostToDevice",   "CopyDeviceToHost"}) {
    EXPECT_NE(r.Find(op, "cuda", DType::kFloat32, ""), nullptr) << op;
  }
  // The table ops that read or update rows run on the GPU (cuda_table_kernels.cc), and the sums of
  // a lookup's gradients.
  for (const char* op : {"TableGather", "TableGatherConcat", "TableApply", "TableGradAggregate"}) {
    EXPECT_NE(r.Find(op, "cuda", DType::kInt32, ""), nullptr) << op;
  }
  // No CPU kernel is borrowed: the device has no alias, so what has no CUDA kernel is absent.
  for (const char* op : {"SparseLookup", "RandomUniform", "Softmax", "Placeholder"}) {
    EXPECT_EQ(r.Find(op, "cuda", DType::kFloat32, ""), nullptr) << op;
  }
  // float32 kernels only (but the int64 global step's AssignAdd, staged through the host).
  EXPECT_EQ(r.Find("MatMul", "cuda", DType::kFloat64, ""), nullptr);
  EXPECT_NE(r.Find("AssignAdd", "cuda", DType::kInt64, ""), nullptr);
}

TEST(CudaDeviceTest, WithoutAGpuTheSessionNamesTheMissingGpuAndTheFix) {
  if (GpuCount() > 0) GTEST_SKIP() << "a GPU is present: the no-GPU error cannot happen here";
  Graph g;
  Scope s(&g);
  Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{2, 3});
  ops::Relu(s.WithOpName("r"), x);
  auto session = Session::Create(g, CudaConfig(/*mix=*/true));
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kFailedPrecondition) << session.status();
  EXPECT_NE(session.status().message().find("device \"cuda\": no GPU found"), std::string::npos)
      << session.status();
  EXPECT_NE(session.status().message().find("SessionConfig::device"), std::string::npos)
      << session.status();
  // The device factory alike (what the Session calls).
  auto device = CreateCudaDevice(SessionConfig{});
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CudaDeviceTest, PinnedHostAllocatorNeedsAGpu) {
  auto pinned = PinnedHostAllocator();
  EXPECT_EQ(pinned->kind(), MemoryKind::kPinnedHost);
  if (GpuCount() > 0) {
    void* p = pinned->Allocate(4096);
    ASSERT_NE(p, nullptr);
    pinned->Zero(p, 4096);
    EXPECT_EQ(static_cast<unsigned char*>(p)[4095], 0);
    pinned->Free(p, 4096);
  } else {
    EXPECT_EQ(pinned->Allocate(4096), nullptr) << "no GPU: no pinned memory either";
  }
}

// Placement of the DLRM-shaped graph under mix_compile_mode: every op on the GPU exactly when it
// has a CUDA kernel, except the row ops (TableGather, TableApply) of untiered tables, whose rows
// are host memory and which therefore run on the host; with tiered tables (device tier in GPU
// memory) they run on the GPU. The key work and feeds stay on the host; copies on every edge
// between the memory spaces.
TEST(CudaDeviceTest, PlacementPutsDenseAndTableRowOpsOnTheGpuAndKeyWorkOnTheHost) {
  internal::InitializeRuntime();
  for (const bool tiered : {false, true}) {
    SCOPED_TRACE(tiered ? "tiered tables" : "untiered tables");
    DlrmLike model(tiered);
    std::unique_ptr<Graph> g = model.graph.Copy();
    auto passes = internal::RunSessionPasses(CudaConfig(/*mix=*/true), g.get());
    ASSERT_TRUE(passes.ok()) << passes.status();
    const KernelRegistry& r = KernelRegistry::Global();
    std::set<std::string> on_gpu, on_host;
    int to_device = 0, to_host = 0;
    for (Node* n : g->nodes()) {
      if (n->type() == "CopyHostToDevice") ++to_device;
      if (n->type() == "CopyDeviceToHost") ++to_host;
      const bool gpu = n->device() == "cuda:0";
      ASSERT_TRUE(gpu || n->device() == "cpu:0") << n->name() << " on " << n->device();
      (gpu ? on_gpu : on_host).insert(n->type());
      const bool row_op = n->type() == "TableGather" || n->type() == "TableApply" ||
                          n->type() == "TableGatherConcat";
      const bool has = r.Find(n->type(), "cuda", internal::KernelDType(*n), "") != nullptr;
      EXPECT_EQ(gpu, has && (tiered || !row_op)) << n->name() << " (" << n->type() << ")";
    }
    for (const char* op : {"MatMul", "BiasAdd", "Relu", "ReluGrad", "BiasAddGrad", "Concat",
                           "SigmoidCrossEntropyWithLogits", "ReduceMean", "ApplyGradientDescent",
                           "ReadVariable", "Assign", "OnesLike", "ReduceSumGrad"}) {
      EXPECT_TRUE(on_gpu.contains(op)) << op << " should run on the GPU";
    }
    for (const char* op : {"TableGather", "TableApply"}) {
      EXPECT_TRUE((tiered ? on_gpu : on_host).contains(op))
          << op << " should run where the table's rows are";
    }
    for (const char* op : {"SparseLookup", "Placeholder", "RandomUniform"}) {
      EXPECT_TRUE(on_host.contains(op)) << op << " should run on the host";
    }
    // The gradients' sums are taken where the dense part left the gradients (the GPU), so a tiered
    // table's gradients never go down to the host.
    EXPECT_TRUE(on_gpu.contains("TableGradAggregate"));
    EXPECT_GT(to_device, 0);
    // Untiered: the sums go down to the host's TableApply. Tiered: nothing comes down at all (the
    // gradients are summed and applied on the GPU; before the CUDA TableGradAggregate they went
    // down to be summed and came back).
    if (tiered) {
      EXPECT_EQ(to_host, 0);
    } else {
      EXPECT_GT(to_host, 0);
    }
    // Every data edge stays in one memory space once the copies are in.
    auto host_side = [](const Node* n, bool as_consumer) {
      if (n->type() == "CopyHostToDevice") return as_consumer;
      if (n->type() == "CopyDeviceToHost") return !as_consumer;
      return n->device() == "cpu:0";
    };
    for (Node* n : g->nodes()) {
      for (int i = 0; i < n->num_inputs(); ++i) {
        const Output& in = n->input(i);
        if (in.dtype() == DType::kResource) continue;
        EXPECT_EQ(host_side(in.node, false), host_side(n, true))
            << n->name() << " input " << i << " from " << in.node->name()
            << " crosses memory spaces without a copy";
      }
    }
  }
}

TEST(CudaDeviceTest, WithoutMixCompileModeTheFirstHostOnlyOpIsNamed) {
  internal::InitializeRuntime();
  DlrmLike model;
  std::unique_ptr<Graph> g = model.graph.Copy();
  auto passes = internal::RunSessionPasses(CudaConfig(/*mix=*/false), g.get());
  ASSERT_FALSE(passes.ok());
  EXPECT_EQ(passes.status().code(), absl::StatusCode::kUnimplemented) << passes.status();
  EXPECT_NE(passes.status().message().find("has no cuda kernel"), std::string::npos)
      << passes.status();
  EXPECT_NE(passes.status().message().find("mix_compile_mode"), std::string::npos)
      << passes.status();
}

// With a GPU: the model trains on "cuda" as on "cpu" (GEMMs in full float32 on both; sums in a
// different order, hence the tolerance).
TEST(CudaDeviceTest, TrainsAsOnTheCpu) {
  if (GpuCount() == 0) {
    GTEST_SKIP() << "no GPU found (" << NoGpuReason()
                 << "): training on the cuda device needs an NVIDIA GPU; scripts/gpu_proof.sh "
                    "runs this test on one";
  }
  DlrmLike model;
  std::vector<std::vector<float>> losses(2);
  for (int d = 0; d < 2; ++d) {
    SessionConfig config = d == 0 ? SessionConfig{} : CudaConfig(/*mix=*/true);
    config.intra_op_parallelism = 1;
    auto session = Session::Create(model.graph, config);
    ASSERT_TRUE(session.ok()) << session.status();
    ASSERT_TRUE((*session)->Run({}, {}, {model.init}).ok());
    for (int step = 0; step < 5; ++step) {
      std::vector<Tensor> out;
      Status st = (*session)->Run(model.Feeds(step), {model.loss}, {model.train}, &out);
      ASSERT_TRUE(st.ok()) << st;
      losses[static_cast<size_t>(d)].push_back(out[0].scalar<float>());
    }
  }
  for (size_t i = 0; i < losses[0].size(); ++i) {
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-4 + 1e-4 * std::fabs(losses[0][i])) << "step " << i;
  }
}

std::string NoGpu(const char* what) {
  return "no GPU found (" + NoGpuReason() + "): " + what +
         " needs an NVIDIA GPU; scripts/gpu_proof.sh runs this test on one";
}

// With a GPU: TableGather (pooled sum/mean/sqrtn, unpooled, padding mask) against the CPU's loops
// (PooledGatherRows, the table's row copy), bit for bit, with padding and default rows, into a
// strided concat output; a bad restore index or row is counted; TableRowIds maps sentinels to -1.
TEST(CudaTableKernelsTest, TableGatherMatchesTheCpuLoopsBitForBit) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpu("the table kernels on the GPU");
  auto stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  Stream& st = **stream;
  constexpr int64_t kRows = 50, kStride = 15, kDim = 5, kBatch = 33, kPer = 4, kWidth = 12;
  constexpr uint32_t kPad = EmbeddingTable::kPaddingRow, kDef = EmbeddingTable::kDefaultRow;
  constexpr float kDefault = 0.25f;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> rows(kRows * kStride);
  for (float& v : rows) v = u(rng);
  rows[3 * kStride] = -0.0f;  // 0 + -0 is +0 in a pooled sum, -0 in a copy
  std::vector<int32_t> unique = {
      3, 7, static_cast<int32_t>(kPad), 0, 49, static_cast<int32_t>(kDef), 12, 7 + 1};
  std::vector<int32_t> restore(kBatch * kPer);
  for (int32_t& r : restore) r = static_cast<int32_t>(rng() % unique.size());
  for (int64_t j = 0; j < kPer; ++j) restore[static_cast<size_t>(j)] = 2;  // all padding
  auto d_rows = Upload(st, rows);
  auto d_unique = Upload(st, unique);
  auto d_restore = Upload(st, restore);
  auto d_out = DeviceBuffer::Allocate(st, kBatch * kPer * kWidth * 4);
  auto d_invalid = Upload(st, std::vector<int32_t>{0});
  ASSERT_TRUE(d_rows.ok() && d_unique.ok() && d_restore.ok() && d_out.ok() && d_invalid.ok());
  const RowTable table{d_rows->as<float>(), kRows, kStride, kDim};
  const TableLookup lookup{d_unique->as<int32_t>(), static_cast<int64_t>(unique.size()),
                           d_restore->as<int32_t>(), kBatch, kPer};
  const auto* urows = reinterpret_cast<const uint32_t*>(unique.data());
  const auto* ridx = reinterpret_cast<const uint32_t*>(restore.data());
  auto row_of = [&](uint32_t r) { return rows.data() + r * kStride; };
  for (TableCombine c :
       {TableCombine::kSum, TableCombine::kMean, TableCombine::kSqrtn, TableCombine::kNone}) {
    const bool pooled = c != TableCombine::kNone;
    const int64_t out_rows = pooled ? kBatch : kBatch * kPer;
    const int64_t column = pooled ? 4 : 0, stride = pooled ? kWidth : kDim;
    std::vector<float> want(static_cast<size_t>(out_rows * stride), 7.0f);
    if (pooled) {
      internal::PooledGatherRows(
          row_of, [](uint32_t) {}, urows, ridx, kBatch, kPer,
          c == TableCombine::kSum ? Combiner::kSum
                                  : (c == TableCombine::kMean ? Combiner::kMean : Combiner::kSqrtn),
          kWidth, kDim, kDefault, want.data() + column);
    } else {
      for (int64_t i = 0; i < out_rows; ++i) {
        const uint32_t r = urows[ridx[i]];
        for (int64_t d = 0; d < kDim; ++d) {
          want[static_cast<size_t>(i * kDim + d)] =
              r == kPad ? 0.0f : (r == kDef ? kDefault : row_of(r)[d]);
        }
      }
    }
    std::vector<float> fill(want.size(), 7.0f);
    ASSERT_TRUE(CopyHostToDevice(st, d_out->data(), fill.data(), fill.size() * 4).ok());
    ASSERT_TRUE(TableGather(st, table, lookup, c, kDefault, stride, d_out->as<float>() + column,
                            d_invalid->as<int32_t>())
                    .ok());
    auto got = Download<float>(st, *d_out, static_cast<int64_t>(want.size()));
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < want.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &want[i], 4);
      std::memcpy(&b, &(*got)[i], 4);
      ASSERT_EQ(a, b) << "combine " << static_cast<int>(c) << " at " << i << ": want " << want[i]
                      << " got " << (*got)[i];
    }
  }
  ASSERT_TRUE(TablePaddingMask(st, lookup, d_out->as<float>(), d_invalid->as<int32_t>()).ok());
  auto mask = Download<float>(st, *d_out, kBatch * kPer);
  ASSERT_TRUE(mask.ok());
  for (size_t i = 0; i < restore.size(); ++i) {
    ASSERT_EQ((*mask)[i], urows[ridx[i]] == kPad ? 0.0f : 1.0f) << i;
  }
  auto invalid = Download<int32_t>(st, *d_invalid, 1);
  ASSERT_TRUE(invalid.ok());
  EXPECT_EQ((*invalid)[0], 0);

  // A restore index past the unique rows, and a row past the table, are counted.
  std::vector<int32_t> bad_unique = {3, 60};
  std::vector<int32_t> bad_restore = {0, 1, 2, 0};
  auto d_bad_unique = Upload(st, bad_unique);
  auto d_bad_restore = Upload(st, bad_restore);
  ASSERT_TRUE(d_bad_unique.ok() && d_bad_restore.ok());
  const TableLookup bad{d_bad_unique->as<int32_t>(), 2, d_bad_restore->as<int32_t>(), 4, 1};
  ASSERT_TRUE(TableGather(st, table, bad, TableCombine::kNone, kDefault, kDim, d_out->as<float>(),
                          d_invalid->as<int32_t>())
                  .ok());
  invalid = Download<int32_t>(st, *d_invalid, 1);
  ASSERT_TRUE(invalid.ok());
  EXPECT_EQ((*invalid)[0], 2);

  // Row ids for SparseApply: sentinels -1 (never trained), a row past the table counted.
  std::vector<int32_t> ids = {4, static_cast<int32_t>(kPad), static_cast<int32_t>(kDef), 49, 50};
  auto d_ids = Upload(st, ids);
  auto d_ids64 = DeviceBuffer::Allocate(st, 5 * 8);
  ASSERT_TRUE(d_ids.ok() && d_ids64.ok());
  ASSERT_TRUE(CopyHostToDevice(st, d_invalid->data(), std::vector<int32_t>{0}.data(), 4).ok());
  ASSERT_TRUE(TableRowIds(st, d_ids->as<int32_t>(), 5, kRows, d_ids64->as<int64_t>(),
                          d_invalid->as<int32_t>())
                  .ok());
  auto ids64 = Download<int64_t>(st, *d_ids64, 5);
  invalid = Download<int32_t>(st, *d_invalid, 1);
  ASSERT_TRUE(ids64.ok() && invalid.ok());
  EXPECT_EQ(*ids64, (std::vector<int64_t>{4, -1, -1, 49, -1}));
  EXPECT_EQ((*invalid)[0], 1);
}

// TableOnly: a tiered table (128 device rows, host rows below) read through the key stage by
// three lookups (pooled sum, pooled mean, unpooled) whose loss is sum(e_i * c_i): every gradient
// that reaches the table is the CPU's bits on the GPU too (ReduceSumGrad and Mul are exact), so
// the rows trained on "cuda" (device tier in GPU memory, gathered and updated by the CUDA table
// kernels, the three lookups' gradients merged on the GPU) must read back as the rows trained on
// "cpu", bit for bit, step after step.
struct TableOnly {
  Graph graph;
  std::vector<Output> looked_up;
  Node* train = nullptr;
  Node* init = nullptr;
  static constexpr int64_t kBatch = 8;

  explicit TableOnly(const SparseOptimizerConfig& optimizer) {
    graph.set_random_seed(5);
    Scope s(&graph);
    TableConfig c;
    c.name = "tiered";
    c.dim = 4;
    c.device_vocabulary_size = 128;
    c.host_vocabulary_size = 1024;
    c.initializer = Initializer::Uniform(-0.5, 0.5, 21);
    auto table = create_table(s, c, optimizer);
    EXPECT_TRUE(table.ok()) << table.status();
    const std::vector<std::optional<Combiner>> combiners = {Combiner::kSum, Combiner::kMean,
                                                            std::nullopt};
    std::vector<Output> terms;
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (size_t l = 0; l < combiners.size(); ++l) {
      Output ids = DatasetColumn(s, "C" + std::to_string(l + 1), DType::kInt64, Shape{kBatch, 2});
      SparseLookupOptions lo;
      lo.name = "lookup" + std::to_string(l);
      lo.combiner = combiners[l];
      lo.modify_graph = true;
      auto e = sparse_lookup(s, *table, ids, lo);
      EXPECT_TRUE(e.ok()) << e.status();
      looked_up.push_back(*e);
      Tensor w(DType::kFloat32, combiners[l] ? Shape{kBatch, 4} : Shape{kBatch, 2, 4});
      for (float& v : w.flat<float>()) v = u(rng);
      terms.push_back(ops::ReduceSum(s, ops::Mul(s, *e, ops::Const(s, w))));
    }
    Output loss = ops::AddN(s.WithOpName("loss"), terms);
    auto sparse_train = SparseMinimize(s, loss);
    EXPECT_TRUE(sparse_train.ok()) << sparse_train.status();
    train = ops::Group(s.WithOpName("train"), {*sparse_train});
    init = GlobalVariablesInitializer(s);
    EXPECT_TRUE(s.status().ok()) << s.status();
    auto modified = ModifyGraph(&graph);
    EXPECT_TRUE(modified.ok()) << modified.status();
  }

  // Batches: 20 batches of three id columns over 300 keys each (all into the one table), so rows
  // move between the 128 device rows and the host tier as training goes.
  static std::unique_ptr<Dataset> Batches() {
    SyntheticOptions d;
    d.num_rows = kBatch * 20;
    d.vocabulary_sizes = {300, 300, 300};
    d.ids_per_feature = 2;
    d.num_dense = 1;
    d.seed = 13;
    d.block_rows = 64;
    auto rows = SyntheticDataset(d);
    EXPECT_TRUE(rows.ok()) << rows.status();
    auto batches = BatchRows(*std::move(rows), kBatch, {.drop_remainder = true});
    EXPECT_TRUE(batches.ok()) << batches.status();
    return *std::move(batches);
  }
};

TEST(CudaTableKernelsTest, TieredTableTrainsOnTheGpuAsOnTheCpuBitForBit) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpu("training a tiered table on the cuda device");
  for (const SparseOptimizerConfig& optimizer :
       {SparseOptimizerConfig::SGD(0.1f), SparseOptimizerConfig::Adagrad(0.1f),
        SparseOptimizerConfig::LazyAdam(0.01f), SparseOptimizerConfig::FTRL(0.1f),
        SparseOptimizerConfig::AdagradByAddress(0.1f)}) {
    SCOPED_TRACE(std::string(SparseOptimizerKindName(optimizer.kind)));
    TableOnly model(optimizer);
    std::vector<std::vector<Tensor>> fetched(2);
    for (int d = 0; d < 2; ++d) {
      SessionConfig config = d == 0 ? SessionConfig{} : CudaConfig(/*mix=*/true);
      config.intra_op_parallelism = 1;
      config.deterministic = true;
      auto session = Session::Create(model.graph, config);
      ASSERT_TRUE(session.ok()) << session.status();
      ASSERT_TRUE((*session)->Run({}, {}, {model.init}).ok());
      auto stage = StartAscPipeline(**session, TableOnly::Batches(), KeyStageOptions{});
      ASSERT_TRUE(stage.ok()) << stage.status();
      const std::vector<TensorName> fetches(model.looked_up.begin(), model.looked_up.end());
      FeedList feeds;
      for (;;) {
        auto more = (*stage)->Next(&feeds);
        ASSERT_TRUE(more.ok()) << more.status();
        if (!*more) break;
        std::vector<Tensor> out;
        Status st = (*session)->Run(feeds, fetches, {model.train}, &out);
        ASSERT_TRUE(st.ok()) << st;
        for (Tensor& t : out) fetched[static_cast<size_t>(d)].push_back(std::move(t));
      }
      (*stage)->Stop();
    }
    ASSERT_EQ(fetched[0].size(), 60u);
    ASSERT_EQ(fetched[0].size(), fetched[1].size());
    for (size_t i = 0; i < fetched[0].size(); ++i) {
      const Tensor& a = fetched[0][i];
      const Tensor& b = fetched[1][i];
      ASSERT_EQ(a.shape(), b.shape()) << "fetch " << i;
      ASSERT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.num_elements() * 4), 0)
          << "lookup " << i % 3 << " of step " << i / 3 << " differs from the CPU's";
    }
  }
}

// With a GPU: CounterChecks reads counts off the stream's path: a zero count passes, a nonzero
// one fails the Poll that finds it with its op's message, once; a full ring waits for the oldest.
TEST(CudaDeviceTest, CounterChecksReportBadCountsLater) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpu("the deferred bad-index checks");
  auto stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::shared_ptr<Stream> st(*std::move(stream));
  auto counts = Upload(*st, std::vector<int32_t>{0, 3});
  ASSERT_TRUE(counts.ok()) << counts.status();
  CounterChecks checks(st);
  auto message = [](int32_t n) { return "op \"g\" (TableGather): " + std::to_string(n) + " bad"; };
  ASSERT_TRUE(checks.Add(counts->as<int32_t>(), message).ok());
  ASSERT_TRUE(checks.Poll(/*wait=*/true).ok());
  ASSERT_TRUE(checks.Add(counts->as<int32_t>() + 1, message).ok());
  Status s = checks.Poll(/*wait=*/true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "op \"g\" (TableGather): 3 bad");
  EXPECT_TRUE(checks.Poll(/*wait=*/true).ok());  // reported once
  for (int i = 0; i < CounterChecks::kSlots + 5; ++i) {
    ASSERT_TRUE(checks.Add(counts->as<int32_t>(), message).ok()) << i;
  }
  ASSERT_TRUE(checks.Poll(/*wait=*/true).ok());
  EXPECT_EQ(checks.checked(), 2 + CounterChecks::kSlots + 5);
}

// With a GPU: the device tier's swap-outs (CudaTierMemory::ReadAsync / WaitRead). A ReadAsync
// ordered after the queued compute sees a compute-stream write queued before it; one ordered only
// after release fences (no compute wait) still sees the swap-ins queued before it; a Write of the
// same slots queued after it does not reach the rows it read; two swap-outs in flight keep their
// own pinned staging (waited for in reverse order, each gives its own rows, bitwise); a second
// WaitRead is OK; the counters count the rows; a bad slot is InvalidArgument before anything is
// queued.
TEST(CudaTierMemoryTest, SwapOutsAreQueuedAndKeepTheirStagingUntilWaitRead) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpu("the device tier's asynchronous swap-outs");
  auto device = CreateCudaDevice(SessionConfig{});
  ASSERT_TRUE(device.ok()) << device.status();
  constexpr int kRowFloats = 6;
  constexpr uint32_t kCapacity = 3000;
  auto memory = (*device)->CreateTableTierMemory(kCapacity, kRowFloats, "table \"t\"");
  ASSERT_TRUE(memory.ok()) << memory.status();
  ASSERT_NE(*memory, nullptr);
  internal::DeviceTierMemory& m = **memory;
  Stream* compute = ComputeStreamOf(device->get());
  ASSERT_NE(compute, nullptr);

  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random_rows = [&](size_t n) {
    std::vector<float> v(n * kRowFloats);
    for (float& x : v) x = u(rng);
    return v;
  };
  // 2,500 slots (more than one 1,024-row staging), scattered, then a second set.
  std::vector<uint32_t> a(2500), b(700);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint32_t>((i * 7) % kCapacity);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint32_t>(i * 4 + 1);
  const std::vector<float> rows_a = random_rows(a.size());
  ASSERT_TRUE(m.Write(a, rows_a.data()).ok());
  ASSERT_TRUE(m.ComputeAfterWrites().ok());
  // A kernel's write queued on the compute stream before the swap-out: slot a[3] becomes zeros.
  ASSERT_TRUE(Memset(*compute, m.rows() + int64_t{a[3]} * kRowFloats, 0,
                     kRowFloats * static_cast<int64_t>(sizeof(float)))
                  .ok());
  std::vector<float> expect_a = rows_a;
  std::fill_n(expect_a.begin() + 3 * kRowFloats, kRowFloats, 0.0f);

  const int64_t out_rows0 = (*device)->tier_swaps().swap_out_rows.load();
  auto down_a = m.ReadAsync(a, internal::SwapOutOrder::kAfterQueuedCompute);
  ASSERT_TRUE(down_a.ok()) << down_a.status();
  ASSERT_NE(down_a->done, nullptr);
  // The victims' slots take new rows at once (queued after the swap-out on the swap stream).
  const std::vector<float> new_a = random_rows(a.size());
  ASSERT_TRUE(m.Write(a, new_a.data()).ok());
  const std::vector<float> rows_b = random_rows(b.size());
  std::vector<float> expect_b(b.size() * kRowFloats);
  // b's slots as they are after those Writes (a slot in both sets has new_a's row).
  {
    std::vector<float> now(b.size() * kRowFloats);
    ASSERT_TRUE(m.Read(b, now.data()).ok());
    expect_b = now;
  }
  auto down_b = m.ReadAsync(b, internal::SwapOutOrder::kAfterReleaseFences);
  ASSERT_TRUE(down_b.ok()) << down_b.status();
  ASSERT_TRUE(m.Write(b, rows_b.data()).ok());

  ASSERT_TRUE(m.WaitRead(*down_b).ok());
  ASSERT_TRUE(m.WaitRead(*down_a).ok());
  EXPECT_EQ(*down_a->rows, expect_a);
  EXPECT_EQ(*down_b->rows, expect_b);
  EXPECT_TRUE(m.WaitRead(*down_a).ok());  // a second wait: the rows are there already
  EXPECT_EQ(*down_a->rows, expect_a);
  EXPECT_EQ((*device)->tier_swaps().swap_out_rows.load() - out_rows0,
            static_cast<int64_t>(a.size() + 2 * b.size()));  // two ReadAsync, one Read

  // A later swap-out reuses the staging: its rows, not the first one's.
  auto again = m.ReadAsync(b, internal::SwapOutOrder::kAfterReleaseFences);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(m.WaitRead(*again).ok());
  EXPECT_EQ(*again->rows, rows_b);

  const std::vector<uint32_t> bad = {1, kCapacity};
  auto refused = m.ReadAsync(bad, internal::SwapOutOrder::kAfterReleaseFences);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("table \"t\""), std::string::npos);
  EXPECT_TRUE((*device)->Synchronize().ok());
}

TEST(CudaRowStoreTest, ChecksItsOptionsThenNeedsAGpu) {
  CudaRowStoreOptions bad;
  bad.row_floats = 8;
  bad.dim = 9;  // more than a row
  bad.capacity = 10;
  bad.label = "table \"t\"";
  auto store = CudaRowStore::Create(bad);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument) << store.status();
  EXPECT_NE(store.status().message().find("table \"t\""), std::string::npos);
  if (GpuCount() > 0) return;  // the rest is the no-GPU error
  CudaRowStoreOptions good = bad;
  good.dim = 4;
  store = CudaRowStore::Create(good);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_NE(store.status().message().find("no GPU found"), std::string::npos) << store.status();
}

// With a GPU: rows move between the host tier's MemoryStore and the GPU store bitwise, the
// CUDA lookup reads them from table(), pins hold rows on the device, duplicates keep the later row.
TEST(CudaRowStoreTest, SwapsRowsWithTheHostTier) {
  if (GpuCount() == 0) {
    GTEST_SKIP() << "no GPU found (" << NoGpuReason()
                 << "): the device tier in GPU memory needs an NVIDIA GPU; scripts/gpu_proof.sh "
                    "runs this test on one";
  }
  constexpr int kRowFloats = 12, kDim = 4;
  constexpr size_t kRows = 300;
  CudaRowStoreOptions o;
  o.row_floats = kRowFloats;
  o.dim = kDim;
  o.capacity = 1000;
  o.chunk_rows = 64;  // several chunks per call
  o.label = "test";
  auto gpu = CudaRowStore::Create(o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  internal::MemoryStoreOptions mo;
  mo.tier = internal::Tier::kHost;
  mo.row_floats = kRowFloats;
  mo.capacity = 1000;
  auto host = internal::MemoryStore::Create(mo);
  ASSERT_TRUE(host.ok()) << host.status();

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> rows(kRows * kRowFloats);
  for (float& v : rows) v = u(rng);
  std::vector<uint32_t> host_slots(kRows), gpu_slots(kRows), back(kRows);
  ASSERT_TRUE((*host)->Allocate(kRows, host_slots.data()).ok());
  ASSERT_TRUE((*host)->Write(host_slots, rows.data()).ok());
  ASSERT_TRUE(internal::MoveRows(**host, host_slots, **gpu, gpu_slots.data()).ok());
  EXPECT_EQ((*host)->size(), 0u);
  EXPECT_EQ((*gpu)->size(), kRows);

  std::vector<float> read(rows.size());
  ASSERT_TRUE((*gpu)->Read(gpu_slots, read.data()).ok());
  EXPECT_EQ(read, rows);

  // The lookup kernel reads the same rows from the device table.
  std::vector<int64_t> ids(gpu_slots.begin(), gpu_slots.end());
  Stream& stream = (*gpu)->stream();
  auto ids_device = Upload(stream, ids);
  ASSERT_TRUE(ids_device.ok()) << ids_device.status();
  auto out = DeviceBuffer::Allocate(stream, static_cast<int64_t>(kRows * kDim * sizeof(float)));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(GatherRows(stream, (*gpu)->table(), ids_device->as<int64_t>(),
                         static_cast<int64_t>(kRows), out->as<float>())
                  .ok());
  auto gathered = Download<float>(stream, *out, static_cast<int64_t>(kRows * kDim));
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  for (size_t r = 0; r < kRows; ++r) {
    for (int d = 0; d < kDim; ++d) {
      ASSERT_EQ((*gathered)[r * kDim + d], rows[r * kRowFloats + d]) << "row " << r;
    }
  }

  // A pinned row stays; after Unpin the rows go back down, bitwise.
  ASSERT_TRUE((*gpu)->Pin({gpu_slots[5]}).ok());
  EXPECT_EQ(internal::MoveRows(**gpu, gpu_slots, **host, back.data()).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*gpu)->Unpin({gpu_slots[5]}).ok());
  ASSERT_TRUE(internal::MoveRows(**gpu, gpu_slots, **host, back.data()).ok());
  std::vector<float> down(rows.size());
  ASSERT_TRUE((*host)->Read(back, down.data()).ok());
  EXPECT_EQ(down, rows);

  // A slot written twice in one call keeps the later row.
  uint32_t slot = 0;
  ASSERT_TRUE((*gpu)->Allocate(1, &slot).ok());
  std::vector<float> two(2 * kRowFloats);
  for (float& v : two) v = u(rng);
  const std::vector<uint32_t> twice = {slot, slot};
  ASSERT_TRUE((*gpu)->Write(twice, two.data()).ok());
  std::vector<float> one(kRowFloats);
  ASSERT_TRUE((*gpu)->Read({slot}, one.data()).ok());
  EXPECT_EQ(one, std::vector<float>(two.begin() + kRowFloats, two.end()));
}

}  // namespace
}  // namespace recsdk::cuda
