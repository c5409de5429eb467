// spec_names_test.cc: every row of docs/migration.md that maps a name of the spec (session
// options, the SDK's APIs, environment variables, tools) to a recsdk call runs that call here, with
// small real arguments, and checks what it does: the option's effect or its documented refusal,
// the API's result. Each case lists in `.spec` the spec names of the doc rows it exercises;
// scripts/check_migration_doc.py (CTest docs_migration_names) fails when a name of a mapped row is
// missing from these lists, so a row cannot be added to the doc without a case here.
//
// The cases run in one process, in order; those that touch process-wide state (init, the
// communicator, environment variables) restore it before they return.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/recsdk.h"
#include "src/pipeline/tfrecord.h"
#include "tests/precision/dump_test_util.h"
#include "tests/session/table_test_util.h"
#include "tests/session/test_models.h"

namespace recsdk {
namespace {

namespace fs = std::filesystem;
using testing::BuildLinearModel;
using testing::BuildLogModel;
using testing::Floats;
using testing::FreshDir;
using ::testing::HasSubstr;
using testing::Ids;
using testing::LinearFeeds;
using testing::LinearModel;
using testing::MakeSession;
using testing::SmallTable;
using testing::StepDirs;
using testing::ValueOrDie;

template <typename T>
T Must(StatusOr<T> v) {
  return ValueOrDie(std::move(v));
}

// With: a T with the fields `set` assigns. (A designated initializer would have to name every
// field that has no default member initializer, under -Wmissing-field-initializers.)
template <typename T, typename F>
T With(F set) {
  T o{};
  set(o);
  return o;
}

// RunTool: `recsdk ARGS` (tests/CMakeLists.txt passes the tool's path in RECSDK_TOOL).
std::pair<int, std::string> RunTool(const std::string& args) {
  if (std::getenv("RECSDK_TOOL") == nullptr) {
    ADD_FAILURE() << "RECSDK_TOOL is not set; run this test through ctest";
    return {-1, ""};
  }
  return testing::RunTool(args);
}

// SpecCase: one case: the spec names of the doc rows it exercises, and the check.
struct SpecCase {
  std::vector<std::string> spec;
  std::function<void()> run;
};

// ExpectRefused: `s` is an error of `code` whose message names `name`.
void ExpectRefused(const Status& s, const std::string& name,
                   absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(name));
}

std::vector<float> Values(Session& s, const std::string& name, const FeedList& feeds = {}) {
  std::vector<Tensor> out = Must(s.Run(feeds, {name}));
  auto flat = out[0].flat<float>();
  return {flat.begin(), flat.end()};
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// FilesUnder: the regular files below `dir` whose name starts with `prefix`.
int FilesUnder(const std::string& dir, const std::string& prefix = "") {
  int n = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename().string().starts_with(prefix)) ++n;
  }
  return n;
}

// RunLinear: `steps` training steps of LinearModel under `config`; the losses, or the first error.
StatusOr<std::vector<float>> RunLinear(const SessionConfig& config, int steps) {
  LinearModel m;
  BuildLinearModel(&m);
  auto s = Session::Create(m.graph, config);
  if (!s.ok()) return s.status();
  if (Status st = (*s)->Run({}, {}, {m.init}).status(); !st.ok()) return st;
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    auto out = (*s)->Run(LinearFeeds(2.0f), {m.loss}, {m.train});
    if (!out.ok()) return out.status();
    losses.push_back((*out)[0].scalar<float>());
  }
  return losses;
}

std::vector<std::string> Passes(const SessionConfig& config) {
  LinearModel m;
  BuildLinearModel(&m);
  return Must(Session::Create(m.graph, config))->applied_passes();
}

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// DenseRun: LinearModel's regression trained by `opt` through ComputeGradients / ApplyGradients
// for `steps` steps on x scaled by `scale` (the last step's); the losses, the weights, the graph's
// op types.
struct DenseRun {
  std::vector<float> losses, w;
  std::vector<std::string> op_types;
};
DenseRun TrainDense(const std::shared_ptr<Optimizer>& opt, int steps, float last_scale = 2.0f) {
  Graph g;
  Scope r(&g);
  Output x = ops::Placeholder(r.WithOpName("x"), DType::kFloat32, Shape{4, 2});
  Output y = ops::Placeholder(r.WithOpName("y"), DType::kFloat32, Shape{4, 1});
  Variable w = Variable::Make(r, "w", Shape{2, 1}, {.initializer = Initializer::Constant(0.25)});
  Output loss = ops::ReduceMean(
      r.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(r, y, ops::MatMul(r, x, w.value())));
  GradsAndVars grads = Must(opt->ComputeGradients(r, loss));
  const Variable global_step = GetOrCreateGlobalStep(r);
  Node* train = Must(opt->ApplyGradients(r, grads, &global_step));
  Node* init = GlobalVariablesInitializer(r);
  auto s = Must(Session::Create(g));
  EXPECT_TRUE(s->Run({}, {}, {init}).ok());
  DenseRun out;
  for (int i = 0; i < steps; ++i) {
    auto l = s->Run(LinearFeeds(i + 1 == steps ? last_scale : 2.0f), {loss}, {train});
    EXPECT_TRUE(l.ok()) << l.status();
    if (l.ok()) out.losses.push_back((*l)[0].scalar<float>());
  }
  out.w = Values(*s, "w/read");
  for (const Node* n : g.nodes()) out.op_types.push_back(std::string(n->type()));
  return out;
}

// SparseModel: one table looked up by a [batch, n] id placeholder "ids"; loss = sum of the rows.
struct SparseModel {
  Graph graph;
  SparseTable table;
  Output ids, emb, loss;
};
void BuildSparse(SparseModel* m, const TableConfig& config, const SparseOptimizerConfig& opt,
                 int64_t batch, int64_t n, const SparseLookupOptions& lookup = {}) {
  Scope r(&m->graph);
  m->table = Must(create_table(r, config, opt));
  m->ids = ops::Placeholder(r.WithOpName("ids"), DType::kInt64, Shape{batch, n});
  m->emb = Must(sparse_lookup(r, m->table, m->ids, lookup));
  m->loss = ops::ReduceSum(r.WithOpName("loss"), m->emb);
}

int64_t TableSize(Session& s, const std::string& name) {
  return Must(LookupTable(s, name))->size();
}

// Tiny Estimator model: ids [B,1] through table "ids" (dim 4, pooled), dense [B,2], an MLP.
InputFn TinyInput(int64_t rows, int64_t batch, int* batches_read = nullptr) {
  return [=]() -> StatusOr<std::unique_ptr<Dataset>> {
    std::vector<int64_t> ids;
    std::vector<float> dense, label;
    for (int64_t r = 0; r < rows; ++r) {
      ids.push_back(r % 7);
      dense.push_back(static_cast<float>(r % 3));
      dense.push_back(1.0f);
      label.push_back(r % 7 < 3 ? 1.0f : 0.0f);
    }
    auto ds = InMemoryDataset({{"ids", ids, 1}, {"dense", dense, 2}, {"label", label, 1}});
    if (!ds.ok()) return ds.status();
    auto batched = BatchRows(*std::move(ds), batch, {.drop_remainder = true});
    if (!batched.ok() || batches_read == nullptr) return batched;
    return Map(*std::move(batched), [batches_read](Batch b) -> StatusOr<Batch> {
      ++*batches_read;
      return b;
    });
  };
}

ModelFn TinyModel() {
  return [](const Scope& s, const Features& f, const Labels& l, ModeKeys mode,
            const Params&) -> StatusOr<EstimatorSpec> {
    TableConfig c = SmallTable("ids", 4, 64);
    auto table = create_table(s, c, SparseOptimizerConfig::Adagrad(0.1f));
    if (!table.ok()) return table.status();
    auto emb = sparse_lookup(s, *table, f.at("ids"), With<SparseLookupOptions>([&](auto& o) {
                               o.is_train = mode == ModeKeys::kTrain;
                               o.combiner = Combiner::kSum;
                             }));
    if (!emb.ok()) return emb.status();
    Output logits = layers::Mlp(s, ops::Concat(s, {*emb, f.at("dense")}, 1),
                                {.hidden_units = {4}, .output_units = 1});
    EstimatorSpec spec;
    spec.predictions["prob"] = ops::Sigmoid(s, logits);
    if (mode == ModeKeys::kPredict) return spec;
    spec.loss = ops::ReduceMean(s, ops::SigmoidCrossEntropyWithLogits(s, l.at("label"), logits));
    spec.eval_metric_ops = {{"auc", MetricKind::kAuc, spec.predictions["prob"], l.at("label")}};
    if (mode == ModeKeys::kTrain) {
      SgdOptimizer sgd(SgdOptions{0.1});
      auto dense = sgd.Minimize(s, spec.loss);
      if (!dense.ok()) return dense.status();
      auto sparse = SparseMinimize(s, spec.loss);
      if (!sparse.ok()) return sparse.status();
      spec.train_op = ops::Group(s, {*dense, *sparse});
    }
    return spec;
  };
}

RunConfig TinyConfig(const std::string& name) {
  RunConfig c;
  c.model_dir = FreshDir(name);
  c.save_checkpoints_secs = 0;
  c.save_checkpoints_steps = 0;
  c.log_step_count_steps = 0;
  c.seed = 3;
  return c;
}

// SetEnv: sets (or with nullptr unsets) an environment variable for the scope of one case.
class SetEnv {
 public:
  SetEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~SetEnv() {
    if (old_.empty()) {
      ::unsetenv(name_.c_str());
    } else {
      ::setenv(name_.c_str(), old_.c_str(), 1);
    }
  }

 private:
  std::string name_, old_;
};

const std::vector<SpecCase>& Cases() {
  static const auto* cases = new std::vector<SpecCase>{
      // --- Session configuration (spec 000) ------------------------------------------------
      {.spec = {"use_off_line"},
       .run =
           [] {
             SessionConfig c;
             c.use_off_line = true;
             ExpectRefused(c.Validate(), "use_off_line");
             c.use_off_line = false;
             EXPECT_EQ(Must(RunLinear(c, 2)).size(), 2u);
           }},
      {.spec = {"enable_data_pre_proc"},
       .run =
           [] {
             SessionConfig c;
             c.enable_data_pre_proc = true;
             ExpectRefused(c.Validate(), "enable_data_pre_proc");
           }},
      {.spec = {"iterations_per_loop", "set_iteration_per_loop"},
       .run =
           [] {
             LinearModel m;
             BuildLinearModel(&m);
             SessionConfig c;
             c.iterations_per_loop = 3;
             auto s = Must(Session::Create(m.graph, c));
             ASSERT_TRUE(s->Run({}, {}, {m.init}).ok());
             int fed = 0;
             BatchSource next = [&](FeedList* f) -> StatusOr<bool> {
               *f = LinearFeeds(2.0f);
               ++fed;
               return true;
             };
             LoopResult r = Must(s->RunLoop(3, next, {m.loss}, {m.train}));
             EXPECT_EQ(r.steps, 3);
             EXPECT_EQ(fed, 3);
             ExpectRefused(s->RunLoop(2, next, {m.loss}, {m.train}).status(),
                           "iterations_per_loop");
           }},
      {.spec = {"profiling_mode", "profiling_options", "fp_point", "bp_point"},
       .run =
           [] {
             LinearModel m;
             BuildLinearModel(&m);
             SessionConfig c;
             c.profiling_mode = true;
             c.profiling_options = "training_trace:task_trace";
             c.fp_point = m.matmul;
             c.bp_point = m.last_grad;
             c.profiling_dir = FreshDir("profiling");
             {
               auto s = Must(Session::Create(m.graph, c));
               ASSERT_TRUE(s->Run({}, {}, {m.init}).ok());
               ASSERT_TRUE(s->Run(LinearFeeds(2.0f), {m.loss}, {m.train}).ok());
               ASSERT_TRUE(s->Close().ok());
             }
             EXPECT_GE(FilesUnder(c.profiling_dir, "trace_"), 2);
             SessionConfig bad = c;
             bad.fp_point = "no_such_node";
             EXPECT_THAT(Session::Create(m.graph, bad).status().ToString(),
                         HasSubstr("no_such_node"));
             bad = c;
             bad.profiling_options = "op_trace:training_trace";
             ExpectRefused(bad.Validate(), "op_trace");
             bad = c;
             bad.bp_point = "";
             ExpectRefused(bad.Validate(), "bp_point");
           }},
      {.spec = {"enable_dump", "dump_path", "dump_step", "dump_mode", "TF_DUMP_STEP", "sess_dump",
                "session_dump_config"},
       .run =
           [] {
             Graph g;
             BuildLogModel(&g);
             SessionConfig c;
             c.enable_dump = true;
             c.dump_path = FreshDir("dump");
             c.dump_step = "1|3-4";
             c.dump_mode = "input";
             auto s = MakeSession(g, c);
             for (int i = 0; i < 5; ++i)
               ASSERT_TRUE(s->Run({{"x", Floats({1, 2})}}, {"scope/z"}).ok());
             ASSERT_TRUE(s->Close().ok());
             std::vector<int64_t> steps;
             for (const auto& [step, dir] : StepDirs(c.dump_path)) steps.push_back(step);
             EXPECT_EQ(steps, (std::vector<int64_t>{1, 3, 4}));
             SessionConfig bad;
             bad.enable_dump = true;
             ExpectRefused(bad.Validate(), "dump_path");
             bad.dump_path = c.dump_path;
             bad.dump_mode = "outputs";
             ExpectRefused(bad.Validate(), "dump_mode");
           }},
      {.spec = {"enable_dump_debug", "dump_debug_mode"},
       .run =
           [] {
             for (const std::string mode : {"all", "aicore_overflow", "atomic_overflow"}) {
               Graph g;
               BuildLogModel(&g);
               SessionConfig c;
               c.enable_dump_debug = true;
               c.dump_debug_mode = mode;
               c.dump_path = FreshDir("overflow_" + mode);
               auto s = MakeSession(g, c);
               // Log(-3) is NaN from a finite input: an overflow of an ordinary (AI Core) op.
               ASSERT_TRUE(s->Run({{"x", Floats({-1, 1})}}, {"scope/z"}).ok());
               EXPECT_EQ(s->stats().overflow_count, mode == "atomic_overflow" ? 0 : 1) << mode;
             }
           }},
      {.spec = {"enable_exception_dump"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             Output params = ops::Const(r, Tensor::Vector<float>({1, 2}));
             Output index = ops::Placeholder(r.WithOpName("index"), DType::kInt32, Shape{1});
             ops::Gather(r.WithOpName("gather"), params, index);
             SessionConfig c;
             c.enable_exception_dump = 1;
             c.dump_path = FreshDir("exception");
             auto s = MakeSession(g, c);
             auto out = s->Run({{"index", Tensor::Vector<int32_t>({5})}}, {"gather"});
             ASSERT_FALSE(out.ok());
             EXPECT_THAT(std::string(out.status().message()), HasSubstr(c.dump_path));
             c.enable_exception_dump = 2;
             ExpectRefused(c.Validate(), "enable_exception_dump");
           }},
      {.spec = {"precision_mode"},
       .run =
           [] {
             SessionConfig c;
             c.precision_mode = "allow_mix_precision";
             EXPECT_TRUE(Has(Passes(c), "mixed_precision"));
             c.precision_mode = "must_keep_origin_dtype";
             EXPECT_FALSE(Has(Passes(c), "mixed_precision"));
             c.precision_mode = "fp32";
             ExpectRefused(c.Validate(), "precision_mode");
           }},
      {.spec = {"precision_mode_v2"},
       .run =
           [] {
             SessionConfig c;
             c.precision_mode_v2 = "mixed_bfloat16";
             EXPECT_TRUE(Has(Passes(c), "mixed_precision"));
             c.precision_mode_v2 = "origin";
             EXPECT_FALSE(Has(Passes(c), "mixed_precision"));
             c.precision_mode = "allow_mix_precision";
             ExpectRefused(c.Validate(), "precision_mode_v2");
           }},
      {.spec = {"enable_reduce_precision"},
       .run =
           [] {
             SessionConfig c;
             c.enable_reduce_precision = true;
             ExpectRefused(c.Validate(), "enable_reduce_precision");
           }},
      {.spec = {"variable_format_optimize"},
       .run =
           [] {
             // Nothing to convert on the CPU backend: both settings train to the same bits.
             SessionConfig on, off;
             off.variable_format_optimize = false;
             EXPECT_TRUE(SameBits(Must(RunLinear(on, 3)), Must(RunLinear(off, 3))));
           }},
      {.spec = {"mix_compile_mode"},
       .run =
           [] {
             SessionConfig c;
             c.mix_compile_mode = true;
             EXPECT_EQ(Must(RunLinear(c, 1)).size(), 1u);
             // On a device with memory of its own (the separate-memory test device).
             c.device = "separate_memory";
             EXPECT_EQ(Must(RunLinear(c, 1)).size(), 1u);
           }},
      {.spec = {"hcom_parallel", "is_tailing_optimization", "NPUOptimizer"},
       .run =
           [] {
             // hcom_parallel buckets the allreduce (tests/dist/mpi_data_parallel_test.cc
             // compares it with one allreduce under mpirun); one process has none to bucket.
             SessionConfig c;
             c.hcom_parallel = true;
             EXPECT_TRUE(c.Validate().ok()) << c.Validate();
             EXPECT_EQ(Must(RunLinear(c, 1)).size(), 1u);
             // is_tailing_optimization (with the optimizer's flag of the same name, the
             // spec's NPUOptimizer pairing) overlaps the last bucket; one process has none.
             c.is_tailing_optimization = true;
             EXPECT_TRUE(c.Validate().ok()) << c.Validate();
             EXPECT_EQ(Must(RunLinear(c, 1)).size(), 1u);
             // NPUOptimizer's is_tailing_optimization: DistributedOptimizerOptions, which must
             // agree with the session's (tests/dist/distributed_test.cc has both directions).
             Graph g;
             Scope s(&g);
             Variable w = Variable::Make(s, "w", Shape{2}, {});
             auto opt = npu_distributed_optimizer_wrapper(std::make_shared<SgdOptimizer>(),
                                                          {.is_tailing_optimization = false});
             EXPECT_TRUE(opt->Minimize(s, ops::ReduceSum(s, w.value())).ok());
             ExpectRefused(Session::Create(g, c).status(), "is_tailing_optimization");
             c.hcom_parallel = false;
             ExpectRefused(c.Validate(), "is_tailing_optimization");
           }},
      {.spec = {"graph_memory_max_size", "variable_memory_max_size"},
       .run =
           [] {
             SessionConfig c;
             c.graph_memory_max_size = 8;
             ExpectRefused(RunLinear(c, 1).status(), "graph_memory_max_size",
                           absl::StatusCode::kResourceExhausted);
             c = SessionConfig();
             c.variable_memory_max_size = 4;
             ExpectRefused(RunLinear(c, 1).status(), "variable_memory_max_size",
                           absl::StatusCode::kResourceExhausted);
             c = SessionConfig();
             c.graph_memory_max_size = 30 * kGiB;
             ExpectRefused(c.Validate(), "31 GiB");
           }},
      {.spec = {"auto_tune_mode"},
       .run =
           [] {
             SessionConfig c;
             c.auto_tune_mode = "RL,GA";
             c.tune_bank_path = FreshDir("tune_bank");
             EXPECT_EQ(Must(RunLinear(c, 1)).size(), 1u);
             EXPECT_TRUE(fs::exists(c.tune_bank_path + "/gemm.tsv"));
             c.deterministic = true;
             ExpectRefused(c.Validate(), "auto_tune_mode");
             c.deterministic = false;
             c.auto_tune_mode = "SA";
             ExpectRefused(c.Validate(), "auto_tune_mode");
           }},
      {.spec = {"stream_max_parallel_num"},
       .run =
           [] {
             SessionConfig c;
             c.stream_max_parallel_num = "DNN_VM_TF:10,DNN_V100:2";
             ASSERT_TRUE(c.Validate().ok()) << c.Validate();
             EXPECT_EQ(c.ParsedStreamLimits().at("DNN_V100"), 2);
             EXPECT_EQ(c.ParsedStreamLimits().at("DNN_VM_TF"), 10);
             EXPECT_EQ(Must(RunLinear(c, 2)).size(), 2u);
             c.stream_max_parallel_num = "DNN_V100:14";
             ExpectRefused(c.Validate(), "stream_max_parallel_num");
           }},
      {.spec = {"graph_run_mode"},
       .run =
           [] {
             SessionConfig c;
             c.graph_run_mode = 0;
             LinearModel m;
             BuildLinearModel(&m);
             EXPECT_FALSE(Session::Create(m.graph, c).ok());  // it has update ops
             Graph g;
             BuildLogModel(&g);
             auto s = MakeSession(g, c);
             EXPECT_TRUE(s->Run({{"x", Floats({1, 2})}}, {"scope/z"}).ok());
             c.graph_run_mode = 2;
             ExpectRefused(c.Validate(), "graph_run_mode");
           }},
      {.spec = {"op_debug_level"},
       .run =
           [] {
             SessionConfig c;
             c.op_debug_level = 3;
             c.kernel_meta_dir = FreshDir("kernel_meta");
             EXPECT_EQ(Must(RunLinear(c, 1)).size(), 1u);
             EXPECT_GT(FilesUnder(c.kernel_meta_dir), 0);
             c.op_debug_level = 4;
             ExpectRefused(c.Validate(), "op_debug_level");
           }},
      {.spec = {"enable_scope_fusion_passes"},
       .run =
           [] {
             SessionConfig c;
             c.enable_scope_fusion_passes = "fuse_dense";
             EXPECT_TRUE(Has(Passes(c), "fuse_dense"));
             EXPECT_FALSE(Has(Passes(SessionConfig()), "fuse_dense"));
             c.enable_scope_fusion_passes = "ScopeLayerNormPass";
             ExpectRefused(c.Validate(), "enable_scope_fusion_passes");
           }},
      {.spec = {"op_select_implmode", "optypelist_for_implmode"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             Output x = ops::Placeholder(r.WithOpName("x"), DType::kFloat32, Shape{5});
             ops::Exp(r.WithOpName("e"), x);
             SessionConfig c;
             c.op_select_implmode = "high_precision";
             c.optypelist_for_implmode = "Exp";
             auto s = MakeSession(g, c);
             const std::vector<float> in = {0.1f, 1.3f, -2.7f, 5.5f, 10.25f};
             const std::vector<float> out = Values(*s, "e", {{"x", Floats(in)}});
             for (size_t i = 0; i < in.size(); ++i) {
               // high_precision: computed in double, rounded once.
               EXPECT_EQ(out[i], static_cast<float>(std::exp(static_cast<double>(in[i]))));
             }
             c.op_select_implmode = "fastest";
             ExpectRefused(c.Validate(), "op_select_implmode");
           }},
      {.spec = {"deterministic"},
       .run =
           [] {
             SessionConfig c;
             c.deterministic = true;
             c.intra_op_parallelism = 2;
             SessionConfig d = c;
             d.intra_op_parallelism = 1;
             EXPECT_TRUE(SameBits(Must(RunLinear(c, 4)), Must(RunLinear(d, 4))));
           }},

      // --- sess.run migration ---------------------------------------------------------------
      {.spec = {"npu_bridge.npu_init", "tf.Session", "sess.run", "sess.close",
                "tf.global_variables_initializer", "tf.compat.v1.placeholder"},
       .run =
           [] {
             LinearModel m;
             BuildLinearModel(&m);
             auto s = Must(Session::Create(m.graph));
             ASSERT_TRUE(s->Run({}, {}, {m.init}).ok());
             const float first = Values(*s, m.loss, LinearFeeds(2.0f))[0];
             for (int i = 0; i < 20; ++i)
               ASSERT_TRUE(s->Run(LinearFeeds(2.0f), {}, {m.train}).ok());
             EXPECT_LT(Values(*s, m.loss, LinearFeeds(2.0f))[0], first);
             ASSERT_TRUE(s->Close().ok());
             EXPECT_EQ(s->Run(LinearFeeds(2.0f), {m.loss}).status().code(),
                       absl::StatusCode::kFailedPrecondition);
           }},
      {.spec = {"tf.train.Saver"},
       .run =
           [] {
             LinearModel m;
             BuildLinearModel(&m);
             auto s = Must(Session::Create(m.graph));
             ASSERT_TRUE(s->Run({}, {}, {m.init}).ok());
             auto saver = Must(Saver::Create(*s, {.model_dir = FreshDir("saver")}));
             const std::vector<float> w0 = Values(*s, "w/read");
             Must(saver->Save(0));
             ASSERT_TRUE(s->Run(LinearFeeds(2.0f), {}, {m.train}).ok());
             EXPECT_FALSE(SameBits(Values(*s, "w/read"), w0));
             EXPECT_EQ(Must(saver->Restore()), 0);
             EXPECT_TRUE(SameBits(Values(*s, "w/read"), w0));
           }},
      {.spec = {"tf.gradients"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             Output x = ops::Placeholder(r.WithOpName("x"), DType::kFloat32, Shape{1});
             Output y = ops::Mul(r, x, x);
             Output dx = Must(Gradients(r, {y}, {x}))[0];
             auto s = MakeSession(g, {});
             EXPECT_EQ(Values(*s, dx.name(), {{"x", Floats({3})}}), std::vector<float>{6});
           }},
      {.spec = {"tf.set_random_seed", "tf.random.set_seed", "tf.random_uniform"},
       .run =
           [] {
             auto draw = [](int64_t seed) {
               Graph g;
               g.set_random_seed(seed);
               Scope r(&g);
               ops::RandomUniform(r.WithOpName("u"), Shape{16}, DType::kFloat32, -1, 1);
               auto s = MakeSession(g, {});
               return Values(*s, "u");
             };
             const std::vector<float> a = draw(1);
             EXPECT_TRUE(SameBits(a, draw(1)));
             EXPECT_FALSE(SameBits(a, draw(2)));
             for (float v : a) EXPECT_TRUE(v >= -1 && v <= 1) << v;
           }},
      {.spec = {"tf.constant_initializer"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             Variable::Make(r, "v", Shape{3}, {.initializer = Initializer::Constant(2.5)});
             Node* init = GlobalVariablesInitializer(r);
             auto s = MakeSession(g, {});
             ASSERT_TRUE(s->Run({}, {}, {init}).ok());
             EXPECT_EQ(Values(*s, "v/read"), (std::vector<float>{2.5f, 2.5f, 2.5f}));
           }},
      {.spec = {"tf.nn.dropout", "npu_ops.dropout"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             ops::Dropout(r.WithOpName("d"),
                          ops::Const(r, Tensor::Vector<float>(std::vector<float>(1000, 1.0f))),
                          0.5f, 7);
             auto s = MakeSession(g, {});
             int zeros = 0;
             for (float v : Values(*s, "d")) {
               EXPECT_TRUE(v == 0.0f || v == 2.0f) << v;
               zeros += v == 0.0f;
             }
             EXPECT_GT(zeros, 400);
             EXPECT_LT(zeros, 600);
           }},
      {.spec = {"npu_unary_ops.gelu"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             const std::vector<float> in = {1.0f, -0.5f, 2.0f};
             ops::Gelu(r.WithOpName("gelu"), ops::Const(r, Tensor::Vector<float>(in)), true);
             auto s = MakeSession(g, {});
             const std::vector<float> out = Values(*s, "gelu");
             for (size_t i = 0; i < in.size(); ++i) {
               const double x = in[i];
               const double ref =
                   0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
               EXPECT_NEAR(out[i], ref, 1e-5);
             }
           }},
      {.spec = {"less", "greater", "floormod", "where"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             Output x = ops::Const(r, Tensor::Vector<float>({1, 5, -3}));
             Output y = ops::Const(r, Tensor::Vector<float>({2, 2, 2}));
             ops::Where(r.WithOpName("min"), ops::Less(r, x, y), x, y);
             ops::Where(r.WithOpName("max"), ops::Greater(r, x, y), x, y);
             ops::FloorMod(r.WithOpName("mod"), x, y);
             auto s = MakeSession(g, {});
             EXPECT_EQ(Values(*s, "min"), (std::vector<float>{1, 2, -3}));
             EXPECT_EQ(Values(*s, "max"), (std::vector<float>{2, 5, 2}));
             EXPECT_EQ(Values(*s, "mod"), (std::vector<float>{1, 1, 1}));  // Python's sign
           }},
      {.spec = {"dataset.batch", "drop_remainder"},
       .run =
           [] {
             auto rows = [](bool drop) {
               auto ds = Must(InMemoryDataset({{"v", std::vector<int64_t>{0, 1, 2, 3, 4}, 1}}));
               auto b = Must(BatchRows(std::move(ds), 2, {.drop_remainder = drop}));
               std::vector<int64_t> sizes;
               Batch batch;
               while (Must(b->GetNext(&batch))) sizes.push_back(batch.num_rows());
               return sizes;
             };
             EXPECT_EQ(rows(true), (std::vector<int64_t>{2, 2}));
             EXPECT_EQ(rows(false), (std::vector<int64_t>{2, 2, 1}));
           }},
      {.spec = {"dataset.shuffle"},
       .run =
           [] {
             auto order = [](uint64_t seed) {
               std::vector<int64_t> v(10);
               for (int i = 0; i < 10; ++i) v[i] = i;
               auto ds = Must(Shuffle(Must(InMemoryDataset({{"v", v, 1}}, 3)), 10, seed));
               std::vector<int64_t> out;
               Batch b;
               while (Must(ds->GetNext(&b))) {
                 for (int64_t x : b.column("v")->flat<int64_t>()) out.push_back(x);
               }
               return out;
             };
             const std::vector<int64_t> a = order(3);
             EXPECT_EQ(a, order(3));
             std::vector<int64_t> sorted = a;
             std::sort(sorted.begin(), sorted.end());
             EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
             EXPECT_NE(a, sorted);
           }},
      {.spec = {"os.listdir"},
       .run =
           [] {
             const std::string dir = FreshDir("listdir");
             for (const char* name : {"part-b.txt", "part-a.txt"}) {
               std::ofstream(dir + "/" + name) << "1\n";
             }
             EXPECT_EQ(Must(ExpandFilePatterns({dir})),
                       (std::vector<std::string>{dir + "/part-a.txt", dir + "/part-b.txt"}));
           }},
      {.spec = {"Iterator.from_structure", "iterator.get_next", "iterator.make_initializer"},
       .run =
           [] {
             auto ds = Must(InMemoryDataset({{"v", std::vector<int64_t>{7, 8, 9}, 1}}, 1));
             Batch b;
             ASSERT_TRUE(Must(ds->GetNext(&b)));
             EXPECT_EQ(b.column("v")->flat<int64_t>()[0], 7);
             while (Must(ds->GetNext(&b))) {
             }
             ASSERT_TRUE(ds->Reset().ok());
             ASSERT_TRUE(Must(ds->GetNext(&b)));
             EXPECT_EQ(b.column("v")->flat<int64_t>()[0], 7);
           }},
      {.spec = {"line_per_sample"},
       .run =
           [] {
             // Two records of three samples each: every list holds 3 x its per-sample values.
             const std::string file = FreshDir("line_per_sample") + "/part-0.tfrecord";
             std::string bytes;
             for (int64_t i = 0; i < 2; ++i) {
               bytes += internal::FrameRecord(internal::EncodeExample({
                   {"label", std::vector<int64_t>{1, 0, 1}, true},
                   {"sparse_feature", std::vector<int64_t>{i, 1, 2, 3, 4, 5}, true},
               }));
             }
             std::ofstream(file, std::ios::binary) << bytes;
             TfRecordOptions o;
             o.schema = {{"label", ColumnKind::kLabel}, {"sparse_feature", ColumnKind::kSparse, 2}};
             o.line_per_sample = 3;
             auto ds = Must(TfRecordDataset({file}, o));
             Batch b;
             ASSERT_TRUE(Must(ds->GetNext(&b)));
             ASSERT_EQ(b.num_rows(), 6);
             EXPECT_EQ(b.column("sparse_feature")->flat<int64_t>()[6], 1);  // record 1, sample 0
             EXPECT_EQ(b.column("sparse_feature")->flat<int64_t>()[9], 3);  // record 1, sample 1
           }},
      {.spec = {"sparse_feature"},
       .run =
           [] {
             // Criteo's fields merged into one column for one table, each in its own key range.
             FeatureSpec merged;
             merged.name = "sparse_feature";
             merged.table_name = "sparse_embeddings";
             merged.fields = {"C1", "C2"};
             merged.field_offsets = {0, 1000};
             std::vector<InMemoryColumn> cols;
             cols.push_back(InMemoryColumn{"C1", std::vector<int64_t>{7, 8}, 1});
             cols.push_back(InMemoryColumn{"C2", std::vector<int64_t>{7, 9}, 1});
             auto ds = Must(MergeFeatureFields(Must(InMemoryDataset(std::move(cols))), {merged}));
             Batch b;
             ASSERT_TRUE(Must(ds->GetNext(&b)));
             EXPECT_EQ(std::vector<int64_t>(b.column("sparse_feature")->flat<int64_t>().begin(),
                                            b.column("sparse_feature")->flat<int64_t>().end()),
                       (std::vector<int64_t>{7, 1007, 8, 1009}));
           }},
      {.spec = {"tf.compat.v1.FixedLenFeature"},
       .run =
           [] {
             const std::string file = FreshDir("tfrecord") + "/part-0.tfrecord";
             std::string bytes;
             for (int64_t i = 0; i < 3; ++i) {
               bytes += internal::FrameRecord(internal::EncodeExample({
                   {"label", std::vector<int64_t>{i % 2}, true},
                   {"sparse_feature", std::vector<int64_t>{i, 10 + i}, true},
                   {"dense_feature", std::vector<float>{0.5f * i, 1, 2}, true},
               }));
             }
             std::ofstream(file, std::ios::binary) << bytes;
             TfRecordOptions o;
             o.schema = {{"label", ColumnKind::kLabel},
                         {"sparse_feature", ColumnKind::kSparse, 2},
                         {"dense_feature", ColumnKind::kDense, 3}};
             auto ds = Must(TfRecordDataset({file}, o));
             Batch b;
             ASSERT_TRUE(Must(ds->GetNext(&b)));
             ASSERT_EQ(b.num_rows(), 3);
             EXPECT_EQ(b.column("sparse_feature")->flat<int64_t>()[5], 12);
             EXPECT_EQ(b.column("dense")->flat<float>()[6], 1.0f);
             EXPECT_EQ(b.column("label")->flat<float>()[1], 1.0f);
           }},
      {.spec = {"tf.io.write_graph"},
       .run =
           [] {
             LinearModel m;
             BuildLinearModel(&m);
             const std::string json = m.graph.ToJson();
             EXPECT_THAT(json, HasSubstr(m.matmul));
             auto loaded = Must(Graph::FromJson(json));
             EXPECT_NE(loaded->FindNode(m.matmul), nullptr);
           }},

      // --- Estimator migration --------------------------------------------------------------
      {.spec = {"tf.estimator.RunConfig", "NPURunConfig", "NPURunConfig(model_dir)",
                "NPURunConfig(save_checkpoints_steps)", "NPURunConfig(keep_checkpoint_max)",
                "NPURunConfig(save_summary_steps)", "tf.estimator.Estimator", "NPUEstimator",
                "NPUEstimator(model_dir)", "model_fn", "EstimatorSpec", "tf.estimator.ModeKeys",
                "NPUEstimator.train", "tf.train.get_global_step", "optimizer.minimize"},
       .run =
           [] {
             NPURunConfig c = TinyConfig("estimator");
             c.save_checkpoints_steps = 3;
             c.keep_checkpoint_max = 1;
             c.save_summary_steps = 2;
             auto est = Must(NPUEstimator::Create(TinyModel(), c));
             ASSERT_TRUE(est->Train(TinyInput(64, 8), 6).ok());
             EXPECT_EQ(Must(est->global_step()), 6);
             EXPECT_THAT(est->latest_checkpoint(), ::testing::EndsWith("ckpt-6"));
             int checkpoints = 0;
             for (const auto& e : fs::directory_iterator(c.model_dir)) {
               checkpoints += e.path().filename().string().starts_with("ckpt-");
             }
             EXPECT_EQ(checkpoints, 1);  // keep_checkpoint_max
             EXPECT_GT(FilesUnder(c.model_dir, "events.out.tfevents"), 0);
           }},
      {.spec = {"NPUEstimator.evaluate", "NPUEstimator.predict", "tf.estimator.train_and_evaluate",
                "tf.estimator.TrainSpec", "tf.estimator.EvalSpec"},
       .run =
           [] {
             auto est = Must(NPUEstimator::Create(TinyModel(), TinyConfig("train_and_evaluate")));
             EvalResult last = Must(est->TrainAndEvaluate(
                 With<TrainSpec>([](auto& t) {
                   t.input_fn = TinyInput(64, 8);
                   t.max_steps = 4;
                 }),
                 With<EvalSpec>([](auto& e) { e.input_fn = TinyInput(16, 8); })));
             EXPECT_EQ(last.at("global_step"), 4);
             EvalResult r = Must(est->Evaluate(TinyInput(16, 8)));
             EXPECT_TRUE(std::isfinite(r.at("loss")));
             EXPECT_GT(r.at("auc"), 0.0);
             int64_t rows = 0;
             ASSERT_TRUE(est->Predict(TinyInput(16, 8),
                                      [&](const Batch&, const std::map<std::string, Tensor>& p) {
                                        rows += p.at("prob").num_elements();
                                        return Status();
                                      })
                             .ok());
             EXPECT_EQ(rows, 16);
           }},
      {.spec = {"export_saved_model", "tf.estimator.export.ServingInputReceiver"},
       .run =
           [] {
             auto est = Must(NPUEstimator::Create(TinyModel(), TinyConfig("export")));
             ASSERT_TRUE(est->Train(TinyInput(16, 8), 2).ok());
             const std::string path = Must(est->ExportSavedModel(
                 FreshDir("export_bundle"),
                 {{"ids", DType::kInt64, Shape{-1, 1}}, {"dense", DType::kFloat32, Shape{-1, 2}}}));
             auto predictor = Must(Predictor::Load(path));
             EXPECT_EQ(predictor->signature().output_names, std::vector<std::string>{"prob"});
             auto named = Must(predictor->PredictNamed(
                 {{"ids", Ids(2, 1, {1, 4})},
                  {"dense", Must(Tensor::FromValues<float>(Shape{2, 2}, {0, 1, 2, 1}))}}));
             ASSERT_EQ(named.at("prob").num_elements(), 2);
             for (float p : named.at("prob").flat<float>()) EXPECT_TRUE(p > 0 && p < 1) << p;
           }},
      {.spec = {"NPURunConfig(save_checkpoints_secs)", "NPURunConfig(log_step_count_steps)",
                "NPURunConfig(session_config)", "tf.ConfigProto",
                "NPURunConfig(iterations_per_loop)", "NPURunConfig(precision_mode)",
                "NPURunConfig(deterministic)", "NPURunConfig(op_select_implmode)",
                "NPURunConfig(enable_data_pre_proc)", "NPURunConfig(mix_compile_mode)"},
       .run =
           [] {
             NPURunConfig c;
             c.save_checkpoints_steps = 10;
             c.save_checkpoints_secs = 60;
             ExpectRefused(c.Validate(), "save_checkpoints");
             c = NPURunConfig();
             c.log_step_count_steps = -1;
             ExpectRefused(c.Validate(), "log_step_count_steps");
             c = NPURunConfig();
             c.precision_mode = "allow_mix_precision";
             c.deterministic = true;
             c.op_select_implmode = "high_precision";
             c.mix_compile_mode = true;
             ASSERT_TRUE(c.Validate().ok()) << c.Validate();
             const SessionConfig e = c.EffectiveSessionConfig();
             EXPECT_EQ(e.precision_mode, "allow_mix_precision");
             EXPECT_TRUE(e.deterministic);
             EXPECT_EQ(e.op_select_implmode, "high_precision");
             EXPECT_TRUE(e.mix_compile_mode);
             c.enable_data_pre_proc = true;
             ExpectRefused(c.Validate(), "enable_data_pre_proc");
             c = NPURunConfig();
             c.session_config.dump_mode = "everything";
             ExpectRefused(c.Validate(), "session_config");
             // iterations_per_loop: the hooks run once per loop of steps, so a period in
             // steps must be a multiple of it.
             c = TinyConfig("iterations_per_loop");
             c.iterations_per_loop = 3;
             c.save_checkpoints_steps = 4;
             EXPECT_THAT(NPUEstimator::Create(TinyModel(), c).status().ToString(),
                         HasSubstr("is not a multiple of iterations_per_loop 3"));
             c.iterations_per_loop = 2;
             auto looped = Must(NPUEstimator::Create(TinyModel(), c));
             ASSERT_TRUE(looped->Train(TinyInput(64, 8), 5).ok());
             EXPECT_EQ(Must(looped->global_step()), 5);
           }},
      {.spec = {"train_distribute", "device_fn", "protocol", "eval_distribute",
                "experimental_distribute", "tf.distribute.MirroredStrategy"},
       .run =
           [] {
             using Field = std::optional<std::string> NPURunConfig::*;
             for (auto [name, field] : std::vector<std::pair<std::string, Field>>{
                      {"train_distribute", &NPURunConfig::train_distribute},
                      {"device_fn", &NPURunConfig::device_fn},
                      {"protocol", &NPURunConfig::protocol},
                      {"eval_distribute", &NPURunConfig::eval_distribute},
                      {"experimental_distribute", &NPURunConfig::experimental_distribute}}) {
               NPURunConfig c;
               c.*field = "mirrored_strategy";
               ExpectRefused(c.Validate(), name);
             }
           }},
      {.spec = {"NPURunConfig(distribute)", "tf.distribute.experimental.ParameterServerStrategy"},
       .run =
           [] {
             NPURunConfig c;
             c.distribute = "ParameterServerStrategy";
             ExpectRefused(c.Validate(), "distribute");
           }},
      {.spec = {"NPURunConfig(dump_config)", "estimator_dump_config", "estimator_dump"},
       .run =
           [] {
             NPURunConfig c = TinyConfig("estimator_dump");
             c.session_config.enable_dump = true;
             c.session_config.dump_path = FreshDir("estimator_dump_data");
             c.session_config.dump_step = "2";
             auto est = Must(NPUEstimator::Create(TinyModel(), c));
             ASSERT_TRUE(est->Train(TinyInput(32, 8), 3).ok());
             EXPECT_EQ(StepDirs(c.session_config.dump_path).size(), 1u);
           }},
      {.spec = {"tf.variable_scope", "tf.get_variable", "tf.AUTO_REUSE", "tf.name_scope"},
       .run =
           [] {
             Graph g;
             Scope tower =
                 Scope(&g).WithVariableReuse(VariableReuse::kAutoReuse).NewSubScope("tower");
             Variable a = Variable::GetOrCreate(tower, "w", Shape{2});
             Variable b = Variable::GetOrCreate(tower, "w", Shape{2});
             EXPECT_EQ(a.name(), "tower/w");
             EXPECT_EQ(b.name(), a.name());
             Scope eval = tower.NewNameScope("eval");
             EXPECT_EQ(Variable::GetOrCreate(eval, "w", Shape{2}).name(), a.name());
             EXPECT_THAT(eval.prefix(), HasSubstr("eval"));
             EXPECT_EQ(GlobalVariables(g).size(), 1u);
           }},
      {.spec = {"SessionRunHook", "MonitoredSession", "tf.train.MonitoredTrainingSession",
                "mon_sess.should_stop", "StopAtStepHook", "LoggingTensorHook", "StepCounterHook",
                "SummarySaverHook", "CheckpointSaverHook", "tf.summary"},
       .run =
           [] {
             LinearModel m;
             BuildLinearModel(&m);
             std::vector<std::string> lines;
             auto writer = std::shared_ptr<SummaryWriter>(
                 Must(SummaryWriter::Create(FreshDir("monitored_summary"))));
             auto checkpoints =
                 std::make_shared<CheckpointSaverHook>(With<CheckpointSaverOptions>([](auto& o) {
                   o.model_dir = FreshDir("monitored");
                   o.save_steps = 2;
                 }));
             auto counter = std::make_shared<StepCounterHook>(1);
             MonitoredSessionOptions o;
             o.hooks = {
                 std::make_shared<StopAtStepHook>(StopAtStepHook::NumSteps(3)),
                 std::make_shared<LoggingTensorHook>(
                     std::vector<std::pair<std::string, TensorName>>{{"loss", m.loss}}, 1,
                     [&](const std::string& line) { lines.push_back(line); }),
                 checkpoints,
                 std::make_shared<SummarySaverHook>(
                     writer, 1, std::vector<std::pair<std::string, TensorName>>{{"loss", m.loss}}),
                 counter};
             auto mon = Must(MonitoredSession::Create(&m.graph, o));
             int steps = 0;
             while (!mon->ShouldStop() && steps < 10) {
               std::vector<Tensor> out;
               ASSERT_TRUE(mon->Run(LinearFeeds(2.0f), {}, {m.train}, &out, 4).ok());
               ++steps;
             }
             ASSERT_TRUE(mon->Close().ok());
             EXPECT_EQ(steps, 3);
             EXPECT_EQ(lines.size(), 3u);
             EXPECT_FALSE(checkpoints->saved().empty());
             EXPECT_GT(counter->steps_per_sec(), 0.0);
             ASSERT_TRUE(writer->Close().ok());
             EXPECT_GT(fs::file_size(writer->path()), 0u);
           }},
      {.spec = {"NanTensorHook"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             Output x = ops::Placeholder(r.WithOpName("x"), DType::kFloat32, Shape{2});
             ops::ReduceSum(r.WithOpName("loss"), ops::Log(r, x));
             MonitoredSessionOptions o;
             o.hooks = {std::make_shared<NanTensorHook>("loss")};
             auto mon = Must(MonitoredSession::Create(&g, o));
             std::vector<Tensor> out;
             EXPECT_TRUE(mon->Run({{"x", Floats({1, 2})}}, {"loss"}, {}, &out).ok());
             EXPECT_FALSE(mon->Run({{"x", Floats({-1, 2})}}, {"loss"}, {}, &out).ok());
           }},
      {.spec = {"tf.compat.v1.metrics.auc"},
       .run =
           [] {
             auto auc = Must(MakeStreamingMetric(MetricKind::kAuc));
             ASSERT_TRUE(auc->Update({0.1f, 0.9f}, {0, 1}).ok());
             ASSERT_TRUE(auc->Update({0.8f, 0.2f}, {1, 0}).ok());
             EXPECT_EQ(Must(auc->Result()), 1.0);
           }},

      // --- The SDK (mx_rec) -----------------------------------------------------------------
      {.spec = {"init", "init(train_steps)", "init(eval_steps)", "ConfigInitializer.get_instance",
                "terminate_config_initializer"},
       .run =
           [] {
             terminate_config_initializer();
             ASSERT_TRUE(init({.train_steps = 5, .eval_steps = 2}).ok());
             ASSERT_NE(ConfigInitializer::Get(), nullptr);
             EXPECT_EQ(ConfigInitializer::Get()->options().train_steps, 5);
             ExpectRefused(init({}), "terminate_config_initializer",
                           absl::StatusCode::kFailedPrecondition);
             {
               auto est = Must(NPUEstimator::Create(TinyModel(), TinyConfig("init")));
               ASSERT_TRUE(est->Train(TinyInput(80, 8)).ok());
               EXPECT_EQ(Must(est->global_step()), 5);  // train_steps, the input holds 10
               int read = 0;
               ASSERT_TRUE(est->Evaluate(TinyInput(128, 8, &read)).ok());
               EXPECT_GT(read, 0);
               EXPECT_LT(read, 16);  // eval_steps 2 (plus what the key stage reads ahead)
             }
             terminate_config_initializer();
             EXPECT_EQ(ConfigInitializer::Get(), nullptr);
             terminate_config_initializer();  // twice is safe
             ExpectRefused(init({.max_steps = 3, .train_steps = 5}), "train_steps");
             terminate_config_initializer();
           }},
      {.spec = {"init(use_dynamic)", "sparse_lookup(send_count)"},
       .run =
           [] {
             terminate_config_initializer();
             ASSERT_TRUE(init({.use_dynamic = false}).ok());
             {
               Graph g;
               Scope r(&g);
               auto t = Must(create_table(r, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
               Output ids = ops::Placeholder(r, DType::kInt64, Shape{2, 2});
               ExpectRefused(sparse_lookup(r, t, ids).status(), "send_count");
             }
             SparseModel m;
             BuildSparse(&m, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f), 2, 2,
                         With<SparseLookupOptions>([](auto& o) { o.send_count = 3; }));
             auto s = MakeSession(m.graph, {});
             auto ok = s->Run({{"ids", Ids(2, 2, {1, 1, 2, 3})}}, {m.emb});
             ASSERT_TRUE(ok.ok()) << ok.status();
             EXPECT_EQ((*ok)[0].shape(), (Shape{2, 2, 2}));
             auto over = s->Run({{"ids", Ids(2, 2, {1, 2, 3, 4})}}, {m.emb});
             EXPECT_FALSE(over.ok());
             EXPECT_THAT(over.status().ToString(), HasSubstr("send_count"));
             terminate_config_initializer();
           }},
      {.spec = {"init(use_dynamic_expansion)", "create_hash_optimizer_by_address", "SGDByAddr",
                "LazyAdamByAddress"},
       .run =
           [] {
             terminate_config_initializer();
             ASSERT_TRUE(init({.use_dynamic_expansion = true}).ok());
             {
               Graph g;
               Scope r(&g);
               ExpectRefused(
                   create_table(r, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)).status(),
                   "use_dynamic_expansion");
             }
             HashOptimizer sgd =
                 Must(optimizers::gradient_descent::create_hash_optimizer_by_address(
                     {.learning_rate = 0.1f}));
             EXPECT_EQ(sgd.name(), "SGDByAddr");
             EXPECT_EQ(Must(optimizers::lazy_adam::create_hash_optimizer_by_address()).name(),
                       "LazyAdamByAddress");
             SparseModel m;
             BuildSparse(&m, SmallTable("t", 2, 4), sgd.config(), 1, 6);
             EXPECT_TRUE(m.table.config().use_dynamic_expansion);
             auto s = MakeSession(m.graph, {});
             ASSERT_TRUE(s->Run({{"ids", Ids(1, 6, {1, 2, 3, 4, 5, 6})}}, {m.emb}).ok());
             EXPECT_EQ(TableSize(*s, "t"), 6);  // past device_vocabulary_size 4: it grew
             terminate_config_initializer();
           }},
      {.spec = {"MutableHashTable", "create_table", "create_table(key_dtype)",
                "create_table(value_dtype)", "create_table(name)", "create_table(dim)",
                "create_table(emb_initializer)", "tf.truncated_normal_initializer",
                "create_table(device_vocabulary_size)", "table_name", "sparse_lookup",
                "sparse_lookup(is_train)", "sparse_lookup(name)"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             TableConfig c;
             c.name = "user_table";
             c.key_dtype = DType::kInt64;
             c.value_dtype = DType::kFloat32;
             c.dim = 4;
             c.device_vocabulary_size = 3;
             c.initializer = Initializer::TruncatedNormal(10, 0.05);
             auto t = Must(create_table(r, c, SparseOptimizerConfig::SGD(0.1f)));
             EXPECT_EQ(t.table_name(), "user_table");
             Output ids = ops::Placeholder(r.WithOpName("ids"), DType::kInt64, Shape{2, 2});
             Output emb = Must(sparse_lookup(r, t, ids, With<SparseLookupOptions>([](auto& o) {
                                               o.name = "user_table_lookup";
                                             })));
             Output eval = Must(sparse_lookup(r, t, ids, With<SparseLookupOptions>([](auto& o) {
                                                o.name = "eval_lookup";
                                                o.is_train = false;
                                              })));
             EXPECT_NE(g.FindNode("user_table_lookup"), nullptr);
             auto s = MakeSession(g, {});
             const FeedList feeds = {{"ids", Ids(2, 2, {1, 2, 1, 2})}};
             for (float v : Values(*s, eval.name(), feeds)) EXPECT_EQ(v, 0.0f);  // inserts nothing
             EXPECT_EQ(TableSize(*s, "user_table"), 0);
             std::vector<Tensor> out = Must(s->Run(feeds, {emb}));
             EXPECT_EQ(out[0].shape(), (Shape{2, 2, 4}));
             for (float v : out[0].flat<float>()) EXPECT_NEAR(v, 10.0, 0.1);
             EXPECT_EQ(TableSize(*s, "user_table"), 2);
             auto full = s->Run({{"ids", Ids(2, 2, {3, 4, 5, 6})}}, {emb});
             EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
             Graph g2;
             c.value_dtype = DType::kFloat64;
             EXPECT_FALSE(create_table(Scope(&g2), c, SparseOptimizerConfig::SGD(0.1f)).ok());
             Graph g3;
             c.value_dtype = DType::kFloat32;
             c.key_dtype = DType::kInt32;
             EXPECT_EQ(Must(create_table(Scope(&g3), c, SparseOptimizerConfig::SGD(0.1f)))
                           .config()
                           .key_dtype,
                       DType::kInt32);
           }},
      {.spec = {"create_table(host_vocabulary_size)"},
       .run =
           [] {
             TableConfig c = SmallTable("tiered", 4, 4);
             c.host_vocabulary_size = 16;
             auto t = Must(EmbeddingTable::Create(c, SparseOptimizerConfig::SGD(0.1f)));
             EXPECT_EQ(t->capacity(), 20);
             c.host_vocabulary_size = -1;
             ExpectRefused(c.Validate(), "host_vocabulary_size");
           }},
      {.spec = {"sparse_lookup(dim)"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             auto t = Must(create_table(r, SmallTable("t", 4), SparseOptimizerConfig::SGD(0.1f)));
             Output ids = ops::Placeholder(r.WithOpName("ids"), DType::kInt64, Shape{1, 2});
             Output full = Must(sparse_lookup(r, t, ids));
             Output prefix = Must(
                 sparse_lookup(r, t, ids, With<SparseLookupOptions>([](auto& o) { o.dim = 2; })));
             auto s = MakeSession(g, {});
             std::vector<Tensor> out = Must(s->Run({{"ids", Ids(1, 2, {5, 6})}}, {full, prefix}));
             EXPECT_EQ(out[1].shape(), (Shape{1, 2, 2}));
             for (int i = 0; i < 2; ++i) {
               for (int k = 0; k < 2; ++k) {
                 EXPECT_EQ(out[1].flat<float>()[i * 2 + k], out[0].flat<float>()[i * 4 + k]);
               }
             }
             Graph g2;
             Scope r2(&g2);
             auto t2 = Must(create_table(r2, SmallTable("t", 4), SparseOptimizerConfig::SGD(0.1f)));
             ExpectRefused(sparse_lookup(r2, t2, ops::Placeholder(r2, DType::kInt64, Shape{1, 2}),
                                         With<SparseLookupOptions>([](auto& o) { o.dim = 5; }))
                               .status(),
                           "dim");
           }},
      {.spec = {"sparse_lookup(modify_graph)", "sparse_lookup(batch)",
                "modify_graph_and_start_emb_cache", "get_initializer", "start_asc_pipeline",
                "GraphModifierHook"},
       .run =
           [] {
             auto build = [](Graph* g, Node** train) {
               Scope r(g);
               auto t = Must(create_table(r, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
               Output ids = DatasetColumn(r, "ids", DType::kInt64, Shape{-1, 1});
               Output emb = Must(sparse_lookup(
                   r, t, ids, With<SparseLookupOptions>([](auto& o) { o.modify_graph = true; })));
               Variable v = Variable::Make(r, "v", Shape{}, {.initializer = Initializer::Ones()});
               Output loss = ops::ReduceSum(r.WithOpName("loss"), ops::Mul(r, emb, v.value()));
               *train = Must(SparseMinimize(r, loss));
             };
             auto data = [](std::vector<int64_t> ids) {
               return Must(BatchRows(Must(InMemoryDataset({{"ids", ids, 1}})), 2));
             };
             Graph g;
             Node* train = nullptr;
             build(&g, &train);
             const std::string dump = FreshDir("modified_graph") + "/modified_graph.json";
             EXPECT_EQ(Must(modify_graph_and_start_emb_cache(&g, true, dump)).moved_lookups.size(),
                       1u);
             EXPECT_TRUE(fs::exists(dump));
             auto s = MakeSession(g, {});
             {
               auto stage = Must(get_initializer(*s, data({1, 2, 3, 4}), true));
               EXPECT_EQ(Values(*s, "v/read"), std::vector<float>{1});  // it initialised
               FeedList feeds;
               int steps = 0;
               while (Must(stage->Next(&feeds))) {
                 ASSERT_TRUE(s->Run(feeds, {"loss"}, {train}).ok());
                 ++steps;
               }
               EXPECT_EQ(steps, 2);
               EXPECT_EQ(TableSize(*s, "t"), 4);
             }
             {
               auto stage = Must(StartAscPipeline(*s, data({5, 6})));
               FeedList feeds;
               ASSERT_TRUE(Must(stage->Next(&feeds)));
               ASSERT_TRUE(s->Run(feeds, {"loss"}, {train}).ok());
               EXPECT_EQ(TableSize(*s, "t"), 6);
             }
             for (bool modify : {true, false}) {
               Graph h;
               build(&h, &train);
               GraphModifierHook hook(modify);
               ASSERT_TRUE(hook.Begin(&h).ok());
               // A moved lookup takes its rows from the key stage: run in the graph, it refuses.
               auto in_graph = MakeSession(h, {});
               Batch b = testing::MakeBatch({{"ids", Ids(2, 1, {1, 2})}});
               EXPECT_EQ(in_graph->Run(BatchFeeds(h, b), {"t_lookup"}).ok(), !modify);
             }
           }},
      {.spec = {"sparse_lookup(access_and_evict_config)"},
       .run =
           [] {
             SparseModel m;
             BuildSparse(&m, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f), 1, 1,
                         With<SparseLookupOptions>([](auto& o) {
                           o.access_and_evict_config = AccessAndEvictConfig{.access_threshold = 2};
                         }));
             EXPECT_EQ(m.table.config().access_threshold, 2);
             auto s = MakeSession(m.graph, {});
             const FeedList feeds = {{"ids", Ids(1, 1, {7})}};
             EXPECT_EQ(Values(*s, m.emb.name(), feeds), (std::vector<float>{0, 0}));
             EXPECT_EQ(TableSize(*s, "t"), 0);  // seen once: not admitted yet
             Values(*s, m.emb.name(), feeds);
             EXPECT_EQ(TableSize(*s, "t"), 1);
           }},
      {.spec = {"FeatureSpec", "sparse_lookup(feature_spec_list)", "FeatureSpec(index_key)",
                "FeatureSpec(access_threshold)", "FeatureSpec(eviction_threshold)",
                "FeatureSpec(is_timestamp)"},
       .run =
           [] {
             const FeatureSpec user{.name = "user",
                                    .table_name = "t",
                                    .index_key = "user_ids",
                                    .access_threshold = 1,
                                    .eviction_threshold = 60};
             const FeatureSpec ts = With<FeatureSpec>([](auto& f) {
               f.name = "ts";
               f.index_key = "timestamp";
               f.is_timestamp = true;
             });
             EXPECT_FALSE(ValidateFeatureSpecs({user}).ok());  // eviction needs the timestamps
             ASSERT_TRUE(ValidateFeatureSpecs({user, ts}).ok());
             FeatureSpec bad = user;
             bad.access_threshold = -2;
             ExpectRefused(bad.Validate(), "access_threshold");
             Graph g;
             Scope r(&g);
             auto t = Must(create_table(r, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
             std::vector<Output> out = Must(sparse_lookup(r, t, {user}, 2, 1, &ts));
             EXPECT_EQ(t.config().access_threshold, 1);
             EXPECT_EQ(t.config().eviction_threshold, 60);
             auto s = MakeSession(g, {});
             Batch b = testing::MakeBatch(
                 {{"user_ids", Ids(2, 1, {3, 4})},
                  {"timestamp", Must(Tensor::FromValues<int64_t>(Shape{2}, {100, 200}))}});
             std::vector<Tensor> rows = Must(s->Run(BatchFeeds(g, b), {out[0]}));
             EXPECT_EQ(rows[0].shape(), (Shape{2, 1, 2}));
             EXPECT_EQ(TableSize(*s, "t"), 2);
           }},
      {.spec = {"EvictHook", "EvictHook(evict_enable)", "EvictHook(evict_time_interval)",
                "EvictHook(evict_step_interval)"},
       .run =
           [] {
             TableConfig c = SmallTable("evict", 2);
             c.access_threshold = 0;
             c.eviction_threshold = 10;
             auto table = Must(EmbeddingTable::Create(c, SparseOptimizerConfig::SGD(0.1f)));
             std::vector<uint32_t> row(1);
             for (auto [key, time] : {std::pair<int64_t, int64_t>{1, 100}, {2, 200}}) {
               ASSERT_TRUE(table
                               ->Resolve(std::vector<int64_t>{key}, {}, std::vector<int64_t>{time},
                                         LookupMode::kTrain, absl::MakeSpan(row))
                               .ok());
             }
             EmbeddingTable* tables[] = {table.get()};
             EvictHook off(false);
             EXPECT_EQ(Must(off.AfterStep(1, tables)), 0);
             EvictHook every_step(true, 0, 1);
             EXPECT_EQ(Must(every_step.AfterStep(1, tables)), 1);  // key 1: 100 s older than 200
             EXPECT_EQ(table->size(), 1);
             EXPECT_TRUE(EvictHook(true, 24 * 60 * 60, 0).Validate().ok());
             ExpectRefused(EvictHook(true, 0, 0).Validate(), "evict");
             EXPECT_FALSE(AsSessionRunHook(EvictHook(true, 0, 0))->Begin(nullptr).ok());
           }},
      {.spec = {"set_threshold"},
       .run =
           [] {
             TableConfig c = SmallTable("t", 2);
             c.access_threshold = 5;
             SparseModel m;
             BuildSparse(&m, c, SparseOptimizerConfig::SGD(0.1f), 1, 1);
             auto s = MakeSession(m.graph, {});
             const FeedList feeds = {{"ids", Ids(1, 1, {7})}};
             Values(*s, m.emb.name(), feeds);
             EXPECT_EQ(TableSize(*s, "t"), 0);
             ASSERT_TRUE(set_threshold(*s, "t", 1).ok());
             Values(*s, m.emb.name(), feeds);
             EXPECT_EQ(TableSize(*s, "t"), 1);
             EXPECT_EQ(set_threshold(*s, "no_table", 1).code(), absl::StatusCode::kNotFound);
           }},
      {.spec = {"create_hash_optimizer", "mx_rec.optimizers.lazy_adam", "mx_rec.optimizers.adagrad",
                "mx_rec.optimizers.gradient_descent", "mx_rec.optimizers.ftrl",
                "get_dense_and_sparse_variable", "sparse_optimizer.compute_gradients",
                "sparse_optimizer.apply_gradients"},
       .run =
           [] {
             HashOptimizer opt =
                 Must(optimizers::lazy_adam::create_hash_optimizer({.learning_rate = 0.1f}));
             EXPECT_EQ(opt.name(), "LazyAdam");
             EXPECT_EQ(Must(optimizers::adagrad::create_hash_optimizer()).name(), "Adagrad");
             EXPECT_EQ(
                 Must(optimizers::gradient_descent::create_hash_optimizer({.learning_rate = 1}))
                     .name(),
                 "SGD");
             ExpectRefused(optimizers::gradient_descent::create_hash_optimizer({}).status(),
                           "learning_rate");
             EXPECT_EQ(Must(optimizers::ftrl::create_hash_optimizer()).name(), "FTRL");
             Graph g;
             Scope r(&g);
             SparseTable t = Must(create_table(r, SmallTable("t", 2), opt));
             Output ids = ops::Placeholder(r.WithOpName("ids"), DType::kInt64, Shape{1, 1});
             Output emb = Must(sparse_lookup(r, t, ids));
             Output loss = ops::ReduceSum(r, emb);
             auto [dense_variables, sparse_variables] = Must(get_dense_and_sparse_variable(&g));
             EXPECT_TRUE(dense_variables.empty());
             ASSERT_EQ(sparse_variables.size(), 1u);
             std::vector<SparseGradients> grads =
                 Must(opt.compute_gradients(r, loss, sparse_variables));
             ASSERT_EQ(grads.size(), 1u);
             Node* train = Must(opt.apply_gradients(r, {{grads[0], sparse_variables[0]}}));
             Node* init = GlobalVariablesInitializer(r);
             auto s = MakeSession(g, {});
             ASSERT_TRUE(s->Run({}, {}, {init}).ok());
             const FeedList feeds = {{"ids", Ids(1, 1, {3})}};
             const std::vector<float> before = Values(*s, emb.name(), feeds);
             ASSERT_TRUE(s->Run(feeds, {}, {train}).ok());
             const std::vector<float> after = Must(Must(LookupTable(*s, "t"))->ReadRow(3));
             for (int k = 0; k < 2; ++k) EXPECT_NEAR(after[k], before[k] - 0.1f, 1e-4);
           }},
      {.spec = {"ASCEND_SPARSE_LOOKUP_LOCAL_EMB", "ASCEND_SPARSE_LOOKUP_ID_OFFSET",
                "tf.get_collection", "sparse_optimizer.apply_gradients([grad, addr])"},
       .run =
           [] {
             HashOptimizer opt =
                 Must(optimizers::gradient_descent::create_hash_optimizer_by_address(
                     {.learning_rate = 0.5f}));
             Graph g;
             Scope r(&g);
             SparseTable t = Must(create_table(r, SmallTable("t", 2), opt));
             Output ids = ops::Placeholder(r.WithOpName("ids"), DType::kInt64, Shape{1, 1});
             Output emb = Must(sparse_lookup(r, t, ids));
             Output loss = ops::ReduceSum(r, emb);
             ASSERT_EQ(g.Collection(kSparseLookupLocalEmb).size(), 1u);
             ASSERT_EQ(g.Collection(kSparseLookupIdOffset).size(), 1u);
             Output local_emb = Must(g.FindOutput(g.Collection(kSparseLookupLocalEmb)[0]));
             Output addr = Must(g.FindOutput(g.Collection(kSparseLookupIdOffset)[0]));
             Output grad = Must(Gradients(r, {loss}, {local_emb}))[0];
             SparseGrad sparse_grad = Must(SparseGradForLocalEmb(r, local_emb, grad));
             EXPECT_EQ(sparse_grad.unique_rows, addr);
             Node* train = Must(ApplySparseGradients(r, {sparse_grad}));
             Node* init = GlobalVariablesInitializer(r);
             auto s = MakeSession(g, {});
             ASSERT_TRUE(s->Run({}, {}, {init}).ok());
             const FeedList feeds = {{"ids", Ids(1, 1, {9})}};
             const std::vector<float> before = Values(*s, emb.name(), feeds);
             ASSERT_TRUE(s->Run(feeds, {}, {train}).ok());
             const std::vector<float> after = Must(Must(LookupTable(*s, "t"))->ReadRow(9));
             for (int k = 0; k < 2; ++k) EXPECT_EQ(after[k], before[k] - 0.5f);  // d loss/d row = 1
           }},
      {.spec = {"export"},
       .run =
           [] {
             SparseModel m;
             BuildSparse(&m, SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f), 1, 2);
             auto s = MakeSession(m.graph, {});
             Values(*s, m.emb.name(), {{"ids", Ids(1, 2, {1, 2})}});
             EmbeddingTable* table = Must(LookupTable(*s, "t"));
             const std::string dir = FreshDir("export_npy");
             ASSERT_TRUE(table->ExportNpy(dir + "/keys.npy", dir + "/values.npy").ok());
             auto copy =
                 Must(EmbeddingTable::Create(SmallTable("t", 2), SparseOptimizerConfig::SGD(0.1f)));
             ASSERT_TRUE(copy->ImportNpy(dir + "/keys.npy", dir + "/values.npy").ok());
             EXPECT_EQ(copy->size(), 2);
             EXPECT_EQ(Must(copy->ReadRow(2)), Must(table->ReadRow(2)));
           }},
      {.spec = {"weight_decay", "l1_regularization_strength", "l2_regularization_strength",
                "l2_shrinkage_regularization_strength"},
       .run =
           [] {
             auto one_step = [](const SparseOptimizerConfig& opt, float grad) {
               auto t = Must(EmbeddingTable::Create(SmallTable("l2", 2), opt));
               std::vector<uint32_t> row(1);
               EXPECT_TRUE(t->Resolve(std::vector<int64_t>{4}, {}, {}, LookupMode::kTrain,
                                      absl::MakeSpan(row))
                               .ok());
               const std::vector<float> w0 = Must(t->ReadRow(4));
               EXPECT_TRUE(t->ApplyGradients(row, std::vector<float>{grad, grad}, 1).ok());
               return std::make_pair(w0, Must(t->ReadRow(4)));
             };
             HashOptimizer sgd = Must(optimizers::gradient_descent::create_hash_optimizer(
                 {.learning_rate = 0.1f, .weight_decay = 0.5f}));
             auto [w0, w1] = one_step(sgd.config(), 0.0f);
             for (int k = 0; k < 2; ++k) EXPECT_FLOAT_EQ(w1[k], w0[k] - 0.1f * 0.5f * w0[k]);
             HashOptimizer ftrl = Must(optimizers::ftrl::create_hash_optimizer(
                 {.learning_rate = 1.0f,
                  .l1_regularization_strength = 100.0f,
                  .l2_regularization_strength = 1.0f,
                  .l2_shrinkage_regularization_strength = 0.1f}));
             auto [f0, f1] = one_step(ftrl.config(), 1.0f);
             EXPECT_EQ(f1[0], 0.0f);  // |linear| <= l1: the weight is zero
             EXPECT_EQ(f1[1], 0.0f);
           }},
      {.spec = {"DenseLossScaleOptimizer", "SparseLossScaleOptimizer", "delay_loss_scale"},
       .run =
           [] {
             auto sgd = std::make_shared<SgdOptimizer>(SgdOptions{0.1});
             EXPECT_TRUE(
                 SameBits(TrainDense(std::make_shared<DenseLossScaleOptimizer>(sgd, 65536), 3).w,
                          TrainDense(sgd, 3).w));
             auto sparse_row = [](bool scaled) {
               HashOptimizer opt = Must(
                   optimizers::gradient_descent::create_hash_optimizer({.learning_rate = 0.1f}));
               SparseModel m;
               BuildSparse(&m, SmallTable("t", 2), opt.config(), 1, 1);
               Scope r(&m.graph);
               SparseLossScaleOptimizer loss_scaled(opt, 65536);
               std::vector<SparseGradients> grads =
                   scaled ? Must(loss_scaled.compute_gradients(r, m.loss, {m.table}))
                          : Must(opt.compute_gradients(r, m.loss, {m.table}));
               Node* train = scaled ? Must(loss_scaled.apply_gradients(r, {{grads[0], m.table}}))
                                    : Must(opt.apply_gradients(r, {{grads[0], m.table}}));
               Node* init = GlobalVariablesInitializer(r);
               auto s = MakeSession(m.graph, {});
               EXPECT_TRUE(s->Run({}, {}, {init}).ok());
               EXPECT_TRUE(s->Run({{"ids", Ids(1, 1, {5})}}, {}, {train}).ok());
               return Must(Must(LookupTable(*s, "t"))->ReadRow(5));
             };
             EXPECT_TRUE(SameBits(sparse_row(true), sparse_row(false)));
           }},
      {.spec = {"NPULossScaleOptimizer", "ExponentialUpdateLossScaleManager", "LossScaleManager"},
       .run =
           [] {
             // x = 1e36 on the last step: the scaled gradients overflow, so that step applies
             // nothing and the scale halves.
             auto opt = std::make_shared<DenseLossScaleOptimizer>(
                 std::make_shared<SgdOptimizer>(SgdOptions{0.1}),
                 With<LossScaleOptions>([](auto& o) { o.dynamic = true; }));
             const DenseRun two = TrainDense(opt, 2);
             auto opt2 = std::make_shared<DenseLossScaleOptimizer>(
                 std::make_shared<SgdOptimizer>(SgdOptions{0.1}),
                 With<LossScaleOptions>([](auto& o) { o.dynamic = true; }));
             const DenseRun skipped = TrainDense(opt2, 3, 1e36f);
             EXPECT_TRUE(SameBits(skipped.w, two.w));
             ExpectRefused(With<LossScaleOptions>([](auto& o) {
                             o.dynamic = true;
                             o.decr_ratio = 2;
                           }).Validate(),
                           "decr_ratio");
           }},
      {.spec = {"tf.train.GradientDescentOptimizer", "tf.train.AdagradOptimizer",
                "tf.compat.v1.train.AdamOptimizer", "dense_optimizer.compute_gradients",
                "dense_optimizer.apply_gradients"},
       .run =
           [] {
             for (const std::shared_ptr<Optimizer>& opt : std::vector<std::shared_ptr<Optimizer>>{
                      std::make_shared<SgdOptimizer>(SgdOptions{0.5}),
                      std::make_shared<AdagradOptimizer>(AdagradOptions{.learning_rate = 0.5}),
                      std::make_shared<AdamOptimizer>(AdamOptions{.learning_rate = 0.1})}) {
               const DenseRun run = TrainDense(opt, 20);
               EXPECT_LT(run.losses.back(), run.losses.front()) << opt->name();
             }
           }},

      // --- Distributed training (docs/distributed.md) --------------------------------------
      {.spec = {"get_rank_id", "get_rank_size", "get_local_rank_id", "get_local_rank_size",
                "hvd.rank", "hvd.size", "hvd.local_rank", "hccl_info.get_rank_size"},
       .run =
           [] {
             ShutdownDistributed();
             EXPECT_EQ(Must(get_rank_id()), 0);
             EXPECT_EQ(Must(get_rank_size()), 1);
             EXPECT_EQ(Must(get_local_rank_id()), 0);
             EXPECT_EQ(Must(get_local_rank_size()), 1);
             SetEnv size("OMPI_COMM_WORLD_SIZE", "two");
             ExpectRefused(get_rank_size().status(), "OMPI_COMM_WORLD_SIZE");
           }},
      {.spec = {"hvd.init", "npu_ops.initialize_system", "npu_ops.shutdown_system"},
       .run =
           [] {
             ShutdownDistributed();
             ASSERT_TRUE(InitDistributed({.collective_timeout_s = 30}).ok());
             EXPECT_TRUE(InitDistributed({.collective_timeout_s = 30}).ok());
             EXPECT_EQ(InitDistributed({.collective_timeout_s = 60}).code(),
                       absl::StatusCode::kFailedPrecondition);
             ShutdownDistributed();
             EXPECT_TRUE(InitDistributed({.collective_timeout_s = 60}).ok());
             ShutdownDistributed();
             ExpectRefused(InitDistributed({.collective_timeout_s = -1}), "collective_timeout_s");
           }},
      {.spec = {"TF_CONFIG"},
       .run =
           [] {
             ShutdownDistributed();
             {
               SetEnv tf_config("TF_CONFIG", R"({"cluster": {"worker": ["localhost:2222"]},
                                                 "task": {"type": "worker", "index": 0}})");
               EXPECT_TRUE(InitDistributed().ok());
               ShutdownDistributed();
             }
             {
               // A ps task is a rank of its own: one process cannot be a worker and a ps.
               SetEnv tf_config("TF_CONFIG", R"({"cluster": {"ps": ["a:1"], "worker": ["b:1"]},
                                                 "task": {"type": "ps", "index": 0}})");
               ExpectRefused(InitDistributed(), "ps 1", absl::StatusCode::kFailedPrecondition);
               ShutdownDistributed();
             }
             {
               SetEnv tf_config("TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1"]},
                                                 "task": {"type": "worker", "index": 0}})");
               ExpectRefused(InitDistributed(), "mpirun -np 2",
                             absl::StatusCode::kFailedPrecondition);
               ShutdownDistributed();
             }
           }},
      {.spec = {"dataset.shard"},
       .run =
           [] {
             auto ds = Must(InMemoryDataset({{"v", std::vector<int64_t>{0, 1, 2, 3, 4, 5}, 1}}));
             auto shard = Must(Shard(std::move(ds), Must(get_rank_size()) * 2, 1));
             std::vector<int64_t> rows;
             Batch b;
             while (Must(shard->GetNext(&b))) {
               for (int64_t v : b.column("v")->flat<int64_t>()) rows.push_back(v);
             }
             EXPECT_EQ(rows, (std::vector<int64_t>{1, 3, 5}));
           }},
      {.spec = {"npu_distributed_optimizer_wrapper", "NPUDistributedOptimizer",
                "hvd.DistributedOptimizer"},
       .run =
           [] {
             auto sgd = std::make_shared<SgdOptimizer>(SgdOptions{0.1});
             const DenseRun wrapped = TrainDense(npu_distributed_optimizer_wrapper(sgd), 3);
             EXPECT_TRUE(Has(wrapped.op_types, "AllReduceMean"));
             EXPECT_TRUE(SameBits(wrapped.w, TrainDense(sgd, 3).w));  // N = 1: the inner one's
             EXPECT_TRUE(
                 SameBits(TrainDense(std::make_shared<DistributedOptimizer>(sgd), 3).w, wrapped.w));
           }},
      {.spec = {"npu_allreduce", "hccl_ops.allreduce"},
       .run =
           [] {
             Graph g;
             Scope r(&g);
             std::vector<Output> out =
                 allreduce(r, {ops::Const(r, Tensor::Vector<float>({1.5f, -2.0f}))});
             ASSERT_EQ(out.size(), 1u);
             EXPECT_EQ(out[0].node->type(), "AllReduceMean");
             auto s = MakeSession(g, {});
             EXPECT_EQ(Values(*s, out[0].name()), (std::vector<float>{1.5f, -2.0f}));
           }},
      {.spec = {"hccl_ops.broadcast", "NPUBroadcastGlobalVariablesHook",
                "hvd.BroadcastGlobalVariablesHook"},
       .run =
           [] {
             LinearModel m;
             BuildLinearModel(&m);
             auto s = Must(Session::Create(m.graph));
             ExpectRefused(broadcast_global_variables(*s, 0), "w",
                           absl::StatusCode::kFailedPrecondition);  // not initialised yet
             ASSERT_TRUE(s->Run({}, {}, {m.init}).ok());
             const std::vector<float> w = Values(*s, "w/read");
             ASSERT_TRUE(broadcast_global_variables(*s, 0).ok());
             EXPECT_TRUE(SameBits(Values(*s, "w/read"), w));
             ExpectRefused(broadcast_global_variables(*s, 1), "1");
             LinearModel m2;
             BuildLinearModel(&m2);
             MonitoredSessionOptions o;
             o.hooks = {std::make_shared<BroadcastGlobalVariablesHook>(0)};
             EXPECT_TRUE(MonitoredSession::Create(&m2.graph, o).ok());
             o.hooks = {std::make_shared<BroadcastGlobalVariablesHook>(3)};
             EXPECT_FALSE(MonitoredSession::Create(&m2.graph, o).ok());
           }},

      // --- Precision monitoring and tuning --------------------------------------------------
      {.spec = {"PRECISION_CHECK", "precision_check.py"},
       .run =
           [] {
             // little_demo (and every sample) with PRECISION_CHECK=1 traces its steps as this
             // dump does (dump_mode "all", dump_checksums); tests/samples/little_demo_test.cc runs
             // the sample itself that way.
             auto trace = [](const std::string& name, float scale) {
               LinearModel m;
               BuildLinearModel(&m);
               SessionConfig c;
               c.enable_dump = true;
               c.dump_mode = "all";
               c.dump_checksums = true;
               c.dump_step = "0-9";
               c.deterministic = true;
               c.dump_path = FreshDir(name);
               auto s = MakeSession(m.graph, c);
               EXPECT_TRUE(s->Run({}, {}, {m.init}).ok());
               for (int i = 0; i < 2; ++i) {
                 EXPECT_TRUE(s->Run(LinearFeeds(i == 1 ? scale : 2.0f), {}, {m.train}).ok());
               }
               EXPECT_TRUE(s->Close().ok());
               return c.dump_path;
             };
             const std::string a = trace("precision_a", 2), b = trace("precision_b", 2),
                               c = trace("precision_c", 3);
             EXPECT_EQ(RunTool("precision-check " + a + " " + b).first, 0);
             const auto [rc, text] = RunTool("precision-check " + a + " " + c);
             EXPECT_EQ(rc, 1) << text;
             EXPECT_THAT(text, HasSubstr("step 2"));
           }},
      {.spec = {"find_nan.py"},
       .run =
           [] {
             auto dump = [](const std::string& name, std::vector<float> x) {
               Graph g;
               BuildLogModel(&g);
               SessionConfig c;
               c.enable_dump = true;
               c.dump_path = FreshDir(name);
               auto s = MakeSession(g, c);
               EXPECT_TRUE(s->Run({{"x", Floats(x)}}, {"scope/z"}).ok());
               EXPECT_TRUE(s->Close().ok());
               return c.dump_path;
             };
             EXPECT_EQ(RunTool("find-nan " + dump("finite", {1, 2})).first, 0);
             const auto [rc, text] = RunTool("find-nan " + dump("nan", {-1, 2}));
             EXPECT_EQ(rc, 1) << text;
             EXPECT_THAT(text, HasSubstr("scope/z"));
           }},
      {.spec = {"ckpt_compare.py"},
       .run =
           [] {
             LinearModel m;
             BuildLinearModel(&m);
             auto s = Must(Session::Create(m.graph));
             ASSERT_TRUE(s->Run({}, {}, {m.init}).ok());
             const std::string a =
                 Must(Must(Saver::Create(*s, {.model_dir = FreshDir("ckpt_a")}))->Save(0));
             ASSERT_TRUE(s->Run(LinearFeeds(2.0f), {}, {m.train}).ok());
             const std::string b =
                 Must(Must(Saver::Create(*s, {.model_dir = FreshDir("ckpt_b")}))->Save(1));
             EXPECT_EQ(RunTool("compare-ckpt " + a + " " + a).first, 0);
             const auto [rc, text] = RunTool("compare-ckpt " + a + " " + b);
             EXPECT_EQ(rc, 1) << text;
             EXPECT_THAT(text, HasSubstr("w"));
           }},
      {.spec = {"precision_tool"},
       .run =
           [] {
             auto dump = [](const std::string& name, float three) {
               Graph g;
               BuildLogModel(&g, three);
               SessionConfig c;
               c.enable_dump = true;
               c.dump_mode = "all";
               c.dump_path = FreshDir(name);
               auto s = MakeSession(g, c);
               EXPECT_TRUE(s->Run({{"x", Floats({1, 2})}}, {"scope/z"}).ok());
               EXPECT_TRUE(s->Close().ok());
               return c.dump_path;
             };
             const std::string left = dump("left", 3.0f), right = dump("right", 0.5f);
             EXPECT_EQ(RunTool("compare-dumps " + left + " " + left).first, 0);
             const auto [rc, text] = RunTool("compare-dumps " + left + " " + right);
             EXPECT_EQ(rc, 1) << text;
             EXPECT_THAT(text, HasSubstr("scope/z"));
           }},
  };
  return *cases;
}

class SpecNamesTest : public ::testing::TestWithParam<size_t> {};

TEST_P(SpecNamesTest, RunsTheMappedCall) {
  const SpecCase& c = Cases()[GetParam()];
  std::string names;
  for (const std::string& n : c.spec) names += (names.empty() ? "" : ", ") + n;
  SCOPED_TRACE("spec names: " + names);
  c.run();
}

INSTANTIATE_TEST_SUITE_P(Migration, SpecNamesTest, ::testing::Range<size_t>(0, Cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string name;
                           for (char ch : Cases()[info.param].spec[0]) {
                             name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           }
                           return std::to_string(info.param) + "_" + name;
                         });

}  // namespace
}  // namespace recsdk
