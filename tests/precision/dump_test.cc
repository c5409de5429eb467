// dump_test.cc: dumps (enable_dump, dump_step, dump_mode), overflow detection (enable_dump_debug),
// exception dumps (enable_exception_dump) of src/precision/dump_observer.cc, and the reader and
// find-nan of src/precision/dump_reader.cc, on small graphs run by a Session.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "nlohmann/json.hpp"
#include "recsdk/recsdk.h"
#include "src/common/crc32c.h"
#include "src/common/env.h"
#include "src/precision/dump_compare.h"
#include "src/precision/dump_observer.h"
#include "src/precision/dump_reader.h"
#include "src/table/npy.h"
#include "tests/precision/dump_test_util.h"

namespace recsdk {
namespace {

namespace fs = std::filesystem;
using internal::Env;
using testing::BuildLogModel;
using testing::Floats;
using testing::FreshDir;
using testing::MakeSession;
using testing::ReadText;
using testing::RunTool;
using testing::StepDirs;

TEST(DumpStepsTest, ParsesTheSpecGrammar) {
  auto steps = internal::DumpSteps::Parse("0|5|10-20");
  ASSERT_TRUE(steps.ok()) << steps.status();
  for (int64_t s : {0, 5, 10, 15, 20}) EXPECT_TRUE(steps->Contains(s)) << s;
  for (int64_t s : {1, 4, 6, 9, 21}) EXPECT_FALSE(steps->Contains(s)) << s;
  EXPECT_TRUE(internal::DumpSteps::Parse("")->Contains(12345));
  EXPECT_FALSE(internal::DumpSteps::Parse("5-3").ok());
  EXPECT_EQ(internal::DumpFileName("a/b:c", "output", 1), "a_b_c.output.1.npy");
}

TEST(DumpTest, DumpsExactlyTheChosenStepsReadableWithMatchingChecksums) {
  const std::string dir = FreshDir("steps");
  Graph g;
  BuildLogModel(&g);
  SessionConfig config;
  config.enable_dump = true;
  config.dump_path = dir;
  config.dump_step = "1|3-4";
  config.dump_mode = "all";
  auto session = MakeSession(g, config);
  ASSERT_NE(session, nullptr);
  for (int step = 0; step < 6; ++step) {
    auto out = session->Run({{"x", Floats({1.0f + step, 2.0f})}}, {"scope/z"});
    ASSERT_TRUE(out.ok()) << out.status();
  }
  const auto steps = StepDirs(dir);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps.begin()->first, 1);
  EXPECT_TRUE(steps.contains(3) && steps.contains(4));
  // The spec's layout: dump_path/{time}/{device id}/{graph name}/{graph id}/{step}.
  const fs::path rel = fs::relative(steps.at(3), dir);
  ASSERT_EQ(std::distance(rel.begin(), rel.end()), 5) << rel;
  auto part = rel.begin();
  EXPECT_EQ(part->string().size(), 14u) << rel;  // YYYYMMDDHHMMSS
  EXPECT_EQ((++part)->string(), "0");
  EXPECT_EQ((++part)->string(), "recsdk_graph");
  // Nothing unpublished is left behind.
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
  }

  for (const auto& [step, step_dir] : steps) {
    const nlohmann::json m = nlohmann::json::parse(ReadText(step_dir + "/manifest.json"));
    EXPECT_EQ(m["step"], step);
    ASSERT_EQ(m["ops"].size(), 3u);
    EXPECT_EQ(m["ops"][0]["name"], "three");
    EXPECT_EQ(m["ops"][1]["name"], "y");
    EXPECT_EQ(m["ops"][1]["type"], "Mul");
    EXPECT_EQ(m["ops"][1]["inputs"][0]["producer"], "x:0");
    EXPECT_EQ(m["ops"][1]["inputs"][1]["producer"], "three:0");
    EXPECT_EQ(m["ops"][2]["name"], "scope/z");
    std::set<std::string> files;
    for (const auto& op : m["ops"]) {
      for (const char* dir_key : {"inputs", "outputs"}) {
        for (const auto& t : op[dir_key]) {
          ASSERT_TRUE(t.contains("file")) << t;
          EXPECT_EQ(t["dtype"], "float32");
          const std::string path = step_dir + "/" + t["file"].get<std::string>();
          files.insert(t["file"].get<std::string>());
          const std::string bytes = ReadText(path);
          EXPECT_EQ(bytes.size(), t["bytes"].get<uint64_t>());
          EXPECT_EQ(internal::Crc32c(bytes), t["crc32c"].get<uint32_t>()) << path;
          auto npy = internal::ReadNpy(path);
          ASSERT_TRUE(npy.ok()) << npy.status();
          EXPECT_EQ(npy->descr, "<f4");
          EXPECT_EQ(npy->shape, t["shape"].get<std::vector<int64_t>>());
        }
      }
    }
    EXPECT_TRUE(files.contains("scope_z.output.0.npy"));
    EXPECT_TRUE(files.contains("y.input.0.npy"));
    // The values: x at step s was {1 + s, 2}; y = 3x; z = log(y).
    auto z = internal::ReadNpy(step_dir + "/scope_z.output.0.npy");
    ASSERT_TRUE(z.ok());
    float z0;
    std::memcpy(&z0, z->data.data(), 4);
    EXPECT_FLOAT_EQ(z0, std::log(3.0f * (1.0f + step)));
    // The reader agrees with the writer.
    auto read = internal::ReadDumpManifest(Env::Default(), step_dir);
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_EQ(read->ops.size(), 3u);
    auto payload = internal::ReadDumpTensor(Env::Default(), *read, read->ops[2].outputs[0]);
    ASSERT_TRUE(payload.ok()) << payload.status();
    EXPECT_EQ(payload->size(), 8u);
  }
  // No NaN anywhere: find-nan says so.
  auto report = internal::FindNan(Env::Default(), dir);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->first.has_value());
  EXPECT_EQ(report->steps, 3);
  EXPECT_EQ(report->tensors, 3 * 6);  // three: 1, y: 2 + 1, z: 1 + 1 per step
}

TEST(DumpTest, DumpModeInputOrOutput) {
  for (const char* mode : {"input", "output"}) {
    const std::string dir = FreshDir(std::string("mode_") + mode);
    Graph g;
    BuildLogModel(&g);
    SessionConfig config;
    config.enable_dump = true;
    config.dump_path = dir;
    config.dump_mode = mode;
    auto session = MakeSession(g, config);
    ASSERT_NE(session, nullptr);
    ASSERT_TRUE(session->Run({{"x", Floats({1, 2})}}, {"scope/z"}).ok());
    const auto steps = StepDirs(dir);
    ASSERT_EQ(steps.size(), 1u) << mode;
    std::set<std::string> files;
    for (const auto& e : fs::directory_iterator(steps.begin()->second)) {
      if (e.path().extension() == ".npy") files.insert(e.path().filename().string());
    }
    const std::set<std::string> want =
        std::string(mode) == "input"
            ? std::set<std::string>{"y.input.0.npy", "y.input.1.npy", "scope_z.input.0.npy"}
            : std::set<std::string>{"three.output.0.npy", "y.output.0.npy", "scope_z.output.0.npy"};
    EXPECT_EQ(files, want) << mode;
    // The manifest still lists what was not written, without a file.
    const nlohmann::json m =
        nlohmann::json::parse(ReadText(steps.begin()->second + "/manifest.json"));
    const auto& y = m["ops"][1];
    EXPECT_EQ(y["inputs"][0].contains("file"), std::string(mode) == "input");
    EXPECT_EQ(y["outputs"][0].contains("file"), std::string(mode) == "output");
    EXPECT_EQ(y["outputs"][0]["shape"], nlohmann::json::array({2}));
  }
}

TEST(DumpTest, OverflowDetectionReportsTheOpAtItsStepAndFindNanNamesIt) {
  const std::string dir = FreshDir("overflow");
  Graph g;
  BuildLogModel(&g);
  SessionConfig config;
  config.enable_dump_debug = true;
  config.dump_path = dir;
  auto session = MakeSession(g, config);
  ASSERT_NE(session, nullptr);
  // Steps 0 and 1 are finite; step 2 feeds a negative value: Log makes a NaN from finite inputs.
  for (float v : {1.0f, 2.0f, -1.0f, 4.0f}) {
    auto out = session->Run({{"x", Floats({v, 1.0f})}}, {"scope/z"});
    ASSERT_TRUE(out.ok()) << out.status();  // default: continue
  }
  EXPECT_EQ(session->stats().overflow_count, 1);
  const auto steps = StepDirs(dir);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps.begin()->first, 2);
  const nlohmann::json m =
      nlohmann::json::parse(ReadText(steps.begin()->second + "/manifest.json"));
  ASSERT_EQ(m["ops"].size(), 1u);
  EXPECT_EQ(m["ops"][0]["name"], "scope/z");
  EXPECT_EQ(m["ops"][0]["reasons"], nlohmann::json::array({"overflow"}));
  EXPECT_EQ(m["ops"][0]["overflow"][0]["nan"], 1);
  EXPECT_TRUE(m["ops"][0]["inputs"][0].contains("file"));
  EXPECT_TRUE(m["ops"][0]["outputs"][0].contains("file"));

  auto report = internal::FindNan(Env::Default(), dir);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->first.has_value());
  EXPECT_EQ(report->first->op, "scope/z");
  EXPECT_EQ(report->first->step, 2);
  EXPECT_EQ(report->first->inputs, internal::NanFinding::Inputs::kFinite);
  EXPECT_NE(report->Text().find("this op made the NaN/Inf"), std::string::npos) << report->Text();

  // dump_debug_mode atomic_overflow watches only the accumulating ops: Log is not one.
  const std::string atomic_dir = FreshDir("overflow_atomic");
  config.dump_path = atomic_dir;
  config.dump_debug_mode = "atomic_overflow";
  auto atomic = MakeSession(g, config);
  ASSERT_TRUE(atomic->Run({{"x", Floats({-1.0f, 1.0f})}}, {"scope/z"}).ok());
  EXPECT_EQ(atomic->stats().overflow_count, 0);
  EXPECT_TRUE(StepDirs(atomic_dir).empty());
}

// stop_on_overflow: the Run stops right after the op that overflowed, with an error naming the
// op, the step and the dump directory; the ops after it do not run (the variable's update), the
// step counter does not advance, and the overflowing op's tensors are dumped.
TEST(DumpTest, StopOnOverflowStopsTheRunAtTheOpNamingStepAndDump) {
  const std::string dir = FreshDir("overflow_stop");
  Graph g;
  std::string value, init, update;
  {
    Scope s(&g);
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{2});
    const Variable v = Variable::Make(s, "v", Shape{2}, {.initializer = Initializer::Zeros()});
    value = v.value().name();
    init = GlobalVariablesInitializer(s)->name();
    Output z = ops::Log(s.WithOpName("scope/z"), x);
    update = AssignAdd(s.WithOpName("update"), v, z)->name();
    ASSERT_TRUE(g.status().ok()) << g.status();
  }
  SessionConfig config;
  config.enable_dump_debug = true;
  config.stop_on_overflow = true;
  config.dump_path = dir;
  auto session = MakeSession(g, config);
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->Run({}, {}, {init}, nullptr).ok());                               // step 0
  ASSERT_TRUE(session->Run({{"x", Floats({1.0f, 1.0f})}}, {}, {update}, nullptr).ok());  // 1
  ::testing::internal::CaptureStderr();
  const Status s = session->Run({{"x", Floats({-1.0f, 1.0f})}}, {}, {update}, nullptr);  // 2
  (void)::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  const std::string msg(s.message());
  EXPECT_NE(msg.find("overflow at step 2: op \"scope/z\" (Log)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stop_on_overflow"), std::string::npos) << msg;
  EXPECT_EQ(session->stats().overflow_count, 1);
  // The directory the error names is the published step, holding the op's inputs and outputs.
  const auto steps = StepDirs(dir);
  ASSERT_EQ(steps.size(), 1u);
  ASSERT_EQ(steps.begin()->first, 2);
  EXPECT_NE(msg.find("\"" + steps.begin()->second + "\""), std::string::npos) << msg;
  const nlohmann::json m =
      nlohmann::json::parse(ReadText(steps.begin()->second + "/manifest.json"));
  ASSERT_EQ(m["ops"].size(), 1u);
  EXPECT_EQ(m["ops"][0]["name"], "scope/z");
  EXPECT_TRUE(m["ops"][0]["inputs"][0].contains("file"));
  // The update after the op did not run: v holds step 1's log(1) = 0, not a NaN.
  auto v = session->Run({}, {value});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)[0].data<float>()[0], 0.0f);
  EXPECT_EQ((*v)[0].data<float>()[1], 0.0f);
  // The failed Run did not count as a step: the next Run is step 2 again, and finite inputs pass.
  ASSERT_TRUE(session->Run({{"x", Floats({2.0f, 1.0f})}}, {}, {update}, nullptr).ok());
  EXPECT_EQ(session->stats().overflow_count, 1);
}

// A cast to float16 of a value past its range (the narrowing a precision mode inserts): the
// overflow report says the value left float16's range rather than only "made Inf".
TEST(DumpTest, OverflowAtANarrowingCastNamesTheNarrowTypesRange) {
  const std::string dir = FreshDir("overflow_narrow");
  Graph g;
  {
    Scope s(&g);
    Output x = ops::Placeholder(s.WithOpName("x"), DType::kFloat32, Shape{2});
    ops::Cast(s.WithOpName("half"), ops::Mul(s.WithOpName("big"), x, x), DType::kFloat16);
    ASSERT_TRUE(g.status().ok()) << g.status();
  }
  SessionConfig config;
  config.enable_dump_debug = true;
  config.dump_path = dir;
  auto session = MakeSession(g, config);
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->Run({{"x", Floats({10.0f, 2.0f})}}, {"half"}).ok());
  EXPECT_EQ(session->stats().overflow_count, 0);  // 100 fits float16
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(session->Run({{"x", Floats({300.0f, 2.0f})}}, {"half"}).ok());  // 90000 > 65504
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(session->stats().overflow_count, 1);
  EXPECT_NE(err.find("op \"half\" (Cast)"), std::string::npos) << err;
  EXPECT_NE(err.find("it narrows to float16, whose range is +-65504"), std::string::npos) << err;
  const auto steps = StepDirs(dir);
  ASSERT_EQ(steps.size(), 1u);
  const nlohmann::json m =
      nlohmann::json::parse(ReadText(steps.begin()->second + "/manifest.json"));
  ASSERT_EQ(m["ops"].size(), 1u);
  EXPECT_EQ(m["ops"][0]["narrowed_to"], "float16");
}

TEST(DumpTest, FindNanTracesAFedNanUpstream) {
  const std::string dir = FreshDir("fed_nan");
  Graph g;
  BuildLogModel(&g);
  SessionConfig config;
  config.enable_dump = true;
  config.enable_dump_debug = true;
  config.dump_path = dir;
  config.dump_mode = "all";
  auto session = MakeSession(g, config);
  ASSERT_TRUE(session->Run({{"x", Floats({1, 2})}}, {"scope/z"}).ok());
  ASSERT_TRUE(
      session->Run({{"x", Floats({std::numeric_limits<float>::quiet_NaN(), 2})}}, {"scope/z"})
          .ok());
  // A NaN fed in is not an overflow: no op made it.
  EXPECT_EQ(session->stats().overflow_count, 0);
  auto report = internal::FindNan(Env::Default(), dir);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->first.has_value());
  EXPECT_EQ(report->first->step, 1);
  EXPECT_EQ(report->first->op, "y");  // the first op whose output holds it
  EXPECT_EQ(report->first->inputs, internal::NanFinding::Inputs::kNonFinite);
  EXPECT_NE(report->Text().find("trace upstream"), std::string::npos) << report->Text();
}

TEST(DumpTest, ExceptionDumpHoldsTheFailingOpsInputsAndTheErrorNamesIt) {
  const std::string dir = FreshDir("exception");
  Graph g;
  Scope root(&g);
  Output params = ops::Const(root.WithOpName("params"),
                             *Tensor::FromValues<float>(Shape{3, 2}, {1, 2, 3, 4, 5, 6}));
  Output ids = ops::Placeholder(root.WithOpName("ids"), DType::kInt64, Shape{2});
  ops::Gather(root.WithOpName("g"), params, ids);
  SessionConfig config;
  config.enable_exception_dump = 1;
  config.dump_path = dir;
  auto session = MakeSession(g, config);
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->Run({{"ids", *Tensor::FromValues<int64_t>(Shape{2}, {0, 2})}}, {"g"}).ok());
  EXPECT_TRUE(StepDirs(dir).empty());  // nothing failed, nothing dumped
  auto failed = session->Run({{"ids", *Tensor::FromValues<int64_t>(Shape{2}, {0, 7})}}, {"g"});
  ASSERT_FALSE(failed.ok());
  const std::string message(failed.status().message());
  EXPECT_NE(message.find("out of range"), std::string::npos) << message;
  EXPECT_NE(message.find("exception dump"), std::string::npos) << message;
  const auto steps = StepDirs(dir);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps.begin()->first, 1);
  EXPECT_NE(message.find(steps.begin()->second), std::string::npos) << message;
  const nlohmann::json m =
      nlohmann::json::parse(ReadText(steps.begin()->second + "/manifest.json"));
  ASSERT_EQ(m["ops"].size(), 1u);
  EXPECT_EQ(m["ops"][0]["name"], "g");
  EXPECT_EQ(m["ops"][0]["reasons"], nlohmann::json::array({"exception"}));
  EXPECT_NE(m["ops"][0]["error"].get<std::string>().find("out of range"), std::string::npos);
  auto ids_file = internal::ReadNpy(steps.begin()->second + "/g.input.1.npy");
  ASSERT_TRUE(ids_file.ok()) << ids_file.status();
  int64_t id1;
  std::memcpy(&id1, ids_file->data.data() + 8, 8);
  EXPECT_EQ(id1, 7);
}

TEST(DumpTest, AFailedWriteIsAClearErrorAndTheNextStepDumps) {
  const std::string dir = FreshDir("fault");
  Graph g;
  BuildLogModel(&g);
  internal::FaultInjectionEnv env(Env::Default());
  SessionConfig config;
  config.enable_dump = true;
  config.dump_path = dir;
  config.dump_env = &env;
  auto session = MakeSession(g, config);
  ASSERT_NE(session, nullptr);
  env.fail_write_after = 1;  // the second tensor file's write fails
  Status s = session->Run({{"x", Floats({1, 2})}}, {"scope/z"}).status();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("dump_path \"" + dir + "\""), std::string::npos) << s;
  EXPECT_NE(s.message().find(".npy"), std::string::npos) << s;  // names the file
  env.fail_write_after = -1;
  env.disk_full_after_bytes = 0;
  s = session->Run({{"x", Floats({1, 2})}}, {"scope/z"}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  env.disk_full_after_bytes = -1;
  ASSERT_TRUE(session->Run({{"x", Floats({1, 2})}}, {"scope/z"}).ok());
  auto report = internal::FindNan(Env::Default(), dir);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GE(report->steps, 1);
}

TEST(DumpTest, ADumpPathThatCannotBeADirectoryIsRefusedAtCreate) {
  const std::string file = FreshDir("not_a_dir") + "/file";
  std::ofstream(file) << "x";
  Graph g;
  BuildLogModel(&g);
  SessionConfig config;
  config.enable_exception_dump = 1;
  config.dump_path = file + "/dumps";
  auto session = Session::Create(g, config);
  ASSERT_FALSE(session.ok());
  EXPECT_NE(session.status().message().find("dump_path \"" + file + "/dumps\""), std::string::npos)
      << session.status();
  EXPECT_NE(session.status().message().find("writable directory"), std::string::npos)
      << session.status();
}

TEST(DumpTest, FindNanNamesACorruptOrMissingFile) {
  const std::string dir = FreshDir("corrupt");
  Graph g;
  BuildLogModel(&g);
  SessionConfig config;
  config.enable_dump = true;
  config.dump_path = dir;
  auto session = MakeSession(g, config);
  ASSERT_TRUE(session->Run({{"x", Floats({1, 2})}}, {"scope/z"}).ok());
  const std::string step_dir = StepDirs(dir).begin()->second;
  const std::string file = step_dir + "/y.output.0.npy";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  auto corrupt = internal::FindNan(Env::Default(), dir);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(corrupt.status().message().find(file), std::string::npos) << corrupt.status();
  EXPECT_NE(corrupt.status().message().find("CRC-32C"), std::string::npos) << corrupt.status();
  fs::remove(file);
  auto missing = internal::FindNan(Env::Default(), dir);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_NE(missing.status().message().find(file), std::string::npos) << missing.status();
  // A manifest that is not one.
  std::ofstream(step_dir + "/manifest.json") << "{\"format\": \"recsdk-dump\", \"version\": 1}";
  auto bad = internal::FindNan(Env::Default(), step_dir);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  EXPECT_NE(bad.status().message().find("manifest.json"), std::string::npos) << bad.status();
  std::ofstream(step_dir + "/manifest.json") << "[[[[";
  EXPECT_EQ(internal::FindNan(Env::Default(), step_dir).status().code(),
            absl::StatusCode::kDataLoss);
  // Nested past the depth every recsdk reader allows: refused before parsing, naming where.
  std::ofstream(step_dir + "/manifest.json") << std::string(100000, '[') + std::string(100000, ']');
  auto deep = internal::FindNan(Env::Default(), step_dir);
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kDataLoss) << deep.status();
  EXPECT_NE(deep.status().message().find("manifest.json"), std::string::npos) << deep.status();
  EXPECT_NE(deep.status().message().find("levels deep"), std::string::npos) << deep.status();
  EXPECT_EQ(internal::FindNan(Env::Default(), dir + "/nothing_here").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(internal::FindNan(Env::Default(), FreshDir("empty")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Table lookups are dumped as any op: the ids in, the rows out. The model trains with four ops at
// once (DNN_V100:4), so the observer's callbacks arrive concurrently. A NaN planted in one table
// row shows up in the lookup, and find-nan names the lookup as the source.
TEST(DumpTest, TableLookupsAreDumpedAndANanRowIsTracedToTheTable) {
  const std::string dir = FreshDir("table");
  Graph g;
  Scope s(&g);
  TableConfig c;
  c.name = "user_table";
  c.dim = 4;
  c.device_vocabulary_size = 64;
  c.initializer = Initializer::Uniform(-0.5, 0.5, 7);
  auto table = create_table(s, c, SparseOptimizerConfig::SGD(0.1f));
  ASSERT_TRUE(table.ok()) << table.status();
  Output ids = ops::Placeholder(s.WithOpName("ids"), DType::kInt64, Shape{2, 2});
  auto emb = sparse_lookup(s, *table, ids);
  ASSERT_TRUE(emb.ok()) << emb.status();
  Output loss = ops::ReduceSum(s.WithOpName("loss"), ops::Square(s, *emb));
  auto train = SparseMinimize(s, loss);
  ASSERT_TRUE(train.ok()) << train.status();
  Node* init = GlobalVariablesInitializer(s);
  SessionConfig config;
  config.enable_dump = true;
  config.dump_path = dir;
  config.dump_mode = "all";
  config.dump_step = "1-2";
  config.stream_max_parallel_num = "DNN_V100:4";
  auto session = MakeSession(g, config);
  ASSERT_NE(session, nullptr);
  ASSERT_TRUE(session->Run({}, {}, {init}).ok());  // step 0
  const Tensor batch = *Tensor::FromValues<int64_t>(Shape{2, 2}, {3, 4, 3, 5});
  ASSERT_TRUE(session->Run({{"ids", batch}}, {loss}, {*train}).ok());  // step 1: clean
  auto* t = *LookupTable(*session, "user_table");
  // The rows of keys 3, 4 and 5 after step 1's update, which the update's dump reads back.
  std::vector<std::vector<float>> updated;
  for (int64_t key : {3, 4, 5}) {
    std::vector<float> row(4);
    ASSERT_TRUE(t->Gather({t->FindRow(key)}, absl::MakeSpan(row)).ok());
    updated.push_back(row);
  }
  // Plant a NaN in key 4's row.
  const uint32_t row = t->FindRow(4);
  float* address = nullptr;
  ASSERT_TRUE(t->RowAddresses({row}, absl::MakeSpan(&address, 1)).ok());
  address[1] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(session->Run({{"ids", batch}}, {loss}, {*train}).ok());  // step 2

  const auto steps = StepDirs(dir);
  ASSERT_EQ(steps.size(), 2u);
  auto step1 = internal::ReadDumpManifest(Env::Default(), steps.at(1));
  ASSERT_TRUE(step1.ok()) << step1.status();
  const internal::DumpOp* gather = nullptr;
  const internal::DumpOp* keys = nullptr;
  for (const auto& op : step1->ops) {
    if (op.type == "TableGather") gather = &op;
    if (op.type == "SparseLookup") keys = &op;
  }
  ASSERT_NE(gather, nullptr);
  ASSERT_NE(keys, nullptr);
  // The lookup's ids, as fed.
  bool ids_dumped = false;
  for (const auto& in : keys->inputs) {
    if (in.producer != "ids:0") continue;
    auto payload = internal::ReadDumpTensor(Env::Default(), *step1, in);
    ASSERT_TRUE(payload.ok()) << payload.status();
    ASSERT_EQ(payload->size(), 4 * sizeof(int64_t));
    int64_t id[4];
    std::memcpy(id, payload->data(), sizeof(id));
    EXPECT_EQ(std::vector<int64_t>(id, id + 4), (std::vector<int64_t>{3, 4, 3, 5}));
    ids_dumped = true;
  }
  EXPECT_TRUE(ids_dumped);
  // The update's dump holds the rows it left: [3, 4], one per key it updated.
  const internal::DumpOp* apply = nullptr;
  for (const auto& op : step1->ops) {
    if (op.type == "TableApply") apply = &op;
  }
  ASSERT_NE(apply, nullptr);
  ASSERT_EQ(apply->outputs.size(), 1u);
  EXPECT_EQ(apply->outputs[0].shape, (std::vector<int64_t>{3, 4}));
  auto after = internal::ReadDumpTensor(Env::Default(), *step1, apply->outputs[0]);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), 12 * sizeof(float));
  std::vector<std::vector<float>> dumped(3, std::vector<float>(4));
  for (int r = 0; r < 3; ++r) std::memcpy(dumped[r].data(), after->data() + r * 16, 16);
  std::sort(dumped.begin(), dumped.end());
  std::sort(updated.begin(), updated.end());
  EXPECT_EQ(dumped, updated);
  // The rows it returned: [2, 2, 4] float32.
  ASSERT_FALSE(gather->outputs.empty());
  EXPECT_EQ(gather->outputs[0].shape, (std::vector<int64_t>{2, 2, 4}));
  EXPECT_FALSE(gather->outputs[0].file.empty());
  // Every file of both steps verifies, and the first NaN is the lookup's, from the table.
  auto report = internal::FindNan(Env::Default(), dir);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(report->first.has_value());
  EXPECT_EQ(report->first->step, 2);
  EXPECT_EQ(report->first->type, "TableGather") << report->Text();
  EXPECT_TRUE(report->first->table_lookup);
  EXPECT_EQ(report->first->inputs, internal::NanFinding::Inputs::kFinite) << report->Text();
  EXPECT_NE(report->Text().find("the table is the source"), std::string::npos) << report->Text();
}

// Nothing read from a dump is trusted: random byte flips, truncations and hostile sizes in the
// manifest or a tensor file give an error (or, when a flip lands where it changes nothing checked,
// a report), never a crash or a huge allocation.
TEST(DumpTest, FindNanAndCompareSurviveHostileFiles) {
  const std::string dir = FreshDir("hostile");
  Graph g;
  BuildLogModel(&g);
  SessionConfig config;
  config.enable_dump = true;
  config.dump_path = dir;
  config.dump_mode = "all";
  auto session = MakeSession(g, config);
  ASSERT_TRUE(session->Run({{"x", Floats({1, 2})}}, {"scope/z"}).ok());
  const std::string step = StepDirs(dir).begin()->second;
  const std::string clean = FreshDir("hostile_clean");
  fs::copy(dir, clean, fs::copy_options::recursive);
  const std::vector<std::string> files = {"manifest.json", "y.output.0.npy", "y.input.1.npy"};
  std::map<std::string, std::string> original;
  for (const auto& f : files) original[f] = ReadText(step + "/" + f);
  auto put = [&](const std::string& f, const std::string& bytes) {
    std::ofstream(step + "/" + f, std::ios::binary | std::ios::trunc) << bytes;
  };
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int errors = 0;
  for (int i = 0; i < 150; ++i) {
    for (const auto& [f, bytes] : original) put(f, bytes);
    const std::string& f = files[next() % files.size()];
    std::string bytes = original[f];
    switch (next() % 3) {
      case 0:  // flip a few bytes
        for (int k = 0; k < 3; ++k) bytes[next() % bytes.size()] = static_cast<char>(next());
        break;
      case 1:  // truncate
        bytes.resize(next() % bytes.size());
        break;
      default:  // a digit becomes a run of nines: huge sizes, ports, steps
        if (size_t pos = bytes.find_first_of("0123456789", next() % bytes.size());
            pos != std::string::npos) {
          bytes.replace(pos, 1, "99999999999999999999");
        }
        break;
    }
    put(f, bytes);
    auto report = internal::FindNan(Env::Default(), dir);
    if (!report.ok()) {
      ++errors;
      EXPECT_FALSE(report.status().message().empty());
    }
    auto compared = internal::CompareDumps(Env::Default(), dir, clean, 0.98);
    if (!compared.ok()) {
      EXPECT_FALSE(compared.status().message().empty());
    }
  }
  EXPECT_GT(errors, 75);  // most mutations are caught
  for (const auto& [f, bytes] : original) put(f, bytes);
  // Sizes past what a dump may hold are refused before anything is allocated.
  std::string manifest = original["manifest.json"];
  const std::string shape = "\"shape\": [\n      2\n     ]";
  ASSERT_NE(manifest.find(shape), std::string::npos) << manifest;
  manifest.replace(manifest.find(shape), shape.size(),
                   "\"shape\": [4611686018427387904, 4611686018427387904]");
  put("manifest.json", manifest);
  auto huge = internal::FindNan(Env::Default(), dir);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kDataLoss) << huge.status();
}

TEST(FindNanToolTest, ExitStatusZeroOneTwo) {
  if (std::getenv("RECSDK_TOOL") == nullptr) GTEST_SKIP() << "RECSDK_TOOL is not set";
  const std::string dir = FreshDir("tool");
  Graph g;
  BuildLogModel(&g);
  SessionConfig config;
  config.enable_dump = true;
  config.dump_path = dir;
  config.dump_step = "0|2";
  auto session = MakeSession(g, config);
  for (float v : {1.0f, 2.0f, -3.0f}) {
    ASSERT_TRUE(session->Run({{"x", Floats({v, 1.0f})}}, {"scope/z"}).ok());
  }
  const auto steps = StepDirs(dir);
  ASSERT_EQ(steps.size(), 2u);
  auto [clean_rc, clean] = RunTool("find-nan " + steps.at(0));
  EXPECT_EQ(clean_rc, 0) << clean;
  EXPECT_NE(clean.find("no NaN or Inf"), std::string::npos) << clean;
  auto [found_rc, found] = RunTool("find-nan " + dir);
  EXPECT_EQ(found_rc, 1) << found;
  EXPECT_NE(found.find("step 2: op \"scope/z\" (Log)"), std::string::npos) << found;
  // In dump_mode output, z's input is its producer y's dumped output: finite, so z made the NaN.
  EXPECT_NE(found.find("this op made the NaN/Inf"), std::string::npos) << found;
  fs::remove(steps.at(2) + "/y.output.0.npy");
  auto [error_rc, error] = RunTool("find-nan " + dir);
  EXPECT_EQ(error_rc, 2) << error;
  EXPECT_NE(error.find("y.output.0.npy\" is missing"), std::string::npos) << error;
  EXPECT_EQ(RunTool("find-nan").first, 2);
}

}  // namespace
}  // namespace recsdk
