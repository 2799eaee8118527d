// A call site's table (table_site.h).
#include "core/table/table_site.h"

#include "core/memory.h"
#include "core/table/registry.h"

namespace gearjax {

TableSite MakeTableSite(int64_t handle) {
  TableSite site;
  site.handle = handle;
  if (std::shared_ptr<Table> table = RegisteredTable(handle)) {
    site.found = true;
    site.table = table;
  }
  return site;
}

std::shared_ptr<Table> TableSite::Resolve() const {
  std::shared_ptr<Table> resolved = table.lock();
  // Closing unregisters the handle first (module.cc): a closed table is one
  // the registry no longer knows, and its error is the registry's.
  if (resolved == nullptr || resolved->closed()) return LookUpTable(handle);
  DrainDeferredReleases();       // as LookUpTable does (memory.h)
  resolved->RaiseDeferredError();
  return resolved;
}

}  // namespace gearjax
