// Table handles: FFI handlers find tables through an integer handle baked into
// the compiled program, never through a raw pointer, so a call on a closed
// table fails with an error instead of touching freed memory.
#pragma once

#include <cstdint>
#include <memory>

#include "table.h"

namespace gearjax {

int64_t RegisterTable(std::shared_ptr<Table> table);  // returns a new handle (>= 1)
std::shared_ptr<Table> FindTable(int64_t handle);     // nullptr if closed or unknown
void UnregisterTable(int64_t handle);

}  // namespace gearjax
