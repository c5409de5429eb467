// cuda_bench.cc: the CUDA backend's figures (issue 27), each a ratio against its yardstick in the
// same run, on the same GPU:
//   BM_Gemm/m/n/k/bf16    our cuda::Gemm against cublasGemmEx called directly with the same
//                         arguments on the same handle: vs_cublas = cuBLAS time / our time
//                         (>= 0.95: the wrapper's checks cost next to nothing). DLRM's MLP shapes
//                         at batch 2048 and one large square product, float32 and bfloat16.
//   BM_GatherRows/dim     cuda::GatherRows of 1M random rows of a 4M-row table: rows_per_s, and
//                         vs_roofline = its bytes/s (row reads + writes + ids) over the bytes/s
//                         of cuda::CopyKernel copying 512 MiB (reads + writes) in the same run
//                         (>= 0.5).
//   BM_TableGather/dim/per  the TableGather op's pooled (sum) lookup on a tiered table's device
//                         rows (cuda::TableGather): 256K samples of `per` ids through unique
//                         rows and restore indices into a 4M-row table whose rows hold dim
//                         floats and two slots (LazyAdam): rows_per_s (ids looked up), and
//                         vs_roofline = its bytes/s (rows read, restore and unique ids read,
//                         pooled rows written) over the copy kernel's in the same run (>= 0.5).
//   BM_SwapIn/BM_SwapOut  RowSwapper moving 256K rows of 128 floats (dim 64 with Adagrad slots,
//                         512 B) between scattered host rows and a device table: vs_pinned =
//                         its bytes/s over cudaMemcpyAsync of the same bytes from (or to) one
//                         pinned buffer (>= 0.8). BM_Swap/SwapInAsync: the device tier's
//                         asynchronous swap-in (SwapInAsync, call to arrival), the same ratio,
//                         and host_fraction = the part of that the host was blocked (packing
//                         into pinned staging, waiting for a staging buffer to come free).
//                         BM_Swap/SwapOutAsync: the device tier's asynchronous swap-out
//                         (CudaTierMemory::ReadAsync with kAfterReleaseFences, then WaitRead,
//                         which copies the rows out of pinned staging into the table's result),
//                         call to rows in the result, the same ratio and host_fraction (the
//                         ReadAsync call alone; WaitRead's wait and unpack are not in it).
// Times are CUDA event times (UseManualTime). Without a GPU the program says so and exits 0.
// scripts/gpu_proof.sh runs it.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "benchmarks/bench_util.h"
#include "src/device/cuda/cuda_device.h"
#include "src/device/cuda/cuda_kernels.h"
#include "src/device/cuda/cuda_runtime.h"
#include "src/device/cuda/row_swapper.h"

namespace recsdk::cuda {
namespace {

using bench::Check;

void CheckOk(const Status& st) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    std::abort();
  }
}

// Timer: event-timed blocks of work on one stream.
struct Timer {
  explicit Timer(Stream& s)
      : stream(s), start(Check(Event::Create(s))), stop(Check(Event::Create(s))) {}
  template <typename F>
  double Seconds(F work) {
    CheckOk(start->Record(stream));
    work();
    CheckOk(stop->Record(stream));
    CheckOk(stop->Synchronize());
    return Check(stop->ElapsedMsSince(*start)) / 1e3;
  }
  Stream& stream;
  std::unique_ptr<Event> start, stop;
};

DeviceBuffer RandomBuffer(Stream& s, int64_t floats, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(floats));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : v) x = u(rng);
  return Check(Upload(s, v));
}

void BM_Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool bf16 = state.range(3) != 0;
  auto stream = Check(Stream::Create(0));
  // bfloat16 operands are half the bytes: the float buffers are large enough for either.
  DeviceBuffer a = RandomBuffer(*stream, m * k, 1), b = RandomBuffer(*stream, k * n, 2);
  DeviceBuffer c = Check(DeviceBuffer::Allocate(*stream, m * n * 4));
  const GemmInput input = bf16 ? GemmInput::kBFloat16 : GemmInput::kFloat32;
  const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  auto handle = static_cast<cublasHandle_t>(stream->blas());
  const float alpha = 1.0f, beta = 0.0f;
  auto ours = [&] {
    CheckOk(Gemm(*stream, input, m, n, k, {a.data(), k, false}, {b.data(), n, false}, c.as<float>(),
                 n));
  };
  auto direct = [&] {
    if (cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                     static_cast<int>(k), &alpha, b.data(), type, static_cast<int>(n), a.data(),
                     type, static_cast<int>(k), &beta, c.data(), CUDA_R_32F, static_cast<int>(n),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasGemmEx failed\n");
      std::abort();
    }
  };
  Timer timer(*stream);
  constexpr int kReps = 20;
  for (int i = 0; i < 3; ++i) {  // warm-up: cuBLAS picks and loads its kernels
    ours();
    direct();
  }
  double ours_s = 0, direct_s = 0;
  for (auto _ : state) {
    // Alternating blocks, so that clocks and other tenants affect both alike.
    const double o = timer.Seconds([&] {
      for (int r = 0; r < kReps; ++r) ours();
    });
    const double d = timer.Seconds([&] {
      for (int r = 0; r < kReps; ++r) direct();
    });
    ours_s += o;
    direct_s += d;
    state.SetIterationTime(o / kReps);
  }
  const double flops = 2.0 * m * n * k * kReps * state.iterations();
  state.counters["ours_tflops"] = flops / ours_s / 1e12;
  state.counters["cublas_tflops"] = flops / direct_s / 1e12;
  state.counters["vs_cublas"] = direct_s / ours_s;
}
// DLRM (samples/dlrm) at batch 2048: bottom MLP 13-512-256-64-16, top MLP 367-512-256-1.
BENCHMARK(BM_Gemm)
    ->Args({2048, 512, 13, 0})
    ->Args({2048, 256, 512, 0})
    ->Args({2048, 64, 256, 0})
    ->Args({2048, 512, 367, 0})
    ->Args({2048, 1, 256, 0})
    ->Args({4096, 4096, 4096, 0})
    ->Args({2048, 256, 512, 1})
    ->Args({4096, 4096, 4096, 1})
    ->ArgNames({"m", "n", "k", "bf16"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_GatherRows(benchmark::State& state) {
  const int64_t dim = state.range(0), rows = int64_t{1} << 22, n = int64_t{1} << 20;
  auto stream = Check(Stream::Create(0));
  DeviceBuffer table = Check(DeviceBuffer::Allocate(*stream, rows * dim * 4));
  CheckOk(Memset(*stream, table.data(), 0, table.bytes()));
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::mt19937_64 rng(3);
  for (int64_t& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
  DeviceBuffer dids = Check(Upload(*stream, ids));
  DeviceBuffer out = Check(DeviceBuffer::Allocate(*stream, n * dim * 4));
  // The yardstick: a plain copy kernel over 512 MiB, bytes read + written per second.
  const int64_t copy_bytes = int64_t{512} << 20;
  DeviceBuffer src = Check(DeviceBuffer::Allocate(*stream, copy_bytes));
  DeviceBuffer dst = Check(DeviceBuffer::Allocate(*stream, copy_bytes));
  CheckOk(Memset(*stream, src.data(), 1, copy_bytes));
  Timer timer(*stream);
  const RowTable t{table.as<float>(), rows, dim, dim};
  auto gather = [&] { CheckOk(GatherRows(*stream, t, dids.as<int64_t>(), n, out.as<float>())); };
  auto copy = [&] { CheckOk(CopyKernel(*stream, src.data(), dst.data(), copy_bytes)); };
  gather();
  copy();
  double gather_s = 0, copy_s = 0;
  for (auto _ : state) {
    const double g = timer.Seconds(gather);
    copy_s += timer.Seconds(copy);
    gather_s += g;
    state.SetIterationTime(g);
  }
  const double iters = static_cast<double>(state.iterations());
  const double row_bytes = 2.0 * dim * 4 + 8;  // read the row, write it, read its id
  const double peak = 2.0 * copy_bytes * iters / copy_s;
  state.counters["rows_per_s"] = n * iters / gather_s;
  state.counters["copy_GBps"] = peak / 1e9;
  state.counters["roofline_rows_per_s"] = peak / row_bytes;
  state.counters["vs_roofline"] = (n * iters / gather_s) / (peak / row_bytes);
}
void BM_TableGather(benchmark::State& state) {
  const int64_t dim = state.range(0), per = state.range(1);
  const int64_t rows = int64_t{1} << 22, batch = int64_t{1} << 18, unique_n = int64_t{1} << 20;
  const int64_t stride = 3 * dim;
  auto stream = Check(Stream::Create(0));
  DeviceBuffer table = Check(DeviceBuffer::Allocate(*stream, rows * stride * 4));
  CheckOk(Memset(*stream, table.data(), 0, table.bytes()));
  std::mt19937_64 rng(5);
  std::vector<int32_t> unique(static_cast<size_t>(unique_n));
  for (int32_t& u : unique) u = static_cast<int32_t>(rng() % static_cast<uint64_t>(rows));
  std::vector<int32_t> restore(static_cast<size_t>(batch * per));
  for (int32_t& r : restore) r = static_cast<int32_t>(rng() % static_cast<uint64_t>(unique_n));
  DeviceBuffer d_unique = Check(Upload(*stream, unique));
  DeviceBuffer d_restore = Check(Upload(*stream, restore));
  DeviceBuffer d_invalid = Check(Upload(*stream, std::vector<int32_t>{0}));
  DeviceBuffer out = Check(DeviceBuffer::Allocate(*stream, batch * dim * 4));
  const int64_t copy_bytes = int64_t{512} << 20;
  DeviceBuffer src = Check(DeviceBuffer::Allocate(*stream, copy_bytes));
  DeviceBuffer dst = Check(DeviceBuffer::Allocate(*stream, copy_bytes));
  CheckOk(Memset(*stream, src.data(), 1, copy_bytes));
  Timer timer(*stream);
  const RowTable t{table.as<float>(), rows, stride, dim};
  const TableLookup lookup{d_unique.as<int32_t>(), unique_n, d_restore.as<int32_t>(), batch, per};
  auto gather = [&] {
    CheckOk(TableGather(*stream, t, lookup, TableCombine::kSum, 0.0f, dim, out.as<float>(),
                        d_invalid.as<int32_t>()));
  };
  auto copy = [&] { CheckOk(CopyKernel(*stream, src.data(), dst.data(), copy_bytes)); };
  gather();
  copy();
  double gather_s = 0, copy_s = 0;
  for (auto _ : state) {
    const double g = timer.Seconds(gather);
    copy_s += timer.Seconds(copy);
    gather_s += g;
    state.SetIterationTime(g);
  }
  const double iters = static_cast<double>(state.iterations());
  // Per id: its row's dim floats, its restore index and its unique row id; per sample: the
  // pooled row written.
  const double bytes = batch * per * (dim * 4.0 + 8.0) + batch * dim * 4.0;
  const double peak = 2.0 * copy_bytes * iters / copy_s;
  state.counters["rows_per_s"] = batch * per * iters / gather_s;
  state.counters["copy_GBps"] = peak / 1e9;
  state.counters["vs_roofline"] = (bytes * iters / gather_s) / peak;
}
BENCHMARK(BM_TableGather)
    ->Args({16, 1})
    ->Args({16, 8})
    ->Args({64, 4})
    ->ArgNames({"dim", "per"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_GatherRows)
    ->Arg(16)
    ->Arg(64)
    ->Arg(128)
    ->ArgName("dim")
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Swap: 256K rows of 128 floats between rows scattered through host memory (every other row of
// an array twice the size) and random rows of a device table of 1M rows.
struct SwapSetup {
  static constexpr int64_t kRowFloats = 128, kRows = int64_t{1} << 18,
                           kDeviceRows = int64_t{1} << 20;
  SwapSetup()
      : swapper(Check(RowSwapper::Create(0, kRowFloats, 8192))),
        host(static_cast<size_t>(2 * kRows * kRowFloats), 0.5f),
        table(Check(DeviceBuffer::Allocate(swapper->stream(), kDeviceRows * kRowFloats * 4))),
        pinned(Check(PinnedBuffer::Allocate(kRows * kRowFloats * 4))),
        flat(Check(DeviceBuffer::Allocate(swapper->stream(), kRows * kRowFloats * 4))) {
    std::vector<int64_t> all(static_cast<size_t>(kDeviceRows));
    for (int64_t i = 0; i < kDeviceRows; ++i) all[static_cast<size_t>(i)] = i;
    std::shuffle(all.begin(), all.end(), std::mt19937_64(4));
    slots.assign(all.begin(), all.begin() + kRows);
    for (int64_t i = 0; i < kRows; ++i) {
      float* row = &host[static_cast<size_t>(2 * i * kRowFloats)];
      src.push_back(row);
      dst.push_back(row);
    }
    std::fill_n(pinned.as<float>(), kRows * kRowFloats, 0.25f);
  }
  RowTable Table() const { return {table.as<float>(), kDeviceRows, kRowFloats, 64}; }
  std::unique_ptr<RowSwapper> swapper;
  std::vector<float> host;
  DeviceBuffer table;
  PinnedBuffer pinned;
  DeviceBuffer flat;
  std::vector<int64_t> slots;
  std::vector<const float*> src;
  std::vector<float*> dst;
};

// SwapKind: the swap a BM_Swap row times: SwapIn and SwapOut return when their rows arrived;
// SwapInAsync (what the device tier's Write does, cuda_tier_memory.cc) returns once its copies are
// enqueued, so the row is timed from the call to the copies' end (Synchronize) and also says how
// much of that the host was blocked for (host_fraction).
enum class SwapKind { kIn, kOut, kInAsync, kOutAsync };

void BM_Swap(benchmark::State& state, SwapKind kind) {
  const bool in = kind == SwapKind::kIn || kind == SwapKind::kInAsync;
  SwapSetup s;
  // SwapOutAsync: a device tier of the table's size on the cuda device (its own rows and swap
  // stream; the rows' values do not matter to the copy).
  std::unique_ptr<internal::Device> device;
  std::unique_ptr<internal::DeviceTierMemory> tier;
  std::vector<uint32_t> tier_slots(s.slots.begin(), s.slots.end());
  if (kind == SwapKind::kOutAsync) {
    device = Check(CreateCudaDevice(SessionConfig{}));
    tier = Check(device->CreateTableTierMemory(SwapSetup::kDeviceRows,
                                               static_cast<int>(SwapSetup::kRowFloats), "bench"));
  }
  Stream& stream = s.swapper->stream();
  Timer timer(stream);
  const int64_t bytes = SwapSetup::kRows * SwapSetup::kRowFloats * 4;
  double host_s = 0;  // SwapInAsync: the time until it returned
  auto swap = [&] {
    if (kind == SwapKind::kInAsync) {
      const auto t0 = std::chrono::steady_clock::now();
      CheckOk(s.swapper->SwapInAsync(s.src, s.slots, s.Table()));
      host_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      CheckOk(stream.Synchronize());
      return;
    }
    if (kind == SwapKind::kOutAsync) {
      const auto t0 = std::chrono::steady_clock::now();
      internal::PendingRows down =
          Check(tier->ReadAsync(tier_slots, internal::SwapOutOrder::kAfterReleaseFences));
      host_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      CheckOk(tier->WaitRead(down));
      return;
    }
    CheckOk(in ? s.swapper->SwapIn(s.src, s.slots, s.Table())
               : s.swapper->SwapOut(s.Table(), s.slots, s.dst));
  };
  auto memcpy_pinned = [&] {
    CheckOk(in ? CopyHostToDevice(stream, s.flat.data(), s.pinned.data(), bytes)
               : CopyDeviceToHost(stream, s.pinned.data(), s.flat.data(), bytes));
  };
  swap();
  (void)timer.Seconds(memcpy_pinned);
  host_s = 0;
  double swap_s = 0, memcpy_s = 0;
  for (auto _ : state) {
    // The swap is host-driven (it returns when done): timed on the host clock, the memcpy with
    // events.
    const auto t0 = std::chrono::steady_clock::now();
    swap();
    const double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    memcpy_s += timer.Seconds(memcpy_pinned);
    swap_s += w;
    state.SetIterationTime(w);
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["swap_GBps"] = bytes * iters / swap_s / 1e9;
  state.counters["pinned_memcpy_GBps"] = bytes * iters / memcpy_s / 1e9;
  state.counters["vs_pinned"] = memcpy_s / swap_s;
  if (kind == SwapKind::kInAsync || kind == SwapKind::kOutAsync) {
    state.counters["host_fraction"] = host_s / swap_s;
  }
}
BENCHMARK_CAPTURE(BM_Swap, SwapIn, SwapKind::kIn)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Swap, SwapInAsync, SwapKind::kInAsync)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Swap, SwapOut, SwapKind::kOut)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Swap, SwapOutAsync, SwapKind::kOutAsync)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace recsdk::cuda

int main(int argc, char** argv) {
  using namespace recsdk::cuda;
  if (GpuCount() == 0) {
    std::printf(
        "cuda_bench: no GPU found (%s); nothing to measure (scripts/gpu_proof.sh runs "
        "this on a GPU machine)\n",
        NoGpuReason().c_str());
    return 0;
  }
  const auto info = GetDeviceInfo(0);
  if (info.ok()) {
    std::printf("cuda_bench: GPU 0: %s (sm_%d%d, %d SMs, %.1f GiB)\n", info->name.c_str(),
                info->compute_major, info->compute_minor, info->multiprocessors,
                static_cast<double>(info->total_memory_bytes) / (1 << 30));
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
