// Tests of the MPI communicator, run under mpirun at 2 and 3 ranks (tests/dist/CMakeLists.txt).
// Every rank runs every test and checks its own results; a test creates its own communicator, so
// that one left unusable by a deadline does not affect the next. Every wait has a deadline (and
// CTest a TIMEOUT), so a bug fails the test instead of hanging it.
#include "src/dist/mpi/mpi_communicator.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/dist/communicator.h"
#include "src/dist/create_communicator.h"
#include "src/dist/launch_env.h"
#include "tests/dist/mpi_test_main.h"  // main(): the MPI tests' entry point

namespace recsdk::dist {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Generous: the ranks share 2 cores with each other and with whatever else CI runs.
Deadline Generous() { return DeadlineAfter(std::chrono::seconds(30)); }

std::string Message(const absl::Status& s) { return std::string(s.message()); }

std::unique_ptr<Communicator> Create() {
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(Generous());
  if (!comm.ok()) {
    ADD_FAILURE() << comm.status();
    return nullptr;
  }
  return std::move(*comm);
}

class MpiCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    comm_ = Create();
    ASSERT_NE(comm_, nullptr);
    ASSERT_EQ(comm_->name(), "mpi");
    ASSERT_GE(comm_->size(), 2) << "run this test under mpirun -np 2 or more";
    rank_ = comm_->rank();
    size_ = comm_->size();
  }

  std::unique_ptr<Communicator> comm_;
  int rank_ = 0;
  int size_ = 0;
};

TEST_F(MpiCommunicatorTest, KnowsItsPlaceAsTheLauncherSays) {
  const absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, "Open MPI");
  EXPECT_EQ(rank_, env->rank);
  EXPECT_EQ(size_, env->size);
}

TEST_F(MpiCommunicatorTest, AllReduceSumsAndAveragesFloats) {
  // Small integers and halves: every sum is exact in float32, whatever order MPI adds in.
  std::vector<float> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(rank_ * 10) + 0.5f * i;
  ASSERT_TRUE(comm_->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Generous(), {1, "s"}).ok());
  const float rank_sum = 10.0f * size_ * (size_ - 1) / 2;
  for (size_t i = 0; i < data.size(); ++i) {
    ASSERT_EQ(data[i], rank_sum + size_ * 0.5f * i) << "element " << i << " on rank " << rank_;
  }
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(rank_ * 10) + 0.5f * i;
  ASSERT_TRUE(comm_->AllReduce(absl::MakeSpan(data), ReduceOp::kMean, Generous()).ok());
  for (size_t i = 0; i < data.size(); ++i) {
    ASSERT_EQ(data[i], (rank_sum + size_ * 0.5f * i) / static_cast<float>(size_))
        << "element " << i << " on rank " << rank_;
  }
}

TEST_F(MpiCommunicatorTest, AllReduceOfBfloat16RoundsTheFloatSumOnce) {
  // 1 + 2^-7 on every rank, exact in bfloat16 (7 bits of mantissa). Their sum over 3 ranks,
  // 3 + 3 * 2^-7, needs 8 bits: the result is the float32 sum rounded once to bfloat16.
  std::vector<bfloat16> data(5, bfloat16::FromFloat(1.0f + 1.0f / 128));
  data[1] = bfloat16::FromFloat(static_cast<float>(rank_));
  ASSERT_TRUE(comm_->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Generous()).ok());
  const float sum = size_ * (1.0f + 1.0f / 128);
  EXPECT_EQ(data[0], bfloat16::FromFloat(sum)) << data[0].ToFloat();
  EXPECT_EQ(data[1].ToFloat(), static_cast<float>(size_ * (size_ - 1) / 2));
  ASSERT_TRUE(comm_->AllReduce(absl::MakeSpan(data), ReduceOp::kMean, Generous()).ok());
  EXPECT_EQ(data[0], bfloat16::FromFloat(bfloat16::FromFloat(sum).ToFloat() * size_ / size_));
}

TEST_F(MpiCommunicatorTest, BroadcastCopiesTheRootsBytesFromEveryRoot) {
  for (int root = 0; root < size_; ++root) {
    std::vector<int64_t> data(100, -1);
    if (rank_ == root) std::iota(data.begin(), data.end(), root * 1000);
    ASSERT_TRUE(comm_->Broadcast(absl::MakeSpan(data), root, Generous()).ok());
    for (size_t i = 0; i < data.size(); ++i) {
      ASSERT_EQ(data[i], root * 1000 + static_cast<int64_t>(i)) << "rank " << rank_;
    }
  }
}

TEST_F(MpiCommunicatorTest, AllGatherPutsRankRsBlockAtR) {
  const std::vector<int32_t> send = {rank_ * 100, rank_ * 100 + 1, rank_ * 100 + 2};
  std::vector<int32_t> recv(3 * size_, -1);
  ASSERT_TRUE(comm_->AllGather(absl::MakeConstSpan(send), absl::MakeSpan(recv), Generous()).ok());
  for (int r = 0; r < size_; ++r) {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(recv[3 * r + k], r * 100 + k) << "rank " << rank_;
  }
}

TEST_F(MpiCommunicatorTest, AllGatherVWithUnevenCountsZerosAndDisplacements) {
  // Rank r sends r + 2 elements, except rank 1, which sends none; blocks go in reverse rank
  // order with a gap of one element after each, which must stay untouched.
  auto count_of = [](int r) { return r == 1 ? 0 : r + 2; };
  std::vector<int64_t> counts(size_);
  std::vector<int64_t> displs(size_);
  int64_t offset = 0;
  for (int r = size_ - 1; r >= 0; --r) {
    counts[r] = count_of(r);
    displs[r] = offset;
    offset += counts[r] + 1;
  }
  std::vector<uint16_t> send(count_of(rank_));
  for (size_t k = 0; k < send.size(); ++k) send[k] = static_cast<uint16_t>(rank_ * 100 + k);
  std::vector<uint16_t> recv(offset, 0xFFFF);
  ASSERT_TRUE(comm_
                  ->AllGatherV(absl::MakeConstSpan(send), absl::MakeSpan(recv),
                               BlockLayout{counts, displs}, Generous())
                  .ok());
  std::vector<uint16_t> expected(offset, 0xFFFF);
  for (int r = 0; r < size_; ++r) {
    for (int64_t k = 0; k < counts[r]; ++k) expected[displs[r] + k] = r * 100 + k;
  }
  EXPECT_EQ(recv, expected) << "rank " << rank_;
}

TEST_F(MpiCommunicatorTest, AllToAllSendsBlockJToRankJ) {
  std::vector<int32_t> send(2 * size_);
  for (int j = 0; j < size_; ++j) {
    send[2 * j] = rank_ * 1000 + j * 10;
    send[2 * j + 1] = rank_ * 1000 + j * 10 + 1;
  }
  std::vector<int32_t> recv(2 * size_, -1);
  ASSERT_TRUE(comm_->AllToAll(absl::MakeConstSpan(send), absl::MakeSpan(recv), Generous()).ok());
  for (int i = 0; i < size_; ++i) {
    EXPECT_EQ(recv[2 * i], i * 1000 + rank_ * 10) << "rank " << rank_;
    EXPECT_EQ(recv[2 * i + 1], i * 1000 + rank_ * 10 + 1) << "rank " << rank_;
  }
}

TEST_F(MpiCommunicatorTest, AllToAllVWithUnevenCountsIncludingZeros) {
  // Rank i sends (i + 2 j) % 3 elements to rank j: zeros on and off the diagonal.
  auto pair_count = [](int from, int to) -> int64_t { return (from + 2 * to) % 3; };
  std::vector<int64_t> send_counts(size_);
  std::vector<int64_t> recv_counts(size_);
  std::vector<int64_t> send;
  for (int j = 0; j < size_; ++j) {
    send_counts[j] = pair_count(rank_, j);
    recv_counts[j] = pair_count(j, rank_);
    for (int64_t k = 0; k < send_counts[j]; ++k) send.push_back(rank_ * 1000 + j * 10 + k);
  }
  const int64_t recv_total = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  std::vector<int64_t> recv(recv_total, -1);
  ASSERT_TRUE(comm_
                  ->AllToAllV(absl::MakeConstSpan(send), BlockLayout{send_counts, {}},
                              absl::MakeSpan(recv), BlockLayout{recv_counts, {}}, Generous(),
                              {9, "keys"})
                  .ok());
  std::vector<int64_t> expected;
  for (int i = 0; i < size_; ++i) {
    for (int64_t k = 0; k < recv_counts[i]; ++k) expected.push_back(i * 1000 + rank_ * 10 + k);
  }
  EXPECT_EQ(recv, expected) << "rank " << rank_;
}

TEST_F(MpiCommunicatorTest, ExchangeVLearnsTheCountsAndMovesTheBlocksInOneCall) {
  // Rank i sends (i + 2 j) % 3 elements to rank j, as above; the receivers learn the counts.
  auto pair_count = [](int from, int to) -> int64_t { return (from + 2 * to) % 3; };
  std::vector<int64_t> send_counts(size_);
  std::vector<int64_t> send;
  for (int j = 0; j < size_; ++j) {
    send_counts[j] = pair_count(rank_, j);
    for (int64_t k = 0; k < send_counts[j]; ++k) send.push_back(rank_ * 1000 + j * 10 + k);
  }
  std::vector<int64_t> recv, recv_counts;
  ASSERT_TRUE(comm_
                  ->ExchangeV(absl::MakeConstSpan(send), send_counts, &recv, &recv_counts,
                              Generous(), {9, "keys"})
                  .ok());
  std::vector<int64_t> expected, expected_counts;
  for (int i = 0; i < size_; ++i) {
    expected_counts.push_back(pair_count(i, rank_));
    for (int64_t k = 0; k < pair_count(i, rank_); ++k)
      expected.push_back(i * 1000 + rank_ * 10 + k);
  }
  EXPECT_EQ(recv_counts, expected_counts) << "rank " << rank_;
  EXPECT_EQ(recv, expected) << "rank " << rank_;
  EXPECT_EQ(comm_->calls_issued(), 1u) << "one call, one sequence number";
  // A rank whose counts do not fill its buffer refuses the call and tells the others, which fail
  // at once; then a call against another collective is named as out of order. Both leave the
  // communicator usable.
  std::vector<int64_t> bad_counts = send_counts;
  if (rank_ == 1) bad_counts[0] += 1;
  absl::Status s = comm_->ExchangeV(absl::MakeConstSpan(send), bad_counts, &recv, &recv_counts,
                                    Generous(), {10, "keys"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Message(s),
              HasSubstr(rank_ == 1 ? "send_counts add up to" : "rank 1 refused its own arguments"));
  std::vector<float> data(2, 1.0f);
  if (rank_ == 0) {
    s = comm_->ExchangeV(absl::MakeConstSpan(send), send_counts, &recv, &recv_counts, Generous(),
                         {11, "keys"});
  } else {
    s = comm_->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Generous(), {11, "keys"});
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(Message(s), HasSubstr("collectives out of order"));
  ASSERT_TRUE(comm_->Barrier(Generous()).ok());
}

TEST_F(MpiCommunicatorTest, BarrierKeepsEveryRankInStep) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(comm_->Barrier(Generous(), {i, "barrier"}).ok());
  // Every rank issued the same calls: the sequence numbers agree, which the next barrier checks.
  EXPECT_EQ(comm_->calls_issued(), 5u);
  ASSERT_TRUE(comm_->Barrier(Generous()).ok());
}

TEST_F(MpiCommunicatorTest, CollectivesInDifferentOrdersAreNamedOnEveryRank) {
  std::vector<float> data(4, 1.0f);
  absl::Status s;
  if (rank_ == 0) {
    s = comm_->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Generous(), {3, "dense_grads"});
  } else {
    s = comm_->Broadcast(absl::MakeSpan(data), 0, Generous(), {3, "init"});
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  if (rank_ == 0) {
    EXPECT_THAT(Message(s), HasSubstr("rank 0 is in AllReduce #0 (step 3, \"dense_grads\") but "
                                      "rank 1 is in Broadcast #0 (step 3, \"init\")"));
  } else {
    EXPECT_THAT(Message(s),
                HasSubstr("is in Broadcast #0 (step 3, \"init\") but rank 0 is in AllReduce #0 "
                          "(step 3, \"dense_grads\")"));
  }
  EXPECT_EQ(data, std::vector<float>(4, 1.0f)) << "no data moved";
  // No rank moved data: the communicator is still usable, and in step.
  ASSERT_TRUE(comm_->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Generous()).ok());
  EXPECT_EQ(data[0], static_cast<float>(size_));
}

TEST_F(MpiCommunicatorTest, CountsThatDifferAcrossRanksAreInvalidArgumentOnEveryRank) {
  std::vector<float> data(rank_ == 1 ? 3 : 4, 1.0f);
  const absl::Status s = comm_->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Generous());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Message(s), HasSubstr(rank_ == 1 ? "rank 0 passes data.size() 4 but rank 1 passes 3"
                                               : "rank 1 passes data.size() 3 but rank " +
                                                     std::to_string(rank_) + " passes 4"));
  ASSERT_TRUE(comm_->Barrier(Generous()).ok());
}

TEST_F(MpiCommunicatorTest, ARankThatRefusesItsArgumentsFailsTheOthersAtOnce) {
  // Rank 1's root is out of range: its own check refuses the call, and it tells the others,
  // which fail too (well before their deadline) instead of waiting for it.
  std::vector<uint8_t> data(8, 1);
  const int root = rank_ == 1 ? size_ + 5 : 0;
  const auto start = DeadlineClock::now();
  const absl::Status s =
      comm_->Broadcast(absl::MakeSpan(data), root, DeadlineAfter(std::chrono::seconds(60)));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  if (rank_ == 1) {
    EXPECT_THAT(Message(s), HasSubstr("root " + std::to_string(size_ + 5) + " is not a rank"));
  } else {
    EXPECT_THAT(Message(s), HasSubstr("rank 1 refused its own arguments to this call"));
  }
  EXPECT_LT(SecondsSince(start), 60.0);
  ASSERT_TRUE(comm_->Barrier(Generous()).ok());
}

TEST_F(MpiCommunicatorTest, OverlappingReceiveBlocksAreRefused) {
  std::vector<int64_t> counts(size_, 1);
  std::vector<int64_t> displs(size_, 0);  // every block at element 0
  const std::vector<int32_t> send = {rank_};
  std::vector<int32_t> recv(size_, -1);
  const absl::Status s = comm_->AllGatherV(absl::MakeConstSpan(send), absl::MakeSpan(recv),
                                           BlockLayout{counts, displs}, Generous());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(Message(s), HasSubstr("the blocks of ranks 0 and 1 in `recv` overlap"));
  EXPECT_EQ(recv, std::vector<int32_t>(size_, -1));
}

TEST_F(MpiCommunicatorTest, AllToAllVCountsThatDisagreeAreNamedByThePair) {
  // Rank 0 sends 1 element to rank 1, which expects 2 from it; everything else is 1.
  std::vector<int64_t> send_counts(size_, 1);
  std::vector<int64_t> recv_counts(size_, 1);
  if (rank_ == 1) recv_counts[0] = 2;
  std::vector<int32_t> send(size_, rank_);
  std::vector<int32_t> recv(size_ + 1, -1);
  const absl::Status s =
      comm_->AllToAllV(absl::MakeConstSpan(send), BlockLayout{send_counts, {}},
                       absl::MakeSpan(recv), BlockLayout{recv_counts, {}}, Generous());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  if (rank_ <= 1) {
    EXPECT_THAT(Message(s), HasSubstr("rank 0 sends 1 elements to rank 1 (its "
                                      "send_layout.counts[1]) but rank 1 expects 2"));
  } else {
    EXPECT_THAT(Message(s), HasSubstr("the send and receive counts of other ranks disagree"));
  }
  EXPECT_EQ(recv, std::vector<int32_t>(size_ + 1, -1)) << "no data moved";
  ASSERT_TRUE(comm_->Barrier(Generous()).ok());
}

TEST_F(MpiCommunicatorTest, ARankThatNeverJoinsIsNamedAtTheDeadline) {
  // A second communicator to meet on after the first is left unusable.
  std::unique_ptr<Communicator> after = Create();
  ASSERT_NE(after, nullptr);
  const auto timeout = std::chrono::seconds(1);
  if (rank_ != 1) {
    std::vector<float> data(16, 1.0f);
    const auto start = DeadlineClock::now();
    const absl::Status s = comm_->AllReduce(absl::MakeSpan(data), ReduceOp::kSum,
                                            DeadlineAfter(timeout), {12, "dense_grads"});
    const double waited = SecondsSince(start);
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_THAT(
        Message(s),
        AllOf(HasSubstr("AllReduce #0 (step 12, \"dense_grads\") on rank " + std::to_string(rank_)),
              HasSubstr("rank 1 did not join it within"),
              HasSubstr(std::to_string(size_ - 1) + " of " + std::to_string(size_) +
                        " ranks had joined"),
              HasSubstr("look at rank 1"), Not(HasSubstr("rank 2 did not join"))));
    // Bounds, not a timing: the call waits for the deadline, and returns soon after it.
    EXPECT_GE(waited, std::chrono::duration<double>(timeout).count());
    EXPECT_LT(waited, std::chrono::duration<double>(timeout).count() + 10.0);
    EXPECT_EQ(data, std::vector<float>(16, 1.0f)) << "no data moved";
    // Unusable from now on, and it says why.
    const absl::Status later = comm_->Barrier(Generous());
    EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
    EXPECT_THAT(Message(later), AllOf(HasSubstr("unusable since an earlier call failed"),
                                      HasSubstr("rank 1 did not join")));
  }
  // Rank 1 skipped the call and meets the others here, after their deadline.
  ASSERT_TRUE(after->Barrier(Generous(), {-1, "after the deadline"}).ok());
}

}  // namespace
}  // namespace recsdk::dist
