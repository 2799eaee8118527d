// One process's NIXL agent for the nixl exchange, driven through NIXL's C API
// (nixl_capi.h) instead of NIXL's Python API: registration, metadata,
// notifications, and batched one-sided reads that post every peer's transfer
// at once and poll them to completion against a deadline, with no Python (and
// no GIL) in the loop. The agent runs without NIXL's progress thread (it
// busy-loops with no delay and would take a core): reads progress by polling,
// and the owner's side progresses whenever Notifications() is called.
//
// Thread-safe: one mutex serialises every call into NIXL (the agent is
// created with thread_sync NONE), but a read polls with the mutex released
// between polls, so an owner's progress loop interleaves with a read.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/nixl/nixl_capi.h"
#include "core/thread_annotations.h"

namespace gearjax::nixl {

// One peer's part of a read: n spans, span i is sizes[i] bytes of the peer's
// registered memory at remote[i] into this process's registered memory at
// local[i]. keep: the caller reads these same spans from this peer again and
// again (a sample's snapshot), so the agent keeps the transfer it makes for
// them and posts it again next time the same spans are read instead of
// making another; up to kKeptPerPeer kept transfers a peer (one a strategy's
// snapshot, say), the least recently used one released for a new one.
inline constexpr int kKeptPerPeer = 8;

struct ReadRequest {
  std::string peer;
  const uint64_t* remote;
  const uint64_t* local;
  const uint64_t* sizes;
  size_t n;
  bool keep = false;
};

// How many transfers Read made, and how many times it posted a kept one
// again instead.
struct TransferCounts {
  int64_t made = 0;
  int64_t reposted = 0;
};

// Why a read did not complete: which request (index into the vector given)
// and what happened. request == -1: every request completed.
struct ReadResult {
  int request = -1;
  std::string why;
};

class Agent {
 public:
  // Loads the C API from `library` and creates agent `name` with the UCX
  // backend. Throws std::runtime_error if NIXL refuses.
  Agent(const std::string& library, const std::string& name);
  // The same through `api` (which must outlive the agent): a test's own.
  Agent(const Api& api, const std::string& name);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Registers [address, address + bytes) of host memory; returns an id for
  // Deregister. Peers see it once they load metadata taken after this call.
  // Deregister drops every kept transfer (one may point into the memory).
  int64_t Register(uint64_t address, uint64_t bytes);
  void Deregister(int64_t id);

  // This agent's metadata (what peers load), and a peer's loaded (returns
  // the peer's agent name; loading it again replaces it). Loading or
  // forgetting a peer drops its kept transfers (made with its old metadata).
  std::string Metadata();
  std::string LoadPeer(const std::string& metadata);
  void ForgetPeer(const std::string& peer);

  void Notify(const std::string& peer, const std::string& message);
  // Progresses the agent and returns the notifications that arrived, as
  // (sender, message) pairs in arrival order per sender.
  std::vector<std::pair<std::string, std::string>> Notifications();

  // Posts one transfer per request, all at once, and polls them until every
  // one is done, one fails, or `timeout_seconds` pass. Transfers still
  // running at a failure are released (NIXL cancels them), kept ones too:
  // a kept transfer stays kept only while it completes.
  ReadResult Read(const std::vector<ReadRequest>& requests, double timeout_seconds);
  TransferCounts Transfers();

  // A registered local buffer of at least `bytes` for reads, one per `use`
  // (0 to 7), kept and grown; an outgrown one stays registered (a read may
  // still be landing in it) until Close. 64-byte aligned. Callers hold
  // sampling() while they use one: samples share these buffers.
  uint8_t* Staging(int use, size_t bytes) GEARJAX_REQUIRES(sampling_);
  Mutex& sampling() GEARJAX_RETURN_CAPABILITY(sampling_) { return sampling_; }

  // Releases every registration and the agent; later calls throw. Idempotent.
  void Close();

 private:
  void CheckOpen() const GEARJAX_REQUIRES(mu_);
  // Releases the kept transfers of `peer` (every peer's if null); mu_ held.
  void DropKept(const std::string* peer) GEARJAX_REQUIRES(mu_);
  struct Kept;
  // Keeps `handle`, made for q, releasing the peer's least recently used
  // kept transfer past kKeptPerPeer; returns the entry, or null when every
  // one of the peer's is posted now (not kept). mu_ held.
  Kept* Keep(const ReadRequest& q, Handle handle) GEARJAX_REQUIRES(mu_);
  void Release(Handle transfer) GEARJAX_REQUIRES(mu_);
  // Read's three phases. A transfer of this Read, and whether it completed.
  struct Pending {
    int request;
    Handle handle;
    bool done;
    bool kept;  // an entry of kept_ holds the handle
    bool failed = false;  // NIXL reported it failed (or its post did): not in flight
    int status = 0;  // NIXL's status when it failed
  };
  // Posts each request's transfer (a kept one with the same spans, or a new
  // one), into `pending`; the first failure goes into `result`. mu_ held.
  void PostLocked(const std::vector<ReadRequest>& requests, std::vector<Pending>& pending,
                  ReadResult& result) GEARJAX_REQUIRES(mu_);
  // The peer's kept transfer for q's spans that no Read has posted, or null.
  // mu_ held.
  Kept* FindKeptLocked(const ReadRequest& q) GEARJAX_REQUIRES(mu_);
  // One status poll of each transfer neither done nor failed, marking it;
  // returns the first that failed in this poll (null if none) and, in
  // `in_flight`, whether any is still in progress. mu_ held.
  const Pending* PollOnceLocked(std::vector<Pending>& pending, bool* in_flight)
      GEARJAX_REQUIRES(mu_);
  // Polls the posted transfers until all are done, one fails, or the
  // Read's deadline passes (each poll takes mu_); `timeout_seconds` names
  // it in the failure.
  void Poll(std::vector<Pending>& pending, std::chrono::steady_clock::time_point deadline,
            double timeout_seconds, ReadResult& result);
  // After a failed Read: polls its other transfers until none is in flight
  // or the same deadline passes (a frozen peer never holds a Read past it).
  // Released while in flight, a transfer may still land later (NIXL's
  // release cancels; a network card's read may go on) in buffers the
  // caller's retry reuses: rows it has checked, or arrays it has handed out.
  void Drain(std::vector<Pending>& pending, std::chrono::steady_clock::time_point deadline);
  // Releases the transfers, keeping those kept_ holds that completed. mu_
  // held.
  void SettleLocked(const std::vector<ReadRequest>& requests,
                    const std::vector<Pending>& pending) GEARJAX_REQUIRES(mu_);

  const Api& api_;
  Mutex mu_;
  Handle agent_ GEARJAX_GUARDED_BY(mu_) = nullptr;
  Handle backend_ = nullptr;
  Handle notif_map_ = nullptr;
  std::map<int64_t, Handle> registered_ GEARJAX_GUARDED_BY(mu_);  // id -> the registered descriptor list
  int64_t next_id_ GEARJAX_GUARDED_BY(mu_) = 1;
  struct Kept {
    std::vector<uint64_t> remote, local, sizes;
    Handle handle = nullptr;
    bool posted = false;  // in a Read now: another Read makes its own
    bool stale = false;   // dropped while posted: its Read releases it
    int64_t last_used = 0;  // a Read's number
  };
  std::map<std::string, std::vector<Kept>> kept_ GEARJAX_GUARDED_BY(mu_);  // peer -> at most kKeptPerPeer
  int64_t reads_ GEARJAX_GUARDED_BY(mu_) = 0;
  TransferCounts transfers_ GEARJAX_GUARDED_BY(mu_);
  struct Buffer {
    std::unique_ptr<uint8_t[]> memory;
    uint8_t* data = nullptr;  // aligned, inside memory
    size_t bytes = 0;
  };
  // One sample at a time uses the staging buffers; taken before mu_ (a
  // sample reads while it holds it; Close takes both).
  Mutex sampling_;
  Buffer staging_[8] GEARJAX_GUARDED_BY(sampling_);
  std::vector<Buffer> retired_ GEARJAX_GUARDED_BY(sampling_);
};

}  // namespace gearjax::nixl
