// collective_table.h: the mark of a table whose Resolve and ApplyGradients are collectives over
// the ranks of a job (src/dist/sharded_table.h). Every rank must make those calls in the same
// order, so they run in the graph's order of a step, never from threads of their own: the key
// stage, which resolves batches ahead on its workers, refuses such tables. Internal.
#ifndef RECSDK_TABLE_COLLECTIVE_TABLE_H_
#define RECSDK_TABLE_COLLECTIVE_TABLE_H_

namespace recsdk::internal {

class CollectiveTable {
 public:
  virtual ~CollectiveTable() = default;
  // world_size: the ranks the table's keys are spread over.
  virtual int world_size() const = 0;
};

}  // namespace recsdk::internal

#endif  // RECSDK_TABLE_COLLECTIVE_TABLE_H_
