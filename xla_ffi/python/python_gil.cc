// The exit gate, and the GIL guards and signal hook built on it (see
// python_gil.h).
#include "python/python_gil.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gearjax::python {
namespace {

std::atomic<bool> gate_closed{false};
pthread_t exiting_thread;  // written before gate_closed is set
// Threads between looking at the gate and having the GIL: CloseExitGate
// waits for them, so none is still on its way when Python finalises.
std::atomic<int64_t> crossing{0};

[[noreturn]] void Park() {
  for (;;) pause();
}

// Called before taking the GIL: parks where exit has begun on another
// thread; otherwise the caller is counted as crossing until Crossed().
void EnterOrPark() {
  crossing.fetch_add(1, std::memory_order_seq_cst);
  if (gate_closed.load(std::memory_order_seq_cst) &&
      !pthread_equal(pthread_self(), exiting_thread)) {
    crossing.fetch_sub(1, std::memory_order_seq_cst);
    Park();
  }
}

void Crossed() { crossing.fetch_sub(1, std::memory_order_seq_cst); }

// A forked child has only the forking thread: none of the parent's is
// crossing there (its exit would otherwise wait for them in vain).
[[maybe_unused]] const bool reset_in_children = [] {
  return pthread_atfork(nullptr, nullptr, [] { crossing.store(0); }) == 0;
}();

}  // namespace

ReleasedGil::ReleasedGil() : state_(PyEval_SaveThread()), hook_(&RunSignalHandlers) {}

ReleasedGil::~ReleasedGil() {
  EnterOrPark();
  PyEval_RestoreThread(state_);
  Crossed();
}

AcquiredGil::AcquiredGil() {
  EnterOrPark();
  state_ = PyGILState_Ensure();
  Crossed();
}

AcquiredGil::~AcquiredGil() { PyGILState_Release(state_); }

void CloseExitGate(double wait_seconds) {
  exiting_thread = pthread_self();
  gate_closed.store(true, std::memory_order_seq_cst);
  if (crossing.load(std::memory_order_seq_cst) == 0) return;
  Py_BEGIN_ALLOW_THREADS
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(wait_seconds);
  while (crossing.load(std::memory_order_seq_cst) > 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  Py_END_ALLOW_THREADS
}

bool RunSignalHandlers() {
  AcquiredGil gil;
  return PyErr_CheckSignals() != 0;
}

}  // namespace gearjax::python
