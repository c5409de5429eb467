// pipeline_bench.cc: Criteo TSV parse rate against reading the same bytes without parsing.
// Input: 200k synthetic Criteo lines (~56 MB) written to /tmp once per process (before any
// benchmark runs); the parses read it from the page cache.
//  - BM_RawRead: a read() loop into a 1 MiB buffer from the page cache (memory bandwidth: the
//    kernel's copy, ~10 GB/s here).
//  - BM_RawReadLines: the same plus memchr for every '\n', the least a line-oriented reader does.
//  - BM_Stage*: one stage each over the file held in memory (no I/O), with bytes_per_cycle at the
//    nominal clock: the '\t'/'\n' index (stage 1) alone, and CriteoParser on 1 MiB chunks (the fast
//    path, the reference path timed alongside it: fast_vs_reference).
//  - BM_CriteoParse/threads:N: CriteoDataset over the file, end to end.
//  - BM_ParseVsRawRead/N: each iteration times, back to back so the ratios compare runs under
//    the same machine load: the raw read of the file from storage (the file's pages are dropped
//    from the page cache with fdatasync + POSIX_FADV_DONTNEED first, then a plain read() loop
//    with the kernel's readahead: what reading a dataset that is not in memory costs), the same
//    read from the page cache, the line-splitting read, and the parse with N threads.
//    parse_vs_raw_read = parse MB/s / raw (storage) read MB/s (goal >= 0.5 on one thread);
//    parse_vs_cached_read and parse_vs_line_split_read against the page-cache reads, which copy
//    memory and are an order of magnitude faster than any parser (for scale, not a goal).
//    cold_resident = the fraction of the file's pages still cached after the drop (0 when the
//    drop worked; on a file system that ignores it the raw read is a cached one and the ratio
//    only gets stricter). parse_cores_used = process CPU time / wall time of the parse (scaling
//    needs the second core to be free).
// Run: pipeline_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
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
#include "src/pipeline/criteo_parse.h"
#include "src/pipeline/separator_index.h"

namespace {

constexpr int kLines = 200000;

const std::string& InputText() {
  static const std::string text = [] {
    std::mt19937_64 rng(1);
    std::string t;
    t.reserve(static_cast<size_t>(kLines) * 300);
    for (int r = 0; r < kLines; ++r) {
      t += (rng() % 4 == 0) ? '1' : '0';
      for (int i = 0; i < 13; ++i) {
        t += '\t';
        if (rng() % 10 != 0) t += std::to_string(rng() % (i < 3 ? 50 : 5000));
      }
      for (int i = 0; i < 26; ++i) {
        t += '\t';
        if (rng() % 20 != 0) t += fmt::format("{:08x}", static_cast<uint32_t>(rng()));
      }
      t += '\n';
    }
    return t;
  }();
  return text;
}

const std::string& InputFile() {
  static const std::string path = [] {
    std::string p = fmt::format("/tmp/recsdk_pipeline_bench_{}.tsv", ::getpid());
    std::FILE* f = std::fopen(p.c_str(), "wb");
    std::fwrite(InputText().data(), 1, InputText().size(), f);
    std::fclose(f);
    // Read it once so every benchmark starts from a warm page cache.
    std::vector<char> buf(1 << 20);
    const int fd = ::open(p.c_str(), O_RDONLY);
    while (::read(fd, buf.data(), buf.size()) > 0) {
    }
    ::close(fd);
    std::atexit([] { std::remove(InputFile().c_str()); });
    return p;
  }();
  return path;
}

int64_t FileBytes() { return static_cast<int64_t>(InputText().size()); }

double CyclesPerSecond() { return benchmark::CPUInfo::Get().cycles_per_second; }

// Strict: read() the file in 1 MiB pieces; nothing else.
int64_t ReadOnce(std::vector<char>& buf) {
  const int fd = ::open(InputFile().c_str(), O_RDONLY);
  int64_t total = 0;
  ssize_t n;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) total += n;
  ::close(fd);
  return total;
}

// Drops the file's pages from the page cache; returns the fraction still resident after.
double DropFromPageCache() {
  const int fd = ::open(InputFile().c_str(), O_RDONLY);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const size_t bytes = static_cast<size_t>(FileBytes());
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return 1.0;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((bytes + page - 1) / page);
  double in = 1.0;
  if (::mincore(map, bytes, resident.data()) == 0) {
    size_t n = 0;
    for (unsigned char r : resident) n += r & 1;
    in = static_cast<double>(n) / static_cast<double>(resident.size());
  }
  ::munmap(map, bytes);
  return in;
}

// Line-splitting: read() plus memchr for every '\n'.
int64_t ReadLinesOnce(std::vector<char>& buf) {
  const int fd = ::open(InputFile().c_str(), O_RDONLY);
  int64_t lines = 0;
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
  return lines;
}

void SetRates(benchmark::State& state) {
  state.SetBytesProcessed(state.iterations() * FileBytes());
  state.SetItemsProcessed(state.iterations() * kLines);
}

void BM_RawRead(benchmark::State& state) {
  std::vector<char> buf(1 << 20);
  for (auto _ : state) benchmark::DoNotOptimize(ReadOnce(buf));
  SetRates(state);
}

void BM_RawReadLines(benchmark::State& state) {
  std::vector<char> buf(1 << 20);
  for (auto _ : state) benchmark::DoNotOptimize(ReadLinesOnce(buf));
  SetRates(state);
}

// Per-stage rates over the text in memory, as bytes per nominal cycle.
void StageCounters(benchmark::State& state, double seconds) {
  const double bytes = static_cast<double>(FileBytes()) * static_cast<double>(state.iterations());
  state.counters["bytes_per_cycle"] = bytes / seconds / CyclesPerSecond();
  state.counters["cycles_per_row"] =
      seconds * CyclesPerSecond() / (static_cast<double>(kLines) * state.iterations());
}

void BM_StageMemcpy(benchmark::State& state) {
  const std::string& text = InputText();
  std::vector<char> buf(1 << 20);
  double s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t off = 0; off < text.size(); off += buf.size()) {
      std::memcpy(buf.data(), text.data() + off, std::min(buf.size(), text.size() - off));
      benchmark::ClobberMemory();
    }
    s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  SetRates(state);
  StageCounters(state, s);
}

void BM_StageScanSeparators(benchmark::State& state) {
  const std::string& text = InputText();
  constexpr size_t kWindow = 16 << 10;
  std::vector<uint32_t> index(kWindow + recsdk::internal::kSeparatorIndexSlack);
  double s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    // In 16 KiB windows, as the parser does.
    int64_t seps = 0;
    for (size_t off = 0; off < text.size(); off += kWindow) {
      const char* p = text.data() + off;
      seps += static_cast<int64_t>(recsdk::internal::IndexSeparators(
          p, p, p + std::min(kWindow, text.size() - off), '\t', '\n', index.data()));
    }
    benchmark::DoNotOptimize(seps);
    s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  SetRates(state);
  StageCounters(state, s);
}

// The in-memory text cut into ~1 MiB chunks at line boundaries, as the reader cuts it.
std::vector<std::string_view> Chunks() {
  const std::string& text = InputText();
  std::vector<std::string_view> chunks;
  for (size_t off = 0; off < text.size();) {
    size_t end = std::min(text.size(), off + (1 << 20));
    if (end < text.size()) end = text.rfind('\n', end - 1) + 1;
    chunks.emplace_back(text.data() + off, end - off);
    off = end;
  }
  return chunks;
}

// CriteoParser over the in-memory chunks: the fast path (best ISA), the portable SWAR fast path
// and the reference path alternate per iteration (so all see the same machine load);
// bytes_per_cycle and cycles_per_row are the fast path's, fast_vs_reference = reference time /
// fast time, fast_vs_swar = SWAR time / fast time.
void BM_StageParse(benchmark::State& state) {
  using Path = recsdk::internal::CriteoParser::Path;
  const std::vector<std::string_view> chunks = Chunks();
  recsdk::CriteoOptions o;
  o.dense_transform = recsdk::DenseTransform::kLog1p;
  const recsdk::internal::CriteoParser parser(o);
  double seconds[3] = {0, 0, 0};
  int64_t rows = 0;
  for (auto _ : state) {
    int k = 0;
    for (Path path : {Path::kFast, Path::kSwar, Path::kReference}) {
      const auto t0 = std::chrono::steady_clock::now();
      for (std::string_view c : chunks) rows += parser.Parse(c, true, path).batch.num_rows();
      seconds[k++] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  if (rows != 3 * state.iterations() * kLines) state.SkipWithError("row count mismatch");
  SetRates(state);
  StageCounters(state, seconds[0]);
  const double mb =
      static_cast<double>(FileBytes()) * static_cast<double>(state.iterations()) / 1e6;
  state.counters["fast_MB_per_s"] = mb / seconds[0];
  state.counters["swar_MB_per_s"] = mb / seconds[1];
  state.counters["reference_MB_per_s"] = mb / seconds[2];
  state.counters["fast_vs_reference"] = seconds[2] / seconds[0];
  state.counters["fast_vs_swar"] = seconds[1] / seconds[0];
}

// Process CPU seconds (all threads).
double ProcessCpuSeconds() {
  rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double ParseOnce(recsdk::Dataset& ds, int64_t* rows) {
  const auto t0 = std::chrono::steady_clock::now();
  (void)ds.Reset();
  recsdk::Batch b;
  for (;;) {
    auto more = ds.GetNext(&b);
    if (!more.ok() || !*more) break;
    *rows += b.num_rows();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

recsdk::CriteoOptions BenchOptions(int threads) {
  recsdk::CriteoOptions o;
  o.reader.num_parse_threads = threads;
  o.dense_transform = recsdk::DenseTransform::kLog1p;
  return o;
}

void BM_CriteoParse(benchmark::State& state) {
  auto ds = recsdk::CriteoDataset({InputFile()}, BenchOptions(static_cast<int>(state.range(0))));
  if (!ds.ok()) {
    state.SkipWithError(std::string(ds.status().message()).c_str());
    return;
  }
  int64_t rows = 0;
  for (auto _ : state) ParseOnce(**ds, &rows);
  if (rows != state.iterations() * kLines) state.SkipWithError("row count mismatch");
  SetRates(state);
  state.counters["threads"] = static_cast<double>(state.range(0));
}

// The ratios: strict read, line-splitting read and parse, timed back to back per iteration.
void BM_ParseVsRawRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const double bytes = static_cast<double>(FileBytes());
  std::vector<char> buf(1 << 20);
  auto ds = recsdk::CriteoDataset({InputFile()}, BenchOptions(threads));
  if (!ds.ok()) {
    state.SkipWithError(std::string(ds.status().message()).c_str());
    return;
  }
  double raw_s = 0, cached_s = 0, lines_s = 0, parse_s = 0, parse_cpu_s = 0, resident = 0;
  int64_t rows = 0;
  for (auto _ : state) {
    resident += DropFromPageCache();
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(ReadOnce(buf));  // from storage, refilling the page cache
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(ReadOnce(buf));
    const auto t2 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(ReadLinesOnce(buf));
    const auto t3 = std::chrono::steady_clock::now();
    raw_s += std::chrono::duration<double>(t1 - t0).count();
    cached_s += std::chrono::duration<double>(t2 - t1).count();
    lines_s += std::chrono::duration<double>(t3 - t2).count();
    const double c0 = ProcessCpuSeconds();
    parse_s += ParseOnce(**ds, &rows);
    parse_cpu_s += ProcessCpuSeconds() - c0;
  }
  if (rows != state.iterations() * kLines) state.SkipWithError("row count mismatch");
  const double it = static_cast<double>(state.iterations());
  state.counters["threads"] = threads;
  state.counters["raw_MB_per_s"] = bytes * it / raw_s / 1e6;
  state.counters["cached_read_MB_per_s"] = bytes * it / cached_s / 1e6;
  state.counters["cold_resident"] = resident / it;
  state.counters["line_split_MB_per_s"] = bytes * it / lines_s / 1e6;
  state.counters["parse_MB_per_s"] = bytes * it / parse_s / 1e6;
  state.counters["parse_rows_per_s"] = kLines * it / parse_s;
  state.counters["parse_vs_raw_read"] = raw_s / parse_s;
  state.counters["parse_vs_cached_read"] = cached_s / parse_s;
  state.counters["parse_vs_line_split_read"] = lines_s / parse_s;
  // Cores the parse got (process CPU time / wall time): with 2 threads on a shared machine this
  // tells "did not scale" from "did not get the second core".
  state.counters["parse_cores_used"] = parse_cpu_s / parse_s;
  state.counters["parse_MB_per_cpu_s"] = bytes * it / parse_cpu_s / 1e6;
}

BENCHMARK(BM_RawRead)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RawReadLines)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StageMemcpy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StageScanSeparators)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StageParse)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CriteoParse)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ParseVsRawRead)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(8);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  InputFile();  // written and cached before any timing (BM_RawRead's first run included it)
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
