// xdeepfm.cc: xDeepFM (Lian et al. 2018) on the Estimator, on planted data.
//
// Data: kFields categorical fields; field f draws ids 0..FieldVocabulary(f)-1 with a skew (u^2
// of a uniform u), so the head ids are seen often. Each (field, id) has a fixed pseudo-random
// weight w and a 4-d latent vector z, every value in [-1, 1]. The planted logit is known, so its
// own AUC on the held-out rows is the ceiling:
//   logit = -0.3 + 0.4 sum_f w_f(id_f)                                   (first order)
//         + 0.25 sum_{i<j} <z_i(id_i), z_j(id_j)>                        (FM: every field pair)
//         + 1.0 sum_{(a,b,c) in kTriples} sum_k z_a,k z_b,k z_c,k         (three 3rd-order terms)
// A logistic regression over the ids learns the first line only; the vector-wise interactions of
// the second and third orders are what the CIN's layers 1 and 2 compute.
//
// Model (the paper's): a linear part (table "linear" of dim 1, sum-pooled to a logit); the field
// embeddings (table "embeddings", dim 8, [B, 10, 8] from one sparse_lookup) feed a CIN
// (layers::Cin, 32-32 maps, split_half) and a DNN (ReLU 128-64); the CIN's pooled maps and the
// DNN's last layer go through one output unit, added to the linear logit; sigmoid cross-entropy.
// LazyAdam for both tables, Adam for the rest. Lookups run in the key stage (modify_graph). One
// Estimator: Train over one epoch, then Evaluate on the held-out rows (AUC).
//
// Threading: one thread drives the Estimator (the key stage runs its own workers).
#include "samples/xdeepfm/xdeepfm.h"

#include <string>

#include "fmt/format.h"
#include "recsdk/estimator.h"
#include "recsdk/recsdk.h"
#include "samples/common/estimator_run.h"
#include "samples/common/flags.h"
#include "samples/common/planted.h"

namespace xdeepfm {
namespace {

using namespace recsdk;  // NOLINT: a sample reads like user code
using samples::PlantedWeight;

constexpr int64_t kVocabulary[kFields] = {60, 40, 300, 150, 20, 500, 200, 30, 100, 50};
constexpr int kLatentDim = 4;
constexpr int kTriples[][3] = {{0, 1, 4}, {2, 3, 7}, {5, 8, 9}};

// Input: every field's ids in one column (one table holds every field).
InputFn Input(const PlantedRows& rows, int64_t batch_size, bool training) {
  return samples::BatchedInput(
      [&rows]() -> std::vector<InMemoryColumn> {
        return {{"ids", samples::FieldKeys(rows.ids, kFields), kFields},
                {"label", std::vector<float>(rows.labels.begin(), rows.labels.end()), 1}};
      },
      batch_size, training);
}

ModelFn MakeModelFn(const XDeepFmOptions& o) {
  return [o](const Scope& s, const Features& f, const Labels& labels, ModeKeys mode,
             const Params&) -> StatusOr<EstimatorSpec> {
    int64_t vocabulary = 0;
    for (int k = 0; k < kFields; ++k) vocabulary += kVocabulary[k];
    const auto sparse_opt =
        SparseOptimizerConfig::LazyAdam(static_cast<float>(o.sparse_learning_rate));
    TableConfig linear_config;
    linear_config.name = "linear";
    linear_config.dim = 1;
    linear_config.device_vocabulary_size = vocabulary;
    linear_config.initializer = Initializer::Zeros();  // a linear model starts at 0
    auto linear_table = create_table(s, linear_config, sparse_opt);
    if (!linear_table.ok()) return linear_table.status();
    TableConfig embedding_config;
    embedding_config.name = "embeddings";
    embedding_config.dim = o.embedding_dim;
    embedding_config.device_vocabulary_size = vocabulary;
    embedding_config.initializer =
        Initializer::TruncatedNormal(0, 0.05, static_cast<int64_t>(o.seed) + 1);
    auto embedding_table = create_table(s, embedding_config, sparse_opt);
    if (!embedding_table.ok()) return embedding_table.status();

    SparseLookupOptions lookup;
    lookup.modify_graph = true;
    lookup.is_train = mode == ModeKeys::kTrain;
    lookup.name = "linear_lookup";
    lookup.combiner = Combiner::kSum;
    auto linear = sparse_lookup(s, *linear_table, f.at("ids"), lookup);  // [B, 1]
    if (!linear.ok()) return linear.status();
    lookup.name = "embedding_lookup";
    lookup.combiner.reset();
    auto fields = sparse_lookup(s, *embedding_table, f.at("ids"), lookup);  // [B, F, dim]
    if (!fields.ok()) return fields.status();

    layers::CinOptions cin_options;
    cin_options.layer_sizes = o.cin_layers;
    auto cin = layers::Cin(s, *fields, cin_options);  // [B, sum of the pooled maps]
    if (!cin.ok()) return cin.status();
    layers::MlpOptions dnn;
    dnn.hidden_units = o.deep_units;
    dnn.name = "dnn";
    const Output hidden =
        layers::Mlp(s, ops::Reshape(s, *fields, {-1, kFields * o.embedding_dim}), dnn);
    layers::DenseOptions output;
    output.units = 1;
    output.name = "output";
    const Output logit = ops::Add(s.WithOpName("logit"), *linear,
                                  layers::Dense(s, ops::Concat(s, {*cin, hidden}, 1), output));
    return samples::BinaryClassifierSpec(s, logit, labels, mode, o.dense_learning_rate);
  };
}

// cin_layers are the Cin layer's to check: its error names the layer sizes and the fix.
Status Validate(const XDeepFmOptions& o) {
  return samples::ValidateRunOptions("xdeepfm", samples::RunOptionsOf(o), "deep_units",
                                     o.deep_units);
}

}  // namespace

int64_t FieldVocabulary(int f) { return kVocabulary[f]; }

PlantedRows MakePlantedRows(int64_t n, uint64_t stream) {
  return samples::MakePlantedRows(n, 0xDEEF + stream, kVocabulary, kFields, [](const int64_t* ids) {
    double z[kFields][kLatentDim];
    double logit = -0.3;
    for (int f = 0; f < kFields; ++f) {
      logit += 0.4 * PlantedWeight(1, f, ids[f]);
      for (int k = 0; k < kLatentDim; ++k) z[f][k] = PlantedWeight(2 + k, f, ids[f]);
    }
    for (int a = 0; a < kFields; ++a)
      for (int b = a + 1; b < kFields; ++b)
        for (int k = 0; k < kLatentDim; ++k) logit += 0.25 * z[a][k] * z[b][k];
    for (const auto& t : kTriples)
      for (int k = 0; k < kLatentDim; ++k) logit += 1.0 * z[t[0]][k] * z[t[1]][k] * z[t[2]][k];
    return logit;
  });
}

StatusOr<XDeepFmResult> Run(const XDeepFmOptions& o) {
  if (Status s = Validate(o); !s.ok()) return s;
  const samples::RunOptions run = samples::RunOptionsOf(o);
  std::fprintf(samples::OutputOf(run),
               "xdeepfm: %lld train rows, %lld held-out rows, batch %lld; dim %d, CIN %s, DNN %s\n",
               static_cast<long long>(o.train_rows), static_cast<long long>(o.eval_rows),
               static_cast<long long>(o.batch_size), o.embedding_dim,
               fmt::format("{}", fmt::join(o.cin_layers, "-")).c_str(),
               fmt::format("{}", fmt::join(o.deep_units, "-")).c_str());
  return samples::RunHeldOut("xdeepfm", run, MakeModelFn(o), MakePlantedRows, Input);
}

StatusOr<XDeepFmOptions> ParseOptions(int argc, char** argv) {
  XDeepFmOptions o;
  samples::Flags flags("xdeepfm");
  samples::AddRunFlags(&flags, &o);
  flags.PositiveNumber("sparse_learning_rate", &o.sparse_learning_rate);
  flags.LayerSizes("cin_layers", &o.cin_layers);
  flags.LayerSizes("deep_units", &o.deep_units);
  if (Status s = flags.Parse(argc, argv); !s.ok()) return s;
  if (Status s = Validate(o); !s.ok()) return s;
  return o;
}

}  // namespace xdeepfm
