// scale: a DLRM-style model whose tables (rows + Adagrad slots) total a multiple of this machine's
// RAM, trained from the SSD tier (issue 29, docs/tiers.md "Tables larger than memory"). Run it
// through scripts/scale_run.sh.
//
// The model: --tables tables of --dim (Adagrad), one Zipf(--zipf) id per table per sample over
// --keys_per_table keys (derived from --ram_multiple), 13 dense features through a bottom MLP,
// DLRM's dot interaction, a 256-128 top MLP (Adagrad). Ids are generated on the fly
// (SyntheticDataset, no input file); the lookups run in the key stage (2 threads, 2 ahead).
// Tiers: the device and host tiers together hold --host_fraction of RAM (an eighth of it the
// device tier), every key has room on SSD under --data_dir. Rows are created lazily at first use;
// --prefill of each table's keys (a pseudo-random subset: key i * A mod K for i < prefill * K)
// are written to the SSD tier first in bulk (internal::PrefillSsd, the values a first use would
// give), since a table larger than memory built by training alone would take hours.
//
// Modes (--mode):
//   run (default): first the same model with its tables scaled down to the host budget, all in
//     memory (--memory_seconds), then the table at scale (--seconds); prints samples/s, RSS
//     (sampled every 0.25 s into --rss_csv), /proc/self/io bytes per step against the minimum the
//     SSD traffic implies, and ends with one line "ssd_vs_memory_at_scale=<x> ...". With
//     --checkpoint_dir: then a full and an incremental checkpoint of the big tables, each timed
//     against a sequential write of as many bytes through the Env.
//   restore: trains --steps, saves, trains --steps more; a second session restores the
//     checkpoint and trains the same --steps; prints restore_equal=1 when every loss of the
//     continuation is bitwise the never-stopped run's (exit 1 otherwise).
//   kill9: a child process trains and checkpoints every 5 steps until SIGKILL; the latest
//     checkpoint restores (the same SSD folder) and continues bitwise as a never-stopped run.
//     restore and kill9 use small tables (20k keys) unless --at_scale 1 gives them run's sizes
//     (--ram_multiple, --host_fraction; the SSD files twice: the killed or saved run's and the
//     never-stopped run's).
//   disk_full: the SSD tier on a tmpfs of --tmpfs_mib (mounted here; needs root, exit 77 =
//     skipped otherwise) filled by prefill; training grows the tier past it. Prints the error,
//     checks it names the ssd tier and the path, that the session still saves and that the last
//     checkpoint restores into a fresh session that trains on; disk_full_ok=1 (exit 1 otherwise).
// Not thread-safe; a driver, not a library.
#include <malloc.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "recsdk/recsdk.h"
#include "src/table/tier_lease.h"

namespace {

using namespace recsdk;  // NOLINT(build/namespaces): a sample
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string mode = "run";
  double ram_multiple = 0.25;   // tables' rows + Adagrad slots / MemTotal
  double host_fraction = 0.25;  // device + host tiers / MemTotal
  double prefill = 0.95;        // share of each table's keys written to SSD before training
  int64_t tables = 2;
  int64_t dim = 64;
  int64_t batch = 4096;
  double zipf = 1.05;
  double seconds = 60;         // timed training at scale
  double memory_seconds = 20;  // timed training of the in-memory model
  int64_t warmup_steps = 20;
  int64_t steps = 30;  // restore / disk_full modes
  std::string data_dir = "/work/scale-data";
  std::string rss_csv;  // default <data_dir>/rss.csv
  std::string checkpoint_dir;
  int64_t delta_steps = 50;
  double max_disk_gb = 40;  // refuse a table whose SSD files would exceed this
  int64_t ram_bytes = 0;    // 0: MemTotal (tests use a fixed figure)
  int64_t tmpfs_mib = 96;
  int64_t keep_data = 0;  // 1: leave the SSD files and checkpoints (run mode deletes them)
  int64_t at_scale = 0;   // 1: restore and kill9 use run's sizes (--ram_multiple), not 20k keys
};

// g_mounted: the tmpfs the disk_full mode mounted, unmounted on any exit.
std::string g_mounted;

[[noreturn]] void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "scale: %s: %s\n", what.c_str(), std::string(st.message()).c_str());
  if (!g_mounted.empty()) (void)umount2(g_mounted.c_str(), MNT_DETACH);
  std::exit(2);
}
template <typename T>
T Check(StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Die(what, v.status());
  return *std::move(v);
}
void Check(const Status& st, const std::string& what) {
  if (!st.ok()) Die(what, st);
}

// ProcField: the value of "<key>: <n> kB" in /proc/meminfo or /proc/self/status, in bytes.
int64_t ProcKb(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') {
      return std::atoll(line.c_str() + n + 1) * 1024;
    }
  }
  return 0;
}

struct Io {
  int64_t read = 0, write = 0;
};
// ReadIo: /proc/self/io's read_bytes / write_bytes (bytes this process had the storage read or
// write, page cache hits excluded).
Io ReadIo() {
  std::ifstream in("/proc/self/io");
  std::string key;
  int64_t v;
  Io io;
  while (in >> key >> v) {
    if (key == "read_bytes:") io.read = v;
    if (key == "write_bytes:") io.write = v;
  }
  return io;
}

// DiskIo: bytes read and written by the whole block device holding `dir` (/proc/diskstats, so
// other processes' I/O on the disk counts too), {0, 0} when not found.
Io DiskIo(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return {};
  std::ifstream in("/proc/diskstats");
  unsigned maj = 0, mnr = 0;
  std::string name;
  int64_t f[11] = {};
  while (in >> maj >> mnr >> name) {
    for (int64_t& x : f) in >> x;
    std::string rest;
    std::getline(in, rest);
    if (maj == major(st.st_dev) && mnr == minor(st.st_dev)) {
      return {f[2] * 512, f[6] * 512};  // sectors read, sectors written
    }
  }
  return {};
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  }
  return total;
}

// OwnBytes: bytes of the files under `dir` with no other link (a linked checkpoint's new disk:
// its hard links to the SSD tier's segment files add no blocks).
uint64_t OwnBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec) && it->hard_link_count(ec) == 1) total += it->file_size(ec);
  }
  return total;
}

// HeapKb: the resident kB of the main malloc heap ([heap] in /proc/self/smaps, brk), 0 if none.
int64_t HeapKb() {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool in_heap = false;
  while (std::getline(in, line)) {
    // A mapping's first line starts "lo-hi perms ..."; its fields start "Name:".
    const size_t first_space = line.find(' ');
    const bool field =
        first_space != std::string::npos && first_space > 0 && line[first_space - 1] == ':';
    if (!field && !line.empty() && std::isxdigit(static_cast<unsigned char>(line[0]))) {
      in_heap = line.size() >= 6 && line.compare(line.size() - 6, 6, "[heap]") == 0;
    } else if (in_heap && line.compare(0, 4, "Rss:") == 0) {
      return std::atoll(line.c_str() + 4);
    }
  }
  return 0;
}

// RssSampler: VmRSS / RssAnon / RssFile, the [heap] mapping's RSS, malloc's bytes in use
// (mallinfo2: arena + mmapped chunks) and the tables' row count (as the training loop last set
// it; -1 outside training) every 0.25 s into a CSV, with the phase the run is in. The heap and
// row columns tell growth from new rows (docs/tiers.md "RSS") apart from a leak.
class RssSampler {
 public:
  explicit RssSampler(const std::string& path) : out_(path), start_(Clock::now()) {
    out_ << "seconds,phase,rss_bytes,rss_anon_bytes,rss_file_bytes,heap_kb,malloc_in_use_kb,"
            "rows\n";
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        Sample();
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
    });
  }
  ~RssSampler() {
    stop_.store(true);
    thread_.join();
  }
  void SetPhase(const std::string& p) {
    std::lock_guard<std::mutex> l(mu_);
    phase_ = p;
    phase_max_ = 0;
  }
  // SetRows: the tables' row count, for the CSV's rows column.
  void SetRows(int64_t rows) { rows_.store(rows); }
  int64_t PhaseMax() {
    std::lock_guard<std::mutex> l(mu_);
    return phase_max_;
  }
  void Sample() {
    const int64_t rss = ProcKb("/proc/self/status", "VmRSS");
    const int64_t anon = ProcKb("/proc/self/status", "RssAnon");
    const int64_t file = ProcKb("/proc/self/status", "RssFile");
    const int64_t heap = HeapKb();
    const struct mallinfo2 mi = mallinfo2();
    const int64_t in_use = static_cast<int64_t>((mi.uordblks + mi.hblkhd) / 1024);
    std::lock_guard<std::mutex> l(mu_);
    phase_max_ = std::max(phase_max_, rss);
    out_ << std::chrono::duration<double>(Clock::now() - start_).count() << "," << phase_ << ","
         << rss << "," << anon << "," << file << "," << heap << "," << in_use << "," << rows_.load()
         << "\n";
    out_.flush();
  }

 private:
  std::mutex mu_;
  std::ofstream out_;
  Clock::time_point start_;
  std::string phase_ = "start";
  int64_t phase_max_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> rows_{-1};
  std::thread thread_;
};

// Sizes: the tables' key spaces and tiers.
struct Sizes {
  int64_t keys = 0;         // per table
  int64_t device_rows = 0;  // per table; 0: untiered (all in memory)
  int64_t host_rows = 0;
  bool ssd = false;
};

int64_t RowBytes(const Options& o) { return o.dim * 2 * static_cast<int64_t>(sizeof(float)); }
// SSD record: row + slots, 8 bytes of use history, 4 of checksum (ssd_store.h).
int64_t RecordBytes(const Options& o) { return RowBytes(o) + 12; }

struct Model {
  std::unique_ptr<Graph> graph;
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
  std::unique_ptr<Session> session;
  std::vector<EmbeddingTable*> tables;
};

void Build(const Options& o, const Sizes& z, const std::string& ssd_dir, Model* m) {
  if (z.ssd) fs::create_directories(ssd_dir);
  m->graph = std::make_unique<Graph>();
  Scope s(m->graph.get());
  m->graph->set_random_seed(3);
  std::vector<Output> vecs;
  Output dense = DatasetColumn(s, "dense", DType::kFloat32, Shape{o.batch, 13});
  vecs.push_back(
      layers::Mlp(s, dense, {.hidden_units = {64}, .output_units = o.dim, .name = "bottom"}));
  for (int64_t t = 0; t < o.tables; ++t) {
    TableConfig c;
    c.name = "t" + std::to_string(t);
    c.dim = static_cast<int>(o.dim);
    c.initializer = Initializer::Uniform(-0.05, 0.05, 100 + static_cast<int>(t));
    if (z.device_rows == 0) {
      c.device_vocabulary_size = z.keys;
    } else {
      c.device_vocabulary_size = z.device_rows;
      c.host_vocabulary_size = z.host_rows;
      if (z.ssd) {
        c.ssd_vocabulary_size = z.keys;
        c.ssd_data_path = {ssd_dir};
      }
    }
    SparseTable table = Check(
        create_table(s, c, SparseOptimizerConfig::Adagrad(0.05f, 0.1f, 1e-10f)), "create_table");
    Output ids = DatasetColumn(s, "C" + std::to_string(t + 1), DType::kInt64, Shape{o.batch, 1});
    SparseLookupOptions lo;
    lo.modify_graph = true;
    lo.combiner = Combiner::kSum;
    vecs.push_back(Check(sparse_lookup(s, table, ids, lo), "sparse_lookup"));
  }
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{o.batch, 1});
  const Scope is = s.NewSubScope("interaction");
  Output inter = ops::DotInteraction(
      is, ops::Reshape(is, ops::Concat(is, vecs, 1), {-1, o.tables + 1, o.dim}));
  Output logits = layers::Mlp(s, ops::Concat(s, {vecs[0], inter}, 1),
                              {.hidden_units = {256, 128}, .output_units = 1, .name = "top"});
  m->loss =
      ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdagradOptions ao;
  ao.learning_rate = 0.05;
  ao.initial_accumulator_value = 0.1;
  AdagradOptimizer adagrad(ao);
  m->train = ops::Group(s, {Check(adagrad.Minimize(s, m->loss), "dense optimizer"),
                            Check(SparseMinimize(s, m->loss), "sparse optimizer")});
  m->init = GlobalVariablesInitializer(s);
  Check(s.status(), "building the model");
  Check(ModifyGraph(m->graph.get()), "ModifyGraph");
  m->session = Check(Session::Create(*m->graph), "Session::Create");
  Check(m->session->Run({}, {}, {m->init}).status(), "init");
  for (int64_t t = 0; t < o.tables; ++t) {
    m->tables.push_back(Check(LookupTable(*m->session, "t" + std::to_string(t)), "LookupTable"));
  }
}

std::unique_ptr<KeyStage> StartStage(const Options& o, const Sizes& z, Model& m,
                                     int64_t start_batch) {
  SyntheticOptions d;
  d.num_rows = int64_t{1} << 50;  // generated on the fly, block by block: no input file
  d.vocabulary_sizes = std::vector<int64_t>(static_cast<size_t>(o.tables), z.keys);
  d.ids_per_feature = 1;
  d.zipf_exponent = o.zipf;
  d.seed = 7;
  d.block_rows = o.batch;
  auto data = Check(
      BatchRows(Check(SyntheticDataset(d), "SyntheticDataset"), o.batch, {.drop_remainder = true}),
      "BatchRows");
  KeyStageOptions ko;
  ko.key_process_thread_num = 2;
  ko.prefetch_batches = 2;
  ko.start_batch = start_batch;
  return Check(StartAscPipeline(*m.session, std::move(data), ko), "StartAscPipeline");
}

// Prefill: the first `prefill` share of each table's keys in the order key = i * A mod K (A
// coprime with K, near K / golden ratio), so the Zipf-hot keys (small ids) lie scattered over the
// SSD files rather than in their first pages. Returns the rows written.
int64_t Prefill(const Options& o, const Sizes& z, Model& m) {
  const int64_t k = z.keys;
  const int64_t n = static_cast<int64_t>(o.prefill * static_cast<double>(k));
  int64_t a = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(k) * 0.6180339887));
  while (std::gcd(a, k) != 1) ++a;
  constexpr int64_t kChunk = 1 << 17;
  std::vector<int64_t> keys;
  int64_t done = 0;
  const auto start = Clock::now();
  for (EmbeddingTable* t : m.tables) {
    for (int64_t b = 0; b < n; b += kChunk) {
      const int64_t e = std::min(n, b + kChunk);
      keys.resize(static_cast<size_t>(e - b));
      for (int64_t i = b; i < e; ++i) {
        keys[static_cast<size_t>(i - b)] =
            static_cast<int64_t>((static_cast<unsigned __int128>(i) * a) % k);
      }
      Check(internal::PrefillSsd(*t, keys), "PrefillSsd");
      done += e - b;
      if ((b / kChunk) % 64 == 0) {
        const double secs = std::chrono::duration<double>(Clock::now() - start).count();
        std::printf("prefill: %" PRId64 " rows (%.2f GB of records) in %.0f s\n", done,
                    static_cast<double>(done * RecordBytes(o)) / 1e9, secs);
        std::fflush(stdout);
      }
    }
  }
  return done;
}

internal::TierStats SumStats(const Model& m) {
  internal::TierStats s;
  for (EmbeddingTable* t : m.tables) {
    const internal::TierStats x = internal::GetTierStats(*t);
    s.device_rows += x.device_rows;
    s.host_rows += x.host_rows;
    s.ssd_rows += x.ssd_rows;
    s.promoted += x.promoted;
    s.demoted += x.demoted;
    s.device_hits += x.device_hits;
    s.device_lookups += x.device_lookups;
    s.ssd_cached_reads += x.ssd_cached_reads;
    s.ssd_disk_reads += x.ssd_disk_reads;
  }
  return s;
}

struct RunResult {
  double samples_per_s = 0;
  int64_t steps = 0;
  double seconds = 0;
  internal::TierStats delta;  // over the timed steps
  Io io;                      // over the timed steps
  Io disk;                    // the data disk's, over the timed steps (all processes)
  int64_t rss_max = 0;
};

// Train: warm-up steps, then steps until `seconds` (or `max_steps`) pass; losses appended to
// `losses` when given.
RunResult Train(KeyStage& stage, Model& m, int64_t warmup, double seconds, int64_t max_steps,
                RssSampler* rss, std::vector<float>* losses, const std::string& disk_dir = "") {
  FeedList feeds;
  std::vector<Tensor> out;
  auto step = [&]() {
    if (!Check(stage.Next(&feeds), "KeyStage::Next")) Die("data", absl::OutOfRangeError("ended"));
    if (losses != nullptr) {
      Check(m.session->Run(feeds, {m.loss}, {m.train}, &out), "step");
      losses->push_back(out[0].data<float>()[0]);
    } else {
      Check(m.session->Run(feeds, {}, {m.train}), "step");
    }
  };
  for (int64_t i = 0; i < warmup; ++i) step();
  RunResult r;
  const internal::TierStats before = SumStats(m);
  const Io io0 = ReadIo();
  const Io d0 = DiskIo(disk_dir);
  const auto start = Clock::now();
  while (r.steps < max_steps) {
    step();
    ++r.steps;
    if (rss != nullptr && r.steps % 16 == 0) {
      const internal::TierStats now = SumStats(m);
      rss->SetRows(now.device_rows + now.host_rows + now.ssd_rows);
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (r.seconds >= seconds) break;
  }
  const Io io1 = ReadIo();
  const Io d1 = DiskIo(disk_dir);
  r.disk = {d1.read - d0.read, d1.write - d0.write};
  const internal::TierStats after = SumStats(m);
  r.io = {io1.read - io0.read, io1.write - io0.write};
  r.delta.device_hits = after.device_hits - before.device_hits;
  r.delta.device_lookups = after.device_lookups - before.device_lookups;
  r.delta.ssd_cached_reads = after.ssd_cached_reads - before.ssd_cached_reads;
  r.delta.ssd_disk_reads = after.ssd_disk_reads - before.ssd_disk_reads;
  r.delta.promoted = after.promoted - before.promoted;
  r.delta.demoted = after.demoted - before.demoted;
  r.delta.ssd_rows = after.ssd_rows;
  r.delta.host_rows = after.host_rows;
  r.delta.device_rows = after.device_rows;
  if (rss != nullptr) r.rss_max = rss->PhaseMax();
  return r;
}

// Drain: quiesce the stage and consume what it read ahead, so a Saver may save.
void Drain(KeyStage& stage, Model& m) {
  stage.Quiesce();
  FeedList feeds;
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (!stage.Quiescent()) {
    if (Clock::now() > deadline) Die("Quiesce", absl::DeadlineExceededError("120 s"));
    if (!Check(stage.Next(&feeds), "KeyStage::Next")) break;
    Check(m.session->Run(feeds, {}, {m.train}), "step");
  }
}

// SequentialWrite: seconds to write `bytes` sequentially (1 MiB appends) through the Env, synced.
double SequentialWrite(const std::string& path, uint64_t bytes) {
  Env* env = Env::Default();
  std::string chunk(size_t{1} << 20, 'x');
  const auto start = Clock::now();
  auto f = Check(env->NewWritableFile(path), "NewWritableFile");
  for (uint64_t done = 0; done < bytes; done += chunk.size()) {
    Check(f->Append(
              std::string_view(chunk).substr(0, std::min<uint64_t>(chunk.size(), bytes - done))),
          "Append");
  }
  Check(f->Sync(), "Sync");
  Check(f->Close(), "Close");
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  (void)env->DeleteFile(path);
  return secs;
}

Sizes ScaleSizes(const Options& o, int64_t ram) {
  Sizes z;
  const double table_bytes = o.ram_multiple * static_cast<double>(ram);
  z.keys = std::max<int64_t>(
      4 * o.batch, static_cast<int64_t>(table_bytes / static_cast<double>(o.tables * RowBytes(o))));
  const int64_t budget_rows = static_cast<int64_t>(o.host_fraction * static_cast<double>(ram) /
                                                   static_cast<double>(o.tables * RowBytes(o)));
  // The device tier: an eighth of the budget, at least the rows of 8 batches (two consecutive
  // batches and the stage's run-ahead pinned at once).
  z.device_rows = std::max<int64_t>(8 * o.batch, budget_rows / 8);
  z.host_rows = std::max<int64_t>(o.batch, budget_rows - z.device_rows);
  z.ssd = true;
  return z;
}

// FitsOnDisk: whether `copies` copies of the SSD tier of tables of `z` fit under --max_disk_gb
// and leave 5 GB of data_dir's disk free; says why not on stderr.
bool FitsOnDisk(const Options& o, const Sizes& z, int copies, int64_t ram) {
  const int64_t ssd_bytes_needed = copies *
                                   static_cast<int64_t>(o.prefill * static_cast<double>(z.keys)) *
                                   o.tables * RecordBytes(o);
  struct statvfs vfs {};
  fs::create_directories(o.data_dir);
  if (statvfs(o.data_dir.c_str(), &vfs) != 0) Die("statvfs", absl::NotFoundError(o.data_dir));
  const double free_bytes = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize);
  if (static_cast<double>(ssd_bytes_needed) > o.max_disk_gb * 1e9 ||
      static_cast<double>(ssd_bytes_needed) > free_bytes - 5e9) {
    std::fprintf(stderr,
                 "scale: the SSD tier needs %.1f GB (%d cop%s at --ram_multiple %.2f of %.1f GiB "
                 "RAM) but --max_disk_gb is %.1f and %s has %.1f GB free (5 GB kept free); lower "
                 "--ram_multiple or --prefill\n",
                 static_cast<double>(ssd_bytes_needed) / 1e9, copies, copies == 1 ? "y" : "ies",
                 o.ram_multiple, static_cast<double>(ram) / (1 << 30), o.max_disk_gb,
                 o.data_dir.c_str(), free_bytes / 1e9);
    return false;
  }
  return true;
}

int RunMode(const Options& o, int64_t ram) {
  const Sizes big = ScaleSizes(o, ram);
  Sizes small;
  small.keys = big.device_rows + big.host_rows;  // the same memory, all of it in the table
  if (!FitsOnDisk(o, big, 1, ram)) return 2;
  const std::string ssd_dir = o.data_dir + "/ssd";
  fs::create_directories(ssd_dir);
  RssSampler rss(o.rss_csv.empty() ? o.data_dir + "/rss.csv" : o.rss_csv);
  std::printf(
      "scale: RAM %.2f GiB; tables %" PRId64 " x %" PRId64 " keys of dim %" PRId64
      " (+ Adagrad slot) = %.2f GiB of rows + slots (%.3fx RAM); device %" PRId64 " + host %" PRId64
      " rows a table = %.2f GiB (%.3f of RAM); in-memory model: %" PRId64 " keys a table\n",
      static_cast<double>(ram) / (1 << 30), o.tables, big.keys, o.dim,
      static_cast<double>(big.keys * o.tables * RowBytes(o)) / (1 << 30),
      static_cast<double>(big.keys * o.tables * RowBytes(o)) / static_cast<double>(ram),
      big.device_rows, big.host_rows,
      static_cast<double>((big.device_rows + big.host_rows) * o.tables * RowBytes(o)) / (1 << 30),
      static_cast<double>((big.device_rows + big.host_rows) * o.tables * RowBytes(o)) /
          static_cast<double>(ram),
      small.keys);
  std::fflush(stdout);

  // 1. The same model, tables scaled down to the host budget, all in memory: run before and
  // after the tables at scale, and the ratio takes their mean, so a load that changes during the
  // run (other builds on the machine) weighs on both sides.
  auto memory_run = [&](const char* when) {
    rss.SetPhase(std::string("memory_") + when);
    Model mm;
    Build(o, small, ssd_dir, &mm);
    auto stage = StartStage(o, small, mm, 0);
    RunResult r =
        Train(*stage, mm, o.warmup_steps, o.memory_seconds, int64_t{1} << 40, &rss, nullptr);
    r.samples_per_s = static_cast<double>(r.steps * o.batch) / r.seconds;
    stage->Stop();
    std::printf("memory (%s): %" PRId64 " steps in %.1f s: %.0f samples/s\n", when, r.steps,
                r.seconds, r.samples_per_s);
    std::fflush(stdout);
    return r.samples_per_s;
  };
  RunResult mem;
  const double mem_before = memory_run("before");

  // 2. At scale.
  rss.SetPhase("build");
  const int64_t rss_base = ProcKb("/proc/self/status", "VmRSS");
  Model m;
  Build(o, big, ssd_dir, &m);
  rss.SetPhase("prefill");
  const auto p0 = Clock::now();
  const int64_t prefilled = Prefill(o, big, m);
  const double prefill_s = std::chrono::duration<double>(Clock::now() - p0).count();
  const int64_t rss_prefill = rss.PhaseMax();
  std::printf("prefill: %" PRId64
              " rows, %.2f GB of SSD files in %.0f s (%.0f MB/s); RSS max %.2f "
              "GiB\n",
              prefilled, static_cast<double>(DirBytes(ssd_dir)) / 1e9, prefill_s,
              static_cast<double>(prefilled * RecordBytes(o)) / 1e6 / prefill_s,
              static_cast<double>(rss_prefill) / (1 << 30));
  std::fflush(stdout);
  rss.SetPhase("scale");
  auto stage = StartStage(o, big, m, 0);
  RunResult at =
      Train(*stage, m, o.warmup_steps, o.seconds, int64_t{1} << 40, &rss, nullptr, ssd_dir);
  at.samples_per_s = static_cast<double>(at.steps * o.batch) / at.seconds;
  const internal::TierStats end = SumStats(m);
  const uint64_t ssd_file_bytes = DirBytes(ssd_dir);
  const int64_t consumed = stage->batches_consumed();
  stage->Stop();
  const double mem_after = memory_run("after");
  mem.samples_per_s = (mem_before + mem_after) / 2;
  const int64_t rows = end.device_rows + end.host_rows + end.ssd_rows;
  const double steps = static_cast<double>(at.steps);
  const double hit = at.delta.device_lookups > 0 ? static_cast<double>(at.delta.device_hits) /
                                                       static_cast<double>(at.delta.device_lookups)
                                                 : 1.0;
  const double ssd_reads = static_cast<double>(at.delta.ssd_cached_reads + at.delta.ssd_disk_reads);
  const double ssd_share =
      at.delta.device_lookups > 0 ? ssd_reads / static_cast<double>(at.delta.device_lookups) : 0;
  // The least the SSD traffic implies: every row read from the SSD tier that the page cache did
  // not hold is one record read from the disk; in steady state as many rows go down to SSD as
  // come up from it, each one record written.
  const double min_read = static_cast<double>(at.delta.ssd_disk_reads * RecordBytes(o)) / steps;
  const double min_write = ssd_reads * static_cast<double>(RecordBytes(o)) / steps;
  const double io_read = static_cast<double>(at.io.read) / steps;
  const double io_write = static_cast<double>(at.io.write) / steps;
  const int64_t budget = (big.device_rows + big.host_rows) * o.tables * RowBytes(o);
  // Stated overhead: the process before the tables (model, data, allocator), the key index
  // (12.8 bytes an entry at load 0.85, sized for every tier's rows), per-row metadata (use
  // history, change tracking: 9 bytes a device/host row, a bit an SSD row), the eviction
  // policies' bookkeeping (80 bytes a device/host slot, eviction_policy.h), and 512 MiB for the
  // key stage's batches in flight and the allocator's caches.
  const int64_t total_rows = (big.device_rows + big.host_rows + big.keys) * o.tables;
  const int64_t overhead = rss_base + static_cast<int64_t>(static_cast<double>(total_rows) * 15.1) +
                           (big.device_rows + big.host_rows) * o.tables * (9 + 80) +
                           (int64_t{512} << 20);
  const int64_t rss_max = std::max(at.rss_max, rss_prefill);
  std::printf("scale: %" PRId64
              " steps in %.1f s: %.0f samples/s; device hit rate %.4f, SSD reads %.4f of "
              "lookups (%.3f from the page cache); rows %" PRId64 " (device %" PRId64
              ", host %" PRId64 ", ssd %" PRId64 "), SSD files %.2f GB\n",
              at.steps, at.seconds, at.samples_per_s, hit, ssd_share,
              ssd_reads > 0 ? static_cast<double>(at.delta.ssd_cached_reads) / ssd_reads : 0.0,
              rows, end.device_rows, end.host_rows, end.ssd_rows,
              static_cast<double>(ssd_file_bytes) / 1e9);
  std::printf("io per step: read %.0f B (min %.0f), written %.0f B (min %.0f)\n", io_read, min_read,
              io_write, min_write);
  std::printf(
      "rss: max %.2f GiB (prefill %.2f, training %.2f); host budget %.2f GiB + stated "
      "overhead %.2f GiB = %.2f GiB\n",
      static_cast<double>(rss_max) / (1 << 30), static_cast<double>(rss_prefill) / (1 << 30),
      static_cast<double>(at.rss_max) / (1 << 30), static_cast<double>(budget) / (1 << 30),
      static_cast<double>(overhead) / (1 << 30),
      static_cast<double>(budget + overhead) / (1 << 30));
  std::fflush(stdout);

  // 3. Checkpoints of the big tables.
  std::string ckpt_figures;
  if (!o.checkpoint_dir.empty()) {
    rss.SetPhase("checkpoint");
    fs::remove_all(o.checkpoint_dir);
    stage = StartStage(o, big, m, consumed);
    Drain(*stage, m);
    SaverOptions so;
    so.model_dir = o.checkpoint_dir;
    so.is_incremental_checkpoint = true;
    so.keep_checkpoint_max = 0;
    auto saver = Check(Saver::Create(*m.session, so), "Saver::Create");
    saver->AttachKeyStage(stage.get());
    const int64_t step0 = stage->batches_consumed();
    auto c0 = Clock::now();
    const std::string full = Check(saver->Save(step0), "Save");
    const double full_s = std::chrono::duration<double>(Clock::now() - c0).count();
    // The table's bytes (a linked checkpoint's links counted at their size) and what the
    // checkpoint added to the disk (files with no other link).
    const uint64_t full_bytes = DirBytes(full);
    const uint64_t full_own_bytes = OwnBytes(full);
    const double ssd_after_full_gb = static_cast<double>(DirBytes(ssd_dir)) / 1e9;
    const double full_raw_s = SequentialWrite(o.checkpoint_dir + "/raw", full_bytes);
    saver->AttachKeyStage(nullptr);
    stage->Stop();
    stage = StartStage(o, big, m, step0);
    Train(*stage, m, 0, 1e9, o.delta_steps, nullptr, nullptr);
    Drain(*stage, m);
    saver->AttachKeyStage(stage.get());
    c0 = Clock::now();
    const std::string delta = Check(saver->SaveDelta(stage->batches_consumed()), "SaveDelta");
    const double delta_s = std::chrono::duration<double>(Clock::now() - c0).count();
    const uint64_t delta_bytes = DirBytes(delta);
    const double delta_raw_s = SequentialWrite(o.checkpoint_dir + "/raw", delta_bytes);
    saver->AttachKeyStage(nullptr);
    std::printf(
        "checkpoint: full %.2f GB of table in %.1f s (raw sequential write of the same bytes "
        "%.1f s: %.2f), of which %.3f GB new on disk (the rest hard links to the SSD files, "
        "%.2f GB at the save); delta after %" PRId64
        " steps %.3f GB in %.2f s (raw %.2f s: "
        "%.2f); the SSD files then %.2f GB (records superseded since the save kept for it)\n",
        static_cast<double>(full_bytes) / 1e9, full_s, full_raw_s, full_raw_s / full_s,
        static_cast<double>(full_own_bytes) / 1e9, ssd_after_full_gb, o.delta_steps,
        static_cast<double>(delta_bytes) / 1e9, delta_s, delta_raw_s, delta_raw_s / delta_s,
        static_cast<double>(DirBytes(ssd_dir)) / 1e9);
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  " ckpt_full_gb=%.2f ckpt_full_new_gb=%.3f ckpt_full_vs_raw=%.2f "
                  "ckpt_delta_gb=%.3f ckpt_delta_vs_raw=%.2f",
                  static_cast<double>(full_bytes) / 1e9, static_cast<double>(full_own_bytes) / 1e9,
                  full_raw_s / full_s, static_cast<double>(delta_bytes) / 1e9,
                  delta_raw_s / delta_s);
    ckpt_figures = buf;
  }
  stage->Stop();
  std::printf(
      "ssd_vs_memory_at_scale=%.3f samples_per_s=%.0f memory_samples_per_s=%.0f "
      "memory_before=%.0f memory_after=%.0f "
      "table_gib=%.2f ram_multiple_reached=%.3f ssd_file_gb=%.2f rows=%" PRId64
      " device_hit=%.4f ssd_read_share=%.4f io_read_per_step=%.0f min_read_per_step=%.0f "
      "io_write_per_step=%.0f min_write_per_step=%.0f disk_write_per_step=%.0f rss_max_gib=%.2f "
      "rss_limit_gib=%.2f "
      "rss_bounded=%d%s\n",
      at.samples_per_s / mem.samples_per_s, at.samples_per_s, mem.samples_per_s, mem_before,
      mem_after, static_cast<double>(rows * RowBytes(o)) / (1 << 30),
      static_cast<double>(rows * RowBytes(o)) / static_cast<double>(ram),
      static_cast<double>(ssd_file_bytes) / 1e9, rows, hit, ssd_share, io_read, min_read, io_write,
      min_write, static_cast<double>(at.disk.write) / steps,
      static_cast<double>(rss_max) / (1 << 30), static_cast<double>(budget + overhead) / (1 << 30),
      rss_max <= budget + overhead ? 1 : 0, ckpt_figures.c_str());
  if (o.keep_data == 0) {
    m.session.reset();  // closes the tables' SSD files
    fs::remove_all(ssd_dir);
    if (!o.checkpoint_dir.empty()) fs::remove_all(o.checkpoint_dir);
  }
  return 0;
}

// TrainSteps: `n` steps of a fresh stage from `start`, losses appended.
void TrainSteps(const Options& o, const Sizes& z, Model& m, int64_t start, int64_t n,
                std::vector<float>* losses) {
  auto stage = StartStage(o, z, m, start);
  Train(*stage, m, 0, 1e9, n, nullptr, losses);
  stage->Stop();
}

Sizes SmallSizes(const Options& o) {
  Sizes z;
  z.keys = 20000;
  z.device_rows = 8 * o.batch;
  z.host_rows = 2000;
  z.ssd = true;
  return z;
}

// FaultSizes: the tables of restore and kill9: small, or run's with --at_scale 1.
Sizes FaultSizes(const Options& o, int64_t ram) {
  return o.at_scale != 0 ? ScaleSizes(o, ram) : SmallSizes(o);
}

int RestoreMode(const Options& o, int64_t ram) {
  const Sizes z = FaultSizes(o, ram);
  if (!FitsOnDisk(o, z, 2, ram)) return 2;
  fs::remove_all(o.data_dir);
  const std::string ckpt = o.data_dir + "/ckpt";
  std::vector<float> never_stopped, resumed;
  {
    Model a;
    Build(o, z, o.data_dir + "/ssd_a", &a);
    Prefill(o, z, a);
    TrainSteps(o, z, a, 0, o.steps, nullptr);
    SaverOptions so;
    so.model_dir = ckpt;
    auto saver = Check(Saver::Create(*a.session, so), "Saver::Create");
    Check(saver->Save(o.steps).status(), "Save");
    TrainSteps(o, z, a, o.steps, o.steps, &never_stopped);
  }
  {
    Model b;
    Build(o, z, o.data_dir + "/ssd_b", &b);
    SaverOptions so;
    so.model_dir = ckpt;
    auto saver = Check(Saver::Create(*b.session, so), "Saver::Create");
    const int64_t step = Check(saver->Restore(), "Restore");
    TrainSteps(o, z, b, step, o.steps, &resumed);
    const internal::TierStats s = SumStats(b);
    std::printf("restore: rows after the continuation: device %" PRId64 ", host %" PRId64
                ", ssd %" PRId64 "\n",
                s.device_rows, s.host_rows, s.ssd_rows);
  }
  size_t differ = 0;
  for (size_t i = 0; i < never_stopped.size(); ++i) {
    if (i >= resumed.size() || std::memcmp(&never_stopped[i], &resumed[i], sizeof(float)) != 0) {
      if (differ++ < 5) {
        std::printf("step %zu: never stopped %.9g, restored %.9g\n", i, never_stopped[i],
                    i < resumed.size() ? resumed[i] : NAN);
      }
    }
  }
  std::printf("restore: %zu continuation losses (first %.6f, last %.6f), %zu differ\n",
              never_stopped.size(), never_stopped.empty() ? 0.0 : never_stopped.front(),
              never_stopped.empty() ? 0.0 : never_stopped.back(), differ);
  const bool ok = differ == 0 && !never_stopped.empty() && resumed.size() == never_stopped.size();
  std::printf("restore_equal=%d\n", ok ? 1 : 0);
  fs::remove_all(o.data_dir);
  return ok ? 0 : 1;
}

// KillMode: a child process trains and saves a checkpoint every 5 steps until this process
// kills it with SIGKILL (after its second checkpoint, mid-step); then a fresh session in the same
// SSD folder restores the latest checkpoint and trains --steps more, and a never-stopped run
// (fresh, the same prefill) trains to the same step: the continuation's losses must be bitwise
// equal. Prints kill9_equal=1.
int KillMode(const Options& o, int64_t ram) {
  const Sizes z = FaultSizes(o, ram);
  fs::remove_all(o.data_dir);
  if (!FitsOnDisk(o, z, 2, ram)) return 2;
  const std::string ckpt = o.data_dir + "/ckpt";
  const std::string ssd = o.data_dir + "/ssd";
  const std::string prefilled = o.data_dir + "/prefilled";
  const auto started = Clock::now();
  const pid_t child = fork();
  if (child < 0) Die("fork", absl::InternalError(std::strerror(errno)));
  if (child == 0) {
    Model m;
    Build(o, z, ssd, &m);
    Prefill(o, z, m);
    std::ofstream(prefilled).put('1');
    SaverOptions so;
    so.model_dir = ckpt;
    so.keep_checkpoint_max = 0;
    auto saver = Check(Saver::Create(*m.session, so), "Saver::Create");
    for (int64_t at = 0;; at += 5) {
      auto stage = StartStage(o, z, m, at);
      Train(*stage, m, 0, 1e9, 5, nullptr, nullptr);
      stage->Stop();
      Check(saver->Save(at + 5).status(), "Save");
    }
  }
  // Wait for the prefill (at most 60 s + 10 s a GB of SSD records), then at most 120 s + as
  // long again for two checkpoints, then kill the child in the middle of its run.
  const double prefill_gb =
      o.prefill * static_cast<double>(z.keys * o.tables * RecordBytes(o)) / 1e9;
  const auto prefill_deadline =
      started + std::chrono::seconds(60 + static_cast<int64_t>(10 * prefill_gb));
  while (!fs::exists(prefilled) && Clock::now() < prefill_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto prefill_s = std::chrono::duration<double>(Clock::now() - started).count();
  std::printf("kill9: %" PRId64 " keys a table, %.2f GB of SSD records prefilled in %.0f s\n",
              z.keys, prefill_gb, prefill_s);
  std::fflush(stdout);
  const auto deadline = Clock::now() + std::chrono::seconds(120 + static_cast<int64_t>(prefill_s));
  auto count = [&] {
    int n = 0;
    std::error_code ec;
    for (auto it = fs::directory_iterator(ckpt, ec); !ec && it != fs::end(it); it.increment(ec)) {
      n += it->path().filename().string().rfind("ckpt-", 0) == 0 ? 1 : 0;
    }
    return n;
  };
  while (count() < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  kill(child, SIGKILL);
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  const bool killed = WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL;
  std::vector<float> resumed, never_stopped;
  int64_t step = -1;
  {
    Model r;
    Build(o, z, ssd, &r);  // the killed run's SSD folder: its files are replaced
    SaverOptions so;
    so.model_dir = ckpt;
    auto saver = Check(Saver::Create(*r.session, so), "Saver::Create");
    const auto restore_start = Clock::now();
    step = Check(saver->Restore(), "Restore");
    std::printf("kill9: restored step %" PRId64 " in %.1f s\n", step,
                std::chrono::duration<double>(Clock::now() - restore_start).count());
    std::fflush(stdout);
    TrainSteps(o, z, r, step, o.steps, &resumed);
  }
  // The resumed run is over: its SSD files and the checkpoints go before the never-stopped
  // run's files are written, so the disk holds two copies of the tier at most (the checkpoint's
  // and the restored table's, during the restore).
  const int checkpoints = count();
  fs::remove_all(ckpt);
  fs::remove_all(ssd);
  {
    Model n;
    Build(o, z, o.data_dir + "/ssd_n", &n);
    Prefill(o, z, n);
    for (int64_t at = 0; at < step; at += 5)
      TrainSteps(o, z, n, at, std::min<int64_t>(5, step - at), nullptr);
    TrainSteps(o, z, n, step, o.steps, &never_stopped);
  }
  size_t differ = 0;
  for (size_t i = 0; i < never_stopped.size() && i < resumed.size(); ++i) {
    differ += std::memcmp(&never_stopped[i], &resumed[i], sizeof(float)) != 0 ? 1 : 0;
  }
  const bool ok = killed && step > 0 && !resumed.empty() &&
                  resumed.size() == never_stopped.size() && differ == 0;
  std::printf("kill9: child killed by SIGKILL: %d, %d checkpoints; restored step %" PRId64
              ", %zu continuation losses, %zu differ\nkill9_equal=%d\n",
              killed ? 1 : 0, checkpoints, step, resumed.size(), differ, ok ? 1 : 0);
  fs::remove_all(o.data_dir);
  return ok ? 0 : 1;
}

int DiskFullMode(const Options& o) {
  if (geteuid() != 0) {
    std::printf("disk_full: skipped: mounting a tmpfs needs root\n");
    return 77;
  }
  const std::string mnt = o.data_dir + "/tmpfs";
  fs::remove_all(o.data_dir);
  fs::create_directories(mnt);
  const std::string size = "size=" + std::to_string(o.tmpfs_mib) + "m";
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, size.c_str()) != 0) {
    std::printf("disk_full: skipped: mount tmpfs on %s: %s\n", mnt.c_str(), std::strerror(errno));
    return 77;
  }
  g_mounted = mnt;
  struct Unmount {
    std::string dir;
    ~Unmount() {
      (void)umount2(dir.c_str(), MNT_DETACH);
      g_mounted.clear();
    }
  } unmount{mnt};
  // One SSD file of about 64 MiB fits on the tmpfs, a second does not: prefill fills most of the
  // first file, and training's demotions need the second.
  Sizes z;
  const int64_t rows_per_file = (int64_t{64} << 20) / RecordBytes(o);
  z.keys = rows_per_file * 3;
  z.device_rows = 8 * o.batch;
  z.host_rows = 2 * o.batch;
  z.ssd = true;
  Options p = o;
  p.tables = 1;  // one table's files on the tmpfs
  p.prefill = static_cast<double>(rows_per_file - 2 * o.batch) / static_cast<double>(z.keys);
  const std::string ckpt = o.data_dir + "/ckpt";
  bool ok = true;
  auto expect = [&](bool c, const char* what) {
    if (!c) {
      std::printf("disk_full: FAILED: %s\n", what);
      ok = false;
    }
  };
  {
    Model m;
    Build(p, z, mnt, &m);
    Prefill(p, z, m);
    auto stage = StartStage(p, z, m, 0);
    Train(*stage, m, 0, 1e9, 5, nullptr, nullptr);
    Drain(*stage, m);
    SaverOptions so;
    so.model_dir = ckpt;
    auto saver = Check(Saver::Create(*m.session, so), "Saver::Create");
    saver->AttachKeyStage(stage.get());
    Check(saver->Save(stage->batches_consumed()).status(), "Save");
    saver->AttachKeyStage(nullptr);
    const int64_t at = stage->batches_consumed();
    stage->Stop();
    stage = StartStage(p, z, m, at);
    FeedList feeds;
    Status err;
    for (int64_t i = 0; i < 100000 && err.ok(); ++i) {
      StatusOr<bool> more = stage->Next(&feeds);
      if (!more.ok()) {
        err = more.status();
        break;
      }
      if (!*more) break;
      err = m.session->Run(feeds, {}, {m.train}).status();
    }
    stage->Stop();
    const std::string msg(err.message());
    std::printf("disk_full: training stopped with: %s\n", msg.c_str());
    expect(!err.ok(), "training never hit the full disk");
    expect(absl::IsResourceExhausted(err), "the error is not ResourceExhausted");
    expect(msg.find("ssd") != std::string::npos, "the message does not name the ssd tier");
    expect(msg.find(mnt) != std::string::npos, "the message does not name the path");
    // State not corrupted: every row the index names is in its tier (the counts agree), and a
    // full save after the failure reads every row of every tier back, checksums included.
    for (EmbeddingTable* t : m.tables) {
      const internal::TierStats ts = internal::GetTierStats(*t);
      expect(t->size() > 0 && ts.device_rows + ts.host_rows + ts.ssd_rows == t->size(),
             "the tiers' row counts do not add up to the table's size after the failure");
    }
    {
      SaverOptions so2;
      so2.model_dir = o.data_dir + "/ckpt_after";
      auto after = Check(Saver::Create(*m.session, so2), "Saver::Create");
      const Status saved = after->Save(at + 1).status();
      if (!saved.ok())
        std::printf("disk_full: save after the failure: %s\n",
                    std::string(saved.message()).c_str());
      expect(saved.ok(), "a save after the failure fails");
      fs::remove_all(so2.model_dir);
    }
    // The last checkpoint restores into a fresh session (SSD on the real disk) that trains on.
    Model r;
    Build(p, z, o.data_dir + "/ssd_restore", &r);
    SaverOptions ro;
    ro.model_dir = ckpt;
    auto rs = Check(Saver::Create(*r.session, ro), "Saver::Create");
    StatusOr<int64_t> step = rs->Restore();
    expect(step.ok(), "the last checkpoint does not restore");
    if (step.ok()) {
      std::vector<float> losses;
      TrainSteps(p, z, r, rs->restored_dataset_batches(), 5, &losses);
      expect(losses.size() == 5 && std::isfinite(losses.back()), "the restored run does not train");
      std::printf("disk_full: restored step %" PRId64 ", trained 5 steps, loss %.6f\n", *step,
                  losses.empty() ? 0.0 : losses.back());
    }
  }
  fs::remove_all(o.data_dir + "/ckpt");
  fs::remove_all(o.data_dir + "/ssd_restore");
  std::printf("disk_full_ok=%d\n", ok ? 1 : 0);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  // Flags: "--name=value" or "--name value".
  auto set = [&](const std::string& name, const std::string& v) -> Status {
    char* end = nullptr;
    auto num = [&](double* f) -> Status {
      *f = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !std::isfinite(*f) || *f < 0) {
        return absl::InvalidArgumentError("scale: --" + name + "=" + v + " is not a number >= 0");
      }
      return absl::OkStatus();
    };
    auto integer = [&](int64_t* f) -> Status {
      double d = 0;
      Status s = num(&d);
      *f = static_cast<int64_t>(d);
      return s;
    };
    if (name == "mode")
      o.mode = v;
    else if (name == "ram_multiple")
      return num(&o.ram_multiple);
    else if (name == "host_fraction")
      return num(&o.host_fraction);
    else if (name == "prefill")
      return num(&o.prefill);
    else if (name == "zipf")
      return num(&o.zipf);
    else if (name == "seconds")
      return num(&o.seconds);
    else if (name == "memory_seconds")
      return num(&o.memory_seconds);
    else if (name == "max_disk_gb")
      return num(&o.max_disk_gb);
    else if (name == "tables")
      return integer(&o.tables);
    else if (name == "dim")
      return integer(&o.dim);
    else if (name == "batch")
      return integer(&o.batch);
    else if (name == "warmup_steps")
      return integer(&o.warmup_steps);
    else if (name == "steps")
      return integer(&o.steps);
    else if (name == "delta_steps")
      return integer(&o.delta_steps);
    else if (name == "ram_bytes")
      return integer(&o.ram_bytes);
    else if (name == "tmpfs_mib")
      return integer(&o.tmpfs_mib);
    else if (name == "keep_data")
      return integer(&o.keep_data);
    else if (name == "at_scale")
      return integer(&o.at_scale);
    else if (name == "data_dir")
      o.data_dir = v;
    else if (name == "rss_csv")
      o.rss_csv = v;
    else if (name == "checkpoint_dir")
      o.checkpoint_dir = v;
    else
      return absl::InvalidArgumentError("scale: unknown flag --" + name +
                                        " (samples/scale/main.cc lists the flags)");
    return absl::OkStatus();
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) Die("flags", absl::InvalidArgumentError("not a flag: " + a));
    a = a.substr(2);
    std::string v;
    if (const size_t eq = a.find('='); eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      Die("flags", absl::InvalidArgumentError("--" + a + " needs a value"));
    }
    Check(set(a, v), "flags");
  }
  if (o.tables < 1 || o.dim < 1 || o.batch < 1 || o.prefill > 1) {
    Die("flags", absl::InvalidArgumentError(
                     "--tables, --dim and --batch must be >= 1 and --prefill in [0, 1]"));
  }
  const int64_t ram = o.ram_bytes > 0 ? o.ram_bytes : ProcKb("/proc/meminfo", "MemTotal");
  if (o.mode == "run") return RunMode(o, ram);
  if (o.mode == "restore") return RestoreMode(o, ram);
  if (o.mode == "disk_full") return DiskFullMode(o);
  if (o.mode == "kill9") return KillMode(o, ram);
  Die("flags",
      absl::InvalidArgumentError("scale: --mode must be run, restore, disk_full or kill9"));
}
