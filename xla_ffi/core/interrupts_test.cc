// Tests of the interrupting signals' count: the handler sits in front of a
// function handler (which still runs) and never in front of SIG_DFL or
// SIG_IGN; a wait gives way within the poll to a signal where its thread's
// hook (or no hook) says so, and otherwise waits on to its deadline; a
// table's rate-limiter waits are such waits.
#include "core/interrupts.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/table/table.h"

namespace gearjax {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::atomic<int> previous_calls{0};
void PreviousHandler(int) { previous_calls.fetch_add(1); }

void InstallPrevious(int sig) {
  struct sigaction action = {};
  action.sa_handler = &PreviousHandler;
  sigemptyset(&action.sa_mask);
  ASSERT_EQ(sigaction(sig, &action, nullptr), 0);
}

// Sends `sig` to the process after `delay`, from another thread.
std::thread SendLater(int sig, std::chrono::milliseconds delay) {
  return std::thread([=] {
    std::this_thread::sleep_for(delay);
    kill(getpid(), sig);
  });
}

TEST(Interrupts, TheCountingHandlerChainsToTheOneInstalledBefore) {
  for (const int sig : {SIGINT, SIGTERM}) {
    InstallPrevious(sig);
    interrupts::Watch();
    const uint64_t before = interrupts::Count();
    const int calls = previous_calls.load();
    ASSERT_EQ(raise(sig), 0);
    EXPECT_EQ(interrupts::Count(), before + 1);
    EXPECT_EQ(previous_calls.load(), calls + 1);
    // Replaced (as Python's signal.signal does): the next Watch goes in front again.
    InstallPrevious(sig);
    interrupts::Watch();
    ASSERT_EQ(raise(sig), 0);
    EXPECT_EQ(interrupts::Count(), before + 2);
    EXPECT_EQ(previous_calls.load(), calls + 2);
  }
}

TEST(Interrupts, DefaultAndIgnoredSignalsAreLeftAlone) {
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(sigaction(SIGINT, &ignore, nullptr), 0);
  interrupts::Watch();
  struct sigaction now;
  ASSERT_EQ(sigaction(SIGINT, nullptr, &now), 0);
  EXPECT_FALSE(now.sa_flags & SA_SIGINFO);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  const uint64_t before = interrupts::Count();
  ASSERT_EQ(raise(SIGINT), 0);  // ignored: nothing counted, nothing to give way to
  EXPECT_EQ(interrupts::Count(), before);
}

TEST(Interrupts, AWaitWithoutAHookGivesWayWithinAPoll) {
  InstallPrevious(SIGINT);
  std::mutex mu;
  std::condition_variable changed;
  std::unique_lock<std::mutex> lock(mu);
  std::thread sender = SendLater(SIGINT, 100ms);
  const auto start = Clock::now();
  EXPECT_THROW(interrupts::WaitInterruptibly(changed, lock, start + 30s, [] { return false; },
                                             "the test's wait", interrupts::Baseline()),
               Interrupted);
  sender.join();
  EXPECT_LT(Clock::now() - start, 100ms + interrupts::kPoll + 200ms);
}

bool WaitOn() { return false; }

TEST(Interrupts, AHookThatWaitsOnKeepsTheDeadline) {
  InstallPrevious(SIGINT);
  interrupts::ScopedHook hook(&WaitOn);
  std::mutex mu;
  std::condition_variable changed;
  std::unique_lock<std::mutex> lock(mu);
  std::thread sender = SendLater(SIGINT, 50ms);
  const auto start = Clock::now();
  EXPECT_FALSE(interrupts::WaitInterruptibly(changed, lock, start + 400ms,
                                             [] { return false; }, "the test's wait",
                                             interrupts::Baseline()));
  sender.join();
  EXPECT_GE(Clock::now() - start, 400ms);
}

// A signal sent once the wait could be seen, but before the wait began
// looking (the caller's thread descheduled in between): counted after the
// baseline, so the wait gives way at once instead of at its deadline.
TEST(Interrupts, ASignalBetweenTheBaselineAndTheWaitIsNotLost) {
  InstallPrevious(SIGINT);
  const uint64_t seen = interrupts::Baseline();
  ASSERT_EQ(raise(SIGINT), 0);
  std::mutex mu;
  std::condition_variable changed;
  std::unique_lock<std::mutex> lock(mu);
  const auto start = Clock::now();
  EXPECT_THROW(interrupts::WaitInterruptibly(changed, lock, start + 30s, [] { return false; },
                                             "the test's wait", seen),
               Interrupted);
  EXPECT_LT(Clock::now() - start, interrupts::kPoll);
}

TEST(Interrupts, ARateLimitedInsertAndSampleGiveWay) {
  InstallPrevious(SIGINT);
  TableSpec spec;
  spec.name = "interrupted";
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = 8;
  spec.max_length = 2;
  spec.limiter = {/*min_size=*/2, /*samples_per_insert=*/1, /*min_diff=*/-1, /*max_diff=*/1,
                  /*timeout_seconds=*/30};
  Table table(spec);
  int32_t value = 1;
  table.Insert({&value}, 1, 1.0);
  table.Insert({&value}, 1, 1.0);  // the ratio now holds further inserts back
  std::thread sender = SendLater(SIGINT, 100ms);
  auto start = Clock::now();
  EXPECT_THROW(table.Insert({&value}, 1, 1.0), Interrupted);
  sender.join();
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_EQ(table.GetStats().writers, 0);
  EXPECT_EQ(table.waiting(), 0);

  spec.limiter = {/*min_size=*/5, /*samples_per_insert=*/0, -1e18, 1e18, 30};  // MinSize(5)
  Table empty(spec);
  std::vector<Draw> draws(4);
  const uint32_t seed[2] = {1, 2};
  sender = SendLater(SIGINT, 100ms);
  start = Clock::now();
  EXPECT_THROW(empty.Select({Strategy::kUniform, 0, 0, 4, 0}, seed, draws.data()), Interrupted);
  sender.join();
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_EQ(empty.GetStats().samples_in_flight, 0);
}

}  // namespace
}  // namespace gearjax
