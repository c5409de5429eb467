// table_test_util.h: helpers for the tests of tables in the graph (tests/session/*): building
// id tensors and batches, running batches in the graph or through the key stage. Header-only;
// single-threaded.
#ifndef RECSDK_TESTS_SESSION_TABLE_TEST_UTIL_H_
#define RECSDK_TESTS_SESSION_TABLE_TEST_UTIL_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "recsdk/recsdk.h"

namespace recsdk::testing {

#define RECSDK_ASSERT_OK(expr)             \
  do {                                     \
    const ::recsdk::Status s_ = (expr);    \
    ASSERT_TRUE(s_.ok()) << s_.ToString(); \
  } while (false)

template <typename T>
T ValueOrDie(StatusOr<T> v) {
  if (!v.ok()) {
    ADD_FAILURE() << v.status().ToString();
    std::abort();
  }
  return *std::move(v);
}

inline Tensor Ids(int64_t batch, int64_t n, const std::vector<int64_t>& values) {
  return ValueOrDie(Tensor::FromValues<int64_t>(Shape{batch, n}, absl::MakeConstSpan(values)));
}

inline TableConfig SmallTable(const std::string& name, int dim, int64_t vocab = 1024) {
  TableConfig c;
  c.name = name;
  c.dim = dim;
  c.device_vocabulary_size = vocab;
  c.initializer = Initializer::Uniform(-0.5, 0.5, 7);
  return c;
}

// MakeBatch: a Batch of the given columns.
inline Batch MakeBatch(const std::vector<std::pair<std::string, Tensor>>& columns) {
  Batch b;
  for (const auto& [name, t] : columns) EXPECT_TRUE(b.AddColumn(name, t).ok()) << name;
  return b;
}

// KeyMode: where a test's lookups run: in the graph (dataset columns fed by BatchFeeds), or
// ModifyGraph moves them to the key stage.
enum class KeyMode { kInGraph, kKeyStage };
inline const char* KeyModeName(KeyMode m) {
  return m == KeyMode::kInGraph ? "in-graph" : "key stage";
}

// RunBatches: runs `init` once, then `fetches` and `targets` once per batch, in `mode`. Returns
// the fetched tensors per step; *session_out keeps the session for inspecting its tables.
inline std::vector<std::vector<Tensor>> RunBatches(KeyMode mode, Graph* graph,
                                                   std::vector<Batch> batches,
                                                   const std::vector<TensorName>& fetches,
                                                   const std::vector<TensorName>& targets,
                                                   std::unique_ptr<Session>* session_out,
                                                   const std::vector<TensorName>& init = {}) {
  std::vector<std::vector<Tensor>> steps;
  if (mode == KeyMode::kKeyStage) {
    auto moved = ModifyGraph(graph);
    EXPECT_TRUE(moved.ok()) << moved.status();
  }
  auto session = ValueOrDie(Session::Create(*graph));
  if (!init.empty()) {
    EXPECT_TRUE(session->Run({}, {}, init).ok());
  }
  if (mode == KeyMode::kInGraph) {
    for (const Batch& b : batches) {
      steps.push_back(ValueOrDie(session->Run(BatchFeeds(*graph, b), fetches, targets)));
    }
  } else {
    auto stage = ValueOrDie(
        StartAscPipeline(*session, ValueOrDie(InMemoryDatasetFromBatches(std::move(batches))),
                         {.key_process_thread_num = 2, .prefetch_batches = 2}));
    FeedList feeds;
    while (ValueOrDie(stage->Next(&feeds))) {
      steps.push_back(ValueOrDie(session->Run(feeds, fetches, targets)));
    }
  }
  *session_out = std::move(session);
  return steps;
}

// TempDir: a directory of this test process's own (under RECSDK_TEST_TMPDIR, default /tmp), so
// test binaries of several build trees (Release, sanitizer, a second checkout) can run at once
// without overwriting each other's files.
inline std::string TempDir() {
  const char* d = std::getenv("RECSDK_TEST_TMPDIR");
  const std::string dir = std::string(d != nullptr ? d : "/tmp") + "/recsdk_test_" +
                          std::to_string(static_cast<long>(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace recsdk::testing

#endif  // RECSDK_TESTS_SESSION_TABLE_TEST_UTIL_H_
