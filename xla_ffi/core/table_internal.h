// Helpers the table's source files share (table.cc, table_insert.cc,
// table_sample.cc, ...): not part of the table's interface.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace gearjax::table_internal {

// A double as text that reads back to the same value.
inline std::string Number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", v);
  return buffer;
}

// Counts a call as waiting (Table::waiting) for as long as it lives; made
// and destroyed with the table's mutex held.
class CountedWait {
 public:
  explicit CountedWait(int64_t& count) : count_(count) { ++count_; }
  ~CountedWait() { --count_; }
  CountedWait(const CountedWait&) = delete;
  CountedWait& operator=(const CountedWait&) = delete;

 private:
  int64_t& count_;
};

}  // namespace gearjax::table_internal
