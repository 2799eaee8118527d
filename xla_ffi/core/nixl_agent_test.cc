// Tests of nixl_capi.h and nixl_agent.h. Loading failures run everywhere;
// the loopback cases need NIXL's C API, named by GEARJAX_NIXL_CAPI (the
// Python suite, tests/test_nixl_native.py, sets it from the installed wheel
// and runs the same paths where NIXL is installed).
#include "nixl_agent.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
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

}  // namespace
}  // namespace gearjax::nixl
