// flags.h: the command-line flags of the samples: "--name=value" or "--name value". Flags binds
// each flag to a field of a sample's options with the messages the planted-data samples
// (wide_deep, xdeepfm, mmoe) give; ForEachFlag is the argv loop alone, for a sample that checks
// its values itself (dcnv2). Threading: one caller; a Flags is not thread-safe.
#ifndef RECSDK_SAMPLES_COMMON_FLAGS_H_
#define RECSDK_SAMPLES_COMMON_FLAGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "recsdk/status.h"

namespace samples {

// Flags: a sample's flags by name. Every message names the sample first ("wide_deep: --batch_size=x
// is not an integer"), so a user of several samples sees which one refused.
class Flags {
 public:
  // sample: the program's name; an unknown flag's message points at samples/<sample>/<sample>.h.
  explicit Flags(std::string sample) : sample_(std::move(sample)) {}

  // Integer: a base-10 integer, cast to the field's type.
  template <typename T>
  void Integer(const std::string& name, T* field) {
    flags_[name] = [sample = sample_, field](const std::string& flag, const std::string& v) {
      recsdk::StatusOr<int64_t> n = ParseInteger(sample, flag, v);
      if (!n.ok()) return n.status();
      *field = static_cast<T>(*n);
      return recsdk::Status();
    };
  }
  // PositiveNumber: a finite number > 0 (a learning rate, a regularisation weight).
  void PositiveNumber(const std::string& name, double* field);
  // String: the value as it is.
  void String(const std::string& name, std::string* field);
  // LayerSizes: comma-separated integers, each >= 1 (--deep_units=128,64).
  void LayerSizes(const std::string& name, std::vector<int64_t>* field);

  // Parse: sets the bound fields from argv[1..argc-1], in order. InvalidArgument for an argument
  // that is not a flag, a last flag without a value, an unknown flag (naming the header that
  // lists the flags) or the first bad value; the fields set before it keep their new values.
  [[nodiscard]] recsdk::Status Parse(int argc, char** argv) const;

 private:
  using Setter = std::function<recsdk::Status(const std::string& flag, const std::string& v)>;

  static recsdk::StatusOr<int64_t> ParseInteger(const std::string& sample, const std::string& flag,
                                                const std::string& v);

  std::string sample_;
  std::map<std::string, Setter> flags_;
};

// ForEachFlag: calls set(name, value) for each flag of argv[1..argc-1] in order, given as
// "--name=value" or "--name value"; returns the first error `set` returns. InvalidArgument
// naming the sample for an argument that is not a flag or a last flag without a value.
[[nodiscard]] recsdk::Status ForEachFlag(
    const std::string& sample, int argc, char** argv,
    const std::function<recsdk::Status(const std::string& name, const std::string& value)>& set);

// UnknownFlag: the InvalidArgument for a flag the sample does not have, pointing at the header
// that lists its flags (samples/<sample>/<sample>.h).
recsdk::Status UnknownFlag(const std::string& sample, const std::string& name);

// AddRunFlags: binds the flags every planted-data sample has to the fields of the same names:
// train_rows, eval_rows, batch_size, embedding_dim, threads, seed (integers),
// dense_learning_rate (a number > 0), model_dir and session_config.
template <typename Options>
void AddRunFlags(Flags* flags, Options* o) {
  flags->Integer("train_rows", &o->train_rows);
  flags->Integer("eval_rows", &o->eval_rows);
  flags->Integer("batch_size", &o->batch_size);
  flags->Integer("embedding_dim", &o->embedding_dim);
  flags->Integer("threads", &o->threads);
  flags->Integer("seed", &o->seed);
  flags->PositiveNumber("dense_learning_rate", &o->dense_learning_rate);
  flags->String("model_dir", &o->model_dir);
  flags->String("session_config", &o->session_config);
}

}  // namespace samples

#endif  // RECSDK_SAMPLES_COMMON_FLAGS_H_
