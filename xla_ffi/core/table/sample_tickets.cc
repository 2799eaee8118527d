// The tickets of samples in flight (see sample_tickets.h).
#include "core/table/sample_tickets.h"

#include <algorithm>

#include "core/gpu/gpu_completions.h"

namespace gearjax {
namespace {

void Erase(std::vector<uint64_t>& sorted, uint64_t ticket) {
  const auto it = std::lower_bound(sorted.begin(), sorted.end(), ticket);
  if (it != sorted.end() && *it == ticket) sorted.erase(it);  // else a bug upstream
}

}  // namespace

uint64_t SampleTickets::Take() {
  Drain();  // every sample drains, so in_flight_ stays as short as it is
  in_flight_.push_back(++last_);
  return last_;
}

bool SampleTickets::QuietSince(uint64_t ticket) {
  Drain();
  return in_flight_.empty() || in_flight_.front() > ticket;
}

bool SampleTickets::InFlight(uint64_t ticket) {
  Drain();
  return std::binary_search(in_flight_.begin(), in_flight_.end(), ticket);
}

int64_t SampleTickets::in_flight() {
  Drain();
  return static_cast<int64_t>(in_flight_.size());
}

int64_t SampleTickets::on_device() {
  Drain();
  return static_cast<int64_t>(on_device_.size());
}

uint64_t SampleTickets::SharesPlaceWith(uint64_t ticket, uint64_t ring) {
  Drain();
  if (ring == 0) return 0;
  for (uint64_t earlier = ticket; earlier > ring;) {
    earlier -= ring;
    if (in_flight_.empty() || earlier < in_flight_.front()) return 0;
    if (std::binary_search(in_flight_.begin(), in_flight_.end(), earlier)) return earlier;
  }
  return 0;
}

void SampleTickets::Return(uint64_t ticket) {
  MutexLock lock(returned_mu_);
  returned_.push_back(ticket);
  has_returned_.store(true, std::memory_order_release);
}

void SampleTickets::HandToDevice(uint64_t ticket) {
  MutexLock lock(returned_mu_);
  handed_.push_back(ticket);
  has_returned_.store(true, std::memory_order_release);
}

void SampleTickets::Drain() {
  if (has_returned_.load(std::memory_order_acquire)) {
    {
      MutexLock lock(returned_mu_);
      draining_.swap(returned_);
      for (uint64_t ticket : handed_) {
        // Only a ticket still in flight goes to the device list (one returned
        // by hand as well stays returned).
        if (std::binary_search(in_flight_.begin(), in_flight_.end(), ticket)) {
          on_device_.insert(std::upper_bound(on_device_.begin(), on_device_.end(), ticket),
                            ticket);
        }
      }
      handed_.clear();
      has_returned_.store(false, std::memory_order_relaxed);
    }
    for (uint64_t ticket : draining_) {
      Erase(in_flight_, ticket);
      Erase(on_device_, ticket);
    }
    draining_.clear();
  }
  if (on_device_.empty() || completions_ == nullptr) return;
  // One load per ticket on the device: few are ever in flight at once.
  size_t kept = 0;
  for (uint64_t ticket : on_device_) {
    if (completions_->Done(ticket)) {
      Erase(in_flight_, ticket);
    } else {
      on_device_[kept++] = ticket;
    }
  }
  on_device_.resize(kept);
}

}  // namespace gearjax
