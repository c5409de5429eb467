// recsdk/export.h: a self-contained inference bundle of a trained model (the spec's
// export_saved_model) and the Predictor that serves it.
//
// ExportSavedModel writes export_dir/ with: graph.json, the inference graph (only the nodes the
// serving outputs need from the serving inputs: no gradient, optimizer or update ops; every
// sparse lookup read-only, so unknown or not-admitted keys read the table's
// serving_default_value and nothing is inserted; lookups ModifyGraph moved to the key stage run
// in the served graph again, fed by the raw id columns, since a Predictor has no key stage); the
// dense weights and the tables' embeddings (without optimizer slots) as .npy payloads with a CRC32C
// manifest (docs/checkpoint-format.md); and serving.json, the serving inputs (name, dtype, shape)
// and outputs. A Predictor loads the bundle into its own Session (no training code runs) and
// returns, for the same inputs, the same bits the training session's graph computes.
//
// Threading: ExportSavedModel runs between Session::Run calls of the training session (it takes
// a snapshot, like Saver::Save). Predictor::Predict may be called from one thread at a time.
#ifndef RECSDK_EXPORT_H_
#define RECSDK_EXPORT_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "recsdk/config.h"
#include "recsdk/session.h"
#include "recsdk/status.h"
#include "recsdk/tensor.h"

namespace recsdk {

class Env;  // recsdk/env.h

// ServingSignature: what a served model takes and returns (the spec's ServingInputReceiver).
struct ServingSignature {
  // inputs: names of the Placeholder (or DatasetColumn) nodes fed at serving. Required: every
  // placeholder the outputs depend on.
  std::vector<std::string> inputs;
  // outputs: the tensors Predict returns, in this order ("node" or "node:index"). Non-empty.
  std::vector<std::string> outputs;
  // input_names: the names a Predictor is fed under (the spec's receiver_tensors keys), one per
  // `inputs` entry, in that order. Default empty: each input is fed under its node name. Each
  // name non-empty and unique.
  // (The "= {}" keeps `{{inputs}, {outputs}}` free of -Wmissing-field-initializers.)
  std::vector<std::string> input_names = {};
  // output_names: the names the outputs are served under (the keys of the model's predictions,
  // e.g. "prob" rather than "infer/Sigmoid:0"), one per `outputs` entry, in that order. Default
  // empty: each output is served under its tensor name. Each name non-empty and unique.
  std::vector<std::string> output_names = {};
};

// ExportSavedModel: writes the bundle to `export_dir`, which must not exist yet (or be empty);
// it is written under a temporary name and renamed, so a crash never leaves a half bundle.
// InvalidArgument for an empty signature, an unknown tensor, an input that is not a placeholder,
// an output that depends on a placeholder the inputs do not list, or input_names / output_names
// of another length than inputs / outputs, empty or repeated; FailedPrecondition when a variable
// is not initialised or export_dir is not empty. A failed write (a full disk: ResourceExhausted;
// a short write, a failed fsync or rename) names the file and leaves nothing at export_dir and no
// temporary beside it. `env`: the file system (tests inject faults through it); null: the
// process's POSIX one.
[[nodiscard]] Status ExportSavedModel(Session& session, const std::string& export_dir,
                                      const ServingSignature& signature, Env* env = nullptr);

// Predictor: serves a bundle written by ExportSavedModel.
class Predictor {
 public:
  // Load: reads and verifies the bundle (DataLoss naming a corrupt or missing file) and creates
  // its session with `config`.
  [[nodiscard]] static StatusOr<std::unique_ptr<Predictor>> Load(const std::string& export_dir,
                                                                 const SessionConfig& config = {});
  ~Predictor();
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  // Predict: feeds `inputs` (each signature input exactly once, under its input name; a
  // bundle exported without input_names is fed by node name, as before) and returns the
  // signature's outputs in signature order. InvalidArgument for a missing, unknown or mistyped
  // input.
  [[nodiscard]] StatusOr<std::vector<Tensor>> Predict(const FeedList& inputs);
  // PredictNamed: Predict, returning each output under its output name (the spec's predictions
  // dict: {"prob": ...}).
  [[nodiscard]] StatusOr<std::map<std::string, Tensor>> PredictNamed(const FeedList& inputs);
  // signature: the bundle's signature, with input_names and output_names always filled (the node
  // and tensor names for a bundle exported without names, or written before names existed).
  const ServingSignature& signature() const;

 private:
  struct Impl;  // the implementation (pimpl), defined in src/
  explicit Predictor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace recsdk

#endif  // RECSDK_EXPORT_H_
