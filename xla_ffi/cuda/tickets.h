// How the CUDA sample handlers give their tickets (Table::Select,
// TableGpu::BeginSample, ServeDraws) back once XLA's stream has passed the kernels
// that read the drawn slots:
//  * DeviceTicket (one table's sample): the gather kernel writes the ticket
//    into the table's completion ring (core/gpu/gpu_completions.h); nothing but
//    the kernels goes on the stream. UpdateTicket: a priority update
//    kernel's, which does the same.
//  * StreamTickets (a shard serving several requesters, several tickets and
//    gathers): a host function after the last gather returns them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/draw.h"
#include "core/memory.h"
#include "core/table/table.h"
#include "core/table/table_gpu.h"

namespace gearjax {

// A sample's ticket until its gather is enqueued with completion() and
// HandToDevice() hands it over; any way out before then (an error or an
// exception) waits for what was enqueued and returns the ticket itself.
class DeviceTicket {
 public:
  DeviceTicket(std::shared_ptr<Table> table, uint64_t ticket, int device, cudaStream_t stream)
      : table_(std::move(table)), ticket_(ticket), device_(device), stream_(stream) {}
  DeviceTicket(const DeviceTicket&) = delete;
  DeviceTicket& operator=(const DeviceTicket&) = delete;
  ~DeviceTicket() {
    if (handed_) return;
    cudaStreamSynchronize(stream_);
    table_->EndSample(ticket_);
  }

  uint64_t id() const { return ticket_; }
  bool handed() const { return handed_; }
  CompletionView completion() const { return TableGpu(*table_).CompletionFor(ticket_, device_); }
  void HandToDevice() {
    TableGpu(*table_).HandToDevice(ticket_);
    handed_ = true;
  }

 private:
  std::shared_ptr<Table> table_;
  uint64_t ticket_;
  int device_;
  cudaStream_t stream_;
  bool handed_ = false;
};

// A GPU priority update's ticket (TableGpu::BeginUpdate) until its kernel is
// enqueued: as a DeviceTicket, and any way out before then first gives the
// table back the deferred leaves the kernel was to set
// (TableGpu::UpdateNotEnqueued), before the ticket ends and the host may
// settle the priorities: else their items would never be drawn.
class UpdateTicket {
 public:
  UpdateTicket(const std::shared_ptr<Table>& table, uint64_t ticket, int device,
               cudaStream_t stream)
      : table_(table), ticket_(table, ticket, device, stream) {}
  UpdateTicket(const UpdateTicket&) = delete;
  UpdateTicket& operator=(const UpdateTicket&) = delete;
  ~UpdateTicket() {
    if (ticket_.handed()) return;
    try {
      TableGpu(*table_).UpdateNotEnqueued(ticket_.id());
    } catch (...) {
      // A forked copy (the only throw): its GPU work is not this process's.
    }
  }  // then ticket_ waits for what was enqueued and ends the ticket

  CompletionView completion() const { return ticket_.completion(); }
  // After the launch: the ticket to the device, then the table told the
  // kernel is enqueued (updates begun after it wait for that).
  void HandToDevice() {
    ticket_.HandToDevice();
    try {
      TableGpu(*table_).UpdateEnqueued(ticket_.id());
    } catch (...) {
      // A forked copy (the only throw): its GPU work is not this process's.
    }
  }

 private:
  std::shared_ptr<Table> table_;
  DeviceTicket ticket_;  // destroyed after the body above
};

// What the stream's host function releases: the table's tickets, and the host
// draws the kernels' uploads were staged from (kept alive until then).
struct PendingTickets {
  std::shared_ptr<Table> table;
  std::vector<uint64_t> tickets;
  std::vector<Draw> draws;
};

// Runs as a stream callback, where CUDA calls are not allowed: if this drops
// the table's last reference, its memory's release is deferred (memory.h).
inline void CUDART_CB EndTicketsAfterKernels(void* data) {
  StreamCallbackScope no_cuda_calls_here;
  std::unique_ptr<PendingTickets> pending(static_cast<PendingTickets*>(data));
  for (uint64_t ticket : pending->tickets) pending->table->EndSample(ticket);
}

// Holds tickets until the stream takes them: any way out before then (an
// error or an exception) waits for what was enqueued and returns the tickets
// itself.
class StreamTickets {
 public:
  StreamTickets(std::unique_ptr<PendingTickets> pending, cudaStream_t stream)
      : pending_(std::move(pending)), stream_(stream) {}
  StreamTickets(const StreamTickets&) = delete;
  StreamTickets& operator=(const StreamTickets&) = delete;
  ~StreamTickets() {
    if (pending_ == nullptr) return;
    cudaStreamSynchronize(stream_);
    for (uint64_t ticket : pending_->tickets) pending_->table->EndSample(ticket);
  }

  PendingTickets& pending() { return *pending_; }

  // Enqueues the tickets' return after the kernels enqueued so far; once that
  // succeeds, the stream's host function owns them.
  cudaError_t HandToStream() {
    const cudaError_t error = cudaLaunchHostFunc(stream_, EndTicketsAfterKernels, pending_.get());
    if (error == cudaSuccess) pending_.release();
    return error;
  }

 private:
  std::unique_ptr<PendingTickets> pending_;
  cudaStream_t stream_;
};

}  // namespace gearjax
