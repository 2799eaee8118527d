// The tickets of a table's samples in flight. A sample takes a ticket when it
// draws (under the table's mutex) and returns it when its windows are copied,
// from any thread, GPU stream callbacks included: so Return takes only a small
// mutex of its own, and whoever next holds the table's mutex drains what was
// returned. A writer reusing a slot waits until no sample that drew before the
// slot was freed is still in flight (QuietSince).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace gearjax {

class SampleTickets {
 public:
  // Under the table's mutex.
  uint64_t Take();                                 // the next ticket, now in flight
  uint64_t next() const { return last_ + 1; }      // the ticket Take will give
  uint64_t last() const { return last_; }          // the last ticket given (0: none yet)
  bool QuietSince(uint64_t ticket);                // no ticket <= `ticket` in flight
  int64_t in_flight();                             // tickets given and not returned

  // From any thread, without the table's mutex.
  void Return(uint64_t ticket);

 private:
  void Drain();  // moves the returned tickets out of in_flight_

  uint64_t last_ = 0;
  std::vector<uint64_t> in_flight_;  // ascending: every Take appends the largest yet
  std::mutex returned_mu_;
  std::vector<uint64_t> returned_;   // handed back, not yet drained
  std::vector<uint64_t> draining_;   // Drain's scratch: no allocation per drain
  std::atomic<bool> has_returned_{false};
};

}  // namespace gearjax
