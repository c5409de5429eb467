// set_threshold.cc: set_threshold (embedding.h): a table's admission threshold changed between
// steps, under the table's lock so it never changes in the middle of a key stage's Resolve.
// Threading: call between Session::Run calls; concurrent key stage workers are fine.
#include "fmt/format.h"
#include "recsdk/embedding.h"
#include "src/common/status_macros.h"
#include "src/session/session_resources.h"
#include "src/session/table_ops.h"

namespace recsdk {

Status set_threshold(Session& session, std::string_view table_name, int64_t access_threshold) {
  RECSDK_RETURN_IF_ERROR(LookupTable(session, table_name).status());  // NotFound naming tables
  for (const Node* n : session.graph().nodes()) {
    if (n->type() != internal::kTableHandleOp || n->StringAttr("table_name") != table_name) {
      continue;
    }
    RECSDK_ASSIGN_OR_RETURN(internal::TableResource * resource,
                            internal::GetOrCreateTable(internal::SessionResources(session), *n));
    // The LockedTable takes the table's lock, so no key stage Resolve is half-way meanwhile.
    return resource->table()->SetAccessThreshold(access_threshold);
  }
  return absl::NotFoundError(fmt::format("set_threshold: no table \"{}\"", table_name));
}

}  // namespace recsdk
