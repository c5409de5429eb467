// table_test_util.h: helpers for the tests of tables in the graph (tests/session/*): building
// id tensors, reading rows, running a step. Header-only; single-threaded.
#ifndef RECSDK_TESTS_SESSION_TABLE_TEST_UTIL_H_
#define RECSDK_TESTS_SESSION_TABLE_TEST_UTIL_H_

#include <cstdlib>
#include <string>
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

inline std::string TempDir() {
  const char* d = std::getenv("RECSDK_TEST_TMPDIR");
  return d != nullptr ? std::string(d) : std::string("/tmp");
}

}  // namespace recsdk::testing

#endif  // RECSDK_TESTS_SESSION_TABLE_TEST_UTIL_H_
