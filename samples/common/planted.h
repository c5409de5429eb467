// planted.h: the pieces of the planted data the samples train on (wide_deep, xdeepfm, mmoe): a
// known logit per row from fixed pseudo-random weights of the ids, labels drawn from it, and the
// planted model's own AUC as the ceiling a trained model is measured against. Each sample's
// MakePlantedRows composes its logit from these; the same seeds give the same rows.
// Threading: pure functions.
#ifndef RECSDK_SAMPLES_COMMON_PLANTED_H_
#define RECSDK_SAMPLES_COMMON_PLANTED_H_

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "recsdk/status.h"

namespace samples {

// PlantedRows: n samples of a planted model with one label: `fields` ids per sample, the label
// drawn from sigmoid(logit), and the logit itself.
struct PlantedRows {
  int64_t n = 0;
  std::vector<int64_t> ids;  // [n][fields]
  std::vector<float> labels;
  std::vector<double> logits;
};

// HeldOutResult: a one-label sample's figures: its held-out AUC, the planted model's AUC on the
// same rows, the training throughput.
struct HeldOutResult {
  double auc = 0;
  double planted_auc = 0;
  double train_samples_per_second = 0;
  int64_t steps = 0;
};

// PlantedWeight: a fixed pseudo-random value in [-1, 1] of (table, a, b): the weight of id b of
// field a in the planted table `table`.
double PlantedWeight(uint64_t table, uint64_t a, int64_t b);

// SkewedId: an id in 0..vocabulary-1 from a uniform u in [0, 1): u^2 * vocabulary, so the head ids
// are seen often.
int64_t SkewedId(double u, int64_t vocabulary);

// PlantedLabel: 1 with probability sigmoid(logit), from a uniform u in [0, 1).
float PlantedLabel(double u, double logit);

// PlantedStream: the random stream of a sample's planted rows. Per row a sample draws the ids,
// then its labels; the weights and the logits are fixed functions of the ids and draw nothing.
// Not thread-safe.
class PlantedStream {
 public:
  explicit PlantedStream(uint64_t seed) : rng_(seed) {}

  // DrawIds: ids[f] = SkewedId(the next uniform, vocabulary[f]) for f in 0..fields-1.
  void DrawIds(const int64_t* vocabulary, int fields, int64_t* ids);
  // DrawLabel: PlantedLabel of the next uniform.
  float DrawLabel(double logit) { return PlantedLabel(uniform_(rng_), logit); }

 private:
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0, 1};
};

// MakePlantedRows: n rows of one label from the stream `seed`: each row's ids (DrawIds over
// `fields` fields), its logit(ids) and its label drawn from that.
PlantedRows MakePlantedRows(int64_t n, uint64_t seed, const int64_t* vocabulary, int fields,
                            const std::function<double(const int64_t* ids)>& logit);

// FieldKey: the key of `id` in slot `slot` (slot << 32 | id): one table holds every slot.
int64_t FieldKey(int slot, int64_t id);

// FieldKeys: the keys of ids laid out [rows][fields], the slot of each being its field.
std::vector<int64_t> FieldKeys(const std::vector<int64_t>& ids, int fields);

// PlantedAuc: the AUC of the planted logits on their own labels (the ceiling on those rows).
recsdk::StatusOr<double> PlantedAuc(const std::vector<double>& logits,
                                    const std::vector<float>& labels);

}  // namespace samples

#endif  // RECSDK_SAMPLES_COMMON_PLANTED_H_
