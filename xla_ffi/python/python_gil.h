// The GIL around native work: released while a table call copies or waits
// (with Ctrl-C still heard), taken by native threads that call Python, and
// both safe at interpreter exit.
//
// Exit: Python 3.11-3.13 end a thread that takes the GIL while the interpreter
// finalises with pthread_exit, which unwinds the thread's stack like an
// exception. Unwinding through a C++ destructor (noexcept) or through
// nanobind's catch (...) is std::terminate: a daemon thread inside a table
// call when the program exited aborted the process ("terminate called
// without an active exception"). So once exit begins (CloseExitGate, called
// by gearjax's atexit handler, before Python finalises), every other thread
// that would take the GIL parks forever instead, and the process exits
// around it, as Python 3.14 does itself.
//
// Ctrl-C: a call that waits with the GIL released (a rate limiter's wait)
// sets RunSignalHandlers as its thread's interrupt hook (core/interrupts.h):
// when a signal arrives it runs Python's handlers, and the call gives way to
// the exception one raised (KeyboardInterrupt), or waits on.
#pragma once

#include <Python.h>

#include "core/interrupts.h"

namespace gearjax::python {

// Releases the GIL for its lifetime (nanobind's gil_scoped_release, safe at
// exit, with the interrupt hook set). Usable as nb::call_guard.
class ReleasedGil {
 public:
  ReleasedGil();
  ~ReleasedGil();
  ReleasedGil(const ReleasedGil&) = delete;
  ReleasedGil& operator=(const ReleasedGil&) = delete;

 private:
  PyThreadState* state_;
  interrupts::ScopedHook hook_;
};

// Holds the GIL for its lifetime, from any thread (nanobind's
// gil_scoped_acquire, safe at exit).
class AcquiredGil {
 public:
  AcquiredGil();
  ~AcquiredGil();
  AcquiredGil(const AcquiredGil&) = delete;
  AcquiredGil& operator=(const AcquiredGil&) = delete;

 private:
  PyGILState_STATE state_;
};

// Exit begins: from now on every thread but the calling one parks instead of
// taking the GIL. Call with the GIL held; waits up to `wait_seconds`, with
// the GIL released, for the threads taking it right now to have it (they
// saw the gate open, and must not meet Python's finalisation).
void CloseExitGate(double wait_seconds);

// The interrupt hook of calls that wait with the GIL released: runs
// Python's signal handlers (PyErr_CheckSignals; on the main thread only) and
// gives up where one raised, leaving its exception set for the binding to
// raise (the Interrupted translator in module.cc).
bool RunSignalHandlers();

}  // namespace gearjax::python
