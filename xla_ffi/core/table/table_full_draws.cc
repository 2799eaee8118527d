// Table's cut="full" samples with replacement drawn without listing the table
// (see table.h, SelectFastFullLocked and SelectFullLocked): rows drawn from
// the strategy's own selector and kept when their window fits.
#include <cstdint>

#include "core/random.h"
#include "core/selectors/length_buckets.h"
#include "core/selectors/length_index.h"
#include "core/selectors/prioritized.h"
#include "core/selectors/step_prioritized.h"
#include "core/selectors/timestep.h"
#include "core/selectors/uniform.h"
#include "core/table/table.h"

namespace gearjax {
namespace {

// Rejection pays while at least 1 draw in 16 is kept; below, listing is cheaper.
constexpr double kMinAcceptance = 1.0 / 16;
// Tries per row before giving the sample to the listing path: at the lowest
// acceptance a row misses them all with probability (15/16)^256, below 1e-7.
constexpr uint32_t kTries = 256;
// A try's Timestep acceptance word: an attempt counter no other draw of the
// row uses (random.h).
constexpr uint32_t kAcceptAttempt = kUniformAttempts + 1;

// Draws each of the n rows by draw(row, uniform) until keep(row, slot) gives
// the slot drawn its probability (below 0: not kept). A row's first try
// takes u[b]; later tries take the words of RedrawRow's rows. Returns false
// where a draw finds nothing or a row misses kTries times: nothing drawn
// counts then.
template <typename DrawSlot, typename Keep>
bool DrawKept(const uint32_t seed[2], const double* u, int64_t n, DrawSlot draw, Keep keep,
              Selection* out) {
  for (int64_t b = 0; b < n; ++b) {
    bool found = false;
    for (uint32_t t = 0; t < kTries && !found; ++t) {
      const int64_t row = RedrawRow(b, t);
      double draw_u = u[b];
      if (t > 0) {
        const Words4 words = RowWords(seed, row);
        draw_u = UniformFromBits(words.w[0], words.w[1]);
      }
      const int64_t slot = draw(row, draw_u);
      if (slot < 0) return false;  // an empty selector: cannot happen with eligible items
      const double probability = keep(row, slot);
      if (probability < 0.0) continue;
      out[b] = {slot, probability};
      found = true;
    }
    if (!found) return false;
  }
  return true;
}

}  // namespace

bool Table::SelectFastFullLocked(const SampleRequest& r, const uint32_t seed[2], const double* u,
                                 Selection* out) {
  if (!(r.cut == Cut::kFull && r.window > 0 && r.replace && spec_.max_times_sampled == 0)) {
    return false;
  }
  if (r.strategy == Strategy::kUniform || r.strategy == Strategy::kTimestep ||
      r.strategy == Strategy::kPrioritized) {
    return SelectFullLocked(r, seed, u, out);
  }
  return DrawsSteps(r.strategy) &&
         SamplingSelectorLocked<StepPrioritizedSelector>(r.strategy, r.alpha)
             .SelectFull({seed, u, r.batch, r.count, {}}, r.window, out);
}

bool Table::SelectFullLocked(const SampleRequest& r, const uint32_t seed[2], const double* u,
                             Selection* out) {
  const int64_t w = r.window;
  LengthIndex& index = LengthIndexLocked();
  const int64_t eligible = index.CountAtLeast(w);
  if (eligible == 0) return false;
  if (r.strategy == Strategy::kPrioritized) {
    return SelectFullPrioritizedLocked(r, seed, u, eligible, out);
  }
  const bool timestep = r.strategy == Strategy::kTimestep;
  const double total = static_cast<double>(timestep ? index.FullWindows(w) : eligible);
  const double acceptance = total / static_cast<double>(timestep ? num_steps_ : live_);
  if (acceptance < kMinAcceptance) return false;
  const SlotInfo* slots = &(*slots_)[0];
  if (timestep) {
    const SumTree& tree = SamplingSelectorLocked<TimestepSelector>(Strategy::kTimestep).tree();
    return DrawKept(
        seed, u, r.batch, [&](int64_t, double draw_u) { return tree.Draw(draw_u); },
        [&](int64_t row, int64_t slot) {
          // Drawn in proportion to L; kept with probability (L - w + 1) / L.
          const int64_t length = slots[slot].length;
          if (length < w) return -1.0;
          const Words4 accept = AttemptWords(seed, row, kAcceptAttempt);
          if (UniformFromBits(accept.w[0], accept.w[1]) * static_cast<double>(length) >=
              static_cast<double>(length - w + 1)) {
            return -1.0;
          }
          return static_cast<double>(length - w + 1) / total;
        },
        out);
  }
  const UniformView view = SamplingSelectorLocked<UniformSelector>(Strategy::kUniform).view();
  return DrawKept(
      seed, u, r.batch,
      [&](int64_t row, double draw_u) { return UniformDraw(view, seed, row, draw_u); },
      [&](int64_t, int64_t slot) { return slots[slot].length < w ? -1.0 : 1.0 / total; }, out);
}

bool Table::SelectFullPrioritizedLocked(const SampleRequest& r, const uint32_t seed[2],
                                        const double* u, int64_t eligible, Selection* out) {
  if (eligible == live_) {
    // No item is too short: the cut excludes none, and the plain draw (its
    // rows' descents interleaved) is the draw.
    SelectLocked(r, seed, u, out);
    return true;
  }
  // A short item is visited through its list (scattered reads), at about
  // twice what listing reads for one in slot order: past half the table,
  // listing is cheaper.
  if (2 * (live_ - eligible) > live_) return false;
  const SumTree& tree =
      SamplingSelectorLocked<PrioritizedSelector>(Strategy::kPrioritized, r.alpha).tree();
  double too_short = 0.0;
  LengthBucketsLocked().ForEachShorter(r.window,
                                       [&](int64_t slot) { too_short += tree.Get(slot); });
  const double total = tree.Total();
  const double kept = total - too_short;
  // Also false where the eligible items weigh nothing and rounding left a
  // trace of weight (the listing path then says why it cannot sample).
  if (!(kept > 0.0 && kept >= kMinAcceptance * total)) return false;
  const SlotInfo* slots = &(*slots_)[0];
  const int64_t w = r.window;
  return DrawKept(
      seed, u, r.batch, [&](int64_t, double draw_u) { return tree.Draw(draw_u); },
      [&](int64_t, int64_t slot) { return slots[slot].length < w ? -1.0 : tree.Get(slot) / kept; },
      out);
}

}  // namespace gearjax
