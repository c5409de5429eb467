// device_tier_test.cc: the device tier of a tiered table in device memory (issue 27,
// src/device/tier_memory.h): on the separate_memory device (memory the host cannot touch) a
// tiered table trained through the key stage, with rows moving device <-> host <-> SSD, gives
// bitwise the losses and exported rows of the same training on the CPU device; its device rows
// are in the device's memory (a host read of one traps, where the CPU device's slab reads fine),
// counted against variable_memory_max_size. The rest of the session suite runs under
// separate_memory too (CTest label separate_memory), key_stage_tiers_test included.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/table/tier_lease.h"
#include "tests/session/table_test_util.h"

namespace recsdk {
namespace {

using testing::SmallTable;
using testing::ValueOrDie;

constexpr int64_t kBatch = 16;

// CpuDevice: while alive, a Session configured for "cpu" runs on the CPU device even under the
// separate_memory CTest variant (which sets RECSDK_TEST_DEVICE).
class CpuDevice {
 public:
  CpuDevice() {
    if (const char* v = std::getenv("RECSDK_TEST_DEVICE")) saved_ = v;
    unsetenv("RECSDK_TEST_DEVICE");
  }
  ~CpuDevice() {
    if (!saved_.empty()) setenv("RECSDK_TEST_DEVICE", saved_.c_str(), 1);
  }
  CpuDevice(const CpuDevice&) = delete;
  CpuDevice& operator=(const CpuDevice&) = delete;

 private:
  std::string saved_;
};

std::unique_ptr<Dataset> Batches() {
  SyntheticOptions d;
  d.num_rows = kBatch * 24;
  d.vocabulary_sizes = {300, 300};
  d.ids_per_feature = 2;
  d.num_dense = 2;
  d.seed = 9;
  d.block_rows = 64;
  return ValueOrDie(BatchRows(ValueOrDie(SyntheticDataset(d)), kBatch, {.drop_remainder = true}));
}

struct Built {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Output loss;
  Node* train = nullptr;
  Node* init = nullptr;
};

// Build: two tiered tables ("a": Adagrad by address, "b": LazyAdam) of 60 device rows, 30 host
// rows and SSD below, looked up in the key stage, and an MLP.
Built Build(const std::string& tag) {
  Built b;
  Scope s(b.graph.get());
  b.graph->set_random_seed(3);
  std::vector<SparseTable> tables;
  for (const char* name : {"a", "b"}) {
    TableConfig c = SmallTable(name, 8);
    c.device_vocabulary_size = 60;
    c.host_vocabulary_size = 30;
    c.ssd_vocabulary_size = 1024;
    const std::string dir = testing::TempDir() + "/device_tier_" + tag + "_" + name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    c.ssd_data_path = {dir};
    tables.push_back(ValueOrDie(create_table(s, c,
                                             std::string(name) == "a"
                                                 ? SparseOptimizerConfig::AdagradByAddress(0.05f)
                                                 : SparseOptimizerConfig::LazyAdam(0.01f))));
  }
  SparseLookupOptions o;
  o.modify_graph = true;
  o.combiner = Combiner::kSum;
  std::vector<Output> parts;
  for (int f = 0; f < 2; ++f) {
    Output ids = DatasetColumn(s, "C" + std::to_string(f + 1), DType::kInt64, Shape{kBatch, 2});
    parts.push_back(ValueOrDie(sparse_lookup(s, tables[f], ids, o)));
  }
  parts.push_back(DatasetColumn(s, "dense", DType::kFloat32, Shape{kBatch, 2}));
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{kBatch, 1});
  Output logits =
      layers::Mlp(s, ops::Concat(s, parts, 1), {.hidden_units = {8}, .output_units = 1});
  b.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptimizer adam(AdamOptions{.learning_rate = 0.01});
  b.train =
      ops::Group(s, {ValueOrDie(adam.Minimize(s, b.loss)), ValueOrDie(SparseMinimize(s, b.loss))});
  b.init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  ValueOrDie(ModifyGraph(b.graph.get()));
  return b;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Trained {
  std::unique_ptr<Session> session;
  std::vector<float> losses;
  std::vector<std::string> exports;
  int64_t promoted = 0, demoted = 0, ssd_rows = 0;
};

Trained Train(const std::string& device, const std::string& tag) {
  Built b = Build(tag);
  SessionConfig config;
  config.deterministic = true;
  config.device = device;
  Trained r;
  r.session = ValueOrDie(Session::Create(*b.graph, config));
  EXPECT_TRUE(r.session->Run({}, {}, {b.init}).ok());
  auto stage = ValueOrDie(StartAscPipeline(*r.session, Batches(), KeyStageOptions{}));
  FeedList feeds;
  while (ValueOrDie(stage->Next(&feeds))) {
    auto out = r.session->Run(feeds, {b.loss}, {b.train});
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    r.losses.push_back((*out)[0].scalar<float>());
  }
  stage->Stop();
  const std::string dir = testing::TempDir() + "/device_tier_export_" + tag;
  std::filesystem::create_directories(dir);
  for (const char* name : {"a", "b"}) {
    EmbeddingTable* t = ValueOrDie(LookupTable(*r.session, name));
    const std::string keys = dir + "/" + name + "_k.npy", values = dir + "/" + name + "_v.npy";
    EXPECT_TRUE(t->ExportNpy(keys, values).ok()) << name;
    r.exports.push_back(ReadFile(keys));
    r.exports.push_back(ReadFile(values));
    const internal::TierStats st = internal::GetTierStats(*t);
    r.promoted += st.promoted;
    r.demoted += st.demoted;
    r.ssd_rows += st.ssd_rows;
  }
  return r;
}

// HostRead: reads the first float of the device row of `key` in table `name` on the host.
float HostRead(Session& session, const std::string& name, int64_t key) {
  EmbeddingTable* t = ValueOrDie(LookupTable(session, name));
  const uint32_t row = t->FindRow(key);
  EXPECT_LT(row, static_cast<uint32_t>(60)) << "key " << key << " is not on the device";
  float* address = nullptr;
  EXPECT_TRUE(t->RowAddresses({&row, 1}, {&address, 1}).ok());
  return *static_cast<volatile float*>(address);
}

TEST(DeviceTierTest, SeparateMemoryTrainsAsCpuWithRowsMovingAcrossTiers) {
  Trained cpu;
  {
    CpuDevice on_cpu;
    cpu = Train("cpu", "cpu");
  }
  Trained dev = Train("separate_memory", "sep");
  ASSERT_EQ(cpu.losses.size(), 24u);
  ASSERT_EQ(dev.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    EXPECT_EQ(dev.losses[i], cpu.losses[i]) << "step " << i + 1;  // bitwise
  }
  ASSERT_EQ(dev.exports.size(), cpu.exports.size());
  for (size_t i = 0; i < cpu.exports.size(); ++i) {
    EXPECT_EQ(dev.exports[i], cpu.exports[i]) << "export " << i;  // the .npy bytes
  }
  // Rows went up and down across the three tiers. (How many depends on what the stage, running
  // ahead on its own thread, had pinned when it chose victims: timing, not the device.)
  EXPECT_GT(dev.promoted, 0);
  EXPECT_GT(dev.demoted, 0);
  EXPECT_GT(dev.ssd_rows, 0);
  // The swaps crossed the device's copy stream: swap-ins queued by the key stage without a host
  // wait (separate_memory's copy stream runs them only when their event is waited for, so the
  // bitwise match above shows each step's kernels waited for them), swap-outs waited for.
  const SessionStats dev_stats = dev.session->stats();
  EXPECT_GT(dev_stats.tier_swap_in_bytes, 0);
  EXPECT_GT(dev_stats.tier_swap_out_bytes, 0);
  EXPECT_EQ(dev_stats.tier_swap_in_host_waits, 0);
  EXPECT_GT(dev_stats.tier_swap_out_host_waits, 0);
  EXPECT_GT(dev_stats.tier_swap_compute_waits, 0);
  RecordProperty("tier_swap_in_bytes", std::to_string(dev_stats.tier_swap_in_bytes));
  RecordProperty("tier_swap_out_bytes", std::to_string(dev_stats.tier_swap_out_bytes));
  RecordProperty("tier_swap_out_host_waits", std::to_string(dev_stats.tier_swap_out_host_waits));
  RecordProperty("tier_swap_compute_waits", std::to_string(dev_stats.tier_swap_compute_waits));
  // On the CPU device the device tier is host memory: nothing crosses.
  const SessionStats cpu_stats = cpu.session->stats();
  EXPECT_EQ(cpu_stats.tier_swap_in_bytes, 0);
  EXPECT_EQ(cpu_stats.tier_swap_out_bytes, 0);
  EXPECT_EQ(cpu_stats.tier_swap_compute_waits, 0);
  // A single-key read goes through the device's copy.
  EmbeddingTable* a_cpu = ValueOrDie(LookupTable(*cpu.session, "a"));
  EmbeddingTable* a_dev = ValueOrDie(LookupTable(*dev.session, "a"));
  int64_t on_device = -1;
  for (int64_t k = 0; k < 300 && on_device < 0; ++k) {
    if (a_dev->FindRow(k) < 60u) on_device = k;
  }
  ASSERT_GE(on_device, 0);
  EXPECT_EQ(ValueOrDie(a_dev->ReadRow(on_device)), ValueOrDie(a_cpu->ReadRow(on_device)));
}

TEST(DeviceTierTest, DeviceRowsAreNotHostMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CpuDevice on_cpu;  // the CPU run of the comparison, and the control below
  Trained dev = Train("separate_memory", "trap");
  Trained cpu = Train("cpu", "trap_cpu");
  EmbeddingTable* a = ValueOrDie(LookupTable(*dev.session, "a"));
  int64_t key = -1;
  for (int64_t k = 0; k < 300 && key < 0; ++k) {
    if (a->FindRow(k) < 60u && ValueOrDie(LookupTable(*cpu.session, "a"))->FindRow(k) < 60u) {
      key = k;
    }
  }
  ASSERT_GE(key, 0);
  // The CPU device's device tier is its host slab: the host reads the row in place.
  EXPECT_EQ(HostRead(*cpu.session, "a", key), ValueOrDie(a->ReadRow(key))[0]);
  // On separate_memory the same read is a read of device memory without a copy: it traps.
  EXPECT_DEATH(HostRead(*dev.session, "a", key), "");
  // The device tier is allocated from the device's variable pool (60 rows of 8 + 8 floats and
  // 60 rows of 8 + 16 floats, at least).
  EXPECT_GE(dev.session->stats().variable_bytes_in_use, 60 * (16 + 24) * 4);
}

}  // namespace
}  // namespace recsdk
