// recsdk/feature_spec.h: FeatureSpec, the description of one sparse feature of a dataset.
//
// A FeatureSpec names a column of the dataset (`index_key`), the sparse table its ids are looked
// up in (`table_name`), and the admission and eviction thresholds the key stage applies. The
// option names are spelled as in the product spec so users can find them. Value type,
// thread-compatible.
#ifndef RECSDK_FEATURE_SPEC_H_
#define RECSDK_FEATURE_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "recsdk/status.h"

namespace recsdk {

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
