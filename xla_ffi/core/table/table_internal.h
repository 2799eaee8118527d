// Helpers the table's source files share (table.cc, table_insert.cc,
// table_sample.cc, ...) and strategies.cc: not part of the table's interface.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>

namespace gearjax::table_internal {

// A double as the shortest text that reads back to the same value, as
// Python's repr writes it (0.2, not 0.20000000000000001).
inline std::string Number(double v) {
  char buffer[32];
  const std::to_chars_result end = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return std::string(buffer, end.ptr);
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
