// Tests of the Communicator rules that hold without MPI: the LocalCommunicator (a world of one),
// the argument checks every communicator shares, the cross-rank header checks (with headers
// made up for several ranks), the launcher's environment and CreateCommunicator's choice.
#include "src/dist/communicator.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/dist/collective_header.h"
#include "src/dist/create_communicator.h"
#include "src/dist/launch_env.h"
#include "src/dist/local_communicator.h"

namespace recsdk::dist {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Deadline Soon() { return DeadlineAfter(std::chrono::seconds(10)); }

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(LocalCommunicatorTest, IsAWorldOfOne) {
  LocalCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.name(), "local");
  EXPECT_EQ(comm.calls_issued(), 0u);
}

TEST(LocalCommunicatorTest, AllReduceOfOneRankIsTheIdentity) {
  LocalCommunicator comm;
  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(comm.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, Soon()).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  ASSERT_TRUE(comm.AllReduce(absl::MakeSpan(data), ReduceOp::kMean, Soon()).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));

  std::vector<bfloat16> halves = {bfloat16::FromFloat(0.5f), bfloat16::FromFloat(-7.0f)};
  ASSERT_TRUE(comm.AllReduce(absl::MakeSpan(halves), ReduceOp::kMean, Soon()).ok());
  EXPECT_EQ(halves[0].ToFloat(), 0.5f);
  EXPECT_EQ(halves[1].ToFloat(), -7.0f);
  EXPECT_EQ(comm.calls_issued(), 3u);
  // An AllReduce hands its data on once: 2 x 3 floats and 2 bfloat16.
  EXPECT_EQ(comm.bytes_sent(), 2 * 3 * sizeof(float) + 2 * sizeof(bfloat16));
  // Blocks for itself go nowhere.
  std::vector<float> all(3);
  const std::vector<int64_t> counts = {3};
  ASSERT_TRUE(
      comm.AllToAllV<float>(data, {counts, {}}, absl::MakeSpan(all), {counts, {}}, Soon()).ok());
  EXPECT_EQ(comm.bytes_sent(), 2 * 3 * sizeof(float) + 2 * sizeof(bfloat16));
}

TEST(LocalCommunicatorTest, AllReduceRefusesAnUnknownOp) {
  LocalCommunicator comm;
  std::vector<float> data = {1.0f};
  const absl::Status s =
      comm.AllReduce(absl::MakeSpan(data), static_cast<ReduceOp>(9), Soon(), {4, "grads"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("AllReduce #0 (step 4, \"grads\") on rank 0 of 1"),
                                HasSubstr("op 9 is not a ReduceOp")));
}

TEST(LocalCommunicatorTest, BroadcastChecksTheRoot) {
  LocalCommunicator comm;
  std::vector<int64_t> data = {7, 8};
  ASSERT_TRUE(comm.Broadcast(absl::MakeSpan(data), 0, Soon()).ok());
  EXPECT_EQ(data, (std::vector<int64_t>{7, 8}));
  for (int root : {1, -1}) {
    const absl::Status s = comm.Broadcast(absl::MakeSpan(data), root, Soon());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(s),
                AllOf(HasSubstr("root " + std::to_string(root)), HasSubstr("must be in [0, 0]")));
  }
  EXPECT_EQ(data, (std::vector<int64_t>{7, 8}));
}

TEST(LocalCommunicatorTest, AllGatherCopiesAndChecksTheReceiveBuffer) {
  LocalCommunicator comm;
  const std::vector<int32_t> send = {1, 2, 3};
  std::vector<int32_t> recv(4, -1);
  ASSERT_TRUE(comm.AllGather(absl::MakeConstSpan(send), absl::MakeSpan(recv), Soon()).ok());
  EXPECT_EQ(recv, (std::vector<int32_t>{1, 2, 3, -1}));  // past size() * send.size(): untouched

  std::vector<int32_t> short_recv(2);
  const absl::Status s =
      comm.AllGather(absl::MakeConstSpan(send), absl::MakeSpan(short_recv), Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("`recv` holds 2 elements; it needs 1 ranks x 3 elements"));
}

TEST(LocalCommunicatorTest, SendAndReceiveMayNotOverlap) {
  LocalCommunicator comm;
  std::vector<int32_t> buffer = {1, 2, 3, 4};
  const absl::Status s = comm.AllGather(absl::MakeConstSpan(buffer.data(), 2),
                                        absl::MakeSpan(buffer.data() + 1, 3), Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("`send` and `recv` overlap"));
  EXPECT_EQ(buffer, (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST(LocalCommunicatorTest, AllGatherVPlacesTheBlockAtItsDisplacement) {
  LocalCommunicator comm;
  const std::vector<uint8_t> send = {5, 6};
  std::vector<uint8_t> recv(5, 0);
  const std::vector<int64_t> counts = {2};
  const std::vector<int64_t> displs = {3};
  ASSERT_TRUE(comm.AllGatherV(absl::MakeConstSpan(send), absl::MakeSpan(recv),
                              BlockLayout{counts, displs}, Soon())
                  .ok());
  EXPECT_EQ(recv, (std::vector<uint8_t>{0, 0, 0, 5, 6}));
}

TEST(LocalCommunicatorTest, AllGatherVRefusesLayoutsThatDoNotFit) {
  LocalCommunicator comm;
  const std::vector<uint8_t> send = {5, 6};
  std::vector<uint8_t> recv(4, 0);
  struct Case {
    std::vector<int64_t> counts;
    std::vector<int64_t> displs;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{2, 0}, {}, "recv_layout.counts has 2 entries; it needs one per rank (1)"},
      {{2}, {0, 1}, "recv_layout.displs has 2 entries"},
      {{-1}, {}, "recv_layout.counts[0] is -1"},
      {{2}, {-3}, "recv_layout.displs[0] is -3"},
      {{2},
       {3},
       "rank 0's block in recv (recv_layout.displs 3 + counts 2) ends past the 4 "
       "elements of `recv`"},
      {{1}, {}, "recv_layout.counts[0] is 1 but this rank sends 2 elements"},
  };
  for (const Case& c : cases) {
    const absl::Status s = comm.AllGatherV(absl::MakeConstSpan(send), absl::MakeSpan(recv),
                                           BlockLayout{c.counts, c.displs}, Soon());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.expected;
    EXPECT_THAT(Message(s), HasSubstr(c.expected));
  }
  EXPECT_EQ(recv, (std::vector<uint8_t>{0, 0, 0, 0}));
}

TEST(LocalCommunicatorTest, AllToAllCopiesTheOwnBlock) {
  LocalCommunicator comm;
  const std::vector<int64_t> send = {4, 5};
  std::vector<int64_t> recv(2);
  ASSERT_TRUE(comm.AllToAll(absl::MakeConstSpan(send), absl::MakeSpan(recv), Soon()).ok());
  EXPECT_EQ(recv, send);
  std::vector<int64_t> short_recv(1);
  const absl::Status s =
      comm.AllToAll(absl::MakeConstSpan(send), absl::MakeSpan(short_recv), Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("`recv` holds 1 elements; it needs 2"));
}

TEST(LocalCommunicatorTest, AllToAllVCopiesBetweenDisplacements) {
  LocalCommunicator comm;
  const std::vector<float> send = {1, 2, 3, 4};
  std::vector<float> recv(4, 0);
  const std::vector<int64_t> counts = {2};
  const std::vector<int64_t> send_displs = {1};
  const std::vector<int64_t> recv_displs = {2};
  ASSERT_TRUE(comm.AllToAllV(absl::MakeConstSpan(send), BlockLayout{counts, send_displs},
                             absl::MakeSpan(recv), BlockLayout{counts, recv_displs}, Soon())
                  .ok());
  EXPECT_EQ(recv, (std::vector<float>{0, 0, 2, 3}));

  // Zero counts move nothing, with empty buffers too.
  const std::vector<int64_t> zero = {0};
  ASSERT_TRUE(comm.AllToAllV(absl::Span<const float>(), BlockLayout{zero, {}}, absl::Span<float>(),
                             BlockLayout{zero, {}}, Soon())
                  .ok());
}

TEST(LocalCommunicatorTest, AllToAllVNamesCountsThatDoNotMatch) {
  LocalCommunicator comm;
  const std::vector<float> send = {1, 2, 3};
  std::vector<float> recv(3, 0);
  const std::vector<int64_t> send_counts = {3};
  const std::vector<int64_t> recv_counts = {2};
  const absl::Status s =
      comm.AllToAllV(absl::MakeConstSpan(send), BlockLayout{send_counts, {}}, absl::MakeSpan(recv),
                     BlockLayout{recv_counts, {}}, Soon(), {2, "keys"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s),
              AllOf(HasSubstr("AllToAllV #0 (step 2, \"keys\")"),
                    HasSubstr("rank 0 sends 3 elements to rank 0 (its send_layout.counts[0]) but "
                              "rank 0 expects 2 (its recv_layout.counts[0])")));
  EXPECT_EQ(recv, (std::vector<float>{0, 0, 0}));
}

TEST(LocalCommunicatorTest, ExchangeVCopiesTheOwnBlockAndChecksTheCounts) {
  LocalCommunicator comm;
  const std::vector<int64_t> send = {7, 8, 9};
  const std::vector<int64_t> counts = {3};
  std::vector<int64_t> recv, recv_counts;
  ASSERT_TRUE(
      comm.ExchangeV(absl::MakeConstSpan(send), counts, &recv, &recv_counts, Soon(), {4, "keys"})
          .ok());
  EXPECT_EQ(recv, send);
  EXPECT_EQ(recv_counts, counts);
  // Empty: nothing moves.
  const std::vector<int64_t> zero = {0};
  ASSERT_TRUE(comm.ExchangeV(absl::Span<const int64_t>(), zero, &recv, &recv_counts, Soon()).ok());
  EXPECT_TRUE(recv.empty());
  // Counts that do not fill `send`, or not one per rank, are refused naming the rule.
  const std::vector<int64_t> two = {2};
  absl::Status s = comm.ExchangeV(absl::MakeConstSpan(send), two, &recv, &recv_counts, Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), AllOf(HasSubstr("ExchangeV #2"),
                                HasSubstr("send_counts add up to 2 elements but `send` holds 3")));
  const std::vector<int64_t> per_two_ranks = {1, 2};
  s = comm.ExchangeV(absl::MakeConstSpan(send), per_two_ranks, &recv, &recv_counts, Soon());
  EXPECT_THAT(Message(s), HasSubstr("send_counts has 2 entries; it needs one per rank (1)"));
  const std::vector<int64_t> negative = {-1};
  s = comm.ExchangeV(absl::Span<const int64_t>(), negative, &recv, &recv_counts, Soon());
  EXPECT_THAT(Message(s), HasSubstr("send_counts[0] is -1"));
}

TEST(LocalCommunicatorTest, ADeadlineThatPassedDoesNotFailAWorldOfOne) {
  LocalCommunicator comm;
  EXPECT_TRUE(comm.Barrier(DeadlineClock::now() - std::chrono::seconds(1)).ok());
  std::vector<float> data = {1.0f};
  EXPECT_TRUE(comm.AllReduce(absl::MakeSpan(data), ReduceOp::kSum, DeadlineAfterSeconds(-5)).ok());
}

TEST(LocalCommunicatorTest, EveryCallTakesASequenceNumberRefusedOnesToo) {
  LocalCommunicator comm;
  std::vector<float> data = {1.0f};
  ASSERT_TRUE(comm.Barrier(Soon()).ok());
  ASSERT_FALSE(comm.Broadcast(absl::MakeSpan(data), 3, Soon()).ok());
  const absl::Status s = comm.Broadcast(absl::MakeSpan(data), 3, Soon());
  EXPECT_THAT(Message(s), HasSubstr("Broadcast #2 on rank 0 of 1"));
  EXPECT_EQ(comm.calls_issued(), 3u);
}

TEST(DeadlineTest, SaturatesInsteadOfOverflowing) {
  EXPECT_EQ(DeadlineAfter(DeadlineClock::duration::max()), Deadline::max());
  EXPECT_EQ(DeadlineAfterSeconds(1e300), Deadline::max());
  EXPECT_LT(DeadlineAfterSeconds(-1), DeadlineClock::now());
}

TEST(DescribeCallTest, NamesKindNumberStepAndLabel) {
  EXPECT_EQ(DescribeCall(CollectiveKind::kAllReduce, 5, {3, "dense_grads"}),
            "AllReduce #5 (step 3, \"dense_grads\")");
  EXPECT_EQ(DescribeCall(CollectiveKind::kBarrier, 0, {}), "Barrier #0");
  EXPECT_EQ(DescribeCall(CollectiveKind::kAllToAllV, 1, {7, ""}), "AllToAllV #1 (step 7)");
  EXPECT_EQ(DescribeCall(CollectiveKind::kBroadcast, 2, {-1, "init"}), "Broadcast #2 (\"init\")");
  EXPECT_EQ(CollectiveKindName(static_cast<CollectiveKind>(42)), "unknown(42)");
}

// Headers of a made-up world: `calls[r]` is rank r's call.
std::vector<CollectiveHeader> HeadersTo(int receiver, const std::vector<CollectiveCall>& calls,
                                        const std::vector<bool>& rejected = {}) {
  const int size = static_cast<int>(calls.size());
  std::vector<CollectiveHeader> headers;
  for (int r = 0; r < size; ++r) {
    headers.push_back(
        MakeCollectiveHeader(calls[r], r, receiver, size, !rejected.empty() && rejected[r]));
  }
  return headers;
}

// Check: every rank's verdict on `calls`; the test asserts they agree on OK / not OK.
std::vector<absl::Status> Check(const std::vector<CollectiveCall>& calls,
                                const std::vector<bool>& rejected = {}) {
  std::vector<absl::Status> verdicts;
  const int size = static_cast<int>(calls.size());
  for (int r = 0; r < size; ++r) {
    verdicts.push_back(CheckCollectiveHeaders(calls[r], r, size, HeadersTo(r, calls, rejected)));
  }
  return verdicts;
}

CollectiveCall Call(CollectiveKind kind, uint64_t seq, int64_t count = 4) {
  CollectiveCall call;
  call.kind = kind;
  call.seq = seq;
  call.count = count;
  call.tag = {3, "grads"};
  if (kind == CollectiveKind::kAllReduce) {
    call.dtype = DType::kFloat32;
    call.elem_size = 4;
  }
  return call;
}

TEST(CollectiveHeaderTest, SameCallsOnEveryRankPass) {
  const CollectiveCall c = Call(CollectiveKind::kAllReduce, 7);
  for (const absl::Status& s : Check({c, c, c})) EXPECT_TRUE(s.ok()) << s;
}

TEST(CollectiveHeaderTest, DifferentCollectivesAreAnOrderErrorOnEveryRank) {
  const CollectiveCall reduce = Call(CollectiveKind::kAllReduce, 7);
  CollectiveCall broadcast = Call(CollectiveKind::kBroadcast, 7);
  broadcast.tag = {3, "init"};
  const std::vector<absl::Status> v = Check({reduce, reduce, broadcast});
  for (const absl::Status& s : v) EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(v[0]),
              AllOf(HasSubstr("collectives out of order: rank 0 is in AllReduce #7 (step 3, "
                              "\"grads\") but rank 2 is in Broadcast #7 (step 3, \"init\")"),
                    HasSubstr("in the same order")));
  EXPECT_THAT(Message(v[2]), HasSubstr("rank 2 is in Broadcast #7 (step 3, \"init\") but rank 0 "
                                       "is in AllReduce #7 (step 3, \"grads\")"));
}

// ExchangeV has no counts round under MPI: each header carries what its sender sends its
// receiver, and the receiver's counts are read from the headers it got.
TEST(CollectiveHeaderTest, AnExchangeVHeaderCarriesTheBlockForItsReceiver) {
  const std::vector<std::vector<int64_t>> sends = {{5, 0, 9}, {1, 2, 3}, {0, 7, 0}};
  std::vector<CollectiveCall> calls;
  for (const std::vector<int64_t>& counts : sends) {
    CollectiveCall c = Call(CollectiveKind::kExchangeV, 2, 0);
    c.elem_size = 24;
    c.send_counts = counts;
    calls.push_back(c);
  }
  for (int receiver = 0; receiver < 3; ++receiver) {
    const std::vector<CollectiveHeader> got = HeadersTo(receiver, calls);
    for (int sender = 0; sender < 3; ++sender) {
      EXPECT_EQ(got[sender].send_to_receiver, sends[sender][receiver])
          << "from rank " << sender << " to rank " << receiver;
    }
  }
  // Different counts per pair are what ExchangeV is for: every rank accepts them.
  for (const absl::Status& s : Check(calls)) EXPECT_TRUE(s.ok()) << s;
}

TEST(CollectiveHeaderTest, ARankThatSkippedACallIsNamedWithItsCount) {
  const CollectiveCall ahead = Call(CollectiveKind::kAllReduce, 8);
  const CollectiveCall behind = Call(CollectiveKind::kAllReduce, 7);
  const std::vector<absl::Status> v = Check({behind, ahead});
  EXPECT_EQ(v[0].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(v[0]),
              HasSubstr("rank 1 issued 8 collectives on this communicator before this one, "
                        "rank 0 7"));
  EXPECT_EQ(v[1].code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CollectiveHeaderTest, DifferentStepsOrLabelsAreAnOrderError) {
  const CollectiveCall a = Call(CollectiveKind::kAllReduce, 1);
  CollectiveCall b = a;
  b.tag.step = 4;
  for (const absl::Status& s : Check({a, b})) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  }
  // A long label shows its first 31 bytes, and labels differing past them still differ.
  CollectiveCall c = a;
  c.tag.label = "a_label_longer_than_thirty_one_bytes_one";
  CollectiveCall d = a;
  d.tag.label = "a_label_longer_than_thirty_one_bytes_two";
  const std::vector<absl::Status> v = Check({c, d});
  EXPECT_EQ(v[0].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(v[0]), HasSubstr("rank 1 is in AllReduce #1 (step 3, "
                                       "\"a_label_longer_than_thirty_one_...\")"));
}

TEST(CollectiveHeaderTest, CountsThatDifferAreInvalidArgumentOnEveryRank) {
  const CollectiveCall four = Call(CollectiveKind::kAllReduce, 0, 4);
  const CollectiveCall three = Call(CollectiveKind::kAllReduce, 0, 3);
  const std::vector<absl::Status> v = Check({four, three, four});
  for (const absl::Status& s : v) EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(v[0]),
              HasSubstr("rank 1 passes data.size() 3 but rank 0 passes 4; every rank must pass "
                        "the same data.size()"));
  EXPECT_THAT(Message(v[1]), HasSubstr("rank 0 passes data.size() 4 but rank 1 passes 3"));

  CollectiveCall mean = four;
  mean.op = ReduceOp::kMean;
  EXPECT_THAT(Message(Check({four, mean})[0]), HasSubstr("rank 1 reduces with mean but rank 0 "
                                                         "with sum"));
  CollectiveCall bf16 = four;
  bf16.dtype = DType::kBFloat16;
  bf16.elem_size = 2;
  EXPECT_THAT(Message(Check({four, bf16})[0]),
              HasSubstr("rank 1 passes elements of 2 bytes but rank 0 of 4"));
  CollectiveCall root0 = Call(CollectiveKind::kBroadcast, 0);
  CollectiveCall root1 = root0;
  root1.root = 1;
  EXPECT_THAT(Message(Check({root0, root1})[1]),
              HasSubstr("rank 0 broadcasts from root -1 but rank 1 from root 1"));
}

TEST(CollectiveHeaderTest, ARankThatRefusedItsArgumentsFailsEveryRank) {
  const CollectiveCall c = Call(CollectiveKind::kBroadcast, 2);
  const std::vector<absl::Status> v = Check({c, c, c}, {false, true, false});
  EXPECT_EQ(v[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(v[0]), HasSubstr("rank 1 refused its own arguments to this call"));
  EXPECT_EQ(v[2].code(), absl::StatusCode::kInvalidArgument);
}

TEST(CollectiveHeaderTest, AllGatherVCountsMustBeTheSameEverywhere) {
  const std::vector<int64_t> counts = {1, 0, 2};
  const std::vector<int64_t> other = {1, 1, 2};
  CollectiveCall a = Call(CollectiveKind::kAllGatherV, 0, 0);
  a.recv_counts = counts;
  CollectiveCall b = a;
  b.recv_counts = other;
  const std::vector<absl::Status> v = Check({a, a, b});
  for (const absl::Status& s : v) EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(v[0]), HasSubstr("rank 2's recv_layout.counts differ from rank 0's"));
}

// The send counts of an all-to-all between 3 ranks: sends[i][j] elements from i to j.
std::vector<CollectiveCall> AllToAllVCalls(const std::vector<std::vector<int64_t>>& sends,
                                           const std::vector<std::vector<int64_t>>& recvs) {
  std::vector<CollectiveCall> calls;
  for (size_t r = 0; r < sends.size(); ++r) {
    CollectiveCall c = Call(CollectiveKind::kAllToAllV, 0, 0);
    c.send_counts = sends[r];
    c.recv_counts = recvs[r];
    calls.push_back(c);
  }
  return calls;
}

TEST(CollectiveHeaderTest, AllToAllVPairsThatDisagreeFailEveryRankAndThePairNamesIt) {
  const std::vector<std::vector<int64_t>> sends = {{0, 1, 2}, {3, 0, 0}, {1, 1, 1}};
  std::vector<std::vector<int64_t>> recvs = {{0, 3, 1}, {1, 0, 1}, {2, 0, 1}};
  for (const absl::Status& s : Check(AllToAllVCalls(sends, recvs))) EXPECT_TRUE(s.ok()) << s;

  recvs[1][0] = 2;  // rank 1 expects 2 from rank 0, which sends it 1
  const std::vector<absl::Status> v = Check(AllToAllVCalls(sends, recvs));
  for (const absl::Status& s : v) EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  const std::string pair =
      "rank 0 sends 1 elements to rank 1 (its send_layout.counts[1]) but rank 1 expects 2 (its "
      "recv_layout.counts[0])";
  EXPECT_THAT(Message(v[0]), HasSubstr(pair));
  EXPECT_THAT(Message(v[1]), HasSubstr(pair));
  EXPECT_THAT(Message(v[2]), HasSubstr("the send and receive counts of other ranks disagree"));
}

TEST(LaunchEnvironmentTest, NoLauncherIsAWorldOfOne) {
  const absl::StatusOr<LaunchEnvironment> env =
      ReadLaunchEnvironment([](const char*) -> const char* { return nullptr; });
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_FALSE(env->under_launcher());
  EXPECT_EQ(env->size, 1);
  EXPECT_EQ(env->rank, 0);
}

// Lookup: an environment made of `vars`.
struct Lookup {
  std::map<std::string, std::string> vars;
  const char* operator()(const char* name) const {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  }
};

TEST(LaunchEnvironmentTest, ReadsOpenMpi) {
  const Lookup lookup{{{"OMPI_COMM_WORLD_SIZE", "4"},
                       {"OMPI_COMM_WORLD_RANK", "3"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}};
  const absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment(lookup);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, "Open MPI");
  EXPECT_EQ(env->size, 4);
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->local_size, 2);
  EXPECT_EQ(env->local_rank, 1);
}

TEST(LaunchEnvironmentTest, ReadsPmiAndAssumesOneHostWithoutLocalVariables) {
  const Lookup lookup{{{"PMI_SIZE", "3"}, {"PMI_RANK", "2"}}};
  const absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment(lookup);
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->launcher, "MPICH/Intel MPI");
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->local_size, 3);
}

TEST(LaunchEnvironmentTest, ValuesThatDoNotParseNameTheVariable) {
  struct Case {
    std::map<std::string, std::string> vars;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{{"OMPI_COMM_WORLD_SIZE", "two"}, {"OMPI_COMM_WORLD_RANK", "0"}},
       "OMPI_COMM_WORLD_SIZE=\"two\" is not a whole number"},
      {{{"OMPI_COMM_WORLD_SIZE", ""}, {"OMPI_COMM_WORLD_RANK", "0"}},
       "OMPI_COMM_WORLD_SIZE=\"\" is not a whole number"},
      {{{"OMPI_COMM_WORLD_SIZE", "2 "}, {"OMPI_COMM_WORLD_RANK", "0"}},
       "OMPI_COMM_WORLD_SIZE=\"2 \" is not a whole number"},
      {{{"OMPI_COMM_WORLD_SIZE", "0"}, {"OMPI_COMM_WORLD_RANK", "0"}},
       "OMPI_COMM_WORLD_SIZE=0 is out of range"},
      {{{"OMPI_COMM_WORLD_SIZE", "99999999999"}, {"OMPI_COMM_WORLD_RANK", "0"}},
       "OMPI_COMM_WORLD_SIZE=\"99999999999\" is not a whole number"},
      {{{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "2"}},
       "OMPI_COMM_WORLD_RANK=2 is out of range; it must be this process's rank, in [0, 1]"},
      {{{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "-1"}},
       "OMPI_COMM_WORLD_RANK=-1 is out of range"},
      {{{"OMPI_COMM_WORLD_SIZE", "2"}},
       "OMPI_COMM_WORLD_SIZE=2 is set but OMPI_COMM_WORLD_RANK is not"},
      {{{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}, {"MPI_LOCALNRANKS", "3"}, {"MPI_LOCALRANKID", "0"}},
       "MPI_LOCALNRANKS=3 is out of range"},
      {{{"MV2_COMM_WORLD_SIZE", "4"},
        {"MV2_COMM_WORLD_RANK", "1"},
        {"MV2_COMM_WORLD_LOCAL_SIZE", "2"},
        {"MV2_COMM_WORLD_LOCAL_RANK", "x"}},
       "MV2_COMM_WORLD_LOCAL_RANK=\"x\" is not a whole number"},
  };
  for (const Case& c : cases) {
    const absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment(Lookup{c.vars});
    EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument) << c.expected;
    EXPECT_THAT(Message(env.status()), HasSubstr(c.expected));
  }
}

LaunchEnvironment Launched(int rank, int size) {
  LaunchEnvironment env;
  env.launcher = "Open MPI";
  env.size_variable = "OMPI_COMM_WORLD_SIZE";
  env.rank_variable = "OMPI_COMM_WORLD_RANK";
  env.rank = rank;
  env.size = size;
  return env;
}

TEST(CreateCommunicatorTest, APlainProgramGetsTheLocalCommunicator) {
  SetMultiProcessCommunicator("", nullptr);
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateCommunicator(LaunchEnvironment{}, Soon());
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->name(), "local");
  // One rank under a launcher, without MPI in the program: still a world of one.
  comm = CreateCommunicator(Launched(0, 1), Soon());
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->name(), "local");
}

TEST(CreateCommunicatorTest, SeveralRanksWithoutMpiAreRefused) {
  SetMultiProcessCommunicator("", nullptr);
  const absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateCommunicator(Launched(1, 2), Soon());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(comm.status()),
              AllOf(HasSubstr("launched as rank 1 of 2 (Open MPI set OMPI_COMM_WORLD_SIZE=2)"),
                    HasSubstr("RegisterMpiCommunicator()")));
}

absl::StatusOr<std::unique_ptr<Communicator>> FakeMultiProcess(const LaunchEnvironment& env,
                                                               Deadline) {
  return absl::UnavailableError("fake factory for rank " + std::to_string(env.rank));
}

TEST(CreateCommunicatorTest, ARegisteredFactoryServesEveryLaunchOnly) {
  SetMultiProcessCommunicator("fake", &FakeMultiProcess);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(Launched(1, 1), Soon());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Message(comm.status()), HasSubstr("fake factory for rank 1"));
  comm = CreateCommunicator(LaunchEnvironment{}, Soon());
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->name(), "local");
  SetMultiProcessCommunicator("", nullptr);
}

TEST(LaunchEnvironmentTest, TfConfigMustDescribeTheLaunchersRanks) {
  LaunchEnvironment env;
  env.launcher = "Open MPI";
  env.rank_variable = "OMPI_COMM_WORLD_RANK";
  env.size = 3;
  auto check = [&](int rank, const std::string& tf_config) {
    env.rank = rank;
    const Lookup lookup{{{"TF_CONFIG", tf_config}}};
    return CheckTfConfig(env, lookup);
  };
  const std::string cluster = R"("cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]})";
  // Chief first, then the workers: worker 1 is the third task, rank 2.
  EXPECT_TRUE(check(0, "{" + cluster + R"(, "task": {"type": "chief", "index": 0}})").ok());
  EXPECT_TRUE(check(2, "{" + cluster + R"(, "task": {"type": "worker", "index": 1}})").ok());
  EXPECT_TRUE(CheckTfConfig(env, Lookup{}).ok()) << "unset: nothing to check";

  const Status wrong_rank =
      check(1, "{" + cluster + R"(, "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(wrong_rank.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(wrong_rank.message()),
              AllOf(HasSubstr("worker 1 (task 2"), HasSubstr("rank 1 (OMPI_COMM_WORLD_RANK)")));
  const Status wrong_size = check(
      0, R"({"cluster": {"worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_EQ(wrong_size.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(wrong_size.message()), HasSubstr("lists 2 tasks"));
  EXPECT_THAT(std::string(wrong_size.message()), HasSubstr("mpirun -np 2"));
  // A ps task comes after the chief and the workers: ps 0 is rank 2 of chief + worker + ps.
  const std::string with_ps = R"("cluster": {"worker": ["b:1", "c:1"], "ps": ["p:1"]})";
  env.rank = 2;
  absl::StatusOr<JobLayout> ps = ReadJobLayout(
      env, Lookup{{{"TF_CONFIG", "{" + with_ps + R"(, "task": {"type": "ps", "index": 0}})"}}});
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_TRUE(ps->is_ps);
  EXPECT_EQ(ps->workers, 2);
  EXPECT_EQ(ps->ps, 1);
  EXPECT_EQ(ps->owner_first(), 2);
  EXPECT_EQ(ps->owners(), 1);
  env.rank = 1;
  absl::StatusOr<JobLayout> worker = ReadJobLayout(
      env, Lookup{{{"TF_CONFIG", "{" + with_ps + R"(, "task": {"type": "worker", "index": 1}})"}}});
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_FALSE(worker->is_ps);
  EXPECT_EQ(worker->owner_first(), 2);
  const Status ps_at_wrong_rank =
      check(0, "{" + with_ps + R"(, "task": {"type": "ps", "index": 0}})");
  EXPECT_EQ(ps_at_wrong_rank.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ps_at_wrong_rank.message()),
              AllOf(HasSubstr("ps 0 (task 2"), HasSubstr("rank 0 (OMPI_COMM_WORLD_RANK)")));
  const Status only_ps =
      check(0, R"({"cluster": {"ps": ["p:1", "q:1", "r:1"]}, "task": {"type": "ps", "index": 0}})");
  EXPECT_EQ(only_ps.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(only_ps.message()), HasSubstr("no chief or worker"));
  // Without TF_CONFIG every rank is a worker and an owner.
  absl::StatusOr<JobLayout> plain = ReadJobLayout(env, Lookup{});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->workers, 3);
  EXPECT_EQ(plain->owner_first(), 0);
  EXPECT_EQ(plain->owners(), 3);
  EXPECT_EQ(check(0, "not json").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(check(0, "{" + cluster + R"(, "task": {"type": "worker", "index": 5}})").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(check(0, "{" + cluster + R"(, "task": {"type": "evaluator", "index": 0}})").code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace recsdk::dist
