// dist_bench.cc: the figures of distributed training, run under mpirun (scripts/dist_figures.sh):
//
//   alltoall_vs_mpi: the figure, our key/row exchange against raw MPI of the same bytes:
//     the calls a sharded table's Resolve makes on our communicator (ExchangeV of the keys'
//     24-byte records to their owners, AllToAllV of the (dim + 1)-float answers back: header
//     rounds, deadlines, polling and all) against raw MPI_Alltoall + 2 MPI_Alltoallv of the same
//     bytes each way, interleaved in one run: raw time / our time (goal >= 0.7).
//   lookup_vs_mpi: the whole distributed lookup (ShardedTable::Resolve: the layout by owner, the
//     exchange, the owners' union, resolve and gather, the answers read back) against the same
//     raw bytes: what a rank's sharded lookup costs next to moving its bytes. Its floor on a
//     host is raw / (raw + the owners' table work), since that work is not in the raw side.
//     exchange_vs_mpi: the same with our time less what one process pays anyway for this rank's
//     keys (local_us: Resolve + Gather of them on a plain table of the same configs, timed in
//     the same loop): the cost of distributing the lookup, against the bytes' raw cost.
//     round_us: our exchange's time / its 4 message rounds; at 16 keys per rank (nothing to
//     move) the cost of one round, the scaling model's per-round constant on this host.
//     table_ns_per_key: (the whole lookup - our exchange) / unique keys: the per-key table work of
//     a distributed lookup on this host, the compute constant of the scaling model
//     (scripts/dist_scaling_model.py).
//   shard_balance: the most unique keys one of the ranks owns over the mean, for Zipf(1.05) ids
//     (goal <= 1.05); computed on every rank, reported by rank 0.
//   bytes_per_key: bytes a rank sends and receives per unique key in the exchange by the model
//     (8 key + 8 count + 8 time out, 4 * (dim + 1) back).
//   bytes_vs_estimate: the bytes a training step of a sharded table moves, counted by the
//     communicator, over the scaling model's estimate (BM_StepBytes; goal: within 10%).
//   group_step_us, apply_us: the time of a step's exchanges of several tables (BM_GroupStep:
//     ResolveGroup + ApplyGroup of 8 tables, as the group_table_exchanges pass makes them) and of
//     one table's ApplyGradients (BM_ApplyGradients), per step, the slowest rank's. No baseline in
//     the run: compare builds (e.g. before and after a change) by running them alternately.
//     faults_per_step: the minor page faults a step takes (the most of a rank's): fresh pages of
//     arrays made per step, a figure the load of a shared host does not move.
//
// Every rank runs the same fixed number of iterations (collectives must match); rank 0 prints.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "benchmarks/mpi_bench_main.h"
#include "recsdk/distributed.h"
#include "recsdk/table.h"
#include "src/common/status_macros.h"
#include "src/dist/deadline.h"
#include "src/dist/key_union.h"
#include "src/dist/process_communicator.h"
#include "src/dist/sharded_table.h"

namespace recsdk {
namespace {

constexpr int kDim = 16;
constexpr int64_t kIterations = 30;

// ZipfKeys: `n` draws from Zipf(s) over [0, vocab), by inverse CDF on a table of cumulative
// weights (exact for the vocabulary sizes used here).
std::vector<int64_t> ZipfKeys(int64_t n, int64_t vocab, double s, uint64_t seed) {
  std::vector<double> cdf(static_cast<size_t>(vocab));
  double total = 0;
  for (int64_t k = 0; k < vocab; ++k) {
    total += 1.0 / std::pow(static_cast<double>(k + 1), s);
    cdf[static_cast<size_t>(k)] = total;
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, total);
  std::vector<int64_t> keys(static_cast<size_t>(n));
  for (int64_t& k : keys) {
    k = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
    // Spread the ranks of the distribution over the id space, as real ids are.
    k = static_cast<int64_t>((static_cast<uint64_t>(k) * 0x9E3779B97F4A7C15ull) >> 20);
  }
  return keys;
}

std::vector<int64_t> Unique(std::vector<int64_t> keys) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

// BenchTable: a plain table `name` of dim kDim with Adagrad.
std::unique_ptr<EmbeddingTable> BenchTable(const char* name) {
  TableConfig config;
  config.name = name;
  config.dim = kDim;
  config.device_vocabulary_size = 1 << 21;
  config.initializer = Initializer::Uniform(-0.1, 0.1, 3);
  return *EmbeddingTable::Create(config, SparseOptimizerConfig::Adagrad(0.1f));
}

// ShardedBenchTable: this rank's ShardedTable `name` (dim kDim, Adagrad) and the world.
std::unique_ptr<EmbeddingTable> ShardedBenchTable(const char* name, int* rank, int* size) {
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return *dist::ShardedTable::Create(BenchTable(name), *rank, *size);
}

// SlowestRank: the largest of the ranks' `seconds`.
double SlowestRank(double seconds) {
  double max = 0;
  MPI_Allreduce(&seconds, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return max;
}

void BM_KeyExchange(benchmark::State& state) {
  const int64_t batch_keys = state.range(0);
  int rank = 0, size = 1;
  std::unique_ptr<EmbeddingTable> table = ShardedBenchTable("bench", &rank, &size);
  // Each rank's batch: unique keys of Zipf(1.05) draws over 10M ids.
  const std::vector<int64_t> keys = Unique(ZipfKeys(batch_keys, 10'000'000, 1.05, 7 + rank));
  const size_t u = keys.size();
  std::vector<uint32_t> rows(u);
  // Warm: the rows exist, so the timed resolves are lookups (as in steady-state training).
  (void)table->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
  // What one process pays for the same keys: a plain table's Resolve and Gather.
  std::unique_ptr<EmbeddingTable> local = BenchTable("local");
  std::vector<uint32_t> local_rows(u);
  std::vector<float> local_embeddings(u * kDim);
  (void)local->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(local_rows));
  // The raw exchange: the same counts per rank and the same bytes each way.
  std::vector<int64_t> per_rank(size, 0);
  for (int64_t k : keys) ++per_rank[dist::ShardedTable::Owner(k, size)];
  constexpr int kOutBytes = 24, kBackBytes = 4 * (kDim + 1);
  std::vector<int> out_counts(size), out_displs(size), in_counts(size), in_displs(size);
  std::vector<int> back_out_counts(size), back_out_displs(size), back_in_counts(size),
      back_in_displs(size);
  std::vector<int> sent_keys(size), got_keys(size);
  std::vector<char> out, in, back_out, back_in;
  for (int r = 0; r < size; ++r) sent_keys[r] = static_cast<int>(per_rank[r]);
  // Our communicator moving the same bytes (ExchangeV of the keys' records, AllToAllV of the
  // answers), with no table work: what the exchange layer (headers, deadlines, polling) costs.
  std::vector<dist::KeyRecord> comm_send(u);
  std::vector<dist::KeyRecord> comm_received;
  std::vector<int64_t> comm_send_counts(per_rank), comm_recv_counts;
  std::vector<float> comm_answer, comm_back(u * (kDim + 1));
  std::vector<int64_t> comm_answer_counts(size), comm_back_counts(size);
  double ours_s = 0, raw_s = 0, local_s = 0, comm_s = 0;
  for (auto _ : state) {
    const auto l0 = std::chrono::steady_clock::now();
    Status l = local->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(local_rows));
    if (l.ok()) l = local->Gather(local_rows, absl::MakeSpan(local_embeddings));
    if (!l.ok()) state.SkipWithError(std::string(l.message()).c_str());
    local_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - l0).count();
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = table->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    const auto t1 = std::chrono::steady_clock::now();
    MPI_Alltoall(sent_keys.data(), 1, MPI_INT, got_keys.data(), 1, MPI_INT, MPI_COMM_WORLD);
    int out_total = 0, in_total = 0;
    for (int r = 0; r < size; ++r) {
      out_counts[r] = sent_keys[r] * kOutBytes;
      in_counts[r] = got_keys[r] * kOutBytes;
      out_displs[r] = out_total;
      in_displs[r] = in_total;
      out_total += out_counts[r];
      in_total += in_counts[r];
    }
    // The buffers live across iterations (a tuned program keeps them): allocated per call they
    // would cost page faults once the allocator maps them fresh each time.
    out.resize(static_cast<size_t>(out_total));
    in.resize(static_cast<size_t>(in_total));
    MPI_Alltoallv(out.data(), out_counts.data(), out_displs.data(), MPI_BYTE, in.data(),
                  in_counts.data(), in_displs.data(), MPI_BYTE, MPI_COMM_WORLD);
    int back_out_total = 0, back_in_total = 0;
    for (int r = 0; r < size; ++r) {
      back_out_counts[r] = got_keys[r] * kBackBytes;
      back_in_counts[r] = sent_keys[r] * kBackBytes;
      back_out_displs[r] = back_out_total;
      back_in_displs[r] = back_in_total;
      back_out_total += back_out_counts[r];
      back_in_total += back_in_counts[r];
    }
    back_out.resize(static_cast<size_t>(back_out_total));
    back_in.resize(static_cast<size_t>(back_in_total));
    MPI_Alltoallv(back_out.data(), back_out_counts.data(), back_out_displs.data(), MPI_BYTE,
                  back_in.data(), back_in_counts.data(), back_in_displs.data(), MPI_BYTE,
                  MPI_COMM_WORLD);
    const auto t2 = std::chrono::steady_clock::now();
    Status c =
        dist::WithProcessCommunicator([&](dist::Communicator& comm, const DistributedOptions&) {
          const dist::Deadline deadline = dist::DeadlineAfterSeconds(60);
          RECSDK_RETURN_IF_ERROR(comm.ExchangeV<dist::KeyRecord>(
              comm_send, comm_send_counts, &comm_received, &comm_recv_counts, deadline,
              dist::CallTag{-1, "bench/keys"}));
          for (int r = 0; r < size; ++r) {
            comm_answer_counts[r] = comm_recv_counts[r] * (kDim + 1);
            comm_back_counts[r] = comm_send_counts[r] * (kDim + 1);
          }
          comm_answer.resize(comm_received.size() * (kDim + 1));
          return comm.AllToAllV<float>(comm_answer, {comm_answer_counts, {}},
                                       absl::MakeSpan(comm_back), {comm_back_counts, {}}, deadline,
                                       dist::CallTag{-1, "bench/rows"});
        });
    if (!c.ok()) state.SkipWithError(std::string(c.message()).c_str());
    const auto t3 = std::chrono::steady_clock::now();
    ours_s += std::chrono::duration<double>(t1 - t0).count();
    raw_s += std::chrono::duration<double>(t2 - t1).count();
    comm_s += std::chrono::duration<double>(t3 - t2).count();
  }
  // The slowest rank sets a collective's pace: compare the ranks' sums at their maxima.
  const double ours_max = SlowestRank(ours_s), raw_max = SlowestRank(raw_s),
               exchange_max = SlowestRank(ours_s - local_s), local_max = SlowestRank(local_s),
               comm_max = SlowestRank(comm_s);
  const double per_call = 1e6 / static_cast<double>(state.iterations());
  state.counters["unique_keys"] = static_cast<double>(u);
  state.counters["alltoall_vs_mpi"] = comm_max > 0 ? raw_max / comm_max : 0;
  state.counters["lookup_vs_mpi"] = raw_max / ours_max;
  state.counters["exchange_vs_mpi"] = exchange_max > 0 ? raw_max / exchange_max : 0;
  state.counters["ours_us"] = ours_max * per_call;
  state.counters["raw_us"] = raw_max * per_call;
  state.counters["local_us"] = local_max * per_call;
  state.counters["comm_us"] = comm_max * per_call;
  // A Resolve is 4 message rounds (ExchangeV: the header with the counts, data; AllToAllV:
  // header, data): at 16 keys (Arg 16) the bytes are nothing and this is the cost of one round.
  state.counters["round_us"] = comm_max * per_call / 4;
  state.counters["table_ns_per_key"] =
      (ours_max - comm_max) * per_call * 1e3 / static_cast<double>(u);
  state.counters["bytes_per_key"] = kOutBytes + kBackBytes;
}
// 2.3k unique keys take ~0.15 ms a call: 30 calls were too short a run (one hiccup of the host
// moved the whole figure 8x between runs), so that case runs 10x the calls.
BENCHMARK(BM_KeyExchange)->Arg(16)->Iterations(100 * kIterations)->UseRealTime();
BENCHMARK(BM_KeyExchange)->Arg(4096)->Iterations(10 * kIterations)->UseRealTime();
BENCHMARK(BM_KeyExchange)->Arg(65536)->Iterations(kIterations)->UseRealTime();

// BM_StepBytes: the bytes one training step of a sharded table moves (Resolve and
// ApplyGradients, counted by the communicator) against the scaling model of docs/distributed.md:
// each of the step's U unique keys goes to another rank with probability (N - 1) / N, and such a
// key costs 24 bytes out (key, count, time), 4 (dim + 1) back (flag, row) and 4 (dim + 1) again
// with its gradient, plus 8 bytes of counts per other rank for each of the 3 exchanges. The
// counter bytes_vs_estimate is measured / estimated, summed over the ranks (goal: within 10%).
void BM_StepBytes(benchmark::State& state) {
  const int64_t batch_keys = state.range(0);
  int rank = 0, size = 1;
  std::unique_ptr<EmbeddingTable> table = ShardedBenchTable("bytes", &rank, &size);
  const std::vector<int64_t> keys = Unique(ZipfKeys(batch_keys, 10'000'000, 1.05, 11 + rank));
  std::vector<uint32_t> rows(keys.size());
  std::vector<float> grads(keys.size() * kDim, 0.01f);
  auto sent = [] {
    uint64_t bytes = 0;
    (void)dist::WithProcessCommunicator([&](dist::Communicator& c, const DistributedOptions&) {
      bytes = c.bytes_sent();
      return absl::OkStatus();
    });
    return bytes;
  };
  const uint64_t before = sent();
  for (auto _ : state) {
    Status s = table->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
    std::vector<uint32_t> real;
    for (uint32_t r : rows) {
      if (r != EmbeddingTable::kDefaultRow && r != EmbeddingTable::kPaddingRow) real.push_back(r);
    }
    if (s.ok()) {
      s = table->ApplyGradients(real, absl::MakeConstSpan(grads).first(real.size() * kDim), 1);
    }
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  }
  double measured = static_cast<double>(sent() - before) / static_cast<double>(state.iterations());
  const double per_key = 24.0 + 2.0 * 4.0 * (kDim + 1);
  double estimate =
      static_cast<double>(keys.size()) * per_key * (size - 1) / size + 3.0 * 8.0 * (size - 1);
  double totals[2] = {measured, estimate}, sums[2] = {0, 0};
  MPI_Allreduce(totals, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  state.counters["unique_keys"] = static_cast<double>(keys.size());
  state.counters["step_bytes"] = sums[0] / size;
  state.counters["bytes_vs_estimate"] = sums[1] > 0 ? sums[0] / sums[1] : 0;
}
BENCHMARK(BM_StepBytes)->Arg(65536)->Iterations(10)->UseRealTime();

// MinorFaults: this process's minor page faults so far.
double MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_minflt);
}

// BM_GroupStep: one training step's exchanges of 8 sharded tables of `range(0)` lookups each
// (Zipf ids, each table its own draw): ResolveGroup, then ApplyGroup of a gradient for every
// real row. group_step_us: the time per step (the slowest rank's).
void BM_GroupStep(benchmark::State& state) {
  constexpr int kTables = 8;
  const int64_t batch_keys = state.range(0);
  int rank = 0, size = 1;
  std::vector<std::unique_ptr<EmbeddingTable>> tables;
  std::vector<std::vector<int64_t>> keys;
  std::vector<std::vector<uint32_t>> rows(kTables), real(kTables);
  std::vector<std::vector<float>> grads(kTables);
  std::vector<dist::ShardedTable::GroupResolve> lookups;
  int64_t unique = 0;
  for (int t = 0; t < kTables; ++t) {
    const std::string name = "group" + std::to_string(t);
    tables.push_back(ShardedBenchTable(name.c_str(), &rank, &size));
    keys.push_back(Unique(ZipfKeys(batch_keys, 10'000'000, 1.05, 100 * t + 5 + rank)));
    rows[t].resize(keys[t].size());
    grads[t].assign(keys[t].size() * kDim, 0.01f);
    unique += static_cast<int64_t>(keys[t].size());
    lookups.push_back({static_cast<dist::ShardedTable*>(tables[t].get()),
                       keys[t],
                       {},
                       {},
                       LookupMode::kTrain,
                       absl::MakeSpan(rows[t])});
  }
  auto step = [&](int64_t n) {
    Status s = dist::ShardedTable::ResolveGroup(lookups);
    std::vector<dist::ShardedTable::GroupApply> applies;
    for (int t = 0; t < kTables && s.ok(); ++t) {
      real[t].clear();
      for (uint32_t r : rows[t]) {
        if (r != EmbeddingTable::kDefaultRow && r != EmbeddingTable::kPaddingRow) {
          real[t].push_back(r);
        }
      }
      applies.push_back({static_cast<dist::ShardedTable*>(tables[t].get()), real[t],
                         absl::MakeConstSpan(grads[t]).first(real[t].size() * kDim), n});
    }
    if (s.ok()) s = dist::ShardedTable::ApplyGroup(applies);
    return s;
  };
  // Warm: the rows exist and the arrays have their size (steady-state training).
  for (int64_t n = 1; n <= 3; ++n) {
    if (Status s = step(n); !s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  }
  double seconds = 0;
  int64_t n = 4;
  const double faults = MinorFaults();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = step(n++);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  }
  const double iterations = static_cast<double>(state.iterations());
  state.counters["unique_keys"] = static_cast<double>(unique);
  state.counters["group_step_us"] = SlowestRank(seconds) * 1e6 / iterations;
  state.counters["faults_per_step"] = SlowestRank(MinorFaults() - faults) / iterations;
}
BENCHMARK(BM_GroupStep)->Arg(4096)->Iterations(10 * kIterations)->UseRealTime();
BENCHMARK(BM_GroupStep)->Arg(65536)->Iterations(kIterations)->UseRealTime();

// BM_ApplyGradients: one sharded table's ApplyGradients of a gradient for every real row of its
// Resolve (each step resolves first, untimed). apply_us: the time per ApplyGradients (the slowest
// rank's).
void BM_ApplyGradients(benchmark::State& state) {
  const int64_t batch_keys = state.range(0);
  int rank = 0, size = 1;
  std::unique_ptr<EmbeddingTable> table = ShardedBenchTable("apply", &rank, &size);
  const std::vector<int64_t> keys = Unique(ZipfKeys(batch_keys, 10'000'000, 1.05, 13 + rank));
  std::vector<uint32_t> rows(keys.size()), real;
  std::vector<float> grads(keys.size() * kDim, 0.01f);
  double seconds = 0, faults = 0;
  int64_t n = 0;
  auto step = [&](bool timed) {
    Status s = table->Resolve(keys, {}, {}, LookupMode::kTrain, absl::MakeSpan(rows));
    real.clear();
    for (uint32_t r : rows) {
      if (r != EmbeddingTable::kDefaultRow && r != EmbeddingTable::kPaddingRow) real.push_back(r);
    }
    const double f0 = MinorFaults();
    const auto t0 = std::chrono::steady_clock::now();
    if (s.ok()) {
      s = table->ApplyGradients(real, absl::MakeConstSpan(grads).first(real.size() * kDim), ++n);
    }
    if (timed) {
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      faults += MinorFaults() - f0;
    }
    return s;
  };
  for (int i = 0; i < 3; ++i) {
    if (Status s = step(false); !s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  }
  for (auto _ : state) {
    if (Status s = step(true); !s.ok()) state.SkipWithError(std::string(s.message()).c_str());
  }
  state.counters["unique_keys"] = static_cast<double>(keys.size());
  const double iterations = static_cast<double>(state.iterations());
  state.counters["apply_us"] = SlowestRank(seconds) * 1e6 / iterations;
  state.counters["faults_per_step"] = SlowestRank(faults) / iterations;
}
BENCHMARK(BM_ApplyGradients)->Arg(65536)->Iterations(kIterations)->UseRealTime();

// shard_balance: unique keys per rank for Zipf(1.05) ids on 4 ranks (whatever the world runs).
void BM_ShardBalance(benchmark::State& state) {
  constexpr int kRanks = 4;
  const std::vector<int64_t> keys = Unique(ZipfKeys(2'000'000, 10'000'000, 1.05, 11));
  std::vector<int64_t> per(kRanks, 0);
  for (auto _ : state) {
    std::fill(per.begin(), per.end(), 0);
    for (int64_t k : keys) ++per[dist::ShardedTable::Owner(k, kRanks)];
  }
  const double mean = static_cast<double>(keys.size()) / kRanks;
  state.counters["unique_keys"] = static_cast<double>(keys.size());
  state.counters["shard_balance"] =
      static_cast<double>(*std::max_element(per.begin(), per.end())) / mean;
}
BENCHMARK(BM_ShardBalance)->Iterations(3);

}  // namespace
}  // namespace recsdk

int main(int argc, char** argv) {
  return recsdk::bench::RunUnderMpi(argc, argv, "dist_bench", /*share_cores=*/true);
}
