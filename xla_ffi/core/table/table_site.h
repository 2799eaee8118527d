// The table a compiled call names, found once for its call site (an FFI
// instantiate stage, ../call_site.h) and resolved per execution without the
// registry: held weakly, so a compiled program never keeps a table alive, and
// resolved exactly as LookUpTable would resolve its handle.
#pragma once

#include <cstdint>
#include <memory>

#include "core/table/table.h"

namespace gearjax {

struct TableSite {
  int64_t handle = 0;
  bool found = false;          // registered when the site was made
  std::weak_ptr<Table> table;  // set when found

  // The table for one execution, as LookUpTable(handle) gives it: its
  // deferred error raised first (Table::RaiseDeferredError), and for a table
  // closed or released since, the registry's own error. While the table is
  // open, no registry lock is taken and no look-up counted.
  std::shared_ptr<Table> Resolve() const;
};

// Looks the handle up once (RegisteredTable: nothing raised, nothing
// counted); a handle no table has gives a site every Resolve of which fails
// as LookUpTable does.
TableSite MakeTableSite(int64_t handle);

}  // namespace gearjax
