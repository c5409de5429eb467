// checkpoint_compare_test.cc: `recsdk compare-ckpt` and CompareCheckpoints: which variable or
// table differs between two checkpoints (worst first), the exit status scripts rely on (0 same,
// 1 different, 2 error), and a clear error for a missing, misnamed or corrupt checkpoint.
#include "src/checkpoint/checkpoint_compare.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"
#include "src/common/env.h"
#include "tests/precision/dump_test_util.h"

namespace recsdk {
namespace {

using internal::CheckpointDifference;

template <typename T>
T Must(StatusOr<T> v) {
  if (!v.ok()) {
    ADD_FAILURE() << v.status();
    std::abort();
  }
  return *std::move(v);
}

// Two tables and a dense variable: out = (user(ids) + item(ids)) x w.
struct TinyModel {
  Graph graph;
  std::unique_ptr<Session> session;
  EmbeddingTable* user = nullptr;
  EmbeddingTable* item = nullptr;
};

std::unique_ptr<TinyModel> BuildTinyModel() {
  auto m = std::make_unique<TinyModel>();
  Scope s(&m->graph);
  m->graph.set_random_seed(5);
  SparseLookupOptions lo;
  lo.combiner = Combiner::kSum;
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{2, 2});
  std::vector<Output> embs;
  for (const char* name : {"user_table", "item_table"}) {
    TableConfig tc;
    tc.name = name;
    tc.dim = 4;
    tc.device_vocabulary_size = 64;
    SparseTable table = Must(create_table(s, tc, SparseOptimizerConfig::SGD(0.1f)));
    embs.push_back(Must(sparse_lookup(s, table, ids, lo)));
  }
  Variable w = Variable::Make(s, "w", Shape{4, 1});
  ops::MatMul(s.WithOpName("out"), ops::Add(s, embs[0], embs[1]), w);
  Node* init = GlobalVariablesInitializer(s);
  EXPECT_TRUE(s.ok()) << s.status();
  m->session = Must(Session::Create(m->graph, SessionConfig{}));
  EXPECT_TRUE(m->session->Run({}, {}, {init}).ok());
  m->user = Must(LookupTable(*m->session, "user_table"));
  m->item = Must(LookupTable(*m->session, "item_table"));
  return m;
}

// Train: inserts `keys` and moves their rows by one SGD update.
void Train(EmbeddingTable* table, std::vector<int64_t> keys) {
  std::vector<uint32_t> rows(keys.size());
  ASSERT_TRUE(table->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows)).ok());
  std::vector<float> grads(keys.size() * 4, 0.5f);
  ASSERT_TRUE(table->ApplyGradients(rows, grads, 0).ok());
}

// Save: a full checkpoint of the session at step 1 under `model_dir`; returns its directory.
std::string Save(Session& session, const std::string& model_dir) {
  SaverOptions o;
  o.model_dir = model_dir;
  auto saver = Must(Saver::Create(session, o));
  EXPECT_TRUE(saver->Save(1).ok());
  return model_dir + "/ckpt-1";
}

class CompareCkptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDir("compare_ckpt");
    m_ = BuildTinyModel();
    Train(m_->user, {1, 2, 3});
    Train(m_->item, {7, 8});
    a_ = Save(*m_->session, dir_ + "/a");
  }
  std::string dir_, a_;
  std::unique_ptr<TinyModel> m_;
};

TEST_F(CompareCkptTest, IdenticalCheckpointsAreTheSameAndExitZero) {
  const std::string b = Save(*m_->session, dir_ + "/b");
  auto c = internal::CompareCheckpoints(internal::Env::Default(), a_, b);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->all_same()) << c->Text();
  EXPECT_EQ(c->rows.size(), 3u) << c->Text();  // w, user_table, item_table
  auto [rc, out] = testing::RunTool("compare-ckpt " + a_ + " " + b);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("the checkpoints hold the same values"), std::string::npos) << out;
}

TEST_F(CompareCkptTest, TheTableWhoseRowsChangedIsListedFirstAndExitIsOne) {
  Train(m_->user, {2, 3, 99});  // two rows move, key 99 is new
  const std::string b = Save(*m_->session, dir_ + "/b");
  auto c = internal::CompareCheckpoints(internal::Env::Default(), a_, b);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->rows.size(), 3u) << c->Text();
  const CheckpointDifference& worst = c->rows[0];
  EXPECT_EQ(worst.kind, CheckpointDifference::Kind::kTable);
  EXPECT_EQ(worst.name, "user_table");
  EXPECT_FALSE(worst.same());
  EXPECT_LT(worst.cosine, 1.0);
  EXPECT_GT(worst.max_abs, 0.0);
  EXPECT_EQ(worst.elements, 3 * 4);  // keys 1, 2, 3 on both sides, dim 4
  EXPECT_EQ(worst.only_left, 0);
  EXPECT_EQ(worst.only_right, 1);  // key 99
  EXPECT_TRUE(c->rows[1].same()) << c->Text();
  EXPECT_TRUE(c->rows[2].same()) << c->Text();

  auto [rc, out] = testing::RunTool("compare-ckpt " + a_ + " " + b);
  EXPECT_EQ(rc, 1) << out;
  // The first row of the printed table (after LEFT, RIGHT and the header) is the changed table.
  std::vector<std::string> lines;
  for (size_t at = 0; at < out.size();) {
    const size_t end = out.find('\n', at);
    lines.push_back(out.substr(at, end - at));
    at = end == std::string::npos ? out.size() : end + 1;
  }
  ASSERT_GE(lines.size(), 4u) << out;
  EXPECT_EQ(lines[3].rfind("table", 0), 0u) << out;
  EXPECT_NE(lines[3].find("user_table"), std::string::npos) << out;
  EXPECT_NE(out.find("verdict: 1 of 3 differ"), std::string::npos) << out;
}

TEST_F(CompareCkptTest, MissingModelDirAndCorruptCheckpointsAreErrorsNamingThePath) {
  const std::string missing = dir_ + "/nowhere/ckpt-1";
  auto [rc, out] = testing::RunTool("compare-ckpt " + a_ + " " + missing);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(missing), std::string::npos) << out;
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;

  // A model directory instead of one of its checkpoints: the fix is named.
  std::tie(rc, out) = testing::RunTool("compare-ckpt " + dir_ + "/a " + a_);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("ckpt-N"), std::string::npos) << out;

  // A payload cut short fails its size/CRC check in the checkpoint reader.
  const std::string b = dir_ + "/b/ckpt-1";
  std::filesystem::create_directories(dir_ + "/b");
  std::filesystem::copy(a_, b, std::filesystem::copy_options::recursive);
  std::string victim;
  for (const auto& e : std::filesystem::recursive_directory_iterator(b)) {
    if (e.path().extension() == ".npy") victim = e.path().string();
  }
  ASSERT_FALSE(victim.empty());
  std::filesystem::resize_file(victim, std::filesystem::file_size(victim) - 4);
  std::tie(rc, out) = testing::RunTool("compare-ckpt " + a_ + " " + b);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(std::filesystem::path(victim).filename().string()), std::string::npos) << out;
  EXPECT_EQ(internal::CompareCheckpoints(internal::Env::Default(), a_, b).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace recsdk
