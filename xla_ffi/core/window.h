// Window arithmetic: where a sampled window starts in its trajectory, how many
// real steps it holds, and where they land in the output row. Shared by the
// host selection, the GPU selection kernel and the CPU and CUDA gathers, so a
// cut mode means the same everywhere.
//
// Cut modes (SampleRequest::cut), for a trajectory of `length` steps and a
// window of `window` steps:
//  * kStart (decision-transformer training windows): the start is uniform in
//    [0, length - 1]; the window is cut at the trajectory's end.
//  * kEnd (what a decision transformer sees at evaluation): the last step is
//    uniform in [0, length - 1]; the window is cut at the trajectory's start,
//    so its real steps end at the drawn step and the padding goes first.
//  * kFull: only windows inside the trajectory, start uniform in
//    [0, length - window]; never padded. The table draws only trajectories of
//    at least `window` steps under kFull (see table.h).
// window == 0 means the whole trajectory from step 0, whatever the cut.
#pragma once

#include <cstdint>

#include "core/common.h"
#include "core/random.h"

namespace gearjax {

enum class Cut : int32_t { kStart = 0, kEnd = 1, kFull = 2 };
inline constexpr int32_t kNumCuts = 3;

// The steps a row of a sample holds: the window, or a whole trajectory's
// room (max_length) for window == 0. The one place this is derived: Python
// asks it for the batch's shapes (_gearjax.window_width, _sample_args.py).
GEARJAX_HD int64_t WindowWidth(int64_t window, int64_t max_length) {
  return window == 0 ? max_length : window;
}

struct WindowCut {
  int64_t start;  // first real step in the trajectory
  int64_t valid;  // real steps: copied from `start` on; the rest of the row is padding
};

// The window of a trajectory of `length` >= 1 steps (and >= window under
// kFull) from two random words (uniform over the choices by BelowFromBits).
// A record of length 0 (a GPU row whose draw raced an update reads one; see
// select_block.h) gets an empty window.
GEARJAX_HD WindowCut CutWindow(Cut cut, int64_t length, int64_t window, uint32_t w0,
                               uint32_t w1) {
  if (length <= 0) return WindowCut{0, 0};
  if (window == 0) return WindowCut{0, length};
  if (cut == Cut::kFull) {
    const int64_t starts = length - window + 1;
    const int64_t start = static_cast<int64_t>(
        BelowFromBits(w0, w1, static_cast<uint64_t>(starts > 0 ? starts : 1)));
    return WindowCut{start, window};
  }
  const int64_t drawn =
      static_cast<int64_t>(BelowFromBits(w0, w1, static_cast<uint64_t>(length)));
  if (cut == Cut::kEnd) {
    const int64_t start = drawn - window + 1 > 0 ? drawn - window + 1 : 0;
    return WindowCut{start, drawn - start + 1};
  }
  const int64_t remaining = length - drawn;
  return WindowCut{drawn, remaining < window ? remaining : window};
}

// The window a drawn step places (PrioritizedSteps): it starts there
// (kStart, cut at the trajectory's end; kFull, where the step is at most
// length - window), or ends there (kEnd, cut at the trajectory's start).
GEARJAX_HD WindowCut WindowAtStep(Cut cut, int64_t length, int64_t window, int64_t step) {
  if (length <= 0 || step < 0 || step >= length) return WindowCut{0, 0};
  if (cut == Cut::kEnd) {
    const int64_t start = step - window + 1 > 0 ? step - window + 1 : 0;
    return WindowCut{start, step - start + 1};
  }
  const int64_t remaining = length - step;
  return WindowCut{step, remaining < window ? remaining : window};
}

// The first output position holding a real step of a row of `width` steps
// with `valid` real ones, padded on the left or the right.
GEARJAX_HD int64_t WindowOffset(int64_t valid, int64_t width, bool pad_left) {
  return pad_left ? width - valid : 0;
}

}  // namespace gearjax
