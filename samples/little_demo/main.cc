// little_demo: the main job. A CTR model on synthetic click data with a planted signal:
// 26 categorical features (Zipf ids, one shared embedding table with admission and eviction)
// and 13 dense features -> sparse_lookup (sum-pooled per feature) -> MLP -> sigmoid
// cross-entropy, trained with Adam (dense) and Adagrad (sparse) through the key stage that
// prepares keys ahead of compute (start_asc_pipeline + automatic graph modification). Prints
// loss and held-out AUC every N steps, the planted model's own AUC, and exports the table to .npy.
//
// Usage: little_demo [--steps N] [--batch B] [--export_dir DIR]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "recsdk/recsdk.h"

namespace {

using namespace recsdk;

constexpr int kSparse = 26;
constexpr int kDense = 13;
constexpr int kDim = 16;

template <typename T>
T Check(StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "little_demo: %s: %s\n", what, std::string(v.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(v);
}
void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "little_demo: %s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

SyntheticOptions DataOptions(int64_t rows, uint64_t seed) {
  SyntheticOptions d;
  d.num_rows = rows;
  d.vocabulary_sizes = std::vector<int64_t>(kSparse, 20000);
  d.num_dense = kDense;
  d.zipf_exponent = 1.05;
  d.with_timestamps = true;
  d.seed = seed;
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 600;
  int64_t batch = 1024;
  std::string export_dir = "little_demo_export";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps")
      steps = std::atoll(argv[i + 1]);
    else if (flag == "--batch")
      batch = std::atoll(argv[i + 1]);
    else if (flag == "--export_dir")
      export_dir = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s; use --steps, --batch, --export_dir\n", flag.c_str());
      return 2;
    }
  }
  if (steps <= 0 || batch <= 0) {
    std::fprintf(stderr, "--steps and --batch must be positive\n");
    return 2;
  }
  const int64_t eval_rows = 16 * 1024;
  const SyntheticOptions data = DataOptions((steps + 1) * batch + eval_rows, 11);

  Graph graph;
  graph.set_random_seed(11);
  Scope s(&graph);
  TableConfig table_config;
  table_config.name = "sparse_embeddings";
  table_config.dim = kDim;
  table_config.device_vocabulary_size = 1 << 20;
  table_config.initializer = Initializer::TruncatedNormal(0, 0.05, 3);
  table_config.access_threshold = 2;          // a key gets a row once seen twice
  table_config.eviction_threshold = 1 << 20;  // seconds of data time
  SparseTable table = Check(
      create_table(s, table_config, SparseOptimizerConfig::Adagrad(0.05f, 0.1f)), "create_table");

  std::vector<Output> ids;
  for (int f = 1; f <= kSparse; ++f)
    ids.push_back(DatasetColumn(s, "C" + std::to_string(f), DType::kInt64, Shape{batch, 1}));
  Output label = DatasetColumn(s, "label", DType::kFloat32, Shape{batch, 1});
  Output dense = DatasetColumn(s, "dense", DType::kFloat32, Shape{batch, kDense});
  SparseLookupOptions lookup;
  lookup.modify_graph = true;  // the key stage does dedup, admission and row resolution ahead
  lookup.combiner = Combiner::kSum;
  lookup.timestamps = DatasetColumn(s, "timestamp", DType::kInt64, Shape{batch});
  std::vector<Output> features = Check(sparse_lookup(s, table, ids, lookup), "sparse_lookup");
  features.push_back(dense);
  layers::MlpOptions mlp;
  mlp.hidden_units = {256, 128};
  mlp.output_units = 1;
  Output logits = layers::Mlp(s, ops::Concat(s, features, 1), mlp);
  Output prob = ops::Sigmoid(s.WithOpName("prob"), logits);
  Output loss =
      ops::ReduceMean(s.WithOpName("loss"), ops::SigmoidCrossEntropyWithLogits(s, label, logits));
  AdamOptions adam_options;
  adam_options.learning_rate = 0.002;
  AdamOptimizer adam(adam_options);
  Node* dense_train = Check(adam.Minimize(s, loss), "dense optimizer");
  Node* sparse_train = Check(SparseMinimize(s, loss), "sparse optimizer");
  Node* train = ops::Group(s, {dense_train, sparse_train});
  Node* init = GlobalVariablesInitializer(s);
  Check(s.status(), "building the model");
  Check(ModifyGraph(&graph), "automatic graph modification");

  auto session = Check(Session::Create(graph), "Session::Create");
  EmbeddingTable* embeddings = nullptr;
  Check(session->Run({}, {}, {init}).status(), "init");
  // Feature f's ids live in their own key range of the shared table (as hashing "feature=value"
  // does for real Criteo data), so equal ids of different features get different rows.
  auto offset_ids = [](Batch b) -> StatusOr<Batch> {
    for (int f = 1; f <= kSparse; ++f) {
      const std::string name = "C" + std::to_string(f);
      Tensor ids = b.column(name)->Copy();
      for (int64_t& id : ids.flat<int64_t>()) id += int64_t{f} << 32;
      if (Status st = b.SetColumn(name, ids); !st.ok()) return st;
    }
    return b;
  };
  auto dataset =
      Check(BatchRows(Check(Map(Check(SyntheticDataset(data), "dataset"), offset_ids), "map"),
                      batch, BatchOptions{}),
            "batch");
  KeyStageOptions stage_options;
  stage_options.key_process_thread_num = 2;
  auto stage =
      Check(StartAscPipeline(*session, std::move(dataset), stage_options), "start_asc_pipeline");
  EvictHook evict(/*evict_enable=*/true, /*evict_time_interval=*/0, /*evict_step_interval=*/100);
  embeddings = Check(LookupTable(*session, "sparse_embeddings"), "LookupTable");

  std::printf(
      "little_demo: %lld steps of %lld rows, %d sparse features (one table, dim %d), %d dense\n",
      static_cast<long long>(steps), static_cast<long long>(batch), kSparse, kDim, kDense);
  const auto t0 = std::chrono::steady_clock::now();
  FeedList feeds;
  Batch b;
  double loss_sum = 0;
  int64_t step = 0;
  std::vector<float> scores, labels, planted;
  while (Check(stage->Next(&feeds, &b), "next batch")) {
    if (step < steps) {
      auto out = Check(session->Run(feeds, {loss}, {train}), "train step");
      loss_sum += out[0].scalar<float>();
      ++step;
      Check(stage->AfterStep(evict, step).status(), "evict hook");
      if (step % 100 == 0 || step == steps) {
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("step %5lld  mean loss %.4f  table rows %lld  %.0f samples/s\n",
                    static_cast<long long>(step), loss_sum / (step % 100 == 0 ? 100 : step % 100),
                    static_cast<long long>(embeddings->size()), step * batch / secs);
        loss_sum = 0;
      }
      continue;
    }
    // Held-out batches: predict only.
    auto out = Check(session->Run(feeds, {prob}), "predict");
    const Tensor* l = b.column("label");
    const Tensor* dn = b.column("dense");
    for (int64_t r = 0; r < b.num_valid(); ++r) {
      scores.push_back(out[0].data<float>()[r]);
      labels.push_back(l->data<float>()[r]);
      std::vector<int64_t> row_ids;
      for (int f = 1; f <= kSparse; ++f) {
        row_ids.push_back(b.column("C" + std::to_string(f))->data<int64_t>()[r] -
                          (int64_t{f} << 32));
      }
      planted.push_back(static_cast<float>(SyntheticTrueLogit(
          data, row_ids, absl::MakeConstSpan(dn->data<float>() + kDense * r, kDense))));
    }
  }
  stage->Stop();
  const double auc = Check(Auc(scores, labels), "AUC");
  const double best = Check(Auc(planted, labels), "planted AUC");
  std::printf("held-out AUC %.4f on %zu rows (planted model AUC %.4f)\n", auc, scores.size(), best);

  EmbeddingTable* t = embeddings;
  std::filesystem::create_directories(export_dir);
  Check(t->ExportNpy(export_dir + "/keys.npy", export_dir + "/values.npy"), "export");
  std::printf("exported %lld rows to %s/{keys,values}.npy\n", static_cast<long long>(t->size()),
              export_dir.c_str());
  return 0;
}
