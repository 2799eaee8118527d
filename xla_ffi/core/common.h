// Shared definitions for the gearjax native core: error types, and the
// host/device annotations used by code that CPU and CUDA handlers both compile.
#pragma once

#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define GEARJAX_HD __host__ __device__ __forceinline__
#else
#define GEARJAX_HD inline
#endif
// Loop unrolling in nvcc's device pass and in GCC. nvcc's host pass knows
// neither pragma; host code in .cu files only launches kernels.
#if defined(__CUDA_ARCH__)
#define GEARJAX_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define GEARJAX_UNROLL
#else
#define GEARJAX_UNROLL _Pragma("GCC unroll 16")
#endif

namespace gearjax {

// Bad arguments from the caller: surfaces as ValueError in Python.
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The rate limiter (or a full table of in-flight writers) held an operation
// back past its timeout: surfaces as TimeoutError in Python.
class Timeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A sample asked for more than the table can serve now and does not wait
// (no rate limiter, or its timeout 0): an empty table, or too few eligible
// items (cut="full", replace=False, max_times_sampled). A Timeout for code
// that catches those (nothing waited, so it is not one to the user: its own
// kind, "shortfall", and TableShortfallError in Python).
class Shortfall : public Timeout {
 public:
  using Timeout::Timeout;
};

// A wait gave way to a signal (interrupts.h): surfaces in Python as the
// exception the signal's handler raised (KeyboardInterrupt for Ctrl-C).
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The table was closed: surfaces as RuntimeError in Python.
class Closed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A call that failed after it returned (a GPU priority update applied by a
// stream callback), raised by the next call on the table: surfaces as
// ValueError in Python, a class gearjax.table_error knows.
class FailedEarlier : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

}  // namespace gearjax
