// pipeline_bench.cc: Criteo TSV parse rate against reading the same bytes without parsing.
// BM_RawRead reads the file in the reader's chunk size and finds its line boundaries (what any
// text reader must do); BM_CriteoParse/threads:N runs CriteoDataset over the same file. The
// counter parse_vs_raw_read = parse bytes/s / raw bytes/s (goal >= 0.5 on one thread).
// Input: 200k synthetic Criteo lines written to /tmp once per process.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "fmt/format.h"
#include "recsdk/dataset.h"

namespace {

constexpr int kLines = 200000;

const std::string& InputFile() {
  static const std::string path = [] {
    std::string p = fmt::format("/tmp/recsdk_pipeline_bench_{}.tsv", ::getpid());
    std::mt19937_64 rng(1);
    std::string text;
    text.reserve(static_cast<size_t>(kLines) * 200);
    for (int r = 0; r < kLines; ++r) {
      text += (rng() % 4 == 0) ? '1' : '0';
      for (int i = 0; i < 13; ++i) {
        text += '\t';
        if (rng() % 10 != 0) text += std::to_string(rng() % (i < 3 ? 50 : 5000));
      }
      for (int i = 0; i < 26; ++i) {
        text += '\t';
        if (rng() % 20 != 0) text += fmt::format("{:08x}", static_cast<uint32_t>(rng()));
      }
      text += '\n';
    }
    std::FILE* f = std::fopen(p.c_str(), "wb");
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    std::atexit([] { std::remove(InputFile().c_str()); });
    return p;
  }();
  return path;
}

int64_t FileBytes() {
  std::FILE* f = std::fopen(InputFile().c_str(), "rb");
  std::fseek(f, 0, SEEK_END);
  const int64_t n = std::ftell(f);
  std::fclose(f);
  return n;
}

void BM_RawRead(benchmark::State& state) {
  const int64_t bytes = FileBytes();
  std::vector<char> buf(1 << 20);
  int64_t lines = 0;
  for (auto _ : state) {
    const int fd = ::open(InputFile().c_str(), O_RDONLY);
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) {
      const char* p = buf.data();
      const char* end = p + n;
      while ((p = static_cast<const char*>(std::memchr(p, '\n', end - p))) != nullptr) {
        ++lines;
        ++p;
      }
    }
    ::close(fd);
  }
  benchmark::DoNotOptimize(lines);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetItemsProcessed(state.iterations() * kLines);
}

void BM_CriteoParse(benchmark::State& state) {
  const int64_t bytes = FileBytes();
  recsdk::CriteoOptions o;
  o.reader.num_parse_threads = static_cast<int>(state.range(0));
  o.dense_transform = recsdk::DenseTransform::kLog1p;
  auto ds = recsdk::CriteoDataset({InputFile()}, o);
  if (!ds.ok()) {
    state.SkipWithError(std::string(ds.status().message()).c_str());
    return;
  }
  int64_t rows = 0;
  for (auto _ : state) {
    (void)(*ds)->Reset();
    recsdk::Batch b;
    for (;;) {
      auto more = (*ds)->GetNext(&b);
      if (!more.ok() || !*more) break;
      rows += b.num_rows();
    }
  }
  if (rows != state.iterations() * kLines) state.SkipWithError("row count mismatch");
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetItemsProcessed(state.iterations() * kLines);
  state.counters["threads"] = static_cast<double>(state.range(0));
}

// Runs the raw read once more inside the parse benchmark's process to form the ratio.
void BM_ParseVsRawRead(benchmark::State& state) {
  const int64_t bytes = FileBytes();
  std::vector<char> buf(1 << 20);
  recsdk::CriteoOptions o;
  o.dense_transform = recsdk::DenseTransform::kLog1p;
  auto ds = recsdk::CriteoDataset({InputFile()}, o);
  double raw_s = 0, parse_s = 0;
  int64_t lines = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    const int fd = ::open(InputFile().c_str(), O_RDONLY);
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) {
      const char* p = buf.data();
      const char* end = p + n;
      while ((p = static_cast<const char*>(std::memchr(p, '\n', end - p))) != nullptr) {
        ++lines;
        ++p;
      }
    }
    ::close(fd);
    auto t1 = std::chrono::steady_clock::now();
    (void)(*ds)->Reset();
    recsdk::Batch b;
    for (;;) {
      auto more = (*ds)->GetNext(&b);
      if (!more.ok() || !*more) break;
    }
    auto t2 = std::chrono::steady_clock::now();
    raw_s += std::chrono::duration<double>(t1 - t0).count();
    parse_s += std::chrono::duration<double>(t2 - t1).count();
  }
  benchmark::DoNotOptimize(lines);
  const double it = static_cast<double>(state.iterations());
  state.counters["raw_MB_per_s"] = bytes * it / raw_s / 1e6;
  state.counters["parse_MB_per_s"] = bytes * it / parse_s / 1e6;
  state.counters["parse_rows_per_s"] = kLines * it / parse_s;
  state.counters["parse_vs_raw_read"] = raw_s / parse_s;
}

BENCHMARK(BM_RawRead)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CriteoParse)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ParseVsRawRead)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
