// A sample's tickets (Table::Select, BeginGpuSample, ServeDraws) held until
// XLA's stream has passed the kernels that read the drawn slots, and returned
// there by a host function. Shared by the CUDA sample handlers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/draw.h"
#include "core/memory.h"
#include "core/table.h"

namespace gearjax {

// What the stream's host function releases: the table's tickets, and the host
// draws the kernels' uploads were staged from (kept alive until then).
struct PendingTicket {
  std::shared_ptr<Table> table;
  std::vector<uint64_t> tickets;
  std::vector<Draw> draws;
};

// Runs as a stream callback, where CUDA calls are not allowed: if this drops
// the table's last reference, its memory's release is deferred (memory.h).
inline void CUDART_CB EndTicketsAfterKernels(void* data) {
  StreamCallbackScope no_cuda_calls_here;
  std::unique_ptr<PendingTicket> pending(static_cast<PendingTicket*>(data));
  for (uint64_t ticket : pending->tickets) pending->table->EndSample(ticket);
}

// Holds a sample's tickets until the stream takes them: any way out before
// then (an error or an exception) waits for what was enqueued and returns the
// tickets itself.
class TicketGuard {
 public:
  TicketGuard(std::unique_ptr<PendingTicket> pending, cudaStream_t stream)
      : pending_(std::move(pending)), stream_(stream) {}
  TicketGuard(const TicketGuard&) = delete;
  TicketGuard& operator=(const TicketGuard&) = delete;
  ~TicketGuard() {
    if (pending_ == nullptr) return;
    cudaStreamSynchronize(stream_);
    for (uint64_t ticket : pending_->tickets) pending_->table->EndSample(ticket);
  }

  PendingTicket& pending() { return *pending_; }

  // Enqueues the tickets' return after the kernels enqueued so far; once that
  // succeeds, the stream's host function owns them.
  cudaError_t HandToStream() {
    const cudaError_t error = cudaLaunchHostFunc(stream_, EndTicketsAfterKernels, pending_.get());
    if (error == cudaSuccess) pending_.release();
    return error;
  }

 private:
  std::unique_ptr<PendingTicket> pending_;
  cudaStream_t stream_;
};

}  // namespace gearjax
