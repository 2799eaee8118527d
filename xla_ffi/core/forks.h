// Tables inherited by a forked child. fork copies a table's memory but not
// the threads that were inside it: a lock one of them held stays held in the
// child forever, and the child's first call on the table waited forever. So
// the process counts the forks it descends through (pthread_atfork), a table
// remembers the count it was made under (Table::Lock), and in a child every
// call on an inherited table fails at once (Closed, ForkedCopyMessage)
// instead of taking its lock. Tables the child makes itself work as usual.
#pragma once

#include <cstdint>
#include <string>

namespace gearjax::forks {

// Forks between the process that loaded gearjax and this one: 0 there, 1 in
// its child, 2 in a grandchild.
uint64_t Generation();

// The pid of the process that loaded gearjax in this process's line at
// generation `generation` (the one a table of that generation was made in).
int64_t PidOfGeneration(uint64_t generation);

// Why a call on a table made at `generation` fails in this process.
std::string ForkedCopyMessage(const std::string& table, uint64_t generation);

}  // namespace gearjax::forks
