// quickstart: the README's example as a program. Between the [readme] markers is the README's
// code block, word for word (the CTest docs_readme_example compares them): a sparse embedding
// table and a dense tower trained with a Session on planted click data. The rest checks that it
// learned: the CTest samples_quickstart runs it and fails when the AUC of its predictions on the
// training rows is not above 0.6 (the planted model's is printed beside it).
// Usage: quickstart (no flags). Threading: one thread drives the Session.
#include <cstdio>
#include <vector>

#include "recsdk/recsdk.h"

int main() {
  using namespace recsdk;  // NOLINT(build/namespaces): the README's example reads this way
  // [readme]
  Graph graph;
  Scope root(&graph);
  Output ids = ops::Placeholder(root.WithOpName("ids"), DType::kInt64, Shape{-1, 1});  // -1: any
  Output label = ops::Placeholder(root.WithOpName("label"), DType::kFloat32, Shape{-1, 1});
  TableConfig config;  // a sparse embedding table: one row per id, made when the id first comes
  config.name = "C1";
  config.dim = 16;
  config.device_vocabulary_size = 50000;  // rows it may hold
  SparseTable table = create_table(root, config, SparseOptimizerConfig::Adagrad(0.05f)).value();
  SparseLookupOptions sum;
  sum.combiner = Combiner::kSum;
  Output emb = sparse_lookup(root, table, ids, sum).value();  // [batch, 16]
  Output logits = layers::Mlp(root, emb, {.hidden_units = {64, 32}, .output_units = 1});
  Output loss = ops::ReduceMean(root, ops::SigmoidCrossEntropyWithLogits(root, label, logits));
  AdamOptimizer adam;
  Node* train = ops::Group(root, {adam.Minimize(root, loss).value(),     // the dense weights
                                  SparseMinimize(root, loss).value()});  // the rows it read
  Node* init = GlobalVariablesInitializer(root);

  auto session = Session::Create(graph).value();  // what can fail returns absl::Status(Or)
  session->Run({}, {}, {init}).value();
  SyntheticOptions planted{
      .num_rows = 500000, .vocabulary_sizes = {50000}, .num_dense = 0, .block_rows = 512};
  auto data = SyntheticDataset(planted).value();  // click data with a planted logistic signal
  Batch batch;
  while (data->GetNext(&batch).value()) {
    session->Run({{"ids", *batch.column("C1")}, {"label", *batch.column("label")}}, {loss}, {train})
        .value();
  }
  // [/readme]

  // The check: predictions on the first 100 batches against their labels and the planted logits.
  std::vector<float> scores, planted_scores, labels;
  if (!data->Reset().ok()) return 1;
  for (int b = 0; b < 100 && data->GetNext(&batch).value(); ++b) {
    std::vector<Tensor> out = session->Run({{"ids", *batch.column("C1")}}, {logits}).value();
    const int64_t* row_ids = batch.column("C1")->data<int64_t>();
    for (int64_t r = 0; r < batch.num_rows(); ++r) {
      scores.push_back(out[0].data<float>()[r]);
      labels.push_back(batch.column("label")->data<float>()[r]);
      planted_scores.push_back(
          static_cast<float>(SyntheticTrueLogit(planted, absl::MakeConstSpan(&row_ids[r], 1), {})));
    }
  }
  const double auc = Auc(scores, labels).value();
  const double planted_auc = Auc(planted_scores, labels).value();
  std::printf("quickstart: AUC %.4f on %zu training rows (planted model AUC %.4f)\n", auc,
              labels.size(), planted_auc);
  return auc > 0.6 ? 0 : 1;
}
