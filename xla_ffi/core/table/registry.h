// Table handles: FFI handlers find tables through an integer handle baked into
// the compiled program, never through a raw pointer, so a call on a closed
// table fails with an error naming it instead of touching freed memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/table/table.h"

namespace gearjax {

int64_t RegisterTable(std::shared_ptr<Table> table);  // returns a new handle (>= 1)
// The table of `handle`, or throws Closed naming it: "table 'name' (handle h)
// is closed" for a table closed in this process, "no table has handle h"
// otherwise. Raises the table's deferred error first, if it has one
// (Table::RaiseDeferredError).
std::shared_ptr<Table> LookUpTable(int64_t handle);
// The table registered under `handle`, or null; nothing else (no deferred
// error raised, no look-up counted): what a call site resolves once
// (call_site.h), before its executions.
std::shared_ptr<Table> RegisteredTable(int64_t handle);
// LookUpTable calls since the process started (the tests hold a compiled
// call's executions to none: call_site.h).
int64_t RegistryLookUps();
// Forgets the handle; later look-ups say the table is closed.
void UnregisterTable(int64_t handle);

}  // namespace gearjax
