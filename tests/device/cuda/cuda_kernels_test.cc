// cuda_kernels_test.cc: every kernel of the CUDA backend (src/device/cuda/cuda_kernels.h) and the
// RowSwapper against its CPU twin on random inputs: the GEMMs against SgemmReference and
// Bf16GemmReference, the elementwise, reduction and loss ops against the CPU kernels run through
// a Session (Broadcast against ReduceSumGrad through Gradients), the interaction against its
// reference functions, SegmentSum against AggregateGradients, TableGradAggregate against
// AggregateLookupGradients, MergeRowGrads against TableApply's merge, and SparseApply against
// RowUpdater::Apply. Without a GPU (cudaGetDeviceCount fails or finds none) each GPU test skips,
// saying so; the host-side checks (argument errors, BuildSegmentCsr) run everywhere. Labels: cuda
// and quick (CI runs it, and it skips there).
#include "src/device/cuda/cuda_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "recsdk/recsdk.h"
#include "src/device/cpu/bf16_gemm.h"
#include "src/device/cpu/dense_update_kernels.h"
#include "src/device/cpu/gemm.h"
#include "src/device/cpu/interaction_kernels.h"
#include "src/device/cuda/cuda_runtime.h"
#include "src/device/cuda/row_swapper.h"
#include "src/table/dedup.h"
#include "src/table/sparse_optimizers_impl.h"

namespace recsdk::cuda {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// Near: |got - want| <= abs_tol + rel_tol * |want| for every element, NaN matching NaN.
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double rel_tol,
                double abs_tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    const double tol = abs_tol + rel_tol * std::fabs(want[i]);
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the CPU gives "
                    << want[i] << " (tolerance " << tol << ")";
      ++failures;
    }
  }
}

// CpuGraph: a small graph run on the CPU backend, the reference the kernels are compared with.
class CpuGraph {
 public:
  Output Input(const std::string& name, const std::vector<float>& values, Shape shape) {
    Output o = ops::Placeholder(root_.WithOpName(name), DType::kFloat32, shape);
    Tensor t(DType::kFloat32, shape);
    std::memcpy(t.flat<float>().data(), values.data(), values.size() * sizeof(float));
    feeds_.emplace_back(o, t);
    return o;
  }
  const Scope& scope() const { return root_; }
  std::vector<std::vector<float>> Run(const std::vector<Output>& outputs) {
    auto session = Session::Create(graph_, SessionConfig{});
    EXPECT_TRUE(session.ok()) << session.status();
    std::vector<TensorName> fetches;
    for (const Output& o : outputs) fetches.push_back(o.name());
    auto out = (*session)->Run(feeds_, fetches);
    EXPECT_TRUE(out.ok()) << out.status();
    std::vector<std::vector<float>> result;
    for (const Tensor& t : *out) {
      const auto flat = t.flat<float>();
      result.emplace_back(flat.begin(), flat.end());
    }
    return result;
  }

 private:
  Graph graph_;
  Scope root_{&graph_};
  FeedList feeds_;
};

// CudaKernelTest: one stream per test; every test skips when no GPU is present.
class CudaKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) {
      GTEST_SKIP() << "no GPU found (" << NoGpuReason()
                   << "): the CUDA kernel tests need an NVIDIA GPU; scripts/gpu_proof.sh runs "
                      "them on one";
    }
    auto stream = Stream::Create(0);
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = *std::move(stream);
  }

  template <typename T>
  DeviceBuffer Up(const std::vector<T>& v) {
    auto b = Upload(*stream_, v);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *std::move(b) : DeviceBuffer();
  }
  DeviceBuffer Zeros(int64_t bytes) {
    auto b = DeviceBuffer::Allocate(*stream_, bytes);
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return DeviceBuffer();
    EXPECT_TRUE(Memset(*stream_, b->data(), 0, bytes).ok());
    return *std::move(b);
  }
  template <typename T>
  std::vector<T> Down(const DeviceBuffer& b, int64_t n) {
    auto v = Download<T>(*stream_, b, n);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *std::move(v) : std::vector<T>();
  }

  std::unique_ptr<Stream> stream_;
};

// --- host-side checks: run with or without a GPU ---

TEST(CudaHostTest, NoGpuIsReportedNotCrashed) {
  if (GpuCount() > 0) {
    EXPECT_EQ(NoGpuReason(), "");
    return;
  }
  EXPECT_NE(NoGpuReason(), "");
  auto stream = Stream::Create(0);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stream.status().message().find("no GPU found"), std::string::npos) << stream.status();
}

TEST(CudaHostTest, BuildSegmentCsrGroupsPositionsInOrder) {
  const std::vector<uint32_t> restore = {2, 0, 2, 1, 0, 2};
  auto csr = BuildSegmentCsr(restore, 4);
  ASSERT_TRUE(csr.ok()) << csr.status();
  EXPECT_EQ(csr->offsets, (std::vector<int32_t>{0, 2, 3, 6, 6}));
  EXPECT_EQ(csr->positions, (std::vector<int32_t>{1, 4, 3, 0, 2, 5}));
  auto bad = BuildSegmentCsr(restore, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("restore index 2"), std::string::npos) << bad.status();
}

TEST(CudaHostTest, RowSwapperRejectsBadSizesBeforeTouchingTheGpu) {
  auto s = RowSwapper::Create(0, 0, 16);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("row_floats 0"), std::string::npos) << s.status();
}

// --- GEMM ---

struct GemmCase {
  int64_t m, n, k;
  bool ta, tb;
};

TEST_F(CudaKernelTest, GemmFloat32MatchesSgemmReference) {
  for (const GemmCase& c : std::vector<GemmCase>{{1, 1, 1, false, false},
                                                 {64, 512, 13, false, false},
                                                 {37, 19, 300, true, false},
                                                 {128, 256, 64, false, true},
                                                 {33, 65, 17, true, true},
                                                 {5, 7, 0, false, false}}) {
    const std::string what = "m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " +
                             std::to_string(c.k) + " ta " + std::to_string(c.ta) + " tb " +
                             std::to_string(c.tb);
    const int64_t lda = std::max<int64_t>(1, c.ta ? c.m : c.k),
                  ldb = std::max<int64_t>(1, c.tb ? c.k : c.n);
    const std::vector<float> a = Random(c.m * c.k, 1), b = Random(c.k * c.n, 2);
    std::vector<float> want(static_cast<size_t>(c.m * c.n));
    internal::SgemmReference(c.m, c.n, c.k, a.data(), lda, c.ta, b.data(), ldb, c.tb, want.data(),
                             c.n);
    DeviceBuffer da = Up(a), db = Up(b), dc = Zeros(c.m * c.n * 4);
    ASSERT_TRUE(Gemm(*stream_, GemmInput::kFloat32, c.m, c.n, c.k, {da.data(), lda, c.ta},
                     {db.data(), ldb, c.tb}, dc.as<float>(), c.n)
                    .ok())
        << what;
    ExpectNear(Down<float>(dc, c.m * c.n), want, 1e-5, 2e-6 * std::sqrt(double(c.k) + 1), what);
  }
}

TEST_F(CudaKernelTest, GemmWithRowStridesAndBeta) {
  // A [8, 5] inside rows of 9, C [8, 6] inside rows of 10: C = 2 A B + 0.5 C.
  const int64_t m = 8, n = 6, k = 5, lda = 9, ldb = 6, ldc = 10;
  const std::vector<float> a = Random(m * lda, 3), b = Random(k * ldb, 4), c0 = Random(m * ldc, 5);
  std::vector<float> ab(static_cast<size_t>(m * ldc), 0.0f);
  internal::SgemmReference(m, n, k, a.data(), lda, false, b.data(), ldb, false, ab.data(), ldc);
  std::vector<float> want = c0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j)
      want[r * ldc + j] = 2.0f * ab[r * ldc + j] + 0.5f * c0[r * ldc + j];
  }
  DeviceBuffer da = Up(a), db = Up(b), dc = Up(c0);
  ASSERT_TRUE(Gemm(*stream_, GemmInput::kFloat32, m, n, k, {da.data(), lda, false},
                   {db.data(), ldb, false}, dc.as<float>(), ldc, 2.0f, 0.5f)
                  .ok());
  ExpectNear(Down<float>(dc, m * ldc), want, 1e-5, 1e-5, "strided gemm");
}

TEST_F(CudaKernelTest, GemmBFloat16MatchesBf16GemmReference) {
  for (const GemmCase& c : std::vector<GemmCase>{{64, 256, 32, false, false},
                                                 {31, 17, 129, true, false},
                                                 {16, 48, 64, false, true},
                                                 {9, 11, 33, true, true}}) {
    const int64_t lda = std::max<int64_t>(1, c.ta ? c.m : c.k),
                  ldb = std::max<int64_t>(1, c.tb ? c.k : c.n);
    const std::vector<float> af = Random(c.m * c.k, 6), bf = Random(c.k * c.n, 7);
    std::vector<uint16_t> a(af.size()), b(bf.size());
    internal::ConvertF32ToBf16(af.data(), a.data(), static_cast<int64_t>(af.size()));
    internal::ConvertF32ToBf16(bf.data(), b.data(), static_cast<int64_t>(bf.size()));
    std::vector<float> want(static_cast<size_t>(c.m * c.n));
    internal::Bf16GemmReference(c.m, c.n, c.k, a.data(), lda, c.ta, b.data(), ldb, c.tb,
                                want.data(), c.n);
    DeviceBuffer da = Up(a), db = Up(b), dc = Zeros(c.m * c.n * 4);
    ASSERT_TRUE(Gemm(*stream_, GemmInput::kBFloat16, c.m, c.n, c.k, {da.data(), lda, c.ta},
                     {db.data(), ldb, c.tb}, dc.as<float>(), c.n)
                    .ok());
    // The products of bfloat16 values are exact in float32; only the order of the adds differs.
    ExpectNear(Down<float>(dc, c.m * c.n), want, 1e-5, 2e-6 * std::sqrt(double(c.k)), "bf16 gemm");
  }
}

TEST_F(CudaKernelTest, GemmBatchedMatchesOneReferencePerBatch) {
  const int64_t batch = 5, m = 27, n = 27, k = 16;
  for (bool tb : {false, true}) {
    const std::vector<float> a = Random(batch * m * k, 8), b = Random(batch * k * n, 9);
    std::vector<float> want(static_cast<size_t>(batch * m * n));
    for (int64_t i = 0; i < batch; ++i) {
      internal::SgemmReference(m, n, k, a.data() + i * m * k, k, false, b.data() + i * k * n,
                               tb ? k : n, tb, want.data() + i * m * n, n);
    }
    DeviceBuffer da = Up(a), db = Up(b), dc = Zeros(batch * m * n * 4);
    ASSERT_TRUE(GemmBatched(*stream_, GemmInput::kFloat32, batch, m, n, k, da.data(), false,
                            db.data(), tb, dc.as<float>())
                    .ok());
    ExpectNear(Down<float>(dc, batch * m * n), want, 1e-5, 1e-5, "batched gemm");
  }
}

TEST_F(CudaKernelTest, GemmRejectsShortRowStrides) {
  DeviceBuffer d = Zeros(1024);
  const Status st = Gemm(*stream_, GemmInput::kFloat32, 4, 4, 8, {d.data(), 4, false},
                         {d.data(), 4, false}, d.as<float>(), 4);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("lda 4"), std::string::npos) << st;
}

// --- elementwise, activations, reductions, loss ---

TEST_F(CudaKernelTest, BinaryMatchesCpuAddSubMul) {
  const int64_t n = 100003;
  const std::vector<float> x = Random(n, 10), y = Random(n, 11);
  CpuGraph cpu;
  Output xo = cpu.Input("x", x, Shape{n}), yo = cpu.Input("y", y, Shape{n});
  const auto want = cpu.Run({ops::Add(cpu.scope(), xo, yo), ops::Sub(cpu.scope(), xo, yo),
                             ops::Mul(cpu.scope(), xo, yo)});
  DeviceBuffer dx = Up(x), dy = Up(y), out = Zeros(n * 4);
  int i = 0;
  for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul}) {
    ASSERT_TRUE(Binary(*stream_, op, dx.as<float>(), dy.as<float>(), out.as<float>(), n).ok());
    // Correctly rounded on both sides: the same bits.
    EXPECT_EQ(Down<float>(out, n), want[static_cast<size_t>(i++)]) << "op " << i;
  }
}

TEST_F(CudaKernelTest, AddNConcatAndTransposeMatchCpu) {
  const int64_t rows = 257, n = rows * 16;
  const std::vector<float> a = Random(n, 50), b = Random(n, 51), c = Random(n, 52),
                           d = Random(n, 53), e = Random(n, 54);
  const std::vector<float> x1 = Random(rows * 13, 55), x2 = Random(rows * 351, 56);
  CpuGraph cpu;
  std::vector<Output> xs;
  int k = 0;
  for (const auto* v : {&a, &b, &c, &d, &e}) {
    xs.push_back(cpu.Input("a" + std::to_string(k++), *v, Shape{rows, 16}));
  }
  Output o1 = cpu.Input("x1", x1, Shape{rows, 13}), o2 = cpu.Input("x2", x2, Shape{rows, 351});
  const auto want = cpu.Run({ops::AddN(cpu.scope(), xs), ops::AddN(cpu.scope(), {xs[0], xs[1]}),
                             ops::Concat(cpu.scope(), {o1, xs[0], o2}, 1),
                             ops::Transpose(cpu.scope(), o2, {1, 0})});
  DeviceBuffer da = Up(a), db = Up(b), dc = Up(c), dd = Up(d), de = Up(e), out = Zeros(n * 4);
  ASSERT_TRUE(AddN(*stream_,
                   {da.as<float>(), db.as<float>(), dc.as<float>(), dd.as<float>(), de.as<float>()},
                   out.as<float>(), n)
                  .ok());
  EXPECT_EQ(Down<float>(out, n), want[0]) << "AddN of 5";
  ASSERT_TRUE(AddN(*stream_, {da.as<float>(), db.as<float>()}, out.as<float>(), n).ok());
  EXPECT_EQ(Down<float>(out, n), want[1]) << "AddN of 2";
  DeviceBuffer dx1 = Up(x1), dx2 = Up(x2), cat = Zeros(rows * (13 + 16 + 351) * 4);
  ASSERT_TRUE(ConcatColumns(*stream_,
                            {{dx1.as<float>(), 13}, {da.as<float>(), 16}, {dx2.as<float>(), 351}},
                            rows, cat.as<float>())
                  .ok());
  EXPECT_EQ(Down<float>(cat, rows * (13 + 16 + 351)), want[2]) << "Concat";
  DeviceBuffer tr = Zeros(rows * 351 * 4);
  ASSERT_TRUE(Transpose2D(*stream_, dx2.as<float>(), rows, 351, tr.as<float>()).ok());
  EXPECT_EQ(Down<float>(tr, rows * 351), want[3]) << "Transpose";
  EXPECT_EQ(AddN(*stream_, {da.as<float>(), out.as<float>()}, out.as<float>(), n).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaKernelTest, BiasAddAndReluMatchCpu) {
  const int64_t rows = 333, cols = 65;
  const std::vector<float> x = Random(rows * cols, 12), b = Random(cols, 13);
  CpuGraph cpu;
  Output biased = ops::BiasAdd(cpu.scope(), cpu.Input("x", x, Shape{rows, cols}),
                               cpu.Input("b", b, Shape{cols}));
  const auto want = cpu.Run({biased, ops::Relu(cpu.scope(), biased)});
  DeviceBuffer dx = Up(x), db = Up(b), out = Zeros(rows * cols * 4);
  ASSERT_TRUE(BiasAdd(*stream_, dx.as<float>(), db.as<float>(), out.as<float>(), rows, cols).ok());
  EXPECT_EQ(Down<float>(out, rows * cols), want[0]);
  ASSERT_TRUE(BiasAdd(*stream_, dx.as<float>(), db.as<float>(), out.as<float>(), rows, cols,
                      Activation::kRelu)
                  .ok());
  EXPECT_EQ(Down<float>(out, rows * cols), want[1]);
}

TEST_F(CudaKernelTest, ActivationsAndTheirGradientsMatchCpu) {
  const int64_t n = 4099;
  std::vector<float> x = Random(n, 14, -8.0f, 8.0f);
  x[0] = 0.0f;
  x[1] = std::nanf("");
  x[2] = -30.0f;
  x[3] = 30.0f;
  const std::vector<float> w = Random(n, 15);
  CpuGraph cpu;
  Output xo = cpu.Input("x", x, Shape{n}), wo = cpu.Input("w", w, Shape{n});
  Output relu = ops::Relu(cpu.scope(), xo), sig = ops::Sigmoid(cpu.scope(), xo);
  // d/dx sum(f(x) * w) = f'(x) * w: the CPU's ReluGrad and SigmoidGrad with dy = w.
  auto grads =
      Gradients(cpu.scope(),
                {ops::Add(cpu.scope(), ops::ReduceSum(cpu.scope(), ops::Mul(cpu.scope(), relu, wo)),
                          ops::ReduceSum(cpu.scope(), ops::Mul(cpu.scope(), sig, wo)))},
                {xo});
  ASSERT_TRUE(grads.ok()) << grads.status();
  const auto want = cpu.Run({relu, sig});
  DeviceBuffer dx = Up(x), dw = Up(w), out = Zeros(n * 4), dgrad = Zeros(n * 4);
  ASSERT_TRUE(Unary(*stream_, UnaryOp::kRelu, dx.as<float>(), out.as<float>(), n).ok());
  EXPECT_EQ(std::memcmp(Down<float>(out, n).data(), want[0].data(), n * 4), 0) << "relu";
  ASSERT_TRUE(Unary(*stream_, UnaryOp::kSigmoid, dx.as<float>(), out.as<float>(), n).ok());
  const std::vector<float> sig_gpu = Down<float>(out, n);
  ExpectNear(sig_gpu, want[1], 1e-6, 1e-30, "sigmoid");

  // The gradients: GPU ReluGrad(x, w) + SigmoidGrad(y_cpu, w) against the CPU's sum of both.
  DeviceBuffer dy_cpu = Up(want[1]), g2 = Zeros(n * 4);
  ASSERT_TRUE(
      UnaryGrad(*stream_, UnaryOp::kRelu, dx.as<float>(), dw.as<float>(), dgrad.as<float>(), n)
          .ok());
  ASSERT_TRUE(
      UnaryGrad(*stream_, UnaryOp::kSigmoid, dy_cpu.as<float>(), dw.as<float>(), g2.as<float>(), n)
          .ok());
  ASSERT_TRUE(
      Binary(*stream_, BinaryOp::kAdd, dgrad.as<float>(), g2.as<float>(), dgrad.as<float>(), n)
          .ok());
  const auto want_grad = cpu.Run({(*grads)[0]});
  ExpectNear(Down<float>(dgrad, n), want_grad[0], 1e-6, 1e-30, "relu + sigmoid gradient");
}

TEST_F(CudaKernelTest, TanhAndNegMatchCpu) {
  const int64_t n = 1000;
  const std::vector<float> x = Random(n, 16, -5.0f, 5.0f);
  CpuGraph cpu;
  Output xo = cpu.Input("x", x, Shape{n});
  const auto want = cpu.Run({ops::Tanh(cpu.scope(), xo), ops::Neg(cpu.scope(), xo)});
  DeviceBuffer dx = Up(x), out = Zeros(n * 4);
  ASSERT_TRUE(Unary(*stream_, UnaryOp::kTanh, dx.as<float>(), out.as<float>(), n).ok());
  ExpectNear(Down<float>(out, n), want[0], 1e-6, 1e-30, "tanh");
  ASSERT_TRUE(Unary(*stream_, UnaryOp::kNeg, dx.as<float>(), out.as<float>(), n).ok());
  EXPECT_EQ(Down<float>(out, n), want[1]);
}

struct ReduceCase {
  std::vector<int64_t> shape;
  int64_t axis;  // the one reduced axis, or -1 for all
};

TEST_F(CudaKernelTest, ReduceSumAndMeanMatchCpu) {
  for (const ReduceCase& c : std::vector<ReduceCase>{{{100000}, -1},
                                                     {{4, 300, 5}, 1},
                                                     {{513, 33}, 0},
                                                     {{7, 1000}, 1},
                                                     {{2048, 3}, 1},
                                                     {{4096, 100}, 1},
                                                     {{3, 9, 4096}, 1}}) {
    Shape shape;
    int64_t total = 1;
    for (int64_t d : c.shape) {
      shape.AddDim(d);
      total *= d;
    }
    int64_t outer = 1, axis = total, inner = 1;
    std::vector<int64_t> axes;
    if (c.axis >= 0) {
      axes = {c.axis};
      axis = c.shape[static_cast<size_t>(c.axis)];
      for (int64_t i = 0; i < c.axis; ++i) outer *= c.shape[static_cast<size_t>(i)];
      inner = total / outer / axis;
    }
    const std::vector<float> x = Random(total, 17);
    CpuGraph cpu;
    Output xo = cpu.Input("x", x, shape);
    const auto want =
        cpu.Run({ops::ReduceSum(cpu.scope(), xo, axes), ops::ReduceMean(cpu.scope(), xo, axes)});
    DeviceBuffer dx = Up(x), out = Zeros(outer * inner * 4);
    const double tol = 1e-6 * std::sqrt(static_cast<double>(axis)) * 4;
    ASSERT_TRUE(
        Reduce(*stream_, ReduceKind::kSum, dx.as<float>(), outer, axis, inner, out.as<float>())
            .ok());
    ExpectNear(Down<float>(out, outer * inner), want[0], 1e-6, tol,
               "sum over axis " + std::to_string(c.axis));
    ASSERT_TRUE(
        Reduce(*stream_, ReduceKind::kMean, dx.as<float>(), outer, axis, inner, out.as<float>())
            .ok());
    ExpectNear(Down<float>(out, outer * inner), want[1], 1e-6, tol / static_cast<double>(axis),
               "mean over axis " + std::to_string(c.axis));
  }
}

// Broadcast against the CPU's ReduceSumGrad: d/dx sum(reduce(x) * w) is w broadcast over the
// reduced axis (times 1 / count for a mean), through the graph's own gradient ops.
TEST_F(CudaKernelTest, BroadcastMatchesReduceSumGradAndFillFills) {
  const int64_t outer = 4, axis = 300, inner = 5, total = outer * axis * inner;
  const std::vector<float> x = Random(total, 40), w = Random(outer * inner, 41);
  CpuGraph cpu;
  Output xo = cpu.Input("x", x, Shape{outer, axis, inner});
  Output wo = cpu.Input("w", w, Shape{outer, inner});
  std::vector<Output> grads;
  for (bool mean : {false, true}) {
    Output r = mean ? ops::ReduceMean(cpu.scope(), xo, {1}) : ops::ReduceSum(cpu.scope(), xo, {1});
    auto g =
        Gradients(cpu.scope(), {ops::ReduceSum(cpu.scope(), ops::Mul(cpu.scope(), r, wo))}, {xo});
    ASSERT_TRUE(g.ok()) << g.status();
    grads.push_back((*g)[0]);
  }
  const auto want = cpu.Run(grads);
  DeviceBuffer dw = Up(w), out = Zeros(total * 4);
  ASSERT_TRUE(Broadcast(*stream_, dw.as<float>(), outer, axis, inner, 1.0f, out.as<float>()).ok());
  EXPECT_EQ(Down<float>(out, total), want[0]) << "sum";
  ASSERT_TRUE(Broadcast(*stream_, dw.as<float>(), outer, axis, inner,
                        1.0f / static_cast<float>(axis), out.as<float>())
                  .ok());
  EXPECT_EQ(Down<float>(out, total), want[1]) << "mean";
  ASSERT_TRUE(Fill(*stream_, 1.0f, out.as<float>(), total).ok());
  EXPECT_EQ(Down<float>(out, total), std::vector<float>(static_cast<size_t>(total), 1.0f));
  EXPECT_EQ(Fill(*stream_, 1.0f, nullptr, 3).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaKernelTest, SigmoidCrossEntropyAndGradientMatchCpu) {
  const int64_t n = 5001;
  std::vector<float> logits = Random(n, 18, -20.0f, 20.0f);
  std::vector<float> labels = Random(n, 19, 0.0f, 1.0f);
  for (int64_t i = 0; i < n; i += 3) labels[static_cast<size_t>(i)] = (i % 2 == 0) ? 1.0f : 0.0f;
  logits[0] = 0.0f;
  const std::vector<float> w = Random(n, 20);
  CpuGraph cpu;
  Output z = cpu.Input("z", labels, Shape{n, 1}), x = cpu.Input("x", logits, Shape{n, 1});
  Output wo = cpu.Input("w", w, Shape{n, 1});
  Output loss = ops::SigmoidCrossEntropyWithLogits(cpu.scope(), z, x);
  auto grads =
      Gradients(cpu.scope(), {ops::ReduceSum(cpu.scope(), ops::Mul(cpu.scope(), loss, wo))}, {x});
  ASSERT_TRUE(grads.ok()) << grads.status();
  const auto want = cpu.Run({loss, (*grads)[0]});
  DeviceBuffer dz = Up(labels), dxl = Up(logits), dw = Up(w), out = Zeros(n * 4);
  ASSERT_TRUE(
      SigmoidCrossEntropy(*stream_, dz.as<float>(), dxl.as<float>(), out.as<float>(), n).ok());
  ExpectNear(Down<float>(out, n), want[0], 1e-6, 1e-6, "sigmoid cross-entropy");
  ASSERT_TRUE(SigmoidCrossEntropyGrad(*stream_, dz.as<float>(), dxl.as<float>(), dw.as<float>(),
                                      out.as<float>(), n)
                  .ok());
  ExpectNear(Down<float>(out, n), want[1], 1e-6, 1e-7, "its gradient");
}

// --- the DLRM interaction ---

TEST_F(CudaKernelTest, DotInteractionMatchesReference) {
  for (const auto& [batch, f, d] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 2, 1}, {64, 27, 16}, {7, 5, 13}, {3, 64, 8}}) {
    const int64_t pairs = f * (f - 1) / 2;
    const std::vector<float> x = Random(batch * f * d, 21), dy = Random(batch * pairs, 22);
    std::vector<float> want(static_cast<size_t>(batch * pairs));
    std::vector<float> want_dx(static_cast<size_t>(batch * f * d));
    internal::DotInteractionReference(x.data(), batch, f, d, want.data());
    internal::DotInteractionGradReference(x.data(), dy.data(), batch, f, d, want_dx.data());
    DeviceBuffer dx_in = Up(x), ddy = Up(dy), out = Zeros(batch * pairs * 4),
                 dx = Zeros(batch * f * d * 4);
    ASSERT_TRUE(DotInteraction(*stream_, dx_in.as<float>(), batch, f, d, out.as<float>()).ok());
    const std::string what = "batch " + std::to_string(batch) + " f " + std::to_string(f);
    ExpectNear(Down<float>(out, batch * pairs), want, 1e-5, 1e-6 * d, what);
    ASSERT_TRUE(DotInteractionGrad(*stream_, dx_in.as<float>(), ddy.as<float>(), batch, f, d,
                                   dx.as<float>())
                    .ok());
    ExpectNear(Down<float>(dx, batch * f * d), want_dx, 1e-5, 1e-6 * f, what + " gradient");
  }
}

// --- the sparse path ---

TEST_F(CudaKernelTest, GatherRowsMatchesHostRowsAndCountsBadIds) {
  for (const auto& [dim, stride] :
       std::vector<std::pair<int64_t, int64_t>>{{16, 48}, {7, 7}, {128, 128}}) {
    const int64_t rows = 1000, n = 4097;
    const std::vector<float> table = Random(rows * stride, 23);
    std::mt19937 rng(24);
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % rows);
    ids[5] = -1;
    ids[6] = rows;
    std::vector<float> want(static_cast<size_t>(n * dim), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids[static_cast<size_t>(i)];
      if (id < 0 || id >= rows) continue;
      std::memcpy(&want[static_cast<size_t>(i * dim)], &table[static_cast<size_t>(id * stride)],
                  static_cast<size_t>(dim) * 4);
    }
    DeviceBuffer dt = Up(table), di = Up(ids), out = Zeros(n * dim * 4), bad = Zeros(4);
    const RowTable t{dt.as<float>(), rows, stride, dim};
    ASSERT_TRUE(
        GatherRows(*stream_, t, di.as<int64_t>(), n, out.as<float>(), bad.as<int32_t>()).ok());
    EXPECT_EQ(Down<float>(out, n * dim), want) << "dim " << dim;
    EXPECT_EQ(Down<int32_t>(bad, 1), std::vector<int32_t>{2});
  }
}

TEST_F(CudaKernelTest, SegmentSumMatchesAggregateGradientsBitwise) {
  const int64_t n = 20000, dim = 16;
  std::vector<int64_t> keys(static_cast<size_t>(n));
  std::mt19937 rng(25);
  // Zipf-like: a few hot keys repeat many times, as in a recommendation batch.
  for (int64_t& k : keys) k = static_cast<int64_t>((rng() % 1000) * (rng() % 1000) / 997);
  internal::DedupResult dedup;
  internal::DedupKeys(keys, &dedup);
  const int64_t u = static_cast<int64_t>(dedup.unique_keys.size());
  const std::vector<float> grads = Random(n * dim, 26);
  std::vector<float> want(static_cast<size_t>(u * dim));
  ASSERT_TRUE(internal::AggregateGradients(dedup.restore_index, grads, static_cast<int>(dim), u,
                                           absl::MakeSpan(want))
                  .ok());
  auto csr = BuildSegmentCsr(dedup.restore_index, u);
  ASSERT_TRUE(csr.ok()) << csr.status();
  DeviceBuffer dg = Up(grads), doff = Up(csr->offsets), dpos = Up(csr->positions),
               out = Zeros(u * dim * 4);
  ASSERT_TRUE(SegmentSum(*stream_, dg.as<float>(), n, dim, doff.as<int32_t>(), dpos.as<int32_t>(),
                         u, out.as<float>())
                  .ok());
  // The same adds in the same order: the same bits.
  EXPECT_EQ(Down<float>(out, u * dim), want);
}

// TableGradAggregate against AggregateLookupGradients (the CPU kernel's sums): every combiner, one
// and three features, Zipf-like restore indices, padding rows in the unique rows (pooled: they
// count for nothing and shrink the mean's / sqrtn's count; unpooled: summed like any row), a
// sample of only padding, -0.0 gradients: the same bits. A restore index outside the unique rows
// is counted and contributes nothing.
TEST_F(CudaKernelTest, TableGradAggregateMatchesAggregateLookupGradientsBitwise) {
  constexpr uint32_t kPad = EmbeddingTable::kPaddingRow, kDef = EmbeddingTable::kDefaultRow;
  const int64_t dim = 12, per = 5;
  std::mt19937 rng(31);
  std::vector<uint32_t> unique(400);
  for (size_t i = 0; i < unique.size(); ++i) unique[i] = static_cast<uint32_t>(i * 3);
  unique[7] = kPad;
  unique[11] = kDef;
  const std::vector<int32_t> unique32(unique.begin(), unique.end());
  const int64_t nu = static_cast<int64_t>(unique.size());
  DeviceBuffer d_unique = Up(unique32);
  for (const std::optional<Combiner> combiner :
       {std::optional<Combiner>(), std::optional<Combiner>(Combiner::kSum),
        std::optional<Combiner>(Combiner::kMean), std::optional<Combiner>(Combiner::kSqrtn)}) {
    for (const int k : {1, 3}) {
      SCOPED_TRACE(::testing::Message()
                   << "combiner " << (combiner ? static_cast<int>(*combiner) : -1) << ", " << k
                   << " features");
      std::vector<std::vector<int32_t>> restores;
      std::vector<std::vector<float>> grads;
      std::vector<int64_t> batches;
      for (int f = 0; f < k; ++f) {
        const int64_t batch = 300 + 17 * f;
        std::vector<int32_t> r(static_cast<size_t>(batch * per));
        for (int32_t& x : r) x = static_cast<int32_t>((rng() % 400) * (rng() % 400) / 400);
        for (int64_t j = 0; j < per; ++j) r[static_cast<size_t>(per + j)] = 7;  // all padding
        r[3] = 7;
        std::vector<float> g = Random((combiner ? batch : batch * per) * dim, 40 + f);
        g[5] = -0.0f;
        restores.push_back(std::move(r));
        grads.push_back(std::move(g));
        batches.push_back(batch);
      }
      std::vector<internal::LookupGradient> cpu;
      std::vector<DeviceBuffer> keep;
      std::vector<GradFeature> gpu;
      int64_t positions = 0;
      for (int f = 0; f < k; ++f) {
        cpu.push_back({.restore = restores[f], .batch = batches[f], .per = per, .grad = grads[f]});
        keep.push_back(Up(restores[f]));
        keep.push_back(Up(grads[f]));
        gpu.push_back(
            {keep[keep.size() - 2].as<int32_t>(), batches[f], per, keep.back().as<float>()});
        positions += batches[f] * per;
      }
      std::vector<float> want(static_cast<size_t>(nu * dim));
      ASSERT_TRUE(
          internal::AggregateLookupGradients(unique, cpu, combiner, dim, absl::MakeSpan(want))
              .ok());
      auto bytes = TableGradAggregateScratchBytes(positions, nu);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      DeviceBuffer scratch = Zeros(*bytes), out = Zeros(nu * dim * 4), bad = Zeros(4);
      const TableCombine combine =
          !combiner
              ? TableCombine::kNone
              : (*combiner == Combiner::kSum
                     ? TableCombine::kSum
                     : (*combiner == Combiner::kMean ? TableCombine::kMean : TableCombine::kSqrtn));
      ASSERT_TRUE(TableGradAggregate(*stream_, d_unique.as<int32_t>(), nu, gpu, combine, dim,
                                     scratch.data(), *bytes, out.as<float>(), bad.as<int32_t>())
                      .ok());
      const std::vector<float> got = Down<float>(out, nu * dim);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &want[i], 4);
        std::memcpy(&b, &got[i], 4);
        ASSERT_EQ(a, b) << "at row " << i / dim << " column " << i % dim << ": want " << want[i]
                        << " got " << got[i];
      }
      EXPECT_EQ(Down<int32_t>(bad, 1), std::vector<int32_t>{0});
    }
  }
  // Bad restore indices (-1, past the unique rows): counted, the rest summed as without them.
  const std::vector<int32_t> restore = {0, -1, 1, 400, 1, 0};
  const std::vector<float> g = Random(6 * dim, 50);
  DeviceBuffer dr = Up(restore), dg = Up(g);
  auto bytes = TableGradAggregateScratchBytes(6, nu);
  ASSERT_TRUE(bytes.ok());
  DeviceBuffer scratch = Zeros(*bytes), out = Zeros(nu * dim * 4), bad = Zeros(4);
  ASSERT_TRUE(TableGradAggregate(*stream_, d_unique.as<int32_t>(), nu,
                                 {{dr.as<int32_t>(), 6, 1, dg.as<float>()}}, TableCombine::kNone,
                                 dim, scratch.data(), *bytes, out.as<float>(), bad.as<int32_t>())
                  .ok());
  EXPECT_EQ(Down<int32_t>(bad, 1), std::vector<int32_t>{2});
  const std::vector<float> got = Down<float>(out, 2 * dim);
  for (int64_t d = 0; d < dim; ++d) {
    EXPECT_EQ(got[d], (0.0f + g[d]) + g[5 * dim + d]) << d;
    EXPECT_EQ(got[dim + d], (0.0f + g[2 * dim + d]) + g[4 * dim + d]) << d;
  }
}

// MergeRowGrads against the CPU TableApply's merge (a row once, its gradients summed from 0 in
// (lookup, position) order; sentinels never applied): three lookups sharing rows, bitwise; a row
// past the table is counted and not applied.
TEST_F(CudaKernelTest, MergeRowGradsMatchesTheCpuMergeBitwise) {
  constexpr int64_t kNumRows = 500, dim = 8;
  std::mt19937 rng(61);
  std::vector<std::vector<int32_t>> rows(3);
  std::vector<std::vector<float>> grads(3);
  std::vector<DeviceBuffer> keep;
  std::vector<RowGrads> parts;
  std::map<uint32_t, std::vector<float>> want;
  int64_t n = 0;
  for (int p = 0; p < 3; ++p) {
    const int64_t count = 200 + 30 * p;
    for (int64_t i = 0; i < count; ++i) rows[p].push_back(static_cast<int32_t>(rng() % 300));
    rows[p][5] = static_cast<int32_t>(EmbeddingTable::kPaddingRow);
    rows[p][6] = static_cast<int32_t>(EmbeddingTable::kDefaultRow);
    if (p == 1) rows[p][7] = static_cast<int32_t>(kNumRows);  // past the table
    grads[p] = Random(count * dim, 70 + p);
    for (int64_t i = 0; i < count; ++i) {
      const auto row = static_cast<uint32_t>(rows[p][i]);
      if (row >= kNumRows) continue;
      auto [it, fresh] = want.try_emplace(row, std::vector<float>(dim, 0.0f));
      for (int64_t d = 0; d < dim; ++d) it->second[d] += grads[p][i * dim + d];
    }
    keep.push_back(Up(rows[p]));
    keep.push_back(Up(grads[p]));
    parts.push_back({keep[keep.size() - 2].as<int32_t>(), count, keep.back().as<float>()});
    n += count;
  }
  auto bytes = MergeRowGradsScratchBytes(n, kNumRows);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  DeviceBuffer scratch = Zeros(*bytes), out = Zeros(n * dim * 4), ids = Zeros(n * 8),
               bad = Zeros(4);
  ASSERT_TRUE(MergeRowGrads(*stream_, parts, kNumRows, dim, scratch.data(), *bytes, out.as<float>(),
                            ids.as<int64_t>(), bad.as<int32_t>())
                  .ok());
  const std::vector<int64_t> got_ids = Down<int64_t>(ids, n);
  const std::vector<float> got = Down<float>(out, n * dim);
  EXPECT_EQ(Down<int32_t>(bad, 1), std::vector<int32_t>{1});
  size_t applied = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (got_ids[i] < 0) continue;
    ++applied;
    const auto it = want.find(static_cast<uint32_t>(got_ids[i]));
    ASSERT_NE(it, want.end()) << got_ids[i];
    for (int64_t d = 0; d < dim; ++d) {
      uint32_t a, b;
      std::memcpy(&a, &it->second[d], 4);
      std::memcpy(&b, &got[i * dim + d], 4);
      ASSERT_EQ(a, b) << "row " << got_ids[i] << " column " << d;
    }
  }
  EXPECT_EQ(applied, want.size());  // each row once
}

// AdamRate: LazyAdam's rate from a device step, as RowUpdater computes it on the host (pow on the
// device within 2 ulp in double: the float rate within 1 ulp, and equal in practice).
TEST_F(CudaKernelTest, AdamRateMatchesRowUpdaterFromADeviceStep) {
  const SparseOptimizerConfig config = SparseOptimizerConfig::LazyAdam(0.01f, 0.9f, 0.999f, 1e-8f);
  DeviceBuffer rate = Zeros(4);
  int equal = 0;
  const std::vector<int64_t> steps = {-3, 0, 1, 2, 9, 99, 1000, 123456};
  for (int64_t step : steps) {
    DeviceBuffer d_step = Up(std::vector<int64_t>{step});
    ASSERT_TRUE(AdamRate(*stream_, config, d_step.as<int64_t>(), rate.as<float>()).ok());
    const float got = Down<float>(rate, 1)[0];
    const float want = internal::RowUpdater(config, 4, step + 1).adam_lr_t();
    EXPECT_LE(std::fabs(got - want), std::fabs(std::nextafter(want, 1e30f) - want)) << step;
    equal += got == want;
  }
  EXPECT_EQ(equal, static_cast<int>(steps.size()));
  EXPECT_EQ(AdamRate(*stream_, SparseOptimizerConfig::SGD(0.1f), nullptr, rate.as<float>()).code(),
            absl::StatusCode::kInvalidArgument);
}

// --- host-side checks of TableGradAggregate's arguments (no GPU needed) ---
TEST(CudaHostTest, TableGradAggregateChecksItsArgumentsBeforeTheGpu) {
  EXPECT_EQ(TableGradAggregateScratchBytes(-1, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TableGradAggregateScratchBytes(int64_t{1} << 31, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

struct OptimizerCase {
  std::string name;
  SparseOptimizerConfig config;
  double rel_tol;
};

TEST_F(CudaKernelTest, SparseApplyMatchesRowUpdater) {
  const std::vector<OptimizerCase> cases = {
      {"sgd", SparseOptimizerConfig::SGD(0.05f), 1e-7},
      {"sgd+wd", SparseOptimizerConfig::SGD(0.05f, 0.01f), 1e-7},
      {"adagrad", SparseOptimizerConfig::Adagrad(0.1f, 0.1f, 1e-10f), 1e-6},
      {"adagrad+wd", SparseOptimizerConfig::Adagrad(0.1f, 0.0f, 1e-7f, 0.02f), 1e-6},
      {"lazyadam", SparseOptimizerConfig::LazyAdam(0.01f, 0.9f, 0.999f, 1e-8f), 1e-6},
      {"lazyadam+wd", SparseOptimizerConfig::LazyAdam(0.01f, 0.8f, 0.99f, 1e-6f, 0.01f), 1e-6},
      {"ftrl", SparseOptimizerConfig::FTRL(0.1f, -0.5f, 0.1f, 0.01f, 0.02f, 0.0f), 1e-5},
      {"ftrl pow", SparseOptimizerConfig::FTRL(0.1f, -0.3f, 0.1f, 0.001f, 0.0f, 0.05f), 1e-5},
  };
  const int64_t dim = 16, rows = 600, count = 300;
  for (const OptimizerCase& c : cases) {
    ASSERT_TRUE(c.config.Validate().ok()) << c.name;
    const int64_t width = dim * (1 + c.config.SlotsPerDim());
    const int64_t stride = width + 3;  // a padded row, as a strided device table would be
    std::vector<float> table = Random(rows * stride, 27);
    for (int64_t r = 0; r < rows; ++r) {
      internal::InitSlots(c.config, static_cast<int>(dim),
                          &table[static_cast<size_t>(r * stride + dim)]);
    }
    // Rows to update: distinct, in a random order.
    std::vector<int64_t> ids(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) ids[static_cast<size_t>(i)] = i;
    std::shuffle(ids.begin(), ids.end(), std::mt19937(28));
    ids.resize(static_cast<size_t>(count));
    DeviceBuffer dt = Up(table), di = Up(ids);
    std::vector<float> want = table;
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> grads = Random(count * dim, 29 + static_cast<uint32_t>(step));
      const internal::RowUpdater updater(c.config, static_cast<int>(dim), step);
      for (int64_t i = 0; i < count; ++i) {
        updater.Apply(&want[static_cast<size_t>(ids[static_cast<size_t>(i)] * stride)],
                      &grads[static_cast<size_t>(i * dim)]);
      }
      DeviceBuffer dg = Up(grads);
      ASSERT_TRUE(SparseApply(*stream_, c.config, step, {dt.as<float>(), rows, stride, dim},
                              di.as<int64_t>(), dg.as<float>(), count)
                      .ok())
          << c.name;
    }
    ExpectNear(Down<float>(dt, rows * stride), want, c.rel_tol, 1e-7, c.name);
  }
}

TEST_F(CudaKernelTest, SparseApplyRejectsATableWithoutRoomForSlots) {
  DeviceBuffer d = Zeros(4096);
  const Status st =
      SparseApply(*stream_, SparseOptimizerConfig::LazyAdam(0.01f, 0.9f, 0.999f, 1e-8f), 1,
                  {d.as<float>(), 8, 16, 16}, d.as<int64_t>(), d.as<float>(), 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("table.stride 16"), std::string::npos) << st;
}

TEST_F(CudaKernelTest, DenseOptimizersMatchTheirReferenceTwins) {
  const int64_t n = 10007;
  const std::vector<float> w0 = Random(n, 40), g = Random(n, 41);
  const std::vector<float> acc0 = Random(n, 42, 0.1f, 1.0f), m0 = Random(n, 43);
  const std::vector<float> v0 = Random(n, 44, 0.0f, 0.5f);
  // SGD: ApplyGradientDescent's loop, w -= lr * g.
  std::vector<float> want = w0;
  for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] -= 0.05f * g[static_cast<size_t>(i)];
  DeviceBuffer dw = Up(w0), dg = Up(g);
  ASSERT_TRUE(DenseSgd(*stream_, dw.as<float>(), dg.as<float>(), n, 0.05f).ok());
  EXPECT_EQ(Down<float>(dw, n), want);
  // Adagrad.
  std::vector<float> w = w0, acc = acc0;
  internal::DenseAdagradReference(w.data(), acc.data(), g.data(), n, 0.1f, 1e-7f);
  dw = Up(w0);
  DeviceBuffer dacc = Up(acc0);
  ASSERT_TRUE(
      DenseAdagrad(*stream_, dw.as<float>(), dacc.as<float>(), dg.as<float>(), n, 0.1f, 1e-7f)
          .ok());
  ExpectNear(Down<float>(dw, n), w, 1e-7, 1e-9, "adagrad w");
  ExpectNear(Down<float>(dacc, n), acc, 1e-7, 1e-9, "adagrad acc");
  // Adam, with and without decoupled weight decay.
  for (bool decay : {false, true}) {
    internal::AdamParams p{};
    p.b1 = 0.9f;
    p.b2 = 0.999f;
    p.c1 = static_cast<float>(1.0 - 0.9);
    p.c2 = static_cast<float>(1.0 - 0.999);
    p.eps = 1e-8f;
    p.lr_t = 0.003f;
    p.decay = 0.0001f;
    p.weight_decay = decay;
    std::vector<float> wa = w0, m = m0, v = v0;
    internal::DenseAdamReference(wa.data(), m.data(), v.data(), g.data(), n, p);
    DeviceBuffer dwa = Up(w0), dm = Up(m0), dv = Up(v0);
    const DenseAdamStep step{p.b1, p.b2, p.c1, p.c2, p.eps, p.lr_t, p.decay, p.weight_decay};
    ASSERT_TRUE(DenseAdam(*stream_, dwa.as<float>(), dm.as<float>(), dv.as<float>(), dg.as<float>(),
                          n, step)
                    .ok());
    ExpectNear(Down<float>(dwa, n), wa, 1e-7, 1e-9, decay ? "adamw w" : "adam w");
    ExpectNear(Down<float>(dm, n), m, 1e-7, 1e-9, "adam m");
    ExpectNear(Down<float>(dv, n), v, 1e-7, 1e-9, "adam v");
  }
}

// --- copies and swaps ---

TEST_F(CudaKernelTest, CopyKernelCopies) {
  const int64_t n = 100000;
  const std::vector<float> x = Random(n, 30);
  DeviceBuffer dx = Up(x), out = Zeros(n * 4);
  ASSERT_TRUE(CopyKernel(*stream_, dx.data(), out.data(), n * 4).ok());
  EXPECT_EQ(Down<float>(out, n), x);
  EXPECT_EQ(CopyKernel(*stream_, dx.data(), out.data(), 6).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaKernelTest, RowSwapperMovesRowsBothWays) {
  const int64_t row_floats = 48, stride = 52, device_rows = 500, n = 333;
  auto swapper = RowSwapper::Create(0, row_floats, 64);  // several chunks, both staging buffers
  ASSERT_TRUE(swapper.ok()) << swapper.status();
  // Host rows scattered through a larger host array, as rows of a host tier are.
  const std::vector<float> host = Random(2 * n * row_floats, 31);
  std::vector<const float*> src(static_cast<size_t>(n));
  std::vector<int64_t> slots(static_cast<size_t>(device_rows));
  for (int64_t i = 0; i < device_rows; ++i) slots[static_cast<size_t>(i)] = i;
  std::shuffle(slots.begin(), slots.end(), std::mt19937(32));
  slots.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    src[static_cast<size_t>(i)] = &host[static_cast<size_t>((2 * i + i % 2) * row_floats)];
  DeviceBuffer table = Zeros(device_rows * stride * 4);
  const RowTable t{table.as<float>(), device_rows, stride, 16};
  ASSERT_TRUE((*swapper)->SwapIn(src, slots, t).ok());
  const std::vector<float> on_device = Down<float>(table, device_rows * stride);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(&on_device[static_cast<size_t>(slots[static_cast<size_t>(i)] * stride)],
                          src[static_cast<size_t>(i)], row_floats * 4),
              0)
        << "row " << i;
  }
  std::vector<float> back(static_cast<size_t>(n * row_floats), -1.0f);
  std::vector<float*> dst(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    dst[static_cast<size_t>(i)] = &back[static_cast<size_t>(i * row_floats)];
  ASSERT_TRUE((*swapper)->SwapOut(t, slots, dst).ok());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(dst[static_cast<size_t>(i)], src[static_cast<size_t>(i)], row_floats * 4),
              0)
        << "row " << i;
  }
  std::vector<int64_t> bad_slots = slots;
  bad_slots[3] = device_rows;
  const Status st = (*swapper)->SwapIn(src, bad_slots, t);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

}  // namespace
}  // namespace recsdk::cuda
