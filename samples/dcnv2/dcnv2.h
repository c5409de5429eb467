// dcnv2.h: the spec's DCNv2 Model Development Guide on recsdk, as a library so a test can train
// it. The model, the planted data and the guide's steps are described in dcnv2.cc and README.md.
// Threading: one caller.
#ifndef RECSDK_SAMPLES_DCNV2_H_
#define RECSDK_SAMPLES_DCNV2_H_

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "recsdk/config.h"
#include "recsdk/status.h"

namespace dcnv2 {

inline constexpr int kDenseFields = 13;
inline constexpr int kSparseFields = 26;

// Dcnv2Options: the run's sizes and the model's knobs (flags of the same names, see ParseOptions).
struct Dcnv2Options {
  int64_t train_rows = 1600000;  // planted rows written to <data_dir>/train.tsv
  int64_t eval_rows = 40000;     // held-out rows (another random stream) in <data_dir>/eval.tsv
  int64_t batch_size = 512;
  int64_t epochs = 1;
  int embedding_dim = 8;  // dim of the one table all 26 fields share (the guide's one create_table)
  int cross_layers = 3;
  std::string cross = "full";  // full | low_rank | mixture (layers::CrossStructure)
  int64_t rank = 32;           // low_rank and mixture
  int64_t experts = 4;         // mixture
  std::vector<int64_t> deep_units = {256, 128};
  std::string structure = "parallel";  // parallel (cross beside deep) | stacked (deep on cross)
  std::string dense_norm = "batch";    // batch | layer | none: on the 13 log1p dense features
  double dense_learning_rate = 0.001;  // Adam
  double sparse_learning_rate = 0.01;  // LazyAdam
  int64_t warmup_steps = 100;          // linear warm-up of the dense rate (0: none)
  double loss_scale = 65536;           // the guide's static loss scale (1: none)
  int threads = 0;                     // SessionConfig::intra_op_parallelism (0: all)
  uint64_t seed = 1;
  std::string data_dir = "dcnv2_data";
  // mode: train (write the data, train, evaluate: the guide), race (the speed race against
  // benchmarks/peers/dcnv2_torch.py, see RunRace) or write_data (write <data_dir>/train.tsv and
  // eval.tsv, then stop).
  std::string mode = "train";
  // The race's timing (--mode=race): `warmup` steps, then `windows` windows of `window_steps`
  // steps each timed; samples/s is the median window. loss_steps (0: all the steps) is the step
  // count whose last 5 losses are averaged for the JSON's "loss".
  int64_t warmup = 10;
  int64_t windows = 5;
  int64_t window_steps = 20;
  int64_t loss_steps = 0;
  // session_config: SESSION_CONFIG=FILE or --session_config FILE, any session option of the spec
  // (enable_dump, precision_mode, ...) from a JSON file as `recsdk validate-config` checks it;
  // unset: the defaults. A nonzero --threads overrides the file's intra_op_parallelism.
  std::optional<recsdk::SessionConfig> session_config;
  std::FILE* out = nullptr;  // default stdout
};

// ParseOptions: flags "--name=value" or "--name value" for every field above but `out`
// (--deep_units=a,b,...), and the environment variable SESSION_CONFIG (a --session_config flag
// wins). InvalidArgument naming an unknown flag or a bad value; a session config file that cannot
// be read or parsed is an error naming the file.
recsdk::StatusOr<Dcnv2Options> ParseOptions(int argc, char** argv);

// PlantedRows: n samples of the planted model, as the Criteo file holds them: 13 integer counts
// (-1: the field is empty), 26 ids per sample (0: empty; else 1..vocab of the field), the label
// drawn from sigmoid(logit), and the logit itself (the planted model's score).
struct PlantedRows {
  int64_t n = 0;
  std::vector<int64_t> counts;  // [n][13]
  std::vector<int64_t> ids;     // [n][26]
  std::vector<float> labels;    // [n]
  std::vector<double> logits;   // [n]
};

// MakePlantedRows: rows of random stream `stream` (train and eval use different streams).
PlantedRows MakePlantedRows(int64_t n, uint64_t stream);
// FieldVocabulary: the number of distinct ids field f (0..25) draws from.
int64_t FieldVocabulary(int f);
// DenseValue: the reader's transform of a count (DenseTransform::kLog1p; empty reads 0).
float DenseValue(int64_t count);
// WriteCriteoTsv: `rows` as Criteo TSV (label, 13 integers, 26 hex ids; empty fields empty).
recsdk::Status WriteCriteoTsv(const std::string& path, const PlantedRows& rows);

// Dcnv2Result: held-out AUC and log loss, the planted model's AUC on the same rows, the training
// throughput.
struct Dcnv2Result {
  double auc = 0;
  double log_loss = 0;
  double planted_auc = 0;
  double train_samples_per_second = 0;
  int64_t steps = 0;
};

// Run: writes the planted data, builds the model (sess.run path), trains, evaluates; prints the
// loss per step block, samples/s and the held-out AUC beside the planted model's.
// --mode=race runs RunRace instead; --mode=write_data writes the two files and returns.
recsdk::StatusOr<Dcnv2Result> Run(const Dcnv2Options& options);

// RunRace: the speed race against the PyTorch peer (benchmarks/peers/dcnv2_torch.py, raced by
// scripts/race.sh dcnv2). Trains on <data_dir>/train.tsv (written first, with train_rows planted
// rows, only when it is missing; so both sides read the same bytes), read whole by the same
// reader as Run into fed batches before any timing (the remainder dropped); the timed steps are
// sess->Run of the training step alone, cycling over the batches. No evaluation. Prints one JSON
// line: samples/s (median window), every window's rate, the first step's loss, the mean loss of
// steps (loss_steps-4..loss_steps], and the CPU time per timed step (all threads).
recsdk::StatusOr<Dcnv2Result> RunRace(const Dcnv2Options& options);

}  // namespace dcnv2

#endif  // RECSDK_SAMPLES_DCNV2_H_
