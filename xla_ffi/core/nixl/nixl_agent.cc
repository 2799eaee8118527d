// The nixl exchange's agent over NIXL's C API (see nixl_agent.h).
#include "core/nixl/nixl_agent.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <thread>

namespace gearjax::nixl {
namespace {

std::string Failed(const char* what, int status) {
  return std::string("NIXL ") + what + " failed (status " + std::to_string(status) + ")";
}

void Check(int status, const char* what) {
  if (status != kSuccess) throw std::runtime_error(Failed(what, status));
}

}  // namespace

Agent::Agent(const std::string& library, const std::string& name)
    : Agent(LoadApi(library), name) {}

Agent::Agent(const Api& api, const std::string& name) : api_(api) {
  if (name.empty()) throw std::invalid_argument("a NIXL agent needs a name");
  AgentConfig config{};
  config.enable_prog_thread = false;
  config.enable_listen_thread = false;
  config.listen_port = 0;
  config.thread_sync = 0;  // none: mu_ serialises every call
  config.num_workers = 1;
  config.pthr_delay_us = 0;
  config.lthr_delay_us = 100000;
  config.capture_telemetry = false;
  Check(api_.create_configured_agent(name.c_str(), &config, &agent_), "agent creation");
  Handle params = nullptr;
  try {
    Check(api_.create_params(&params), "backend parameters");
    Check(api_.create_backend(agent_, "UCX", params, &backend_), "UCX backend creation");
    api_.destroy_params(params);
    params = nullptr;
    Check(api_.create_notif_map(&notif_map_), "notification map");
  } catch (...) {
    if (params != nullptr) api_.destroy_params(params);
    Close();
    throw;
  }
}

Agent::~Agent() { Close(); }

void Agent::CheckOpen() const {
  if (agent_ == nullptr) throw std::runtime_error("this NIXL agent is closed");
}

int64_t Agent::Register(uint64_t address, uint64_t bytes) {
  if (address == 0 || bytes == 0) {
    throw std::invalid_argument("register a non-empty span at a non-null address");
  }
  MutexLock lock(mu_);
  CheckOpen();
  Handle list = nullptr;
  Check(api_.create_reg_dlist(kDram, &list), "descriptor list");
  int status = api_.reg_dlist_add_desc(list, static_cast<uintptr_t>(address),
                                       static_cast<size_t>(bytes), 0, nullptr, 0);
  if (status == kSuccess) status = api_.register_mem(agent_, list, nullptr);
  if (status != kSuccess) {
    api_.destroy_reg_dlist(list);
    throw std::runtime_error(Failed("memory registration", status));
  }
  registered_[next_id_] = list;
  return next_id_++;
}

void Agent::Deregister(int64_t id) {
  MutexLock lock(mu_);
  CheckOpen();
  auto it = registered_.find(id);
  if (it == registered_.end()) throw std::invalid_argument("no such registration");
  DropKept(nullptr);
  const int status = api_.deregister_mem(agent_, it->second, nullptr);
  api_.destroy_reg_dlist(it->second);
  registered_.erase(it);
  Check(status, "memory deregistration");
}

std::string Agent::Metadata() {
  MutexLock lock(mu_);
  CheckOpen();
  void* data = nullptr;
  size_t len = 0;
  Check(api_.get_local_md(agent_, &data, &len), "metadata");
  std::string out(static_cast<const char*>(data), len);
  std::free(data);
  return out;
}

std::string Agent::LoadPeer(const std::string& metadata) {
  if (metadata.empty()) throw std::invalid_argument("empty NIXL metadata");
  MutexLock lock(mu_);
  CheckOpen();
  char* name = nullptr;
  Check(api_.load_remote_md(agent_, metadata.data(), metadata.size(), &name),
        "loading a peer's metadata");
  std::string out(name);
  std::free(name);
  DropKept(&out);
  return out;
}

void Agent::ForgetPeer(const std::string& peer) {
  MutexLock lock(mu_);
  CheckOpen();
  DropKept(&peer);
  Check(api_.invalidate_remote_md(agent_, peer.c_str()), "forgetting a peer");
}

void Agent::Notify(const std::string& peer, const std::string& message) {
  MutexLock lock(mu_);
  CheckOpen();
  Check(api_.gen_notif(agent_, peer.c_str(), message.data(), message.size(), nullptr),
        "notification");
}

std::vector<std::pair<std::string, std::string>> Agent::Notifications() {
  MutexLock lock(mu_);
  CheckOpen();
  std::vector<std::pair<std::string, std::string>> out;
  Check(api_.get_notifs(agent_, notif_map_, nullptr), "progress");
  size_t senders = 0;
  Check(api_.notif_map_size(notif_map_, &senders), "notification count");
  for (size_t s = 0; s < senders; ++s) {
    const char* sender = nullptr;
    size_t count = 0;
    Check(api_.notif_map_get_agent_at(notif_map_, s, &sender), "notification sender");
    const std::string name(sender);
    Check(api_.notif_map_get_notifs_size(notif_map_, name.c_str(), &count), "notifications");
    for (size_t i = 0; i < count; ++i) {
      const void* data = nullptr;
      size_t len = 0;
      Check(api_.notif_map_get_notif(notif_map_, name.c_str(), i, &data, &len), "notification");
      out.emplace_back(name, std::string(static_cast<const char*>(data), len));
    }
  }
  api_.notif_map_clear(notif_map_);
  return out;
}

namespace {

// Makes a transfer that reads request q's spans.
int MakeTransfer(const Api& api, Handle agent, const ReadRequest& q, Handle* transfer) {
  Handle local = nullptr, remote = nullptr;
  int status = api.create_xfer_dlist(kDram, &local);
  if (status == kSuccess) status = api.create_xfer_dlist(kDram, &remote);
  for (size_t i = 0; i < q.n && status == kSuccess; ++i) {
    status = api.xfer_dlist_add_desc(local, q.local[i], q.sizes[i], 0);
    if (status == kSuccess) status = api.xfer_dlist_add_desc(remote, q.remote[i], q.sizes[i], 0);
  }
  if (status == kSuccess) {
    status = api.create_xfer_req(agent, kRead, local, remote, q.peer.c_str(), transfer, nullptr);
  }
  // The transfer keeps its own copies of the descriptors.
  if (local != nullptr) api.destroy_xfer_dlist(local);
  if (remote != nullptr) api.destroy_xfer_dlist(remote);
  return status;
}

bool SameSpans(const std::vector<uint64_t>& kept, const uint64_t* spans, size_t n) {
  return kept.size() == n && std::equal(kept.begin(), kept.end(), spans);
}

}  // namespace

void Agent::Release(Handle transfer) {
  // A transfer NIXL cannot release (still running) is left to the agent.
  if (api_.release_xfer_req(agent_, transfer) == kSuccess) api_.destroy_xfer_req(transfer);
}

void Agent::DropKept(const std::string* peer) {
  for (auto it = peer ? kept_.find(*peer) : kept_.begin(); it != kept_.end();) {
    std::vector<Kept>& mine = it->second;
    for (size_t i = mine.size(); i-- > 0;) {
      if (mine[i].posted) {
        mine[i].stale = true;  // its Read releases it
      } else {
        Release(mine[i].handle);
        mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    it = mine.empty() ? kept_.erase(it) : std::next(it);
    if (peer != nullptr) break;
  }
}

Agent::Kept* Agent::Keep(const ReadRequest& q, Handle handle) {
  std::vector<Kept>& mine = kept_[q.peer];
  if (mine.size() >= static_cast<size_t>(kKeptPerPeer)) {
    auto oldest = mine.end();
    for (auto k = mine.begin(); k != mine.end(); ++k) {
      if (!k->posted && (oldest == mine.end() || k->last_used < oldest->last_used)) oldest = k;
    }
    if (oldest == mine.end()) return nullptr;  // every one posted now: not kept
    Release(oldest->handle);
    mine.erase(oldest);
  }
  mine.push_back({{q.remote, q.remote + q.n}, {q.local, q.local + q.n},
                  {q.sizes, q.sizes + q.n}, handle});
  return &mine.back();
}

TransferCounts Agent::Transfers() {
  MutexLock lock(mu_);
  return transfers_;
}

ReadResult Agent::Read(const std::vector<ReadRequest>& requests, double timeout_seconds) {
  std::vector<Pending> pending;
  ReadResult result;
  {
    MutexLock lock(mu_);
    CheckOpen();
    PostLocked(requests, pending, result);
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_seconds));
  Poll(pending, deadline, timeout_seconds, result);
  if (result.request >= 0) Drain(pending, deadline);
  MutexLock lock(mu_);
  if (agent_ == nullptr) return result;  // closed meanwhile: the agent took its transfers
  SettleLocked(requests, pending);
  return result;
}

namespace {

// Records the first failure of a Read (later ones follow from it).
void FirstFailure(ReadResult& result, int request, std::string why) {
  if (result.request < 0) result = {request, std::move(why)};
}

}  // namespace

Agent::Kept* Agent::FindKeptLocked(const ReadRequest& q) {
  auto mine = kept_.find(q.peer);
  for (size_t i = 0; mine != kept_.end() && i < mine->second.size(); ++i) {
    // One another Read has posted is not touched: this Read makes its own.
    Kept& k = mine->second[i];
    if (!k.posted && !k.stale && SameSpans(k.remote, q.remote, q.n) &&
        SameSpans(k.local, q.local, q.n) && SameSpans(k.sizes, q.sizes, q.n)) {
      return &k;
    }
  }
  return nullptr;
}

void Agent::PostLocked(const std::vector<ReadRequest>& requests, std::vector<Pending>& pending,
                       ReadResult& result) {
  const int64_t read = ++reads_;
  for (size_t r = 0; r < requests.size() && result.request < 0; ++r) {
    const ReadRequest& q = requests[r];
    if (q.n == 0) continue;
    Handle handle = nullptr;
    Kept* kept = q.keep ? FindKeptLocked(q) : nullptr;
    if (kept != nullptr) {
      handle = kept->handle;
      ++transfers_.reposted;
    } else {
      const int status = MakeTransfer(api_, agent_, q, &handle);
      if (status != kSuccess) {
        FirstFailure(result, static_cast<int>(r), Failed("transfer creation", status));
        break;
      }
      ++transfers_.made;
      if (q.keep) kept = Keep(q, handle);
    }
    if (kept != nullptr) {
      kept->posted = true;
      kept->last_used = read;
    }
    const int status = api_.post_xfer_req(agent_, handle, nullptr);
    pending.push_back({static_cast<int>(r), handle, status == kSuccess, kept != nullptr,
                       status != kSuccess && status != kInProgress});
    if (status != kSuccess && status != kInProgress) {
      FirstFailure(result, static_cast<int>(r), Failed("posting the transfer", status));
    }
  }
}

namespace {

// Between two polls: spin briefly (a loopback read takes microseconds), then
// back off so a frozen peer does not cost a core until the deadline.
void PauseBeforePoll(int polls) {
  if (polls < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace

const Agent::Pending* Agent::PollOnceLocked(std::vector<Pending>& pending, bool* in_flight) {
  const Pending* failed = nullptr;
  *in_flight = false;
  for (Pending& p : pending) {
    if (p.done || p.failed) continue;
    const int status = api_.get_xfer_status(agent_, p.handle);
    if (status == kSuccess) {
      p.done = true;
    } else if (status == kInProgress) {
      *in_flight = true;
    } else {
      p.failed = true;
      p.status = status;
      if (failed == nullptr) failed = &p;
    }
  }
  return failed;
}

void Agent::Poll(std::vector<Pending>& pending, std::chrono::steady_clock::time_point deadline,
                 double timeout_seconds, ReadResult& result) {
  for (int polls = 0; result.request < 0; ++polls) {
    bool in_flight = false;
    {
      MutexLock lock(mu_);
      CheckOpen();
      if (const Pending* failed = PollOnceLocked(pending, &in_flight)) {
        FirstFailure(result, failed->request, Failed("the transfer", failed->status));
      }
    }
    if (!in_flight || result.request >= 0) return;
    if (std::chrono::steady_clock::now() > deadline) {
      for (const Pending& p : pending) {
        if (!p.done) {
          FirstFailure(result, p.request,
                       "no answer within " + std::to_string(timeout_seconds) + " s");
          break;
        }
      }
      return;
    }
    PauseBeforePoll(polls);
  }
}

void Agent::Drain(std::vector<Pending>& pending, std::chrono::steady_clock::time_point deadline) {
  for (int polls = 0;; ++polls) {
    bool in_flight = false;
    {
      MutexLock lock(mu_);
      if (agent_ == nullptr) return;  // closed: the agent took its transfers
      PollOnceLocked(pending, &in_flight);
    }
    if (!in_flight || std::chrono::steady_clock::now() > deadline) return;
    PauseBeforePoll(polls);
  }
}

void Agent::SettleLocked(const std::vector<ReadRequest>& requests,
                         const std::vector<Pending>& pending) {
  for (const Pending& p : pending) {
    auto mine = p.kept ? kept_.find(requests[p.request].peer) : kept_.end();
    if (mine != kept_.end()) {
      auto kept = std::find_if(mine->second.begin(), mine->second.end(),
                               [&](const Kept& k) { return k.handle == p.handle; });
      if (kept != mine->second.end()) {
        kept->posted = false;
        // Kept only while it completes: a failed or cancelled one is made
        // anew next time.
        if (p.done && !kept->stale) continue;
        mine->second.erase(kept);
        if (mine->second.empty()) kept_.erase(mine);
      }
    }
    Release(p.handle);
  }
}

uint8_t* Agent::Staging(int use, size_t bytes) {
  if (use < 0 || use >= 8) throw std::invalid_argument("staging use out of range");
  Buffer& buffer = staging_[use];
  if (buffer.bytes >= bytes && buffer.data != nullptr) return buffer.data;
  const size_t size = std::max<size_t>({bytes, size_t{1} << 16, 2 * buffer.bytes});
  Buffer grown;
  grown.memory.reset(new uint8_t[size + 64]());
  const uintptr_t address = reinterpret_cast<uintptr_t>(grown.memory.get());
  grown.data = grown.memory.get() + ((64 - address % 64) % 64);
  grown.bytes = size;
  Register(reinterpret_cast<uint64_t>(grown.data), size);
  if (buffer.data != nullptr) retired_.push_back(std::move(buffer));
  buffer = std::move(grown);
  return buffer.data;
}

void Agent::Close() {
  MutexLock sampling(sampling_);  // a sample in flight still uses the staging buffers
  MutexLock lock(mu_);
  if (agent_ == nullptr) return;
  DropKept(nullptr);
  kept_.clear();  // posted ones too: their Reads see the agent closed
  for (auto& [id, list] : registered_) {
    api_.deregister_mem(agent_, list, nullptr);
    api_.destroy_reg_dlist(list);
  }
  registered_.clear();
  if (notif_map_ != nullptr) api_.destroy_notif_map(notif_map_);
  notif_map_ = nullptr;
  api_.destroy_agent(agent_);  // the backend goes with the agent
  for (Buffer& b : staging_) b = Buffer{};
  retired_.clear();
  if (backend_ != nullptr) api_.destroy_backend(backend_);  // the handle's wrapper only
  backend_ = nullptr;
  agent_ = nullptr;
}

}  // namespace gearjax::nixl
