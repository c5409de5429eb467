// ssd_store_bench: the SSD tier's row store (src/table/tiers/ssd_store.h) against the disk it
// sits on, measured in the same run by a fio-like loop of our own: sequential 1 MiB reads and
// writes and random 4 KiB reads and writes, with O_DIRECT where the file system supports it (else
// buffered, with the pages dropped first by posix_fadvise DONTNEED).
//
// Counters (rates per second, MB = 10^6 bytes):
// - BM_Disk*: the disk's own rates (MB/s, and ops/s for 4 KiB).
// - BM_StoreRandomRead/io_threads:T: random row reads from cold files (the page cache dropped
//   before each batch of 8192 rows): rows/s, MB/s, and row_read_vs_random_read = rows/s over the
//   disk's random 4 KiB reads/s at depth 64 (io_uring, O_DIRECT; 32 blocking threads where
//   io_uring is not available), measured right after each batch. Goal >= 0.5.
// - BM_StoreRandomWrite/io_threads:T: random row writes then fdatasync: rows/s, MB/s,
//   row_write_vs_random_write (over the disk's random 4 KiB writes/s at queue depth 32).
// - BM_StoreBulkWrite: rows written to freshly allocated (adjacent) slots, the shape of a
//   demotion, then fdatasync: MB/s and vs_seq_write.
// - BM_HostBytesPerSsdRow: host memory per SSD-resident row of this design, measured with the
//   real KeyIndex (key -> packed RowLocation) and an SsdStore full to capacity, plus the 8 bytes
//   of admission count and last-use time the table keeps per key. Goal <= 24. The store's fixed
//   bytes (read buffers, file table; per table, not per row) are reported apart.
// - BM_StoreOverwrite / BM_RocksDbOverwrite: 64 batches of 2048 random row overwrites (RocksDB:
//   WAL on, then a flush and the compactions it sets off): rows/s and write_amplification (bytes
//   sent to the disk, from /proc/self/io, over row bytes written).
// - BM_StoreSwap/cold:C: a tiered table's swaps (read and free 96 random live rows, allocate 96
//   slots and write them), warm and with clean pages dropped before each swap: the write part and
//   the read part in us per row, and write_amplification.
// - BM_RocksDbRandomRead (when librocksdb-dev is installed): MultiGet of random rows from a
//   RocksDB holding the same rows (direct I/O, fully compacted) against the store's Read.
// - BM_UringRandomRead (when liburing-dev is installed): io_uring reads done by the bench itself,
//   buffered and O_DIRECT, at depths 8 and 64, against the store's Read of the same rows.
//
// Files go under $RECSDK_SSD_BENCH_DIR (default /tmp/recsdk_ssd_bench, removed at the end):
// 256 MiB for the store and 256 MiB of scratch. The machine is shared and its disk is virtual:
// quote ratios and ranges, not single figures.
//
// Run: build/benchmarks/ssd_store_bench
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#ifdef RECSDK_HAVE_LIBURING
#include <liburing.h>
#endif
#ifdef RECSDK_HAVE_ROCKSDB
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/statistics.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#endif

#include "benchmark/benchmark.h"
#include "src/table/key_index.h"
#include "src/table/tiers/ssd_store.h"
#include "src/table/tiers/uring.h"

namespace recsdk::internal {
namespace {

constexpr int kRowFloats = 64;  // 256-byte rows: e.g. dim 32 with Adam's two slots, or dim 64
constexpr uint32_t kRows = 1u << 20;
constexpr size_t kBatchRows = 8192;
constexpr uint64_t kScratchBytes = uint64_t{256} << 20;
constexpr size_t kBlock = 4096;
constexpr size_t kSeqChunk = size_t{1} << 20;
// kBaselineThreads: the concurrency (queue depth) of the disk baseline the store's ratios use.
// The store keeps many reads in flight (io_uring at depth 64, or every page read started with
// POSIX_FADV_WILLNEED), so it is compared with the disk at a depth where the disk is near its
// best, not at depth 1.
constexpr int kBaselineThreads = 32;

std::string BenchDir() {
  const char* d = std::getenv("RECSDK_SSD_BENCH_DIR");
  return d != nullptr && *d ? d : "/tmp/recsdk_ssd_bench";
}

uint64_t NextRandom(uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// DirectFile: a file opened with O_DIRECT when the file system allows it.
struct DirectFile {
  int fd = -1;
  bool direct = false;
  DirectFile(const std::string& path, int flags) {
    fd = open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0644);
    direct = fd >= 0;
    if (fd < 0) fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
    if (fd < 0) std::abort();
    // Buffered fallback: make the reads come from the disk.
    if (!direct) {
      fdatasync(fd);
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
  }
  ~DirectFile() { close(fd); }
};

void* AlignedBuffer(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, kBlock, bytes) != 0) std::abort();
  std::memset(p, 0x5A, bytes);
  return p;
}

// Scratch: the fio-like loop's own file, preallocated and written once.
const std::string& ScratchPath() {
  static const std::string* path = [] {
    std::filesystem::create_directories(BenchDir());
    auto* p = new std::string(BenchDir() + "/scratch.bin");
    DirectFile f(*p, O_RDWR | O_CREAT | O_TRUNC);
    if (posix_fallocate(f.fd, 0, kScratchBytes) != 0) std::abort();
    void* buf = AlignedBuffer(kSeqChunk);
    for (uint64_t off = 0; off < kScratchBytes; off += kSeqChunk) {
      if (pwrite(f.fd, buf, kSeqChunk, static_cast<off_t>(off)) !=
          static_cast<ssize_t>(kSeqChunk)) {
        std::abort();
      }
    }
    fdatasync(f.fd);
    free(buf);
    return p;
  }();
  return *path;
}

// SequentialMBps: 1 MiB reads or writes over the scratch file.
double SequentialMBps(bool write) {
  DirectFile f(ScratchPath(), O_RDWR);
  void* buf = AlignedBuffer(kSeqChunk);
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t off = 0; off < kScratchBytes; off += kSeqChunk) {
    const ssize_t n = write ? pwrite(f.fd, buf, kSeqChunk, static_cast<off_t>(off))
                            : pread(f.fd, buf, kSeqChunk, static_cast<off_t>(off));
    if (n != static_cast<ssize_t>(kSeqChunk)) std::abort();
  }
  if (write) fdatasync(f.fd);
  const double s = Seconds(start);
  free(buf);
  return static_cast<double>(kScratchBytes) / s / 1e6;
}

// Random4kOps: random 4 KiB reads or writes over the scratch file by `threads` threads, each
// doing `per_thread` of them; operations per second.
double Random4kOps(bool write, int threads, int per_thread) {
  DirectFile f(ScratchPath(), O_RDWR);
  std::vector<std::thread> workers;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      void* buf = AlignedBuffer(kBlock);
      uint64_t rng = 0x1234567ull + 77 * t;
      for (int i = 0; i < per_thread; ++i) {
        const off_t off = static_cast<off_t>((NextRandom(rng) % (kScratchBytes / kBlock)) * kBlock);
        const ssize_t n = write ? pwrite(f.fd, buf, kBlock, off) : pread(f.fd, buf, kBlock, off);
        if (n != static_cast<ssize_t>(kBlock)) std::abort();
      }
      free(buf);
    });
  }
  for (std::thread& w : workers) w.join();
  if (write) fdatasync(f.fd);
  return static_cast<double>(threads) * per_thread / Seconds(start);
}

// Random4kReadsUring: random 4 KiB O_DIRECT reads over the scratch file through io_uring with
// `depth` in flight (what fio does with ioengine=io_uring, iodepth=depth); reads per second, or
// -1 where io_uring or O_DIRECT is not available.
double Random4kReadsUring(int reads, unsigned depth) {
  absl::StatusOr<std::unique_ptr<Uring>> ring = Uring::Create(depth);
  const int fd = open(ScratchPath().c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (!ring.ok() || fd < 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  std::vector<void*> buffers(depth);
  for (void*& b : buffers) b = AlignedBuffer(kBlock);
  uint64_t rng = 0xABCDEFull;
  const auto start = std::chrono::steady_clock::now();
  int submitted = 0, done = 0;
  while (done < reads) {
    while (submitted < reads) {
      const uint64_t off = (NextRandom(rng) % (kScratchBytes / kBlock)) * kBlock;
      if (!(*ring)->QueueRead(fd, buffers[submitted % depth], kBlock, off, 0)) break;
      ++submitted;
    }
    if ((*ring)->SubmitAndWait(1) != 0) std::abort();
    done += static_cast<int>((*ring)->Reap([](uint64_t, int32_t res) {
      if (res != static_cast<int32_t>(kBlock)) std::abort();
    }));
  }
  const double seconds = Seconds(start);
  for (void* b : buffers) free(b);
  close(fd);
  return reads / seconds;
}

void BM_DiskRandom4kUring(benchmark::State& state) {
  const unsigned depth = static_cast<unsigned>(state.range(0));
  double ops = 0;
  for (auto _ : state) ops = Random4kReadsUring(20000, depth);
  if (ops < 0) {
    state.SkipWithError("io_uring or O_DIRECT is not available here");
    return;
  }
  state.counters["ops_per_s"] = ops;
  state.counters["MB_per_s"] = ops * kBlock / 1e6;
  state.SetLabel("read 4 KiB, io_uring O_DIRECT");
}
BENCHMARK(BM_DiskRandom4kUring)
    ->Arg(8)
    ->Arg(64)
    ->ArgName("depth")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// DiskRandomReads: the baseline of row_read_vs_random_read: `reads` random 4 KiB reads at depth
// 64 through io_uring where it works (the disk near its best), else on kBaselineThreads
// threads; seconds.
double DiskRandomReadSeconds(int reads) {
  const double ops = Random4kReadsUring(reads, 64);
  if (ops > 0) return reads / ops;
  return reads / Random4kOps(false, kBaselineThreads, reads / kBaselineThreads);
}

// Disk figures, measured once per process and reused as the baselines of the ratios.
double CachedDisk(const std::string& what, int threads) {
  static auto* cache = new std::map<std::pair<std::string, int>, double>();
  auto key = std::make_pair(what, threads);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  double v = 0;
  if (what == "seq_read") v = SequentialMBps(false);
  if (what == "seq_write") v = SequentialMBps(true);
  if (what == "rand_read") v = Random4kOps(false, threads, 20000 / threads);
  if (what == "rand_write") v = Random4kOps(true, threads, 8000 / threads);
  cache->emplace(key, v);
  return v;
}

void BM_DiskSequential(benchmark::State& state) {
  const bool write = state.range(0) == 1;
  double mbps = 0;
  for (auto _ : state) mbps = SequentialMBps(write);
  state.counters["MB_per_s"] = mbps;
  state.SetLabel(write ? "write 1 MiB" : "read 1 MiB");
}
BENCHMARK(BM_DiskSequential)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_DiskRandom4k(benchmark::State& state) {
  const bool write = state.range(0) == 1;
  const int threads = static_cast<int>(state.range(1));
  double ops = 0;
  for (auto _ : state) ops = Random4kOps(write, threads, (write ? 8000 : 20000) / threads);
  state.counters["ops_per_s"] = ops;
  state.counters["MB_per_s"] = ops * kBlock / 1e6;
  state.SetLabel(write ? "write 4 KiB" : "read 4 KiB");
}
BENCHMARK(BM_DiskRandom4k)
    ->ArgsProduct({{0, 1}, {1, 8, kBaselineThreads}})
    ->ArgNames({"write", "threads"})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// StoreFor: an SsdStore of kRows rows, all written, with `io_threads` threads and `read_path`.
SsdStore& StoreFor(int io_threads, SsdReadPath read_path = SsdReadPath::kBuffered) {
  static auto* stores = new std::map<std::pair<int, int>, std::unique_ptr<SsdStore>>();
  const auto key = std::make_pair(io_threads, static_cast<int>(read_path));
  auto it = stores->find(key);
  if (it != stores->end()) return *it->second;
  const std::string dir = BenchDir() + "/store" + std::to_string(io_threads) + "_" +
                          std::to_string(static_cast<int>(read_path));
  std::filesystem::create_directories(dir);
  SsdStoreOptions o;
  o.row_floats = kRowFloats;
  o.capacity = kRows;
  o.folders = {dir};
  o.file_name = "bench";
  o.io_threads = io_threads;
  o.read_path = read_path;
  std::unique_ptr<SsdStore> store = *SsdStore::Create(o);
  std::vector<uint32_t> slots(kRows);
  if (!store->Allocate(kRows, slots.data()).ok()) std::abort();
  std::vector<float> rows(size_t{65536} * kRowFloats, 1.0f);
  for (uint32_t i = 0; i < kRows; i += 65536) {
    if (!store->Write({slots.data() + i, 65536}, rows.data()).ok()) std::abort();
  }
  if (!store->Sync().ok()) std::abort();
  return *stores->emplace(key, std::move(store)).first->second;
}

std::vector<uint32_t> RandomSlots(uint64_t& rng, size_t n) {
  std::vector<uint32_t> slots(n);
  for (uint32_t& s : slots) s = static_cast<uint32_t>(NextRandom(rng) % kRows);
  return slots;
}

void BM_StoreRandomRead(benchmark::State& state) {
  const int io_threads = static_cast<int>(state.range(0));
  const auto read_path = static_cast<SsdReadPath>(state.range(1));
  SsdStore& store = StoreFor(io_threads, read_path);
  std::vector<float> out(kBatchRows * kRowFloats);
  uint64_t rng = 99;
  double seconds = 0, disk_seconds = 0;
  uint64_t rows = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<uint32_t> slots = RandomSlots(rng, kBatchRows);
    if (!store.DropPageCache().ok()) std::abort();
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    if (!store.Read(slots, out.data()).ok()) std::abort();
    seconds += Seconds(start);
    rows += kBatchRows;
    // The baseline right after, as many random 4 KiB reads, so both see the same moment of
    // this shared disk.
    state.PauseTiming();
    disk_seconds += DiskRandomReadSeconds(static_cast<int>(kBatchRows));
    state.ResumeTiming();
  }
  const double rows_per_s = static_cast<double>(rows) / seconds;
  const double disk_ops = static_cast<double>(rows) / disk_seconds;
  state.counters["rows_per_s"] = rows_per_s;
  state.counters["MB_per_s"] = rows_per_s * kRowFloats * 4 / 1e6;
  state.counters["disk_4k_reads_per_s"] = disk_ops;
  state.counters["row_read_vs_random_read"] = rows_per_s / disk_ops;
  state.SetLabel(!store.ring_reads()                 ? "buffered"
                 : read_path == SsdReadPath::kDirect ? "io_uring + O_DIRECT"
                                                     : "io_uring, page cache first");
}
BENCHMARK(BM_StoreRandomRead)
    ->Args({0, static_cast<int>(SsdReadPath::kAuto)})
    ->Args({0, static_cast<int>(SsdReadPath::kDirect)})
    ->Args({0, static_cast<int>(SsdReadPath::kBuffered)})
    ->Args({4, static_cast<int>(SsdReadPath::kBuffered)})
    ->ArgNames({"io_threads", "path"})
    ->Iterations(6)
    ->Unit(benchmark::kMillisecond);

void BM_StoreRandomWrite(benchmark::State& state) {
  const int io_threads = static_cast<int>(state.range(0));
  SsdStore& store = StoreFor(io_threads);
  constexpr size_t kWriteRows = kBatchRows / 4;
  std::vector<float> in(kWriteRows * kRowFloats, 2.0f);
  uint64_t rng = 7;
  double seconds = 0, disk_seconds = 0;
  uint64_t rows = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<uint32_t> slots = RandomSlots(rng, kWriteRows);
    if (!store.DropPageCache().ok()) std::abort();
    state.ResumeTiming();
    const auto start = std::chrono::steady_clock::now();
    // Writing part of a page that is not cached reads it first; then the sync writes it back.
    if (!store.Write(slots, in.data()).ok() || !store.Sync().ok()) std::abort();
    seconds += Seconds(start);
    rows += slots.size();
    state.PauseTiming();
    disk_seconds +=
        static_cast<double>(kWriteRows) /
        Random4kOps(true, kBaselineThreads, static_cast<int>(kWriteRows) / kBaselineThreads);
    state.ResumeTiming();
  }
  const double rows_per_s = static_cast<double>(rows) / seconds;
  const double disk_ops = static_cast<double>(rows) / disk_seconds;
  state.counters["rows_per_s"] = rows_per_s;
  state.counters["MB_per_s"] = rows_per_s * kRowFloats * 4 / 1e6;
  state.counters["disk_4k_writes_per_s"] = disk_ops;
  state.counters["row_write_vs_random_write"] = rows_per_s / disk_ops;
}
BENCHMARK(BM_StoreRandomWrite)
    ->Arg(0)
    ->Arg(4)
    ->ArgName("io_threads")
    ->Iterations(4)
    ->Unit(benchmark::kMillisecond);

void BM_StoreBulkWrite(benchmark::State& state) {
  // Demotion's shape: 65536 rows (16 MiB) to adjacent slots, then fdatasync.
  SsdStore& store = StoreFor(4);
  const double disk_mbps = CachedDisk("seq_write", 1);
  constexpr uint32_t kBulk = 65536;
  std::vector<float> in(size_t{kBulk} * kRowFloats, 3.0f);
  std::vector<uint32_t> slots(kBulk);
  uint32_t base = 0;
  double seconds = 0;
  uint64_t rows = 0;
  for (auto _ : state) {
    for (uint32_t i = 0; i < kBulk; ++i) slots[i] = base + i;
    base = (base + kBulk) % kRows;
    const auto start = std::chrono::steady_clock::now();
    if (!store.Write(slots, in.data()).ok() || !store.Sync().ok()) std::abort();
    seconds += Seconds(start);
    rows += kBulk;
  }
  const double mbps = static_cast<double>(rows) * kRowFloats * 4 / seconds / 1e6;
  state.counters["rows_per_s"] = static_cast<double>(rows) / seconds;
  state.counters["MB_per_s"] = mbps;
  state.counters["disk_seq_write_MB_per_s"] = disk_mbps;
  state.counters["vs_seq_write"] = mbps / disk_mbps;
}
BENCHMARK(BM_StoreBulkWrite)->Iterations(4)->Unit(benchmark::kMillisecond);

#ifdef RECSDK_HAVE_LIBURING
// UringRead: the rows in `slots` of the store's files read through io_uring with `depth` reads in
// flight: buffered row-sized reads straight into `out` (the store's own file access, another
// submission path), or O_DIRECT reads of the 4 KiB block(s) holding each row, the row copied out.
// Rows are not checksummed here (the store checks them). Returns seconds, or -1 when O_DIRECT is
// not supported.
double UringRead(const SsdStore& store, const std::vector<uint32_t>& slots, float* out, bool direct,
                 unsigned depth) {
  std::vector<int> fds;
  for (const std::string& path : store.FilePaths()) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd < 0) {
      for (int f : fds) close(f);
      return -1;
    }
    if (!direct) posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    fds.push_back(fd);
  }
  struct io_uring ring;
  if (io_uring_queue_init(depth, &ring, 0) != 0) std::abort();
  const size_t row_bytes = store.row_bytes();
  const size_t record = store.record_bytes();
  auto offset_of = [&](uint32_t slot) {
    return SsdStore::kHeaderBytes + uint64_t{slot % store.rows_per_file()} * record;
  };
  // A record may straddle two blocks.
  auto span_of = [&](uint64_t offset) {
    return (offset + row_bytes + kBlock - 1) / kBlock * kBlock - offset / kBlock * kBlock;
  };
  std::vector<void*> blocks(depth);
  std::vector<unsigned> free_blocks;
  for (unsigned i = 0; i < depth; ++i) {
    blocks[i] = AlignedBuffer(2 * kBlock);
    free_blocks.push_back(i);
  }
  std::vector<unsigned> block_of(slots.size());
  const auto start = std::chrono::steady_clock::now();
  size_t submitted = 0, done = 0;
  while (done < slots.size()) {
    while (submitted < slots.size() && submitted - done < depth) {
      const uint32_t slot = slots[submitted];
      const uint64_t offset = offset_of(slot);
      struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      const int fd = fds[slot / store.rows_per_file()];
      if (direct) {
        const unsigned b = free_blocks.back();
        free_blocks.pop_back();
        block_of[submitted] = b;
        io_uring_prep_read(sqe, fd, blocks[b], static_cast<unsigned>(span_of(offset)),
                           offset / kBlock * kBlock);
      } else {
        io_uring_prep_read(sqe, fd, out + submitted * store.row_floats(),
                           static_cast<unsigned>(row_bytes), offset);
      }
      io_uring_sqe_set_data64(sqe, submitted);
      ++submitted;
    }
    io_uring_submit(&ring);
    struct io_uring_cqe* cqe;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) std::abort();
    unsigned head;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      const size_t i = io_uring_cqe_get_data64(cqe);
      const uint64_t offset = offset_of(slots[i]);
      if (cqe->res != static_cast<int>(direct ? span_of(offset) : row_bytes)) std::abort();
      if (direct) {
        std::memcpy(out + i * store.row_floats(),
                    static_cast<char*>(blocks[block_of[i]]) + offset % kBlock, row_bytes);
        free_blocks.push_back(block_of[i]);
      }
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
    done += seen;
  }
  const double seconds = Seconds(start);
  io_uring_queue_exit(&ring);
  for (void* b : blocks) free(b);
  for (int f : fds) close(f);
  return seconds;
}

// BM_UringRandomRead: io_uring reads of random rows against the store's Read of the same rows,
// both from cold pages, alternating batch by batch. Counters: rows_per_s (io_uring),
// store_rows_per_s, uring_vs_store.
void BM_UringRandomRead(benchmark::State& state) {
  const bool direct = state.range(0) == 1;
  const unsigned depth = static_cast<unsigned>(state.range(1));
  SsdStore& store = StoreFor(0, SsdReadPath::kAuto);
  std::vector<float> out(kBatchRows * kRowFloats), want(kBatchRows * kRowFloats);
  uint64_t rng = 31;
  double uring_seconds = 0, store_seconds = 0;
  uint64_t rows = 0;
  for (auto _ : state) {
    const std::vector<uint32_t> slots = RandomSlots(rng, kBatchRows);
    if (!store.DropPageCache().ok()) std::abort();
    const double s = UringRead(store, slots, out.data(), direct, depth);
    if (s < 0) {
      state.SkipWithError("O_DIRECT is not supported on this file system");
      return;
    }
    uring_seconds += s;
    if (!store.DropPageCache().ok()) std::abort();
    const auto start = std::chrono::steady_clock::now();
    if (!store.Read(slots, want.data()).ok()) std::abort();
    store_seconds += Seconds(start);
    if (out != want) std::abort();  // both read the same rows
    rows += kBatchRows;
  }
  state.counters["rows_per_s"] = static_cast<double>(rows) / uring_seconds;
  state.counters["store_rows_per_s"] = static_cast<double>(rows) / store_seconds;
  state.counters["uring_vs_store"] = store_seconds / uring_seconds;
  state.SetLabel(direct ? "io_uring O_DIRECT 4 KiB blocks" : "io_uring buffered rows");
}
BENCHMARK(BM_UringRandomRead)
    ->ArgsProduct({{0, 1}, {8, 64}})
    ->ArgNames({"direct", "depth"})
    ->Iterations(4)
    ->Unit(benchmark::kMillisecond);
#endif  // RECSDK_HAVE_LIBURING

// DeviceWriteBytes: bytes this process has caused to be written to storage so far
// (/proc/self/io write_bytes: whole pages for buffered writes, as the disk sees them).
uint64_t DeviceWriteBytes() {
  std::FILE* f = std::fopen("/proc/self/io", "r");
  if (f == nullptr) return 0;
  char line[128];
  uint64_t bytes = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "write_bytes: %lu", &bytes) == 1) break;
  }
  std::fclose(f);
  return bytes;
}

constexpr int kOverwriteBatches = 64;
constexpr size_t kOverwriteRows = 2048;

// BM_StoreOverwrite: 64 batches of 2048 random row overwrites, then fdatasync: rows/s and
// write_amplification (bytes the disk is sent / row bytes written).
void BM_StoreOverwrite(benchmark::State& state) {
  SsdStore& store = StoreFor(0);
  std::vector<float> in(kOverwriteRows * kRowFloats, 4.0f);
  uint64_t rng = 11;
  double amplification = 0, rows_per_s = 0;
  for (auto _ : state) {
    if (!store.DropPageCache().ok()) std::abort();
    const uint64_t before = DeviceWriteBytes();
    const auto start = std::chrono::steady_clock::now();
    for (int b = 0; b < kOverwriteBatches; ++b) {
      if (!store.Write(RandomSlots(rng, kOverwriteRows), in.data()).ok()) std::abort();
    }
    if (!store.Sync().ok()) std::abort();
    rows_per_s = kOverwriteBatches * kOverwriteRows / Seconds(start);
    amplification = static_cast<double>(DeviceWriteBytes() - before) /
                    (kOverwriteBatches * kOverwriteRows * kRowFloats * 4.0);
  }
  state.counters["rows_per_s"] = rows_per_s;
  state.counters["write_amplification"] = amplification;
}
BENCHMARK(BM_StoreOverwrite)->Iterations(1)->Unit(benchmark::kMillisecond);

// BM_StoreSwap/cold:C: the shape of a tiered table's swaps (table_tiers.cc): a store of 200000
// slots of 388-byte records (dim 32 with LazyAdam's two slots and the use history), 120000 live
// at random slots (all written, then 40% freed at random: free space as fragmented as after a
// long run); then 400 times: read 96 random live rows (promotions), free their slots, allocate 96
// and write rows into them (demotions). With cold:1 the files' clean cached pages are dropped
// before each swap (an SSD tier larger than the page cache, as tier_e2e_bench's cold layout).
// Counters: the swap's write part per row (Allocate + Write), its read part per row, and
// write_amplification (bytes sent to the disk by the writeback of the whole run, after a final
// Sync, over the row bytes written).
void BM_StoreSwap(benchmark::State& state) {
  const bool cold = state.range(0) != 0;
  constexpr uint32_t kCap = 200000, kLive = 120000;
  constexpr int kFloats = 97, kSwaps = 400;
  constexpr size_t kMove = 96;
  const std::string dir = BenchDir() + "/swap";
  std::filesystem::create_directories(dir);
  double write_us = 0, read_us = 0, amplification = 0;
  for (auto _ : state) {
    SsdStoreOptions o;
    o.row_floats = kFloats;
    o.capacity = kCap;
    o.folders = {dir};
    o.file_name = "swap";
    std::unique_ptr<SsdStore> store = *SsdStore::Create(o);
    // Every slot written, then a random 40% freed: free space as fragmented as a long run's.
    std::vector<uint32_t> live(kCap);
    if (!store->Allocate(kCap, live.data()).ok()) std::abort();
    std::vector<float> rows(size_t{kCap} * kFloats, 1.0f);
    if (!store->Write(live, rows.data()).ok() || !store->Sync().ok()) std::abort();
    uint64_t mix = 3;
    for (size_t j = live.size(); j-- > 1;) std::swap(live[j], live[NextRandom(mix) % (j + 1)]);
    if (!store->Free({live.data() + kLive, kCap - kLive}).ok()) std::abort();
    live.resize(kLive);
    uint64_t rng = 5;
    std::vector<uint32_t> out(kMove), in(kMove);
    std::vector<float> buf(kMove * kFloats, 2.0f);
    double w = 0, r = 0;
    const uint64_t before = DeviceWriteBytes();
    for (int i = 0; i < kSwaps; ++i) {
      if (cold) store->DropCleanPages();
      std::vector<size_t> pick(kMove);
      for (size_t j = 0; j < kMove; ++j) {
        // Distinct live entries: swap each pick to the back, then take it.
        const size_t at = NextRandom(rng) % (live.size() - j);
        std::swap(live[at], live[live.size() - 1 - j]);
        out[j] = live[live.size() - 1 - j];
      }
      auto start = std::chrono::steady_clock::now();
      if (!store->Read(out, buf.data()).ok() || !store->Free(out).ok()) std::abort();
      r += Seconds(start);
      live.resize(live.size() - kMove);
      start = std::chrono::steady_clock::now();
      if (!store->Allocate(kMove, in.data()).ok() || !store->Write(in, buf.data()).ok()) {
        std::abort();
      }
      w += Seconds(start);
      live.insert(live.end(), in.begin(), in.end());
    }
    if (!store->Sync().ok()) std::abort();
    amplification =
        static_cast<double>(DeviceWriteBytes() - before) / (double{kSwaps} * kMove * kFloats * 4.0);
    write_us = w * 1e6 / (double{kSwaps} * kMove);
    read_us = r * 1e6 / (double{kSwaps} * kMove);
    store.reset();
    std::filesystem::remove_all(dir);
  }
  state.counters["write_us_per_row"] = write_us;
  state.counters["read_us_per_row"] = read_us;
  state.counters["write_amplification"] = amplification;
}
BENCHMARK(BM_StoreSwap)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("cold")
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

#ifdef RECSDK_HAVE_ROCKSDB
// RocksDB holding the same kRows rows (key: the slot, 4 bytes big-endian; value: the row), with
// direct I/O for reads, flushes and compactions, no compression, 4 KiB blocks and an 8 MiB block
// cache (3% of the data), loaded in bulk and fully compacted: its best case for reads.
std::string RowKey(uint32_t slot) {
  const char k[4] = {static_cast<char>(slot >> 24), static_cast<char>(slot >> 16),
                     static_cast<char>(slot >> 8), static_cast<char>(slot)};
  return std::string(k, 4);
}

rocksdb::DB& RocksDb() {
  static rocksdb::DB* db = [] {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.use_direct_reads = true;
    o.use_direct_io_for_flush_and_compaction = true;
    o.compression = rocksdb::kNoCompression;
    rocksdb::BlockBasedTableOptions t;
    t.block_cache = rocksdb::NewLRUCache(8 << 20);
    t.block_size = 4096;
    o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
    const std::string dir = BenchDir() + "/rocksdb";
    std::filesystem::create_directories(dir);
    rocksdb::DB* opened = nullptr;
    if (!rocksdb::DB::Open(o, dir, &opened).ok()) std::abort();
    std::vector<float> row(kRowFloats, 1.0f);
    rocksdb::WriteOptions bulk;
    bulk.disableWAL = true;
    for (uint32_t first = 0; first < kRows; first += 65536) {
      rocksdb::WriteBatch batch;
      for (uint32_t slot = first; slot < first + 65536; ++slot) {
        batch.Put(RowKey(slot), rocksdb::Slice(reinterpret_cast<const char*>(row.data()),
                                               kRowFloats * sizeof(float)));
      }
      if (!opened->Write(bulk, &batch).ok()) std::abort();
    }
    if (!opened->Flush(rocksdb::FlushOptions()).ok()) std::abort();
    if (!opened->CompactRange(rocksdb::CompactRangeOptions(), nullptr, nullptr).ok()) std::abort();
    return opened;
  }();
  return *db;
}

// BM_RocksDbRandomRead: MultiGet of 8192 random rows against the store's Read of the same rows
// (cold pages), batch by batch. Counters: rows_per_s (RocksDB), store_rows_per_s,
// rocksdb_vs_store.
void BM_RocksDbRandomRead(benchmark::State& state) {
  SsdStore& store = StoreFor(0, SsdReadPath::kAuto);
  rocksdb::DB& db = RocksDb();
  std::vector<float> out(kBatchRows * kRowFloats);
  uint64_t rng = 77;
  double rocks_seconds = 0, store_seconds = 0;
  uint64_t rows = 0;
  for (auto _ : state) {
    const std::vector<uint32_t> slots = RandomSlots(rng, kBatchRows);
    std::vector<std::string> keys(slots.size());
    std::vector<rocksdb::Slice> key_slices(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
      keys[i] = RowKey(slots[i]);
      key_slices[i] = keys[i];
    }
    std::vector<rocksdb::PinnableSlice> values(slots.size());
    std::vector<rocksdb::Status> statuses(slots.size());
    auto start = std::chrono::steady_clock::now();
    db.MultiGet(rocksdb::ReadOptions(), db.DefaultColumnFamily(), slots.size(), key_slices.data(),
                values.data(), statuses.data());
    for (size_t i = 0; i < slots.size(); ++i) {
      if (!statuses[i].ok() || values[i].size() != kRowFloats * sizeof(float)) std::abort();
      std::memcpy(out.data() + i * kRowFloats, values[i].data(), values[i].size());
    }
    rocks_seconds += Seconds(start);
    if (!store.DropPageCache().ok()) std::abort();
    start = std::chrono::steady_clock::now();
    if (!store.Read(slots, out.data()).ok()) std::abort();
    store_seconds += Seconds(start);
    rows += slots.size();
  }
  state.counters["rows_per_s"] = static_cast<double>(rows) / rocks_seconds;
  state.counters["store_rows_per_s"] = static_cast<double>(rows) / store_seconds;
  state.counters["rocksdb_vs_store"] = store_seconds / rocks_seconds;
}
BENCHMARK(BM_RocksDbRandomRead)->Iterations(4)->Unit(benchmark::kMillisecond);

// BM_RocksDbOverwrite: BM_StoreOverwrite's workload on RocksDB (WAL on, synced at the end), then
// a flush and the compactions it triggers: rows/s and write_amplification (every byte the disk
// is sent: WAL, flush, compaction).
void BM_RocksDbOverwrite(benchmark::State& state) {
  rocksdb::DB& db = RocksDb();
  std::vector<float> row(kRowFloats, 5.0f);
  uint64_t rng = 13;
  double amplification = 0, rows_per_s = 0;
  for (auto _ : state) {
    const uint64_t before = DeviceWriteBytes();
    const auto start = std::chrono::steady_clock::now();
    for (int b = 0; b < kOverwriteBatches; ++b) {
      rocksdb::WriteBatch batch;
      for (uint32_t slot : RandomSlots(rng, kOverwriteRows)) {
        batch.Put(RowKey(slot), rocksdb::Slice(reinterpret_cast<const char*>(row.data()),
                                               kRowFloats * sizeof(float)));
      }
      if (!db.Write(rocksdb::WriteOptions(), &batch).ok()) std::abort();
    }
    if (!db.FlushWAL(/*sync=*/true).ok()) std::abort();
    rows_per_s = kOverwriteBatches * kOverwriteRows / Seconds(start);
    if (!db.Flush(rocksdb::FlushOptions()).ok()) std::abort();
    for (int i = 0; i < 600; ++i) {  // the compactions the flush set off, up to a minute
      uint64_t pending = 0, running = 0;
      db.GetIntProperty("rocksdb.compaction-pending", &pending);
      db.GetIntProperty("rocksdb.num-running-compactions", &running);
      if (pending == 0 && running == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    amplification = static_cast<double>(DeviceWriteBytes() - before) /
                    (kOverwriteBatches * kOverwriteRows * kRowFloats * 4.0);
  }
  state.counters["rows_per_s"] = rows_per_s;
  state.counters["write_amplification"] = amplification;
}
BENCHMARK(BM_RocksDbOverwrite)->Iterations(1)->Unit(benchmark::kMillisecond);
#endif  // RECSDK_HAVE_ROCKSDB

void BM_HostBytesPerSsdRow(benchmark::State& state) {
  // One table whose rows are all on SSD: the key index holds every key's packed location, the
  // store its bookkeeping; the table adds per SSD slot 1 bit of change tracking (delta
  // snapshots) and, with eviction, 8 bytes of last-access timestamp. A row's use history (8
  // bytes) is in its SSD record since stop 20, not in host memory.
  constexpr uint32_t kN = 1u << 20;
  double per_row = 0;
  for (auto _ : state) {
    KeyIndex index(kN);
    std::filesystem::create_directories(BenchDir() + "/bytes");
    SsdStoreOptions o;
    o.row_floats = 16;
    o.capacity = kN;
    o.folders = {BenchDir() + "/bytes"};
    o.file_name = "bytes";
    std::unique_ptr<SsdStore> store = *SsdStore::Create(o);
    std::vector<uint32_t> slots(kN);
    if (!store->Allocate(kN, slots.data()).ok()) std::abort();
    const TierBases bases(0, 0, kN);
    std::vector<int64_t> keys(kN);
    std::vector<uint32_t> packed(kN);
    uint64_t rng = 5;
    for (uint32_t i = 0; i < kN; ++i) {
      keys[i] = static_cast<int64_t>(NextRandom(rng));
      packed[i] = bases.Pack({Tier::kSsd, slots[i]});
    }
    index.InsertBatch(keys.data(), packed.data(), kN);
    const double index_bytes = static_cast<double>(index.MemoryBytes()) / index.size();
    // A read first, so the direct path's buffers exist and are counted (as fixed bytes).
    std::vector<float> row(16, 1.0f);
    if (!store->Write({slots[0]}, row.data()).ok()) std::abort();
    if (!store->Read({slots[0]}, row.data()).ok()) std::abort();
    const double store_bytes =
        static_cast<double>(store->HostMemoryBytes() - store->FixedHostBytes()) / kN;
    per_row = index_bytes + store_bytes + 0.125 + 8.0;
    state.counters["host_bytes_per_ssd_row_no_eviction"] = index_bytes + store_bytes + 0.125;
    state.counters["index_bytes_per_row"] = index_bytes;
    state.counters["store_bytes_per_row"] = store_bytes;
    state.counters["store_fixed_bytes"] = static_cast<double>(store->FixedHostBytes());
  }
  state.counters["host_bytes_per_ssd_row"] = per_row;
}
BENCHMARK(BM_HostBytesPerSsdRow)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace recsdk::internal

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(recsdk::internal::BenchDir(), ec);
  return 0;
}
