// replicated_table.cc: the key and gradient exchanges of a ReplicatedTable (replicated_table.h).
#include "src/dist/replicated_table.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "src/common/status_macros.h"
#include "src/dist/key_union.h"
#include "src/dist/process_communicator.h"
#include "src/dist/sharded_table.h"

namespace recsdk::dist {
namespace {

// ReplicaExchange: runs `fn` on the process communicator with its deadline, and names the table
// and the step's collective in an error.
template <typename Fn>
Status ReplicaExchange(const std::string& table, const char* what, Fn&& fn) {
  Status s = WithWorkerCommunicator([&](Communicator& comm, const DistributedOptions& o) {
    return fn(comm, DeadlineAfterSeconds(o.collective_timeout_s));
  });
  if (s.ok()) return s;
  return Status(s.code(), fmt::format("replicated table \"{}\", {}: {}", table, what, s.message()));
}

// AgreeCounts: all-gathers (count, failed) of every rank into `counts` (one per rank) and
// returns the ranks that failed their own checks, in rank order.
Status AgreeCounts(const std::string& table, const char* what, std::string_view label, int64_t step,
                   int world, int64_t count, bool failed, std::vector<int64_t>* counts,
                   std::vector<int>* failed_ranks) {
  const std::array<int64_t, 2> mine = {failed ? 0 : count, failed ? 1 : 0};
  std::vector<int64_t> all(2 * static_cast<size_t>(world));
  RECSDK_RETURN_IF_ERROR(ReplicaExchange(table, what, [&](Communicator& c, auto d) {
    return c.AllGather<int64_t>(mine, absl::MakeSpan(all), d, CallTag{step, label});
  }));
  counts->assign(static_cast<size_t>(world), 0);
  failed_ranks->clear();
  for (int r = 0; r < world; ++r) {
    (*counts)[r] = all[2 * static_cast<size_t>(r)];
    if (all[2 * static_cast<size_t>(r) + 1] != 0) failed_ranks->push_back(r);
  }
  return absl::OkStatus();
}

std::string Ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += i + 1 == ranks.size() ? " and " : ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

ReplicatedTable::ReplicatedTable(std::unique_ptr<EmbeddingTable> table, int rank, int size)
    : ForwardingTable(table.get()),
      table_(std::move(table)),
      rank_(rank),
      world_(size),
      counts_label_(name() + "/replica_counts"),
      keys_label_(name() + "/replica_keys"),
      grad_counts_label_(name() + "/replica_grad_counts"),
      grad_rows_label_(name() + "/replica_grad_rows"),
      grads_label_(name() + "/replica_grads") {}

StatusOr<std::unique_ptr<EmbeddingTable>> ReplicatedTable::Create(
    std::unique_ptr<EmbeddingTable> table, int rank, int size) {
  if (table == nullptr || size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        fmt::format("ReplicatedTable: rank {} of {} ranks{}; pass this process's rank and the "
                    "world size, 0 <= rank < size",
                    rank, size, table == nullptr ? " with no table" : ""));
  }
  if (table->config().use_dynamic_expansion || table->optimizer().ByAddress()) {
    return absl::FailedPreconditionError(fmt::format(
        "table \"{}\" is replicated on {} ranks (is_dp) and {}, which updates rows by address "
        "on this rank alone, so the replicas would drift apart; use a by-row optimizer without "
        "use_dynamic_expansion, or set is_dp = false to shard the table",
        table->name(), size,
        table->config().use_dynamic_expansion
            ? std::string("has use_dynamic_expansion")
            : fmt::format("its optimizer is {}",
                          SparseOptimizerKindName(table->optimizer().kind))));
  }
  return std::unique_ptr<EmbeddingTable>(new ReplicatedTable(std::move(table), rank, size));
}

Status ReplicatedTable::Resolve(absl::Span<const int64_t> unique_keys,
                                absl::Span<const uint32_t> counts,
                                absl::Span<const int64_t> timestamps, LookupMode mode,
                                absl::Span<uint32_t> rows) {
  const size_t n = unique_keys.size();
  // A rank with wrong arguments sends nothing but still takes part and says so, so that every
  // rank fails this call and no replica changes.
  Status own;
  if (rows.size() != n || (!counts.empty() && counts.size() != n) ||
      (!timestamps.empty() && timestamps.size() != n)) {
    own = absl::InvalidArgumentError(fmt::format(
        "table \"{}\": Resolve of {} keys got {} rows, {} counts and {} timestamps; pass one "
        "row (and one count and timestamp, or none) per key",
        name(), n, rows.size(), counts.size(), timestamps.size()));
  }
  std::vector<int64_t> per_rank;
  std::vector<int> failed;
  RECSDK_RETURN_IF_ERROR(AgreeCounts(name(), "exchanging the key counts", counts_label_, -1, world_,
                                     static_cast<int64_t>(n), !own.ok(), &per_rank, &failed));
  RECSDK_RETURN_IF_ERROR(own);
  if (!failed.empty()) {
    return absl::AbortedError(fmt::format(
        "replicated table \"{}\": rank{} {} refused its own lookup arguments (its error says "
        "why); no rank resolved this batch, so the replicas are unchanged",
        name(), failed.size() > 1 ? "s" : "", Ranks(failed)));
  }
  std::vector<KeyRecord> send(n);
  for (size_t i = 0; i < n; ++i) {
    send[i] = {unique_keys[i], counts.empty() ? 1 : static_cast<int64_t>(counts[i]),
               timestamps.empty() ? kNoKeyTime : timestamps[i]};
  }
  int64_t total = 0;
  std::vector<int64_t> offset(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    offset[r] = total;
    total += per_rank[r];
  }
  std::vector<KeyRecord> received(static_cast<size_t>(total));
  RECSDK_RETURN_IF_ERROR(
      ReplicaExchange(name(), "gathering every rank's keys", [&](Communicator& c, auto d) {
        return c.AllGatherV<KeyRecord>(send, absl::MakeSpan(received), {per_rank, {}}, d,
                                       CallTag{-1, keys_label_});
      }));
  // The union of every rank's keys in rank order, resolved once on each replica.
  KeyUnion united;
  united.Unite(received, table_->data_time());
  const std::vector<int64_t>& keys = united.keys;
  const std::vector<uint32_t>& key_counts = united.counts;
  const std::vector<int64_t>& key_times = united.times;  // empty: no lookup had timestamps
  const std::vector<uint32_t>& which = united.which;
  const bool any_time = !key_times.empty();
  std::vector<uint32_t> key_rows(keys.size());
  Status resolved = table_->Resolve(
      keys, key_counts, any_time ? absl::MakeConstSpan(key_times) : absl::Span<const int64_t>(),
      mode, absl::MakeSpan(key_rows));
  if (!resolved.ok()) {
    // Every replica resolved the same keys from the same state, so every rank fails alike.
    return Status(resolved.code(),
                  fmt::format("replicated table \"{}\" (the union of {} ranks' keys): {}", name(),
                              world_, resolved.message()));
  }
  for (size_t i = 0; i < n; ++i) rows[i] = key_rows[which[offset[rank_] + i]];
  return absl::OkStatus();
}

Status ReplicatedTable::ApplyGradients(absl::Span<const uint32_t> rows,
                                       absl::Span<const float> summed_grads, int64_t step) {
  const size_t dim = static_cast<size_t>(config_.dim);
  Status own;
  if (summed_grads.size() != rows.size() * dim) {
    own = absl::InvalidArgumentError(
        fmt::format("table \"{}\": ApplyGradients got {} gradient floats for {} rows of dim {}",
                    name(), summed_grads.size(), rows.size(), dim));
  }
  // The real rows only: the sentinels (padding, not admitted) never train.
  std::vector<uint32_t> send_rows;
  std::vector<float> send_grads;
  if (own.ok()) {
    send_rows.reserve(rows.size());
    send_grads.reserve(rows.size() * dim);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] >= kDefaultRow) continue;
      send_rows.push_back(rows[i]);
      send_grads.insert(send_grads.end(), summed_grads.begin() + i * dim,
                        summed_grads.begin() + (i + 1) * dim);
    }
  }
  std::vector<int64_t> per_rank;
  std::vector<int> failed;
  RECSDK_RETURN_IF_ERROR(AgreeCounts(name(), "exchanging the gradient counts", grad_counts_label_,
                                     step, world_, static_cast<int64_t>(send_rows.size()),
                                     !own.ok(), &per_rank, &failed));
  RECSDK_RETURN_IF_ERROR(own);
  if (!failed.empty()) {
    return absl::AbortedError(fmt::format(
        "replicated table \"{}\": rank{} {} refused its own gradients (its error says why); no "
        "rank applied this step's update, so the replicas are unchanged",
        name(), failed.size() > 1 ? "s" : "", Ranks(failed)));
  }
  int64_t total = 0;
  std::vector<int64_t> grad_counts(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    total += per_rank[r];
    grad_counts[r] = per_rank[r] * static_cast<int64_t>(dim);
  }
  std::vector<uint32_t> all_rows(static_cast<size_t>(total));
  std::vector<float> all_grads(static_cast<size_t>(total) * dim);
  RECSDK_RETURN_IF_ERROR(
      ReplicaExchange(name(), "gathering every rank's gradient rows", [&](Communicator& c, auto d) {
        return c.AllGatherV<uint32_t>(send_rows, absl::MakeSpan(all_rows), {per_rank, {}}, d,
                                      CallTag{step, grad_rows_label_});
      }));
  RECSDK_RETURN_IF_ERROR(
      ReplicaExchange(name(), "gathering every rank's gradients", [&](Communicator& c, auto d) {
        return c.AllGatherV<float>(send_grads, absl::MakeSpan(all_grads), {grad_counts, {}}, d,
                                   CallTag{step, grads_label_});
      }));
  // Each row's gradients from every rank, added in rank order, averaged: the same on every rank.
  absl::flat_hash_map<uint32_t, uint32_t> index;
  index.reserve(all_rows.size());
  std::vector<uint32_t> unique_rows;
  std::vector<float> sums;
  for (size_t p = 0; p < all_rows.size(); ++p) {
    auto [it, inserted] = index.try_emplace(all_rows[p], static_cast<uint32_t>(unique_rows.size()));
    if (inserted) {
      unique_rows.push_back(all_rows[p]);
      sums.resize(sums.size() + dim, 0.0f);
    }
    float* s = sums.data() + it->second * dim;
    const float* g = all_grads.data() + p * dim;
    for (size_t d = 0; d < dim; ++d) s[d] += g[d];
  }
  const float scale = GradientScale(config_, world_);
  if (scale != 1.0f) {
    for (float& v : sums) v *= scale;
  }
  return table_->ApplyGradients(unique_rows, sums, step);
}

Status ReplicatedTable::RowAddresses(absl::Span<const uint32_t>, absl::Span<float*>) {
  return absl::FailedPreconditionError(fmt::format(
      "table \"{}\" is replicated on {} ranks: an update by address would change this rank's "
      "replica alone; use a by-row optimizer (Create refuses the by-address ones)",
      name(), world_));
}

Status ReplicatedTable::ApplyGradientsByAddress(absl::Span<float* const>, absl::Span<const float>,
                                                int64_t) {
  return RowAddresses({}, {});
}

}  // namespace recsdk::dist
