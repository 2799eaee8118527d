// The tickets of samples in flight (see sample_tickets.h).
#include "sample_tickets.h"

#include <algorithm>

namespace gearjax {

uint64_t SampleTickets::Take() {
  Drain();  // every sample drains, so in_flight_ stays as short as it is
  in_flight_.push_back(++last_);
  return last_;
}

bool SampleTickets::QuietSince(uint64_t ticket) {
  Drain();
  return in_flight_.empty() || in_flight_.front() > ticket;
}

int64_t SampleTickets::in_flight() {
  Drain();
  return static_cast<int64_t>(in_flight_.size());
}

void SampleTickets::Return(uint64_t ticket) {
  std::lock_guard<std::mutex> lock(returned_mu_);
  returned_.push_back(ticket);
  has_returned_.store(true, std::memory_order_release);
}

void SampleTickets::Drain() {
  if (!has_returned_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard<std::mutex> lock(returned_mu_);
    draining_.swap(returned_);
    has_returned_.store(false, std::memory_order_relaxed);
  }
  for (uint64_t ticket : draining_) {
    const auto it = std::lower_bound(in_flight_.begin(), in_flight_.end(), ticket);
    if (it != in_flight_.end() && *it == ticket) in_flight_.erase(it);  // else a bug upstream
  }
  draining_.clear();
}

}  // namespace gearjax
