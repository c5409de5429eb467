// recsdk/feature_spec.h: FeatureSpec, the description of one sparse feature of a dataset.
//
// A FeatureSpec names a column of the dataset (`index_key`), the sparse table its ids are looked
// up in (`table_name`), and the admission and eviction thresholds the key stage applies. The
// option names are spelled as in the product spec so users can find them. Value type,
// thread-compatible.
//
// Several fields in one table (the spec's DCNv2 guide merges Criteo's 26 fields into one
// `sparse_feature` and creates one table): a spec with `fields` names the dataset columns it
// merges, and MergeFeatureFields (recsdk/dataset.h) adds the merged column to every batch, each
// field's ids moved into its own key range (per-field offsets, or a hash of field and id), so no
// id of one field can meet the same id of another.
#ifndef RECSDK_FEATURE_SPEC_H_
#define RECSDK_FEATURE_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "recsdk/status.h"

namespace recsdk {

// FieldKeys: how a merged feature keeps its fields' ids apart in one table.
enum class FieldKeys {
  // kOffset: field f's id becomes field_offsets[f] + id. The id must lie in [0, the next field's
  // offset - this field's offset) (the last field: [0, 2^63 - its offset)); an id outside its
  // range is an error naming the field, because it would meet another field's keys.
  kOffset = 0,
  // kHash: field f's id becomes a stable 64-bit hash of (f, id), non-negative. Any int64 id;
  // distinct (field, id) pairs collide with probability ~n^2 / 2^64.
  kHash = 1,
};

// FeatureSpec: one sparse feature of a dataset (see the file comment). Validate() checks it.
struct FeatureSpec {
  // name: the feature's name, unique among the specs of one dataset. Required.
  std::string name;
  // table_name: the sparse table the feature's ids are looked up in; several features may share
  // one table. Default "" means "a table named like the feature" (see EffectiveTableName()).
  // Ignored for the timestamp spec.
  std::string table_name;
  // index_key: the name of the dataset column (Batch column) holding this feature's ids, or the
  // timestamps when is_timestamp is true. Default "" means the column is named `name`.
  std::string index_key;
  // access_threshold: admission threshold, in accesses. -1 (default) sets no admission; >= 0
  // admits a new key once its (weighted) access count reaches it. Below -1 is an error.
  // Admission is per table: sparse_lookup makes this the threshold of the feature's table, and
  // every spec (or TableConfig, or access_and_evict_config) that sets one for the table must set
  // the same; -1 leaves it to them.
  int64_t access_threshold = -1;
  // eviction_threshold: eviction threshold, in seconds since a key was last seen. -1 (default)
  // sets no eviction; >= 0 evicts keys idle that long. Below -1 is an error. Eviction needs
  // admission (access_threshold >= 0) and a timestamp spec in the same feature list. Per table,
  // like access_threshold.
  int64_t eviction_threshold = -1;
  // is_timestamp: true when this spec describes the dataset's timestamp column (int64 seconds),
  // which eviction reads; such a spec has no table and no thresholds. Default false.
  bool is_timestamp = false;
  // batch_size: the number of samples per batch this feature is fed with; 0 (default) means
  // "the dataset's batch size". Negative is an error.
  int64_t batch_size = 0;
  // faae_coefficient: feature admission and eviction coefficient, the weight one access of this
  // feature adds to a key's access count (so a feature seen in a heavier slot is admitted
  // sooner; a key seen once here counts faae_coefficient). Per feature, unlike the thresholds.
  // Default 1; must be >= 1.
  int64_t faae_coefficient = 1;
  // fields: the dataset columns (int64, [B, n_f] ids each) this feature merges into its one
  // column EffectiveIndexKey(), side by side in this order ([B, sum of n_f]); MergeFeatureFields
  // builds that column. Empty (default): the feature reads its column as it is. A field must not
  // be the feature's own column, and at most kMaxFields are allowed.
  std::vector<std::string> fields = {};
  // field_keys: how the fields' ids are kept apart (FieldKeys). Default kOffset.
  FieldKeys field_keys = FieldKeys::kOffset;
  // field_offsets: with kOffset, field f's first key; one per field, strictly increasing, >= 0
  // (e.g. the running sum of the fields' vocabulary sizes, as a preprocessing script computes).
  // Empty: field f starts at f << 32, so each field's ids must lie in [0, 2^32). Must be empty
  // with kHash.
  std::vector<int64_t> field_offsets = {};

  // kMaxFields: the most fields one feature may merge.
  static constexpr int kMaxFields = 4096;

  // EffectiveIndexKey: index_key, or name when index_key is empty.
  const std::string& EffectiveIndexKey() const { return index_key.empty() ? name : index_key; }
  // EffectiveTableName: table_name, or name when table_name is empty.
  const std::string& EffectiveTableName() const { return table_name.empty() ? name : table_name; }

  // Validate checks this spec alone; the error names the feature, the option, the value, the
  // rule and the fix.
  [[nodiscard]] Status Validate() const;
};

// ValidateFeatureSpecs checks every spec and the rules that span the list: unique names, at most
// one timestamp spec, and a timestamp spec whenever some feature enables eviction.
[[nodiscard]] Status ValidateFeatureSpecs(const std::vector<FeatureSpec>& specs);

}  // namespace recsdk

#endif  // RECSDK_FEATURE_SPEC_H_
