// Tests of deferred errors: the first error is raised once with how many came
// after it, nothing is raised when nothing is kept, and of many threads
// raising one error at once exactly one throws.
#include "core/gpu/deferred_error.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "core/common.h"

namespace gearjax {
namespace {

std::string RaisedMessage(DeferredError& e) {
  try {
    e.Raise("failed: ");
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "";
}

TEST(DeferredError, TheFirstIsRaisedOnceWithHowManyCameAfter) {
  DeferredError e;
  EXPECT_FALSE(e.pending());
  EXPECT_NO_THROW(e.Raise("failed: "));
  e.Defer("priority NaN at entry 3");
  e.Defer("priority -1 at entry 0");
  e.Defer("priority inf at entry 7");
  EXPECT_TRUE(e.pending());
  EXPECT_EQ(RaisedMessage(e),
            "failed: priority NaN at entry 3 (and 2 later updates failed too)");
  EXPECT_FALSE(e.pending());
  EXPECT_NO_THROW(e.Raise("failed: "));
  e.Defer("again");  // a new error after the raise starts a new count
  EXPECT_EQ(RaisedMessage(e), "failed: again");
}

TEST(DeferredError, OfManyThreadsRaisingOneErrorExactlyOneThrows) {
  DeferredError e;
  e.Defer("bad");
  std::atomic<int> thrown{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      try {
        e.Raise("x: ");
      } catch (const InvalidArgument&) {
        ++thrown;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(thrown.load(), 1);
}

}  // namespace
}  // namespace gearjax
