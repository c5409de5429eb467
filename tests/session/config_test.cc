// config_test.cc: SessionConfig rules (Validate) and JSON load/save (src/session/config/config.cc).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <string_view>

#include "fmt/format.h"
#include "recsdk/recsdk.h"

namespace recsdk {
namespace {

std::string Msg(const Status& s) { return std::string(s.message()); }

// ExpectInvalid: Validate fails and its message holds every fragment (option, value, rule).
void ExpectInvalid(const SessionConfig& c, std::initializer_list<const char*> fragments) {
  const Status s = c.Validate();
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const char* f : fragments) EXPECT_NE(Msg(s).find(f), std::string::npos) << f << " in " << s;
}

TEST(SessionConfigTest, DefaultsAreValidAndMatchTheSeed) {
  SessionConfig c;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  EXPECT_FALSE(c.use_off_line);
  EXPECT_EQ(c.iterations_per_loop, 1);
  EXPECT_EQ(c.dump_mode, "output");
  EXPECT_TRUE(c.variable_format_optimize);
  EXPECT_EQ(c.graph_run_mode, 1);
  EXPECT_EQ(c.op_debug_level, 0);
  EXPECT_EQ(c.graph_memory_max_size, 26 * kGiB);
  EXPECT_EQ(c.variable_memory_max_size, 5 * kGiB);
  EXPECT_EQ(c.op_select_implmode, "high_performance");
}

TEST(SessionConfigTest, IntraOpParallelismIsBounded) {
  SessionConfig c;
  c.intra_op_parallelism = 65537;  // issue 10: passed Validate and crashed ~Session
  ExpectInvalid(c, {"intra_op_parallelism", "65537", "[0, 1024]"});
  c.intra_op_parallelism = -1;
  ExpectInvalid(c, {"intra_op_parallelism", "-1"});
  c.intra_op_parallelism = 1024;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(SessionConfigTest, ValueSetsAndRanges) {
  {
    SessionConfig c;
    c.graph_run_mode = 2;
    ExpectInvalid(c, {"graph_run_mode", "2"});
  }
  {
    SessionConfig c;
    c.op_debug_level = 4;
    ExpectInvalid(c, {"op_debug_level", "4"});
  }
  {
    SessionConfig c;
    c.iterations_per_loop = 0;
    ExpectInvalid(c, {"iterations_per_loop", "0", "[1, 1000000]"});
  }
  {
    SessionConfig c;
    c.dump_mode = "both";
    ExpectInvalid(c, {"dump_mode", "\"both\"", "\"input\", \"output\", \"all\""});
  }
  {
    SessionConfig c;
    c.dump_debug_mode = "overflow";
    ExpectInvalid(c, {"dump_debug_mode", "overflow", "aicore_overflow"});
  }
  {
    SessionConfig c;
    c.precision_mode = "fp8";
    ExpectInvalid(c, {"precision_mode", "fp8", "must_keep_origin_dtype"});
  }
  {
    SessionConfig c;
    c.op_select_implmode = "fast";
    ExpectInvalid(c, {"op_select_implmode", "fast", "high_precision"});
  }
  {
    SessionConfig c;
    c.enable_exception_dump = 2;
    ExpectInvalid(c, {"enable_exception_dump", "2"});
  }
}

TEST(SessionConfigTest, MemorySizesAndTheirSum) {
  SessionConfig c;
  c.graph_memory_max_size = 257 * kGiB;
  ExpectInvalid(c, {"graph_memory_max_size", "274877906944"});
  c.graph_memory_max_size = -1;
  ExpectInvalid(c, {"graph_memory_max_size", "-1"});
  c.graph_memory_max_size = 30 * kGiB;
  c.variable_memory_max_size = 2 * kGiB;
  ExpectInvalid(c, {"graph_memory_max_size", "variable_memory_max_size", "31 GiB"});
  c.variable_memory_max_size = 1 * kGiB;
  EXPECT_TRUE(c.Validate().ok());
}

TEST(SessionConfigTest, StreamMaxParallelNum) {
  SessionConfig c;
  c.stream_max_parallel_num = "DNN_VM_TF:10,DNN_V100:1";
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.ParsedStreamLimits()["DNN_VM_TF"], 10);
  c.stream_max_parallel_num = "DNN_V100:14";
  ExpectInvalid(c, {"stream_max_parallel_num", "14", "1 to 13"});
  c.stream_max_parallel_num = "GPU:2";
  ExpectInvalid(c, {"stream_max_parallel_num", "GPU"});
  c.stream_max_parallel_num = "DNN_V100:2,DNN_V100:3";
  ExpectInvalid(c, {"DNN_V100", "twice"});
}

TEST(SessionConfigTest, DumpStepGrammar) {
  SessionConfig c;
  for (const char* ok : {"", "0", "0|5|10", "0|3-5|10", "7-7"}) {
    c.dump_step = ok;
    EXPECT_TRUE(c.Validate().ok()) << ok << ": " << c.Validate();
  }
  for (const char* bad : {"|", "1|", "a", "3-", "-3", "5-3", "1-2-3", "1,2", " 1"}) {
    c.dump_step = bad;
    ExpectInvalid(c, {"dump_step"});
  }
}

TEST(SessionConfigTest, DumpsNeedAPath) {
  // Dumps, overflow detection and exception dumps work (tests/precision/): each needs dump_path.
  SessionConfig c;
  c.enable_dump = true;
  ExpectInvalid(c, {"dump_path", "enable_dump"});
  c.dump_path = "/tmp/dumps";
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  SessionConfig d;
  d.enable_dump_debug = true;
  ExpectInvalid(d, {"dump_path", "enable_dump_debug"});
  d.dump_path = "/tmp/dumps";
  EXPECT_TRUE(d.Validate().ok()) << d.Validate();
  SessionConfig e;
  e.enable_exception_dump = 1;
  ExpectInvalid(e, {"dump_path", "enable_exception_dump"});
  e.dump_path = "/tmp/dumps";
  EXPECT_TRUE(e.Validate().ok()) << e.Validate();
}

TEST(SessionConfigTest, DumpChecksumsNeedEnableDump) {
  SessionConfig c;
  c.dump_checksums = true;
  ExpectInvalid(c, {"dump_checksums", "enable_dump"});
  c.enable_dump = true;
  c.dump_path = "/tmp/dumps";
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST(SessionConfigTest, StopOnOverflowNeedsOverflowDetection) {
  SessionConfig c;
  c.stop_on_overflow = true;
  ExpectInvalid(c, {"stop_on_overflow", "enable_dump_debug"});
  c.enable_dump_debug = true;
  c.dump_path = "/tmp/dumps";
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  // JSON: a boolean, like the spec's switches; a string is refused naming the option.
  auto parsed = SessionConfig::FromJson(
      R"({"enable_dump_debug": true, "dump_path": "/tmp/d", "stop_on_overflow": true})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->stop_on_overflow);
  auto bad = SessionConfig::FromJson(
      R"({"enable_dump_debug": true, "dump_path": "/tmp/d", "stop_on_overflow": "yes"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("stop_on_overflow"), std::string_view::npos)
      << bad.status();
}

TEST(SessionConfigTest, ProfilingRules) {
  SessionConfig c;
  c.profiling_mode = true;
  ExpectInvalid(c, {"profiling_mode", "profiling_options"});
  c.profiling_options = "op_trace:task_trace";
  ExpectInvalid(c, {"op_trace is exclusive"});
  c.profiling_options = "training_trace:bogus";
  ExpectInvalid(c, {"profiling_options", "bogus"});
  c.profiling_options = "training_trace:task_trace";
  ExpectInvalid(c, {"fp_point", "bp_point", "required with training_trace"});
  c.fp_point = "fc1/MatMul";
  c.bp_point = "gradients/fc1/MatMul_grad";
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

// is_tailing_optimization overlaps the last of hcom_parallel's buckets: with hcom_parallel it is
// accepted (tests/dist/mpi_data_parallel_test.cc runs it under mpirun), without it refused naming
// both options and the fix.
TEST(SessionConfigTest, TailingOptimizationNeedsHcomParallel) {
  SessionConfig c;
  c.is_tailing_optimization = true;
  const Status refused = c.Validate();
  ASSERT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  for (const char* fragment :
       {"is_tailing_optimization", "hcom_parallel is false", "set hcom_parallel true"}) {
    EXPECT_NE(refused.message().find(fragment), std::string_view::npos) << refused;
  }
  c.hcom_parallel = true;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST(SessionConfigTest, OptionsThatCannotTakeEffectSaySo) {
  const std::vector<std::pair<std::function<void(SessionConfig&)>, const char*>> cases = {
      {[](SessionConfig& c) { c.use_off_line = true; }, "use_off_line"},
      {[](SessionConfig& c) { c.enable_data_pre_proc = true; }, "enable_data_pre_proc"},
      {[](SessionConfig& c) { c.is_tailing_optimization = true; }, "hcom_parallel is false"},
      {[](SessionConfig& c) { c.enable_reduce_precision = true; }, "not supported"},
      {[](SessionConfig& c) { c.auto_tune_mode = "XX"; }, "\"XX\""},
      {[](SessionConfig& c) { c.enable_scope_fusion_passes = "MatMulBiasAdd"; }, "MatMulBiasAdd"},
  };
  for (const auto& [set, fragment] : cases) {
    SessionConfig c;
    set(c);
    ExpectInvalid(c, {fragment});
  }
  // auto_tune_mode tunes by timing (tests/device/cpu/gemm_tuner_test.cc): not with deterministic.
  SessionConfig tune;
  tune.auto_tune_mode = "RL,GA";
  EXPECT_TRUE(tune.Validate().ok()) << tune.Validate();
  tune.deterministic = true;
  ExpectInvalid(tune, {"auto_tune_mode", "deterministic", "clear"});
  tune.deterministic = false;
  tune.tune_bank_path = "";
  ExpectInvalid(tune, {"tune_bank_path"});
  SessionConfig both;
  both.precision_mode = "must_keep_origin_dtype";
  both.precision_mode_v2 = "origin";
  ExpectInvalid(both, {"set only one"});
  SessionConfig keep;
  keep.precision_mode_v2 = "origin";
  EXPECT_TRUE(keep.Validate().ok());
  // The low-precision modes run the mixed_precision pass (tests/session/passes/).
  for (const char* mode : {"allow_mix_precision", "force_fp16"}) {
    SessionConfig low;
    low.precision_mode = mode;
    EXPECT_TRUE(low.Validate().ok()) << mode;
  }
  SessionConfig v2;
  v2.precision_mode_v2 = "mixed_bfloat16";
  EXPECT_TRUE(v2.Validate().ok());
  SessionConfig list_without_mode;
  list_without_mode.op_select_implmode = "";
  list_without_mode.optypelist_for_implmode = "Exp";
  EXPECT_FALSE(list_without_mode.Validate().ok());
}

TEST(SessionConfigTest, JsonRoundTripKeepsEveryOption) {
  SessionConfig c;
  c.iterations_per_loop = 7;
  c.deterministic = true;
  c.op_select_implmode = "high_precision";
  c.optypelist_for_implmode = "Exp,Softmax";
  c.dump_step = "0|3-5";
  c.graph_memory_max_size = 3 * kGiB;
  const std::string text = c.ToJson();
  for (const std::string& name : SessionConfig::OptionNames()) {
    EXPECT_NE(text.find("\"" + name + "\""), std::string::npos) << name;
  }
  auto back = SessionConfig::FromJson(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), text);
  EXPECT_EQ(back->iterations_per_loop, 7);
  EXPECT_TRUE(back->deterministic);
  EXPECT_EQ(back->graph_memory_max_size, 3 * kGiB);
}

TEST(SessionConfigTest, JsonErrors) {
  auto unknown = SessionConfig::FromJson(R"({"iteration_per_loop": 4})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(Msg(unknown.status()).find("unknown option \"iteration_per_loop\""), std::string::npos)
      << unknown.status();
  EXPECT_NE(Msg(unknown.status()).find("did you mean \"iterations_per_loop\""), std::string::npos)
      << unknown.status();
  auto wrong_type = SessionConfig::FromJson(R"({"graph_run_mode": "1"})");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(Msg(wrong_type.status()).find("graph_run_mode"), std::string::npos);
  auto too_big = SessionConfig::FromJson(R"({"intra_op_parallelism": 99999999999})");
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(Msg(too_big.status()).find("intra_op_parallelism"), std::string::npos);
  auto invalid = SessionConfig::FromJson(R"({"graph_run_mode": 5})");
  ASSERT_FALSE(invalid.ok());
  EXPECT_NE(Msg(invalid.status()).find("graph_run_mode: 5"), std::string::npos);
  EXPECT_FALSE(SessionConfig::FromJson("[1,2]").ok());
  EXPECT_FALSE(SessionConfig::FromJson("{").ok());
  // The spec writes deterministic as 0/1.
  auto det = SessionConfig::FromJson(R"({"deterministic": 1})");
  ASSERT_TRUE(det.ok()) << det.status();
  EXPECT_TRUE(det->deterministic);
  EXPECT_FALSE(SessionConfig::FromJson(R"({"deterministic": 2})").ok());
}

// ExpectJsonError: FromJson fails with InvalidArgument and its message holds every fragment.
void ExpectJsonError(std::string_view text, std::initializer_list<std::string> fragments) {
  auto c = SessionConfig::FromJson(text);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  for (const std::string& f : fragments) {
    EXPECT_NE(Msg(c.status()).find(f), std::string::npos) << f << " in " << c.status();
  }
}

// A syntax error says where (it said "not valid JSON" and nothing else).
TEST(SessionConfigTest, SyntaxErrorsNameTheLineAndColumn) {
  ExpectJsonError("{\n  \"graph_run_mode\": 1,\n  \"deterministic\": tru\n}",
                  {"session config is not valid JSON", "line 3"});
  ExpectJsonError("{", {"session config is not valid JSON", "line 1, column 2"});
  ExpectJsonError("", {"session config is empty"});
  // Nesting past 64 levels is refused before it is parsed or walked: printing a value nested a
  // million levels deep in the error ran the stack out.
  const std::string deep =
      "{\"device\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  ExpectJsonError(deep, {"session config", "more than 64 levels", "line 1"});
}

// An empty key, or one far from every option, gets no "did you mean" (the empty key was answered
// with "device"), and the message says where the options are documented.
TEST(SessionConfigTest, UnknownKeysFarFromEveryOptionGetNoSuggestion) {
  for (const char* text : {R"({"": 1})", R"({"zzzzzzzzzzzzzz": 1})", R"({"x": 1})"}) {
    SCOPED_TRACE(text);
    auto c = SessionConfig::FromJson(text);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(Msg(c.status()).find("did you mean"), std::string::npos) << c.status();
    EXPECT_NE(Msg(c.status()).find("recsdk/config.h"), std::string::npos) << c.status();
  }
  ExpectJsonError(R"({"": 1})", {"an option name is empty"});
  ExpectJsonError(R"({"devise": "cpu"})", {"did you mean \"device\""});
  ExpectJsonError(R"({"op_select_impl_mode": "high_precision"})",
                  {"did you mean \"op_select_implmode\""});
  ExpectJsonError(R"({"Deterministic": 1})", {"did you mean \"deterministic\""});
}

// A 16 MB key or value: the "did you mean" search compared it in full against every option (16 MB
// took tens of seconds, 100 MB minutes) and the message quoted it whole. Now the search skips
// keys far longer than any option and the message quotes 80 bytes and the length.
TEST(SessionConfigTest, HugeKeysAndValuesAreBoundedInTimeAndInTheMessage) {
  const std::string huge(16 << 20, 'k');
  const auto start = std::chrono::steady_clock::now();
  auto c = SessionConfig::FromJson("{\"" + huge + "\": 1}");
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(c.ok());
  EXPECT_LT(Msg(c.status()).size(), 400u) << Msg(c.status()).substr(0, 400);
  EXPECT_NE(Msg(c.status()).find("(16777216 bytes in all)"), std::string::npos);
  EXPECT_LT(secs, 5.0);  // parsing 16 MB takes well under a second; the old search took minutes
  for (const char* option : {"dump_mode", "graph_run_mode", "precision_mode", "dump_step"}) {
    SCOPED_TRACE(option);
    auto v = SessionConfig::FromJson(fmt::format("{{\"{}\": \"{}\"}}", option, huge));
    ASSERT_FALSE(v.ok());
    EXPECT_LT(Msg(v.status()).size(), 600u) << Msg(v.status()).substr(0, 600);
    EXPECT_NE(Msg(v.status()).find("bytes in all"), std::string::npos) << v.status();
  }
  auto array = SessionConfig::FromJson("{\"device\": [\"" + std::string(1 << 20, 'a') + "\", \"" +
                                       std::string(1 << 20, 'b') + "\"]}");
  ASSERT_FALSE(array.ok());
  EXPECT_NE(Msg(array.status()).find("an array of 2 entries is not a string"), std::string::npos)
      << Msg(array.status()).substr(0, 600);
}

}  // namespace
}  // namespace recsdk

namespace recsdk {
namespace {

TEST(SessionConfigTest, MemoryLimitsAreEnforcedNamingLimitAmountAndOp) {
  Graph g;
  Scope root(&g);
  Output x = ops::Placeholder(root.WithOpName("x"), DType::kFloat32, Shape{32, 1});
  Output y = ops::Placeholder(root.WithOpName("y"), DType::kFloat32, Shape{1, 32});
  ops::MatMul(root.WithOpName("big"), x, y);
  SessionConfig c;
  // big's [32,32] float32 output needs 4096 bytes; the feeds (copied into graph memory on a
  // device whose memory is not the host's) 128 each.
  c.graph_memory_max_size = 2048;
  auto session = Session::Create(g, c);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<float> ones(32, 1.0f);
  auto out = (*session)->Run({{"x", *Tensor::FromValues<float>(Shape{32, 1}, ones)},
                              {"y", *Tensor::FromValues<float>(Shape{1, 32}, ones)}},
                             {"big"});
  ASSERT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << out.status();
  const std::string m(out.status().message());
  EXPECT_NE(m.find("\"big\""), std::string::npos) << m;
  EXPECT_NE(m.find("4096"), std::string::npos) << m;
  EXPECT_NE(m.find("graph_memory_max_size"), std::string::npos) << m;
}

}  // namespace
}  // namespace recsdk
