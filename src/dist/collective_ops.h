// collective_ops.h: the graph ops that run collectives (today AllReduceMean, recsdk/distributed.h
// documents it), with their shape functions, gradients and CPU kernels.
//
// Registered by an explicit call at runtime start (InitializeRuntime), like the table ops: a
// static registrar would vanish from the static library.
//
// Threading: RegisterCollectiveOps is thread-safe and idempotent.
#ifndef RECSDK_DIST_COLLECTIVE_OPS_H_
#define RECSDK_DIST_COLLECTIVE_OPS_H_

#include <string_view>

#include "recsdk/status.h"
#include "src/device/table_resource.h"

namespace recsdk::dist {

inline constexpr char kAllReduceMeanOp[] = "AllReduceMean";
// TableLookupExchange, TableApplyExchange (table_exchange_ops.cc): named with the table ops.
using internal::kTableApplyExchangeOp;
using internal::kTableLookupExchangeOp;
// AllReduceBuckets: an AllReduceMean split into buckets by hcom_parallel (bucket_all_reduce.cc):
// the buckets' outputs, forwarded in the old node's order. kAllReduceBuckets: the most buckets
// one AllReduceMean becomes.
inline constexpr char kAllReduceBucketsOp[] = "AllReduceBuckets";
inline constexpr int kAllReduceBuckets = 4;

// RegisterCollectiveOps: the op definitions (with attribute schemas) in the global op registry
// and their CPU kernels in the global kernel registry, the table decorator that shards every
// Session's tables over the ranks when there are several (sharded_table.h), and the pass that
// orders a step's collectives (order_collectives.cc). Once per process.
void RegisterCollectiveOps();

// RegisterTableExchangeOps: TableLookupExchange and TableApplyExchange (definitions, schemas,
// CPU kernels) and the session pass "group_table_exchanges" (table_exchange_ops.cc), registered
// by RegisterCollectiveOps.
void RegisterTableExchangeOps();

// RegisterBucketAllReduce: AllReduceBuckets (definition, CPU kernel) and the session pass
// "bucket_all_reduce" (hcom_parallel; bucket_all_reduce.cc), registered by RegisterCollectiveOps.
void RegisterBucketAllReduce();

// AllReduceStart, AllReduceWait: the last bucket of an all-reduce split by is_tailing_optimization
// (tailing_all_reduce.cc): Start hands the reduction to a background thread and returns once that
// thread holds the communicator (so the collective's place in the step's order is taken); Wait
// ends when the reduction has, and outputs the means.
inline constexpr char kAllReduceStartOp[] = "AllReduceStart";
inline constexpr char kAllReduceWaitOp[] = "AllReduceWait";

// RegisterTailingAllReduce: AllReduceStart and AllReduceWait (definitions, CPU kernels) and the
// session pass "tailing_optimization" (is_tailing_optimization; tailing_all_reduce.cc),
// registered by RegisterCollectiveOps.
void RegisterTailingAllReduce();

// TailingMismatch: InvalidArgument naming SessionConfig.is_tailing_optimization (`session`) and
// DistributedOptimizerOptions.is_tailing_optimization (the opposite) of AllReduceMean `node`.
Status TailingMismatch(std::string_view node, bool session);

// RegisterOrderCollectivesPass: the session pass "order_collectives" (order_collectives.cc),
// registered by RegisterCollectiveOps.
void RegisterOrderCollectivesPass();

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_COLLECTIVE_OPS_H_
