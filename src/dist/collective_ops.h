// collective_ops.h: the graph ops that run collectives (today AllReduceMean, recsdk/distributed.h
// documents it), with their shape functions, gradients and CPU kernels.
//
// Registered by an explicit call at runtime start (InitializeRuntime), like the table ops: a
// static registrar would vanish from the static library.
//
// Threading: RegisterCollectiveOps is thread-safe and idempotent.
#ifndef RECSDK_DIST_COLLECTIVE_OPS_H_
#define RECSDK_DIST_COLLECTIVE_OPS_H_

namespace recsdk::dist {

inline constexpr char kAllReduceMeanOp[] = "AllReduceMean";

// RegisterCollectiveOps: the op definitions (with attribute schemas) in the global op registry
// and their CPU kernels in the global kernel registry, the table decorator that shards every
// Session's tables over the ranks when there are several (sharded_table.h), and the pass that
// orders a step's collectives (order_collectives.cc). Once per process.
void RegisterCollectiveOps();

// RegisterOrderCollectivesPass: the session pass "order_collectives" (order_collectives.cc),
// registered by RegisterCollectiveOps.
void RegisterOrderCollectivesPass();

}  // namespace recsdk::dist

#endif  // RECSDK_DIST_COLLECTIVE_OPS_H_
