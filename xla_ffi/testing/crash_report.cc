// A native stack on a crash, for GPU runs: Python 3.12's faulthandler prints
// only Python frames, and the lent GPU machines have no gdb, so a SIGSEGV
// inside XLA or a handler (a rate-limiter timeout in a CUDA handler, both GPU
// runs so far) said nothing of where it was. install_crash_report() puts a
// handler in front of the current one (faulthandler's) that writes the
// signal, the faulting address and the native frames (glibc's backtrace:
// module+offset, and a symbol where the module exports one) to stderr, then
// hands the signal on to the handler it replaced, and ends the process with
// the signal (a test-only tool: no runtime here recovers from SIGSEGV).
#include <execinfo.h>
#include <nanobind/nanobind.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>

#include "testing/testing_module.h"

namespace nb = nanobind;

namespace gearjax::testing {
namespace {

constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
constexpr int kMaxFrames = 96;
struct sigaction previous[std::size(kCrashSignals)];

int IndexOf(int sig) {
  for (size_t i = 0; i < std::size(kCrashSignals); ++i) {
    if (kCrashSignals[i] == sig) return static_cast<int>(i);
  }
  return -1;
}

// Only async-signal-safe calls, but for backtrace(), whose first call may
// allocate: Install calls it once beforehand.
void OnCrash(int sig, siginfo_t* info, void* context) {
  // backtrace takes the dynamic loader's lock: a crash while another thread
  // held it would hang here; SIGALRM's default action ends the process.
  alarm(5);
  char line[160];
  const int n = std::snprintf(line, sizeof(line),
                              "\ngearjax crash report: signal %d at address %p; native frames, "
                              "innermost first:\n",
                              sig, info == nullptr ? nullptr : info->si_addr);
  if (n > 0) (void)!write(STDERR_FILENO, line, static_cast<size_t>(n));
  void* frames[kMaxFrames];
  backtrace_symbols_fd(frames, backtrace(frames, kMaxFrames), STDERR_FILENO);
  // The handler this one replaced (faulthandler's prints the Python frames),
  // then the default action: the process ends with the signal, as before.
  const int i = IndexOf(sig);
  if (i >= 0) {
    struct sigaction& before = previous[i];
    sigaction(sig, &before, nullptr);
    if ((before.sa_flags & SA_SIGINFO) != 0 && before.sa_sigaction != nullptr) {
      before.sa_sigaction(sig, info, context);
    } else if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
      before.sa_handler(sig);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

bool installed = false;

bool Install() {
  if (installed) return false;
  void* warm[2];
  backtrace(warm, 2);  // loads libgcc's unwinder now, not inside the handler
  for (size_t i = 0; i < std::size(kCrashSignals); ++i) {
    struct sigaction ours {};
    ours.sa_sigaction = &OnCrash;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    sigaction(kCrashSignals[i], &ours, &previous[i]);
  }
  installed = true;
  return true;
}

}  // namespace

void DefineCrashReport(nb::module_ m) {
  m.def("install_crash_report", &Install,
        "Writes the native frames to stderr when the process crashes (SIGSEGV, SIGBUS, "
        "SIGILL, SIGFPE, SIGABRT), before the handler it replaces (faulthandler's); false "
        "when already installed.");
}

}  // namespace gearjax::testing
