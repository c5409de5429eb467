// planted.cc: the planted data's pieces (planted.h).
#include "samples/common/planted.h"

#include <algorithm>
#include <cmath>

#include "recsdk/metrics.h"

namespace samples {

double PlantedWeight(uint64_t table, uint64_t a, int64_t b) {
  uint64_t x = static_cast<uint64_t>(b) * 0x9E3779B97F4A7C15ull + table * 0xBF58476D1CE4E5B9ull +
               a * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86CD8B4D5ull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 53) * 2 - 1;
}

int64_t SkewedId(double u, int64_t vocabulary) {
  return std::min<int64_t>(vocabulary - 1, static_cast<int64_t>(u * u * vocabulary));
}

float PlantedLabel(double u, double logit) { return u < 1 / (1 + std::exp(-logit)) ? 1.0f : 0.0f; }

void PlantedStream::DrawIds(const int64_t* vocabulary, int fields, int64_t* ids) {
  for (int f = 0; f < fields; ++f) ids[f] = SkewedId(uniform_(rng_), vocabulary[f]);
}

PlantedRows MakePlantedRows(int64_t n, uint64_t seed, const int64_t* vocabulary, int fields,
                            const std::function<double(const int64_t* ids)>& logit) {
  PlantedStream stream(seed);
  PlantedRows r;
  r.n = n;
  r.ids.resize(n * fields);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* ids = &r.ids[i * fields];
    stream.DrawIds(vocabulary, fields, &r.ids[i * fields]);
    r.logits.push_back(logit(ids));
    r.labels.push_back(stream.DrawLabel(r.logits.back()));
  }
  return r;
}

int64_t FieldKey(int slot, int64_t id) { return (static_cast<int64_t>(slot) << 32) | id; }

std::vector<int64_t> FieldKeys(const std::vector<int64_t>& ids, int fields) {
  std::vector<int64_t> keys(ids.size());
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = FieldKey(static_cast<int>(i % fields), ids[i]);
  return keys;
}

recsdk::StatusOr<double> PlantedAuc(const std::vector<double>& logits,
                                    const std::vector<float>& labels) {
  std::vector<float> planted(logits.begin(), logits.end());
  return recsdk::Auc(planted, labels);
}

}  // namespace samples
