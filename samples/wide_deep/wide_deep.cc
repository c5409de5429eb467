// wide_deep.cc: Wide & Deep (Cheng et al. 2016) on the Estimator, on planted data.
//
// Data: kFields categorical fields; field f draws ids 0..FieldVocabulary(f)-1 with a skew (u^2
// of a uniform u), so the head ids are seen often. The planted logit is known, so its own AUC on
// the held-out rows is the ceiling:
//   logit = -0.3 + 0.4 sum_f w_f(id_f)                          (per-id weights, all fields)
//         + 0.8 sum_c w'_c(cross_c)                             (two crossed fields: memorisation)
//         + 0.7 sum_{(i,j) in kLatentPairs} <z_i(id_i), z_j(id_j)>  (4-d latents: generalisation)
// with every w, w', z a fixed pseudo-random value in [-1, 1]. A logistic regression over the ids
// and the same crosses (the wide part alone) learns the first two lines only; the latent
// interactions are what the deep part is for.
//
// Model: the wide part is a linear model over the ids and the crossed ids, all in one table
// "wide" of dim 1 (keys slot << 32 | id), sum-pooled to a logit and trained by FTRL, as in the
// paper; the deep part looks the kFields ids up in "deep_embeddings" (dim 8, LazyAdam), flattens
// them and runs a ReLU tower (128-64) to a logit; the two logits add; sigmoid cross-entropy.
// Adam for the tower. Lookups run in the key stage (modify_graph). One Estimator: Train over one
// epoch, then Evaluate on the held-out rows (AUC).
//
// Threading: one thread drives the Estimator (the key stage runs its own workers).
#include "samples/wide_deep/wide_deep.h"

#include <string>

#include "fmt/format.h"
#include "recsdk/estimator.h"
#include "recsdk/recsdk.h"
#include "samples/common/estimator_run.h"
#include "samples/common/flags.h"
#include "samples/common/planted.h"

namespace wide_deep {
namespace {

using namespace recsdk;  // NOLINT: a sample reads like user code
using samples::FieldKey;
using samples::PlantedWeight;

constexpr int64_t kVocabulary[kFields] = {50, 30, 1000, 40, 300, 2000, 500, 20};
constexpr int kCross[kCrosses][2] = {{0, 1}, {3, 7}};
constexpr int kLatentDim = 4;
constexpr int kLatentPairs[][2] = {{0, 4}, {1, 3}, {4, 6}, {2, 7}, {5, 1}};

// Input: the ids of every field, then of the crosses (slots kFields..), for the wide part; the
// ids of the fields for the deep part.
InputFn Input(const PlantedRows& rows, int64_t batch_size, bool training) {
  return samples::BatchedInput(
      [&rows]() -> std::vector<InMemoryColumn> {
        std::vector<int64_t> wide, deep;
        wide.reserve(rows.n * (kFields + kCrosses));
        deep.reserve(rows.n * kFields);
        for (int64_t i = 0; i < rows.n; ++i) {
          const int64_t* ids = &rows.ids[i * kFields];
          for (int f = 0; f < kFields; ++f) {
            wide.push_back(FieldKey(f, ids[f]));
            deep.push_back(FieldKey(f, ids[f]));
          }
          for (int c = 0; c < kCrosses; ++c) {
            wide.push_back(FieldKey(kFields + c, CrossId(c, ids)));
          }
        }
        std::vector<float> labels(rows.labels.begin(), rows.labels.end());
        return {{"wide_ids", std::move(wide), kFields + kCrosses},
                {"deep_ids", std::move(deep), kFields},
                {"label", std::move(labels), 1}};
      },
      batch_size, training);
}

ModelFn MakeModelFn(const WideDeepOptions& o) {
  return [o](const Scope& s, const Features& f, const Labels& labels, ModeKeys mode,
             const Params&) -> StatusOr<EstimatorSpec> {
    int64_t wide_vocabulary = 0, deep_vocabulary = 0;
    for (int k = 0; k < kFields; ++k) deep_vocabulary += kVocabulary[k];
    wide_vocabulary = deep_vocabulary;
    for (int c = 0; c < kCrosses; ++c) {
      wide_vocabulary += kVocabulary[kCross[c][0]] * kVocabulary[kCross[c][1]];
    }
    TableConfig wide_config;
    wide_config.name = "wide";
    wide_config.dim = 1;
    wide_config.device_vocabulary_size = wide_vocabulary;
    wide_config.initializer = Initializer::Zeros();  // a linear model starts at 0
    auto wide_table =
        create_table(s, wide_config,
                     SparseOptimizerConfig::FTRL(static_cast<float>(o.wide_learning_rate), -0.5f,
                                                 static_cast<float>(o.wide_initial_accumulator),
                                                 0.0f, static_cast<float>(o.wide_l2)));
    if (!wide_table.ok()) return wide_table.status();
    TableConfig deep_config;
    deep_config.name = "deep_embeddings";
    deep_config.dim = o.embedding_dim;
    deep_config.device_vocabulary_size = deep_vocabulary;
    deep_config.initializer =
        Initializer::TruncatedNormal(0, 0.05, static_cast<int64_t>(o.seed) + 1);
    auto deep_table = create_table(
        s, deep_config, SparseOptimizerConfig::LazyAdam(static_cast<float>(o.deep_learning_rate)));
    if (!deep_table.ok()) return deep_table.status();

    SparseLookupOptions lookup;
    lookup.modify_graph = true;
    lookup.is_train = mode == ModeKeys::kTrain;
    lookup.name = "wide_lookup";
    lookup.combiner = Combiner::kSum;
    auto wide = sparse_lookup(s, *wide_table, f.at("wide_ids"), lookup);  // [B, 1]
    if (!wide.ok()) return wide.status();
    lookup.name = "deep_lookup";
    lookup.combiner.reset();
    auto deep = sparse_lookup(s, *deep_table, f.at("deep_ids"), lookup);  // [B, F, dim]
    if (!deep.ok()) return deep.status();

    layers::MlpOptions tower;
    tower.hidden_units = o.deep_units;
    tower.output_units = 1;
    tower.name = "deep";
    const Output deep_logit =
        layers::Mlp(s, ops::Reshape(s, *deep, {-1, kFields * o.embedding_dim}), tower);
    const Output logit = ops::Add(s.WithOpName("logit"), *wide, deep_logit);
    return samples::BinaryClassifierSpec(s, logit, labels, mode, o.dense_learning_rate);
  };
}

Status Validate(const WideDeepOptions& o) {
  return samples::ValidateRunOptions("wide_deep", samples::RunOptionsOf(o), "deep_units",
                                     o.deep_units);
}

}  // namespace

int64_t FieldVocabulary(int f) { return kVocabulary[f]; }

std::pair<int, int> CrossFields(int c) { return {kCross[c][0], kCross[c][1]}; }

int64_t CrossId(int c, const int64_t* ids) {
  return ids[kCross[c][0]] * kVocabulary[kCross[c][1]] + ids[kCross[c][1]];
}

PlantedRows MakePlantedRows(int64_t n, uint64_t stream) {
  return samples::MakePlantedRows(n, 0x3DEE9 + stream, kVocabulary, kFields,
                                  [](const int64_t* ids) {
                                    double logit = -0.3;
                                    for (int f = 0; f < kFields; ++f)
                                      logit += 0.4 * PlantedWeight(1, f, ids[f]);
                                    for (int c = 0; c < kCrosses; ++c)
                                      logit += 0.8 * PlantedWeight(2, c, CrossId(c, ids));
                                    for (const auto& pair : kLatentPairs) {
                                      double dot = 0;
                                      for (int k = 0; k < kLatentDim; ++k) {
                                        dot += PlantedWeight(3 + k, pair[0], ids[pair[0]]) *
                                               PlantedWeight(3 + k, pair[1], ids[pair[1]]);
                                      }
                                      logit += 0.7 * dot;
                                    }
                                    return logit;
                                  });
}

StatusOr<WideDeepResult> Run(const WideDeepOptions& o) {
  if (Status s = Validate(o); !s.ok()) return s;
  const samples::RunOptions run = samples::RunOptionsOf(o);
  std::fprintf(samples::OutputOf(run),
               "wide_deep: %lld train rows, %lld held-out rows, batch %lld; wide FTRL %.3g, deep "
               "dim %d, tower %s\n",
               static_cast<long long>(o.train_rows), static_cast<long long>(o.eval_rows),
               static_cast<long long>(o.batch_size), o.wide_learning_rate, o.embedding_dim,
               fmt::format("{}", fmt::join(o.deep_units, "-")).c_str());
  return samples::RunHeldOut("wide_deep", run, MakeModelFn(o), MakePlantedRows, Input);
}

StatusOr<WideDeepOptions> ParseOptions(int argc, char** argv) {
  WideDeepOptions o;
  samples::Flags flags("wide_deep");
  samples::AddRunFlags(&flags, &o);
  flags.PositiveNumber("wide_learning_rate", &o.wide_learning_rate);
  flags.PositiveNumber("wide_initial_accumulator", &o.wide_initial_accumulator);
  flags.PositiveNumber("wide_l2", &o.wide_l2);
  flags.PositiveNumber("deep_learning_rate", &o.deep_learning_rate);
  flags.LayerSizes("deep_units", &o.deep_units);
  if (Status s = flags.Parse(argc, argv); !s.ok()) return s;
  if (Status s = Validate(o); !s.ok()) return s;
  return o;
}

}  // namespace wide_deep
