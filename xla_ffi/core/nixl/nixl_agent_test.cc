// Tests of nixl_capi.h and nixl_agent.h. Loading failures, and the cases
// run through a C API of the test's own (a transfer in flight when its Read
// fails), run everywhere; the loopback cases need NIXL's C API, named by
// GEARJAX_NIXL_CAPI (the Python suite, tests/test_nixl_native.py, sets it
// from the installed wheel and runs the same paths where NIXL is installed).
#include "core/nixl/nixl_agent.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

// NIXL's UCX keeps threads and allocations for the life of the process, and
// LeakSanitizer's exit-time scan of them crashes (SIGSEGV in its tracer):
// leak checking is off for this binary only. ASan's other checks stay on.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }

namespace gearjax::nixl {
namespace {

TEST(NixlCapiTest, AMissingLibraryIsNamed) {
  try {
    LoadApi("/nonexistent/libnixl_capi.so");
    FAIL() << "loaded a library that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libnixl_capi.so"), std::string::npos);
  }
}

TEST(NixlCapiTest, ALibraryWithoutTheApiNamesTheMissingSymbol) {
  try {
    LoadApi("libm.so.6");
    FAIL() << "took libm for NIXL";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nixl_capi_create_configured_agent"),
              std::string::npos);
  }
}

const char* Library() { return std::getenv("GEARJAX_NIXL_CAPI"); }

TEST(NixlAgentTest, LoopbackReadsNotificationsAndDeadPeers) {
  if (Library() == nullptr) GTEST_SKIP() << "GEARJAX_NIXL_CAPI is not set (no NIXL here)";
  Agent owner(Library(), "gearjax-test-owner");
  Agent reader(Library(), "gearjax-test-reader");
  std::vector<uint8_t> shard(1 << 16), into(1 << 16, 0);
  std::iota(shard.begin(), shard.end(), 0);
  owner.Register(reinterpret_cast<uint64_t>(shard.data()), shard.size());
  reader.Register(reinterpret_cast<uint64_t>(into.data()), into.size());
  const std::string peer = reader.LoadPeer(owner.Metadata());
  EXPECT_EQ(peer, "gearjax-test-owner");

  // Three spans, out of order, of different sizes.
  const uint64_t base = reinterpret_cast<uint64_t>(shard.data());
  const uint64_t to = reinterpret_cast<uint64_t>(into.data());
  std::vector<uint64_t> remote = {base + 4096, base + 17, base + 60000};
  std::vector<uint64_t> local = {to, to + 5000, to + 9000};
  std::vector<uint64_t> sizes = {1000, 64, 5000};
  std::vector<ReadRequest> requests = {{peer, remote.data(), local.data(), sizes.data(), 3}};
  // The owner progresses on this thread between the reader's polls.
  ReadResult result;
  for (int attempt = 0; attempt < 200; ++attempt) {
    owner.Notifications();
    result = reader.Read(requests, 0.05);
    if (result.request < 0) break;
  }
  ASSERT_EQ(result.request, -1) << result.why;
  for (size_t s = 0; s < sizes.size(); ++s) {
    EXPECT_EQ(std::memcmp(into.data() + (local[s] - to), shard.data() + (remote[s] - base),
                          sizes[s]), 0) << "span " << s;
  }

  const std::string me = owner.LoadPeer(reader.Metadata());
  reader.Notify(peer, std::string("GXUP\0x", 6));
  std::vector<std::pair<std::string, std::string>> got;
  for (int i = 0; i < 2000 && got.empty(); ++i) got = owner.Notifications();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, me);
  EXPECT_EQ(got[0].second, std::string("GXUP\0x", 6));

  // A span outside what the owner registered is refused, not read.
  std::vector<uint64_t> outside = {base + shard.size()};
  std::vector<uint64_t> one = {64};
  requests = {{peer, outside.data(), local.data(), one.data(), 1}};
  EXPECT_EQ(reader.Read(requests, 1.0).request, 0);

  // A closed owner fails the read (or it runs into the deadline), never hangs.
  owner.Close();
  requests = {{peer, remote.data(), local.data(), sizes.data(), 3}};
  const ReadResult dead = reader.Read(requests, 2.0);
  EXPECT_EQ(dead.request, 0);
  EXPECT_THROW(owner.Metadata(), std::runtime_error);
}

TEST(NixlAgentTest, KeptTransfersArePostedAgainTheOldestGoFirstAndAReloadedPeerDropsThem) {
  if (Library() == nullptr) GTEST_SKIP() << "GEARJAX_NIXL_CAPI is not set (no NIXL here)";
  Agent owner(Library(), "gearjax-test-keep-owner");
  Agent reader(Library(), "gearjax-test-keep-reader");
  std::vector<uint8_t> shard(1 << 16), into(1 << 16, 0);
  owner.Register(reinterpret_cast<uint64_t>(shard.data()), shard.size());
  reader.Register(reinterpret_cast<uint64_t>(into.data()), into.size());
  std::string peer = reader.LoadPeer(owner.Metadata());
  std::atomic<bool> stop{false};
  std::thread progress([&] {
    while (!stop) {
      try {
        owner.Notifications();
      } catch (const std::runtime_error&) {  // closed below
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  const uint64_t base = reinterpret_cast<uint64_t>(shard.data());
  const uint64_t to = reinterpret_cast<uint64_t>(into.data());
  std::vector<uint64_t> remote = {base + 100, base + 5000};
  std::vector<uint64_t> local = {to, to + 1000};
  std::vector<uint64_t> sizes = {512, 2048};
  auto read = [&](bool keep, uint8_t fill) {
    std::fill(shard.begin(), shard.end(), fill);
    std::fill(into.begin(), into.end(), 0);
    const ReadResult r = reader.Read({{peer, remote.data(), local.data(), sizes.data(),
                                       remote.size(), keep}}, 10.0);
    EXPECT_EQ(r.request, -1) << r.why;
    for (size_t s = 0; s < sizes.size(); ++s) {  // this read's bytes, not the last one's
      EXPECT_EQ(into[local[s] - to], fill);
      EXPECT_EQ(into[local[s] - to + sizes[s] - 1], fill);
    }
  };
  auto counts = [&] {
    const TransferCounts c = reader.Transfers();
    return std::make_pair(c.made, c.reposted);
  };
  read(true, 1);
  EXPECT_EQ(counts(), std::make_pair(int64_t{1}, int64_t{0}));
  read(true, 2);
  read(true, 3);
  EXPECT_EQ(counts(), std::make_pair(int64_t{1}, int64_t{2}));
  // A read that is not kept makes its own and leaves the kept one alone.
  read(false, 4);
  read(true, 5);
  EXPECT_EQ(counts(), std::make_pair(int64_t{2}, int64_t{3}));
  // Other spans are kept beside them, up to kKeptPerPeer a peer.
  const std::vector<uint64_t> first = sizes;
  sizes = {256, 4096};
  read(true, 6);
  read(true, 7);
  EXPECT_EQ(counts(), std::make_pair(int64_t{3}, int64_t{4}));
  sizes = first;
  read(true, 8);
  EXPECT_EQ(counts(), std::make_pair(int64_t{3}, int64_t{5}));
  // kKeptPerPeer - 1 more: the least recently used ({256, 4096}) goes.
  for (int k = 0; k < kKeptPerPeer - 1; ++k) {
    sizes = {static_cast<uint64_t>(8 + 8 * k), 64};
    read(true, static_cast<uint8_t>(20 + k));
  }
  EXPECT_EQ(counts(), std::make_pair(int64_t{3 + kKeptPerPeer - 1}, int64_t{5}));
  sizes = first;
  read(true, 9);  // still kept
  EXPECT_EQ(counts().second, 6);
  sizes = {256, 4096};
  read(true, 10);  // released: made again
  EXPECT_EQ(counts(), std::make_pair(int64_t{3 + kKeptPerPeer}, int64_t{6}));
  // The peer's metadata loaded again drops its kept transfers (made with
  // the old metadata); so does forgetting it.
  peer = reader.LoadPeer(owner.Metadata());
  read(true, 11);
  EXPECT_EQ(counts(), std::make_pair(int64_t{4 + kKeptPerPeer}, int64_t{6}));
  reader.ForgetPeer(peer);
  peer = reader.LoadPeer(owner.Metadata());
  read(true, 12);
  read(true, 13);
  EXPECT_EQ(counts(), std::make_pair(int64_t{5 + kKeptPerPeer}, int64_t{7}));
  // (A kept transfer that fails is not kept either; in one process the
  // owner's memory stays mapped and reads of it succeed, so
  // tests/test_sharded.py's killed owners show that.)
  stop = true;
  progress.join();
}

TEST(NixlAgentTest, CloseWaitsForASampleUsingTheStagingBuffers) {
  if (Library() == nullptr) GTEST_SKIP() << "GEARJAX_NIXL_CAPI is not set (no NIXL here)";
  Agent agent(Library(), "gearjax-test-close");
  std::atomic<bool> closed{false};
  std::thread closer;
  {
    // A sample holds sampling() while it reads into a staging buffer.
    MutexLock sampling(agent.sampling());
    uint8_t* staging = agent.Staging(0, 4096);
    closer = std::thread([&] {
      agent.Close();
      closed = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(closed.load()) << "Close freed the staging buffers under a sample";
    std::memset(staging, 7, 4096);  // still the sample's (ASan: not freed)
  }
  closer.join();
  EXPECT_TRUE(closed.load());
}

}  // namespace
}  // namespace gearjax::nixl

namespace gearjax::nixl {
namespace {

// A NIXL C API of the test's own, for what a loopback cannot show: a
// transfer still in flight when its Read fails. A transfer to peer "slow"
// is in progress for its first three status polls, then done; to "fails"
// it fails at its first poll; to "refused" it cannot be made. Releases are
// recorded with whether the transfer was done by then.
namespace fake {
int slow_polls = 0;
bool slow_done = false;
int released_in_flight = 0, released = 0;
std::vector<std::string> peers;  // handle (1-based index) -> peer

int MakeHandle(Handle* h) {
  static uintptr_t next = 1000;
  *h = reinterpret_cast<Handle>(++next);
  return kSuccess;
}
std::string PeerOf(Handle h) { return peers[reinterpret_cast<uintptr_t>(h) - 1]; }

Api MakeApi() {
  Api api{};
  api.create_configured_agent = [](const char*, const AgentConfig*, Handle* h) {
    return MakeHandle(h);
  };
  api.destroy_agent = [](Handle) { return kSuccess; };
  api.create_params = [](Handle* h) { return MakeHandle(h); };
  api.destroy_params = [](Handle) { return kSuccess; };
  api.create_backend = [](Handle, const char*, Handle, Handle* h) { return MakeHandle(h); };
  api.destroy_backend = [](Handle) { return kSuccess; };
  api.create_notif_map = [](Handle* h) { return MakeHandle(h); };
  api.destroy_notif_map = [](Handle) { return kSuccess; };
  api.create_xfer_dlist = [](int, Handle* h) { return MakeHandle(h); };
  api.xfer_dlist_add_desc = [](Handle, uintptr_t, size_t, uint64_t) { return kSuccess; };
  api.destroy_xfer_dlist = [](Handle) { return kSuccess; };
  api.create_xfer_req = [](Handle, int, Handle, Handle, const char* peer, Handle* req, Handle) {
    if (std::string(peer) == "refused") return -1;
    peers.push_back(peer);
    *req = reinterpret_cast<Handle>(peers.size());
    return kSuccess;
  };
  api.post_xfer_req = [](Handle, Handle, Handle) { return kInProgress; };
  api.get_xfer_status = [](Handle, Handle req) {
    if (PeerOf(req) == "fails") return -2;
    if (++slow_polls <= 3) return kInProgress;
    slow_done = true;
    return kSuccess;
  };
  api.release_xfer_req = [](Handle, Handle req) {
    ++released;
    if (PeerOf(req) == "slow" && !slow_done) ++released_in_flight;
    return kSuccess;
  };
  api.destroy_xfer_req = [](Handle) { return kSuccess; };
  return api;
}
}  // namespace fake

TEST(NixlAgentFakeTest, AFailedReadReleasesItsOtherTransfersOnlyOnceTheyHaveLanded) {
  // Released in flight, a transfer may still land later (NIXL's release
  // cancels; a network card's read may go on) in buffers a retry reuses.
  static const Api api = fake::MakeApi();
  for (const char* failing : {"refused", "fails"}) {  // at creation, or at a poll
    fake::slow_polls = 0;
    fake::slow_done = false;
    fake::released = fake::released_in_flight = 0;
    Agent agent(api, "fake-reader");
    std::vector<uint64_t> remote = {4096}, local = {8192}, sizes = {64};
    const ReadResult result = agent.Read({{"slow", remote.data(), local.data(), sizes.data(), 1},
                                          {failing, remote.data(), local.data(), sizes.data(), 1}},
                                         5.0);
    EXPECT_EQ(result.request, 1) << failing << ": " << result.why;
    EXPECT_TRUE(fake::slow_done) << failing;
    EXPECT_EQ(fake::released_in_flight, 0) << failing << ": released while it could still land";
    EXPECT_GE(fake::released, 1) << failing;
  }
}

}  // namespace
}  // namespace gearjax::nixl
