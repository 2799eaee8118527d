// The tickets of a table's samples in flight. A sample takes a ticket when it
// draws (under the table's mutex) and gives it back when its windows are
// copied, in one of two ways:
//  * Return, from any thread (a CPU handler, a GPU path that still waits on
//    its stream): takes only a small mutex of its own, and whoever next holds
//    the table's mutex drains what was returned;
//  * HandToDevice, from the thread that enqueued the sample's kernels: the
//    GPU says when they are done by writing the ticket into the table's
//    completion ring (gpu_completions.h), which every drain reads for the
//    tickets handed to it. Nothing runs on the stream for it.
// A writer reusing a slot waits until no sample that drew before the slot was
// freed is still in flight (QuietSince).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "core/thread_annotations.h"

namespace gearjax {

class GpuCompletions;

class SampleTickets {
 public:
  // The ring HandToDevice's tickets are read from (set once, before any
  // ticket is handed over; nullptr: none are).
  void SetCompletions(const GpuCompletions* completions) { completions_ = completions; }

  // Under the table's mutex.
  uint64_t Take();                                 // the next ticket, now in flight
  uint64_t next() const { return last_ + 1; }      // the ticket Take will give
  uint64_t last() const { return last_; }          // the last ticket given (0: none yet)
  bool QuietSince(uint64_t ticket);                // no ticket <= `ticket` in flight
  bool InFlight(uint64_t ticket);                  // `ticket` given and not back
  int64_t in_flight();                             // tickets given and not back
  int64_t on_device();                             // of those, handed to the device
  bool has_on_device() const { return !on_device_.empty(); }  // as of the last drain
  // An earlier ticket still in flight whose ring place (ticket % ring) is
  // `ticket`'s, or 0: `ticket` may not be handed to the device before it is
  // back (gpu_completions.h).
  uint64_t SharesPlaceWith(uint64_t ticket, uint64_t ring);

  // From any thread, without the table's mutex.
  void Return(uint64_t ticket);
  void HandToDevice(uint64_t ticket);

 private:
  void Drain();  // moves what came back out of in_flight_

  const GpuCompletions* completions_ = nullptr;
  uint64_t last_ = 0;
  std::vector<uint64_t> in_flight_;  // ascending: every Take appends the largest yet
  std::vector<uint64_t> on_device_;  // in flight, handed to the device (ascending)
  Mutex returned_mu_;
  // Handed back, and handed to the device, not yet drained.
  std::vector<uint64_t> returned_ GEARJAX_GUARDED_BY(returned_mu_);
  std::vector<uint64_t> handed_ GEARJAX_GUARDED_BY(returned_mu_);
  std::vector<uint64_t> draining_;   // Drain's scratch: no allocation per drain
  std::atomic<bool> has_returned_{false};
};

}  // namespace gearjax
