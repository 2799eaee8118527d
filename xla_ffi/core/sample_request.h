// What a sample asks a table for: the strategy that draws trajectories, and
// the request (batch, window, cut, replacement) every sampling path takes
// (Table::Select, the GPU and shard paths, the FFI handlers' SampleAttrs).
// Its one check against a table is Table::CheckRequest.
#pragma once

#include <cstdint>

#include "core/window.h"

namespace gearjax {

// Each one's name, parameter checks and the rest: strategies.h.
enum class Strategy : int32_t {
  kUniform = 0,      // trajectories uniformly
  kTimestep = 1,     // trajectories in proportion to their length
  kPrioritized = 2,  // trajectories in proportion to priority ** alpha
  kTopK = 3,         // uniformly over the k highest priorities (ties: newer first)
  kRecent = 4,       // uniformly over the n newest
  kPrioritizedSteps = 5,  // steps in proportion to their priority ** alpha (step_priorities)
};

struct SampleRequest {
  Strategy strategy = Strategy::kUniform;
  double alpha = 0.0;  // Prioritized, PrioritizedSteps
  int64_t count = 0;   // k for TopK, n for Recent (>= 1)
  int64_t batch = 0;
  int64_t window = 0;  // steps per window; 0 means whole trajectories from step 0
  Cut cut = Cut::kStart;  // where windows lie in their trajectories (window.h)
  bool replace = true;    // false: a trajectory at most once per batch
};

}  // namespace gearjax
