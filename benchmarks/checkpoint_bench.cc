// checkpoint_bench.cc: checkpoint save and restore of one dim-16 Adagrad table against plain
// write()/read() of the same bytes, measured in the same run.
//
//   BM_SaveRestore: per iteration, SaveTable (snapshot + .npy payloads with CRC32C + fsync of each
//       file + manifest) and a plain write() of the same number of bytes to one file + fdatasync;
//       then RestoreTable (read, verify, rebuild the index) into an empty table and two plain
//       read()s of that file, in rotated order (RunRotated). Counters: save_MBps, write_MBps,
//       restore_MBps, read_MBps, hot_read_MBps, ckpt_save_vs_write = write time / save time,
//       ckpt_restore_vs_read = read time / restore time with the read into ordinary malloc'd
//       memory (the baseline; goal >= 0.7 each), ckpt_restore_vs_hot_read = the same
//       against a read into a fresh huge-page mapping (stricter: no 4 KiB page faults).
//   BM_PayloadIO: the checkpoint's own file work alone, without the table's Snapshot /
//       LoadSnapshot: WriteTablePayloads of a snapshot taken beforehand (untimed) against the plain
//       write, and ReadTablePayloads (read + verify into fresh snapshot buffers) against the plain
//       read. Counters ckpt_write_vs_write and ckpt_read_vs_read: what the checkpoint format and
//       I/O cost; the rest of ckpt_save_vs_write / ckpt_restore_vs_read is the table's copy.
//   BM_Delta1Pct: a delta snapshot + payloads after 1% of the rows changed, against a full one of
//       the same table. Counter delta_vs_full = delta time / full time (goal about 0.01 + the
//       O(capacity) scan of the change bytes). snapshot_ms / snapshot_vs_full_save: the part of a
//       full save that stalls the step when SaverOptions::async_write writes in the background.
//
//   BM_SsdTierSave / BM_SsdTierDelta: tables mostly on the SSD tier (their comments below).
//
//   BM_PredictorLoad: ExportSavedModel of a model whose only big part is that table (a read-only
//       lookup + a small dense layer), then per iteration Predictor::Load of the bundle (read,
//       verify, build the serving session and its table) against a plain read() of every file of
//       the bundle into fresh memory, rotated as above. Counters predictor_load_vs_read = read
//       time / load time with malloc'd memory (the issue: loading takes about as long as reading
//       the bytes) and predictor_load_vs_hot_read against fresh huge-page mappings.
//
// Rows: 1M by default (128 MB of rows with slots); RECSDK_CKPT_BENCH_ROWS=10000000 for the
// issue's 10M (1.28 GB, needs ~5 GB of memory). Files go to RECSDK_CKPT_BENCH_DIR (default /tmp).
// Reads hit the page cache on both sides (the files were just written), so read figures compare
// the code, not the disk. Both plain reads go into fresh memory, as a restore must: `new char[]`
// (MallocRead) and a mapping with transparent huge pages (HotRead, as fast as fresh memory gets).
// Single-threaded driver; the table copies rows with oneTBB.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "recsdk/checkpoint.h"
#include "recsdk/recsdk.h"
#include "recsdk/table.h"
#include "src/checkpoint/checkpoint_io.h"
#include "src/common/env.h"
#include "src/table/tier_lease.h"

namespace recsdk {
namespace {

int64_t Rows() {
  const char* env = std::getenv("RECSDK_CKPT_BENCH_ROWS");
  return env != nullptr ? std::atoll(env) : 1000000;
}

std::string BenchDir() {
  const char* env = std::getenv("RECSDK_CKPT_BENCH_DIR");
  return std::string(env != nullptr ? env : "/tmp") + "/recsdk_checkpoint_bench";
}

TableConfig Config(int64_t rows) {
  TableConfig c;
  c.name = "bench";
  c.dim = 16;
  c.device_vocabulary_size = rows;
  c.initializer = Initializer::Uniform(-0.1, 0.1, 1);
  return c;
}

std::unique_ptr<EmbeddingTable> Filled(int64_t rows) {
  auto t = *EmbeddingTable::Create(Config(rows), SparseOptimizerConfig::Adagrad(0.1f));
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int64_t> keys(kChunk);
  std::vector<uint32_t> ids(kChunk);
  for (int64_t b = 0; b < rows; b += kChunk) {
    const int64_t n = std::min(kChunk, rows - b);
    for (int64_t i = 0; i < n; ++i) keys[i] = (b + i) * 2654435761LL;
    if (!t->Resolve(absl::MakeConstSpan(keys.data(), n), {}, {}, LookupMode::kTrain,
                    absl::MakeSpan(ids.data(), n))
             .ok()) {
      std::abort();
    }
  }
  return t;
}

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void PlainWrite(const std::string& path, const char* data, size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd, data + done, bytes - done);
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  ::fdatasync(fd);
  ::close(fd);
}

void PlainRead(const std::string& path, char* data, size_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::read(fd, data + done, bytes - done);
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

// FreshBuffer: fresh memory for a plain read, mapped with transparent huge pages as the
// checkpoint's own buffers are. A read into `new char[]` (4 KiB pages) pays page faults that the
// restore's huge-page buffers do not; the *_vs_hot_read counters use this stricter baseline.
class FreshBuffer {
 public:
  explicit FreshBuffer(size_t bytes) : bytes_(std::max<size_t>(bytes, 1)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    madvise(p, bytes_, MADV_HUGEPAGE);
    data_ = static_cast<char*>(p);
  }
  ~FreshBuffer() { munmap(data_, bytes_); }
  FreshBuffer(const FreshBuffer&) = delete;
  FreshBuffer& operator=(const FreshBuffer&) = delete;
  char* get() const { return data_; }

 private:
  size_t bytes_;
  char* data_;
};

// The three timed reads of a restore-side iteration: the restore, the plain read into ordinary
// malloc'd memory (`new char[]`, 4 KiB pages: the baseline), and the plain read into a
// fresh huge-page mapping (FreshBuffer: the stricter "hot" baseline). Each runs first in one of
// three consecutive iterations: the first gets the pages the previous iteration freed, the later
// ones must find fresh pages (on this VM, compaction and first touch cost more than the copy), so
// a fixed order would flatter one side.
template <typename F0, typename F1, typename F2>
void RunRotated(int iteration, F0& a, F1& b, F2& c) {
  switch (iteration % 3) {
    case 0:
      a(), b(), c();
      break;
    case 1:
      b(), c(), a();
      break;
    default:
      c(), a(), b();
      break;
  }
}

// MallocRead / HotRead: a plain read() of `path` into fresh memory, freed before returning (a
// restoring process has no warm buffer either); seconds, allocation and free included.
double MallocRead(const std::string& path, size_t bytes) {
  auto a = std::chrono::steady_clock::now();
  {
    std::unique_ptr<char[]> buffer(new char[std::max<size_t>(bytes, 1)]);
    PlainRead(path, buffer.get(), bytes);
    benchmark::DoNotOptimize(buffer.get());
  }
  return Seconds(a, std::chrono::steady_clock::now());
}

double HotRead(const std::string& path, size_t bytes) {
  auto a = std::chrono::steady_clock::now();
  {
    FreshBuffer buffer(bytes);
    PlainRead(path, buffer.get(), bytes);
    benchmark::DoNotOptimize(buffer.get());
  }
  return Seconds(a, std::chrono::steady_clock::now());
}

void BM_SaveRestore(benchmark::State& state) {
  const int64_t rows = Rows();
  auto table = Filled(rows);
  const std::string dir = BenchDir();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const size_t bytes =
      static_cast<size_t>(rows) * (8 + 4 * static_cast<size_t>(table->row_floats()));
  std::vector<char> buffer(bytes, 1);
  double save = 0, write = 0, restore = 0, read = 0, hot_read = 0;
  int iteration = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    if (!SaveTable(*table, dir + "/ckpt").ok()) std::abort();
    auto t1 = std::chrono::steady_clock::now();
    PlainWrite(dir + "/plain", buffer.data(), bytes);
    auto t2 = std::chrono::steady_clock::now();
    auto fresh = *EmbeddingTable::Create(Config(rows), SparseOptimizerConfig::Adagrad(0.1f));
    double restore_s = 0, read_s = 0, hot_read_s = 0;
    auto restore_once = [&] {
      auto a = std::chrono::steady_clock::now();
      if (!RestoreTable(*fresh, dir + "/ckpt").ok() || fresh->size() != rows) std::abort();
      restore_s = Seconds(a, std::chrono::steady_clock::now());
    };
    auto read_once = [&] { read_s = MallocRead(dir + "/plain", bytes); };
    auto hot_read_once = [&] { hot_read_s = HotRead(dir + "/plain", bytes); };
    RunRotated(iteration++, restore_once, read_once, hot_read_once);
    save += Seconds(t0, t1);
    write += Seconds(t1, t2);
    restore += restore_s;
    read += read_s;
    hot_read += hot_read_s;
    state.SetIterationTime(Seconds(t0, t1) + restore_s);
  }
  const double mb = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / 1e6;
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["save_MBps"] = mb / save;
  state.counters["write_MBps"] = mb / write;
  state.counters["restore_MBps"] = mb / restore;
  state.counters["read_MBps"] = mb / read;
  state.counters["hot_read_MBps"] = mb / hot_read;
  state.counters["ckpt_save_vs_write"] = write / save;
  state.counters["ckpt_restore_vs_read"] = read / restore;
  state.counters["ckpt_restore_vs_hot_read"] = hot_read / restore;
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_SaveRestore)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_PayloadIO(benchmark::State& state) {
  const int64_t rows = Rows();
  auto table = Filled(rows);
  const std::string dir = BenchDir() + "_io";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  internal::Env* env = internal::Env::Default();
  const size_t bytes =
      static_cast<size_t>(rows) * (8 + 4 * static_cast<size_t>(table->row_floats()));
  std::vector<char> buffer(bytes, 1);
  double write = 0, plain_write = 0, read = 0, plain_read = 0;
  for (auto _ : state) {
    auto snap = table->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
    if (!snap.ok()) std::abort();
    auto t0 = std::chrono::steady_clock::now();
    auto entry = internal::WriteTablePayloads(env, dir, "t_", *snap);
    if (!entry.ok()) std::abort();
    auto t1 = std::chrono::steady_clock::now();
    PlainWrite(dir + "/plain", buffer.data(), bytes);
    auto t2 = std::chrono::steady_clock::now();
    snap = absl::CancelledError("freed");  // free the snapshot: a restoring process has none
    auto t3 = std::chrono::steady_clock::now();
    auto back = internal::ReadTablePayloads(env, dir, *entry);
    if (!back.ok() || static_cast<int64_t>(back->keys.size()) != rows) std::abort();
    auto t4 = std::chrono::steady_clock::now();
    back = absl::CancelledError("freed");
    auto t5 = std::chrono::steady_clock::now();
    FreshBuffer fresh_buffer(bytes);
    PlainRead(dir + "/plain", fresh_buffer.get(), bytes);
    auto t6 = std::chrono::steady_clock::now();
    write += Seconds(t0, t1);
    plain_write += Seconds(t1, t2);
    read += Seconds(t3, t4);
    plain_read += Seconds(t5, t6);
    state.SetIterationTime(Seconds(t0, t1) + Seconds(t3, t4));
  }
  const double mb = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / 1e6;
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["payload_write_MBps"] = mb / write;
  state.counters["payload_read_MBps"] = mb / read;
  state.counters["ckpt_write_vs_write"] = plain_write / write;
  state.counters["ckpt_read_vs_read"] = plain_read / read;
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_PayloadIO)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_Delta1Pct(benchmark::State& state) {
  const int64_t rows = Rows();
  auto table = Filled(rows);
  const std::string dir = BenchDir() + "_delta";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  internal::Env* env = internal::Env::Default();
  const int64_t changed = rows / 100;
  std::vector<uint32_t> ids(static_cast<size_t>(changed));
  std::vector<float> grads(static_cast<size_t>(changed) * 16, 0.01f);
  double full = 0, delta = 0, snapshot = 0, delta_snapshot = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto f = table->Snapshot(EmbeddingTable::SnapshotKind::kFull);
    auto ta = std::chrono::steady_clock::now();
    if (!f.ok() || !internal::WriteTablePayloads(env, dir, "full_", *f).ok()) std::abort();
    auto t1 = std::chrono::steady_clock::now();
    snapshot += Seconds(t0, ta);
    // 1% of the rows change (every 100th row id).
    for (int64_t i = 0; i < changed; ++i) ids[i] = static_cast<uint32_t>(i * 100);
    if (!table->ApplyGradients(ids, grads, 1).ok()) std::abort();
    auto t2 = std::chrono::steady_clock::now();
    auto d = table->Snapshot(EmbeddingTable::SnapshotKind::kDelta);
    delta_snapshot += Seconds(t2, std::chrono::steady_clock::now());
    if (!d.ok() || static_cast<int64_t>(d->keys.size()) != changed ||
        !internal::WriteTablePayloads(env, dir, "delta_", *d).ok()) {
      std::abort();
    }
    auto t3 = std::chrono::steady_clock::now();
    full += Seconds(t0, t1);
    delta += Seconds(t2, t3);
    state.SetIterationTime(Seconds(t2, t3));
  }
  state.counters["full_ms"] = 1e3 * full / static_cast<double>(state.iterations());
  state.counters["delta_ms"] = 1e3 * delta / static_cast<double>(state.iterations());
  state.counters["delta_vs_full"] = delta / full;
  state.counters["delta_snapshot_ms"] =
      1e3 * delta_snapshot / static_cast<double>(state.iterations());
  // What a full save stalls the step with SaverOptions::async_write: the snapshot alone.
  state.counters["snapshot_ms"] = 1e3 * snapshot / static_cast<double>(state.iterations());
  state.counters["snapshot_vs_full_save"] = snapshot / full;
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_Delta1Pct)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_PredictorLoad(benchmark::State& state) {
  const int64_t rows = Rows();
  Graph graph;
  Scope s(&graph);
  auto table = *create_table(s, Config(rows), SparseOptimizerConfig::Adagrad(0.1f));
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{8, 2});
  SparseLookupOptions lo;
  lo.combiner = Combiner::kSum;
  lo.is_train = false;
  Output emb = *sparse_lookup(s, table, ids, lo);
  layers::DenseOptions d;
  d.units = 1;
  Output out = layers::Dense(s.WithOpName("out"), emb, d);
  GlobalVariablesInitializer(s);
  if (!s.ok()) std::abort();
  auto session = *Session::Create(graph);
  if (!session->Run({}, {}, {"init"}).ok()) std::abort();
  EmbeddingTable* t = *LookupTable(*session, "bench");
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int64_t> keys(kChunk);
  std::vector<uint32_t> row_ids(kChunk);
  for (int64_t b = 0; b < rows; b += kChunk) {
    const int64_t n = std::min(kChunk, rows - b);
    for (int64_t i = 0; i < n; ++i) keys[i] = (b + i) * 2654435761LL;
    if (!t->Resolve(absl::MakeConstSpan(keys.data(), n), {}, {}, LookupMode::kTrain,
                    absl::MakeSpan(row_ids.data(), n))
             .ok()) {
      std::abort();
    }
  }
  const std::string dir = BenchDir() + "_bundle";
  std::filesystem::remove_all(dir);
  const Status exported = ExportSavedModel(*session, dir, {{"ids"}, {out.node->name()}});
  if (!exported.ok()) {
    std::fprintf(stderr, "%s\n", std::string(exported.message()).c_str());
    std::abort();
  }
  session.reset();
  std::vector<std::string> files;
  size_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    files.push_back(e.path());
    bytes += e.file_size();
  }
  double load = 0, read = 0, hot_read = 0;
  int iteration = 0;
  for (auto _ : state) {
    double load_s = 0, read_s = 0, hot_read_s = 0;
    auto load_once = [&] {
      auto a = std::chrono::steady_clock::now();
      auto predictor = Predictor::Load(dir);
      if (!predictor.ok()) std::abort();
      load_s = Seconds(a, std::chrono::steady_clock::now());
      predictor->reset();  // free its memory before the plain reads, as a fresh process has it
    };
    auto read_once = [&] {
      for (const std::string& f : files) read_s += MallocRead(f, std::filesystem::file_size(f));
    };
    auto hot_read_once = [&] {
      for (const std::string& f : files) hot_read_s += HotRead(f, std::filesystem::file_size(f));
    };
    RunRotated(iteration++, load_once, read_once, hot_read_once);
    load += load_s;
    read += read_s;
    hot_read += hot_read_s;
    state.SetIterationTime(load_s);
  }
  const double mb = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / 1e6;
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["bundle_MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["load_MBps"] = mb / load;
  state.counters["read_MBps"] = mb / read;
  state.counters["hot_read_MBps"] = mb / hot_read;
  state.counters["predictor_load_vs_read"] = read / load;
  state.counters["predictor_load_vs_hot_read"] = hot_read / load;
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_PredictorLoad)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3);

// BM_SsdTierSave: a table whose rows live mostly on the SSD tier (issue 29): dim 64 + Adagrad
// (512-byte rows), RECSDK_CKPT_BENCH_SSD_ROWS rows (default 2M: 1 GB of rows) prefilled into the
// SSD tier in scattered key order, 10k rows on the device and 20k in host memory after 20
// batches of 4096 keys. Per iteration, with the SSD files' pages dropped from the page cache
// first (cold: the disk, not the cache): SaveTable (rows in storage order: the SSD files read
// front to back while the checkpoint is written) against a plain write() + fdatasync of the same
// bytes, then RestoreTable into a fresh tiered table (streamed: rows verified, then placed in the
// tiers 4 MiB at a time). Counters: ckpt_ssd_save_vs_write = write time / save time (goal >= 0.7),
// restore_MBps and ckpt_ssd_restore_vs_read_write = (plain read of the rows file + plain write of
// as many bytes) / restore, restore_peak_rss_MB (peak RSS rise during the restore, against
// rows_MB), ckpt_disk_MB against ssd_files_MB. With RECSDK_CKPT_BENCH_KEY_ORDER=1 also the key
// order the format used before (Snapshot + payloads: one random SSD read per row), cold:
// ckpt_ssd_key_order_vs_write, and the part of it the in-memory Snapshot took
// (key_order_snapshot_share; the rest is writing the payloads).
// Linked (format version 3, the Saver's default since ckptscale): the same table saved with its
// SSD segment files hard-linked into the checkpoint instead of copied, in the same iteration,
// the three (copy save, linked save, plain write) rotated: ckpt_ssd_linked_save_vs_write = plain
// write of the rows' bytes / linked save, ckpt_linked_new_disk_MB = bytes of the checkpoint's
// files that are not links to the SSD tier (st_nlink 1), against ckpt_disk_MB of the copying
// save; then RestoreTable of the linked checkpoint into a fresh table
// (ckpt_ssd_linked_restore_vs_read_write, the same baseline as the copy's restore). The copy
// checkpoint is also restored into a table holding one row, which verifies the rows file whole
// before loading it (two passes; an empty table loads in one): restore_one_pass_vs_two_pass =
// two-pass time / one-pass time, ckpt_ssd_two_pass_restore_vs_read_write.
int64_t StatusKb(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, field, std::strlen(field)) == 0)
      kb = std::atoll(line + std::strlen(field));
  }
  std::fclose(f);
  return kb;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) bytes += e.file_size();
  }
  return bytes;
}

// OwnBytes: bytes of the files under `dir` that have no other link (a linked checkpoint's new
// disk: its links to the SSD tier's files add no blocks).
uint64_t OwnBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.hard_link_count() == 1) bytes += e.file_size();
  }
  return bytes;
}

// LinkedSaveTable: SaveTable with the SSD segments hard-linked (SnapshotAndWriteTable with
// link_ssd, the table's hold settled as the Saver does).
void LinkedSaveTable(EmbeddingTable& table, const std::string& dir) {
  internal::Env* env = internal::Env::Default();
  if (!env->CreateDir(dir).ok()) std::abort();
  auto entry = internal::SnapshotAndWriteTable(env, dir, "", table,
                                               EmbeddingTable::SnapshotKind::kFull, nullptr,
                                               /*link_ssd=*/true);
  if (!entry.ok() || !internal::LinkedSsd(*entry)) std::abort();
  nlohmann::json m = {{"format_version", internal::kLinkedSsdFormatVersion}, {"table", *entry}};
  if (!internal::WriteJsonDocument(env, dir + "/manifest.json", m, /*atomic=*/true).ok()) {
    std::abort();
  }
  if (!table.SettleSsdHold(true).ok()) std::abort();
}

TableConfig SsdConfig(int64_t rows, const std::string& folder) {
  TableConfig c;
  c.name = "ssdbench";
  c.dim = 64;
  c.device_vocabulary_size = 10000;
  c.host_vocabulary_size = 20000;
  c.ssd_vocabulary_size = rows + 100000;
  c.ssd_data_path = {folder};
  c.initializer = Initializer::Uniform(-0.1, 0.1, 1);
  return c;
}

void BM_SsdTierSave(benchmark::State& state) {
  const char* env_rows = std::getenv("RECSDK_CKPT_BENCH_SSD_ROWS");
  const int64_t rows = env_rows != nullptr ? std::atoll(env_rows) : 2000000;
  const char* env_key = std::getenv("RECSDK_CKPT_BENCH_KEY_ORDER");
  const bool key_order = env_key != nullptr && std::string(env_key) == "1";
  const std::string dir = BenchDir();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/ssd");
  auto table =
      *EmbeddingTable::Create(SsdConfig(rows, dir + "/ssd"), SparseOptimizerConfig::Adagrad(0.1f));
  {
    std::vector<int64_t> keys(static_cast<size_t>(rows));
    const int64_t a = static_cast<int64_t>(static_cast<double>(rows) / 1.618) | 1;
    for (int64_t i = 0; i < rows; ++i) keys[i] = static_cast<int64_t>((i * a) % rows);
    if (!internal::PrefillSsd(*table, keys).ok()) std::abort();
    std::mt19937_64 rng(1);
    std::vector<int64_t> batch(4096);
    std::vector<uint32_t> ids(batch.size());
    for (int step = 0; step < 20; ++step) {
      for (auto& k : batch) k = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
      std::sort(batch.begin(), batch.end());
      batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
      ids.resize(batch.size());
      if (!table->Resolve(batch, {}, {}, LookupMode::kTrain, absl::MakeSpan(ids)).ok()) {
        std::abort();
      }
      batch.resize(4096);
    }
  }
  const uint64_t ssd_bytes = DirBytes(dir + "/ssd");
  double save = 0, write = 0, restore = 0, base_rw = 0, keyed = 0, keyed_write = 0, snapshot_s = 0;
  double linked = 0, linked_restore = 0, two_pass_restore = 0;
  int64_t peak_kb = 0;
  uint64_t bytes = 0, ckpt_bytes = 0, linked_bytes = 0;
  bytes = static_cast<uint64_t>(table->size()) * (8 + 4 * 2 * 64);
  std::vector<char> buffer(bytes, 1);
  int iteration = 0;
  for (auto _ : state) {
    // The save and the plain write take turns at going first (the disk is shared).
    double save_s = 0, write_s = 0;
    auto save_once = [&] {
      ::sync();
      internal::DropSsdCleanPages(*table);
      auto a = std::chrono::steady_clock::now();
      if (!SaveTable(*table, dir + "/ckpt").ok()) std::abort();
      save_s = Seconds(a, std::chrono::steady_clock::now());
    };
    auto write_once = [&] {
      ::sync();
      auto a = std::chrono::steady_clock::now();
      PlainWrite(dir + "/plain", buffer.data(), bytes);
      write_s = Seconds(a, std::chrono::steady_clock::now());
    };
    double linked_s = 0;
    auto linked_once = [&] {
      ::sync();
      internal::DropSsdCleanPages(*table);
      std::filesystem::remove_all(dir + "/linked");
      auto a = std::chrono::steady_clock::now();
      LinkedSaveTable(*table, dir + "/linked");
      linked_s = Seconds(a, std::chrono::steady_clock::now());
    };
    RunRotated(iteration++, save_once, linked_once, write_once);
    ckpt_bytes = DirBytes(dir + "/ckpt");
    linked_bytes = OwnBytes(dir + "/linked");
    save += save_s;
    write += write_s;
    linked += linked_s;
    if (key_order) {
      ::sync();
      internal::DropSsdCleanPages(*table);
      auto k0 = std::chrono::steady_clock::now();
      auto snap = table->Snapshot(EmbeddingTable::SnapshotKind::kFullKeepTracking);
      if (!snap.ok()) std::abort();
      snapshot_s += Seconds(k0, std::chrono::steady_clock::now());
      std::filesystem::create_directories(dir + "/keyed");
      if (!internal::WriteTablePayloads(internal::Env::Default(), dir + "/keyed", "", *snap).ok()) {
        std::abort();
      }
      auto k1 = std::chrono::steady_clock::now();
      PlainWrite(dir + "/plain", buffer.data(), bytes);
      keyed += Seconds(k0, k1);
      keyed_write += Seconds(k1, std::chrono::steady_clock::now());
      std::filesystem::remove_all(dir + "/keyed");
    }
    // Restore into a fresh tiered table, then the plain baseline: read the rows file and write as
    // many bytes.
    std::filesystem::remove_all(dir + "/ssd2");
    std::filesystem::create_directories(dir + "/ssd2");
    auto fresh = *EmbeddingTable::Create(SsdConfig(rows, dir + "/ssd2"),
                                         SparseOptimizerConfig::Adagrad(0.1f));
    const int64_t before_kb = StatusKb("VmRSS:");
    if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
      std::fputs("5", f);
      std::fclose(f);
    }
    auto r0 = std::chrono::steady_clock::now();
    if (!RestoreTable(*fresh, dir + "/ckpt").ok() || fresh->size() != table->size()) std::abort();
    ::sync();  // the SSD tier's writes on the disk, as the plain write's fdatasync
    auto r1 = std::chrono::steady_clock::now();
    peak_kb = std::max(peak_kb, StatusKb("VmHWM:") - before_kb);
    fresh.reset();
    PlainRead(dir + "/ckpt/rows.npy", buffer.data(),
              bytes - static_cast<uint64_t>(table->size()) * 8);
    PlainWrite(dir + "/plain", buffer.data(), bytes);
    auto r2 = std::chrono::steady_clock::now();
    restore += Seconds(r0, r1);
    base_rw += Seconds(r1, r2);
    // The linked checkpoint's restore (the SSD rows read from its links, record CRCs checked).
    std::filesystem::remove_all(dir + "/ssd2");
    std::filesystem::create_directories(dir + "/ssd2");
    fresh = *EmbeddingTable::Create(SsdConfig(rows, dir + "/ssd2"),
                                    SparseOptimizerConfig::Adagrad(0.1f));
    ::sync();
    auto l0 = std::chrono::steady_clock::now();
    if (!RestoreTable(*fresh, dir + "/linked").ok() || fresh->size() != table->size()) {
      std::abort();
    }
    ::sync();
    linked_restore += Seconds(l0, std::chrono::steady_clock::now());
    fresh.reset();
    // The same copy checkpoint restored into a table that holds one row: verified whole first,
    // then loaded (two passes over the rows file), against the one-pass restore above.
    std::filesystem::remove_all(dir + "/ssd2");
    std::filesystem::create_directories(dir + "/ssd2");
    fresh = *EmbeddingTable::Create(SsdConfig(rows, dir + "/ssd2"),
                                    SparseOptimizerConfig::Adagrad(0.1f));
    {
      const int64_t one = 0;
      uint32_t row = 0;
      if (!fresh->Resolve({&one, 1}, {}, {}, LookupMode::kTrain, {&row, 1}).ok()) std::abort();
    }
    ::sync();
    auto t0 = std::chrono::steady_clock::now();
    if (!RestoreTable(*fresh, dir + "/ckpt").ok() || fresh->size() != table->size()) {
      std::abort();
    }
    ::sync();
    two_pass_restore += Seconds(t0, std::chrono::steady_clock::now());
    fresh.reset();
    std::filesystem::remove_all(dir + "/ckpt");
    std::filesystem::remove_all(dir + "/plain");
    state.SetIterationTime(save_s);
  }
  const double it = static_cast<double>(state.iterations());
  const double mb = static_cast<double>(bytes) * it / 1e6;
  state.counters["rows"] = static_cast<double>(table->size());
  state.counters["rows_MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["save_MBps"] = mb / save;
  state.counters["write_MBps"] = mb / write;
  state.counters["ckpt_ssd_save_vs_write"] = write / save;
  state.counters["linked_save_s"] = linked / it;
  state.counters["ckpt_ssd_linked_save_vs_write"] = write / linked;
  state.counters["ckpt_linked_new_disk_MB"] = static_cast<double>(linked_bytes) / 1e6;
  state.counters["ckpt_ssd_linked_restore_vs_read_write"] = base_rw / linked_restore;
  state.counters["ckpt_ssd_two_pass_restore_vs_read_write"] = base_rw / two_pass_restore;
  state.counters["restore_one_pass_vs_two_pass"] = two_pass_restore / restore;
  if (key_order) {
    state.counters["ckpt_ssd_key_order_vs_write"] = keyed_write / keyed;
    state.counters["key_order_snapshot_share"] = snapshot_s / keyed;
  }
  state.counters["restore_MBps"] = mb / restore;
  state.counters["ckpt_ssd_restore_vs_read_write"] = base_rw / restore;
  state.counters["restore_peak_rss_MB"] = static_cast<double>(peak_kb) / 1024.0;
  state.counters["ckpt_disk_MB"] = static_cast<double>(ckpt_bytes) / 1e6;
  state.counters["ssd_files_MB"] = static_cast<double>(ssd_bytes) / 1e6;
  table.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_SsdTierSave)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(4);

// BM_SsdTierDelta: the incremental (delta) checkpoint of a table whose rows live mostly on the SSD
// tier (issue 29). RECSDK_CKPT_BENCH_DELTA_ROWS rows (default 4M) of dim 16 + Adagrad prefilled
// into the SSD tier, 16k device and 64k host rows; a first delta takes the prefill's rows. Per
// iteration: 20 training batches of 4096 skewed keys (Resolve + ApplyGradients; the dirty rows
// the batches push out of the host land on SSD), then the delta as the Saver writes it
// (SnapshotAndWriteTable, kDelta: storage order, CRC32C, fsync) against a plain write() +
// fdatasync of as many bytes as the delta's files, taking turns at going first. Counters:
// ckpt_ssd_delta_vs_write = plain write time / delta time (goal >= 0.7), delta_ms, delta_MB,
// and delta_fixed_ms: the delta of a table with nothing changed (what every delta
// pays whatever it holds: the search for the dirty rows, ResetTracking, the files and their
// syncs); delta_cpu_ms, write_cpu_ms, delta_fixed_cpu_ms: the same in CPU time of the process
// (steadier than wall time on a loaded machine).
void BM_SsdTierDelta(benchmark::State& state) {
  const char* env_rows = std::getenv("RECSDK_CKPT_BENCH_DELTA_ROWS");
  const int64_t rows = env_rows != nullptr ? std::atoll(env_rows) : 4000000;
  const std::string dir = BenchDir() + "_delta_ssd";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/ssd");
  TableConfig c;
  c.name = "deltabench";
  c.dim = 16;
  c.device_vocabulary_size = 16384;
  c.host_vocabulary_size = 65536;
  c.ssd_vocabulary_size = rows + 100000;
  c.ssd_data_path = {dir + "/ssd"};
  c.initializer = Initializer::Uniform(-0.1, 0.1, 1);
  auto table = *EmbeddingTable::Create(c, SparseOptimizerConfig::Adagrad(0.1f));
  {
    std::vector<int64_t> keys(static_cast<size_t>(rows));
    const int64_t a = static_cast<int64_t>(static_cast<double>(rows) / 1.618) | 1;
    for (int64_t i = 0; i < rows; ++i) keys[i] = static_cast<int64_t>((i * a) % rows);
    if (!internal::PrefillSsd(*table, keys).ok()) std::abort();
  }
  internal::Env* env = internal::Env::Default();
  auto delta_save = [&](const std::string& to) {
    std::filesystem::remove_all(to);
    if (!env->CreateDir(to).ok()) std::abort();
    auto entry =
        internal::SnapshotAndWriteTable(env, to, "", *table, EmbeddingTable::SnapshotKind::kDelta);
    if (!entry.ok()) std::abort();
  };
  delta_save(dir + "/first");  // the prefill's rows; tracking starts clean after it
  std::filesystem::remove_all(dir + "/first");
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int64_t> batch;
  std::vector<uint32_t> ids;
  std::vector<float> grads;
  int64_t step = 0;
  auto train = [&](int batches) {
    for (int b = 0; b < batches; ++b) {
      batch.resize(4096);
      for (auto& k : batch) {
        k = static_cast<int64_t>(std::pow(u(rng), 3.0) * static_cast<double>(rows));
      }
      std::sort(batch.begin(), batch.end());
      batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
      ids.resize(batch.size());
      if (!table->Resolve(batch, {}, {}, LookupMode::kTrain, absl::MakeSpan(ids)).ok()) {
        std::abort();
      }
      grads.assign(batch.size() * 16, 0.01f);
      if (!table->ApplyGradients(ids, grads, ++step).ok()) std::abort();
    }
  };
  // CPU seconds of the process beside wall time: on this shared machine (2 cores, 4-5 engineers)
  // the wall time of a 100 ms save moves 3x between runs with the load; its CPU time much less.
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  double delta = 0, write = 0, fixed = 0, delta_cpu = 0, write_cpu = 0, fixed_cpu = 0;
  uint64_t bytes = 0;
  std::vector<char> buffer;
  int iteration = 0;
  for (auto _ : state) {
    train(20);
    double delta_s = 0, write_s = 0;
    uint64_t delta_bytes = 0;
    auto delta_once = [&] {
      const double c = cpu_now();
      auto a = std::chrono::steady_clock::now();
      delta_save(dir + "/delta");
      delta_s = Seconds(a, std::chrono::steady_clock::now());
      delta_cpu += cpu_now() - c;
      delta_bytes = DirBytes(dir + "/delta");
    };
    auto write_once = [&] {
      // As many bytes as the delta's files: known after the delta when it goes second, else the
      // previous iteration's (the same training, so within a few percent).
      const uint64_t n = delta_bytes != 0 ? delta_bytes : std::max<uint64_t>(bytes, 1);
      buffer.assign(n, 1);
      ::sync();
      const double c = cpu_now();
      auto a = std::chrono::steady_clock::now();
      PlainWrite(dir + "/plain", buffer.data(), n);
      write_cpu += cpu_now() - c;
      write_s = Seconds(a, std::chrono::steady_clock::now());  // rescaled below if sizes differ
      bytes = n;
    };
    if (iteration++ % 2 == 0) {
      ::sync();
      delta_once();
      write_once();
    } else {
      write_once();
      const uint64_t written = bytes;
      ::sync();
      delta_once();
      if (written != delta_bytes && written > 0) {
        write_s *= static_cast<double>(delta_bytes) / static_cast<double>(written);
      }
    }
    bytes = delta_bytes;
    delta += delta_s;
    write += write_s;
    // The same save with nothing changed since: its fixed part.
    const double fc = cpu_now();
    auto f0 = std::chrono::steady_clock::now();
    delta_save(dir + "/empty");
    fixed += Seconds(f0, std::chrono::steady_clock::now());
    fixed_cpu += cpu_now() - fc;
    state.SetIterationTime(delta_s);
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["rows"] = static_cast<double>(table->size());
  state.counters["delta_MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["delta_ms"] = 1e3 * delta / it;
  state.counters["write_ms"] = 1e3 * write / it;
  state.counters["delta_fixed_ms"] = 1e3 * fixed / it;
  state.counters["ckpt_ssd_delta_vs_write"] = write / delta;
  state.counters["delta_cpu_ms"] = 1e3 * delta_cpu / it;
  state.counters["write_cpu_ms"] = 1e3 * write_cpu / it;
  state.counters["delta_fixed_cpu_ms"] = 1e3 * fixed_cpu / it;
  table.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_SsdTierDelta)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(4);

}  // namespace
}  // namespace recsdk

BENCHMARK_MAIN();
