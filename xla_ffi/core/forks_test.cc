// Tests of tables in a forked child: a call on an inherited table throws
// Closed naming the fork at once, even when the parent forked while another
// thread held the table's lock; the parent's table and the child's own
// tables work.
#include "core/forks.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/table/table.h"

namespace gearjax {
namespace {

using namespace std::chrono_literals;

TableSpec Spec() {
  TableSpec spec;
  spec.name = "inherited";
  spec.columns.push_back({"x", 4, std::vector<uint8_t>(4, 0)});
  spec.capacity = 8;
  spec.max_length = 2;
  return spec;
}

// Runs `child` in a forked child; its exit code (0: passed).
int InChild(int (*child)(Table&), Table& table) {
  const pid_t pid = fork();
  if (pid == 0) _exit(child(table));
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

int UseInheritedAndOwn(Table& inherited) {
  if (forks::Generation() != 1 || !inherited.forked_copy()) return 1;
  const auto start = std::chrono::steady_clock::now();
  int32_t value = 1;
  try {
    inherited.Insert({&value}, 1, 1.0);
    return 2;
  } catch (const Closed& e) {
    if (std::strstr(e.what(), "is a fork of it") == nullptr) return 3;
    if (std::strstr(e.what(), "table 'inherited'") == nullptr) return 4;
  }
  try {
    inherited.GetStats();
    return 5;
  } catch (const Closed&) {
  }
  if (std::chrono::steady_clock::now() - start > 1s) return 6;
  Table own(Spec());
  if (own.forked_copy()) return 7;
  own.Insert({&value}, 1, 1.0);
  return own.GetStats().size == 1 ? 0 : 8;
}

TEST(Forks, AnInheritedTableRefusesEveryCallAndTheChildsOwnWork) {
  Table table(Spec());
  EXPECT_FALSE(table.forked_copy());
  EXPECT_EQ(InChild(&UseInheritedAndOwn, table), 0);
  int32_t value = 2;
  table.Insert({&value}, 1, 1.0);  // the parent's table is untouched
  EXPECT_EQ(table.GetStats().size, 1);
  EXPECT_EQ(forks::Generation(), 0u);
}

TEST(Forks, AChildForkedWhileAThreadHoldsTheLockDoesNotWait) {
  Table table(Spec());
  std::atomic<bool> stop{false};
  std::thread writer([&] {  // holds the table's lock most of the time
    int32_t value = 3;
    while (!stop) table.Insert({&value}, 1, 1.0);
  });
  std::this_thread::sleep_for(20ms);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(InChild(&UseInheritedAndOwn, table), 0);
  }
  stop = true;
  writer.join();
}

}  // namespace
}  // namespace gearjax
