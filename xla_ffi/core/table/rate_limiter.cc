// The rate limiter (see rate_limiter.h).
#include "core/table/rate_limiter.h"

#include <cmath>
#include <sstream>

#include "core/common.h"
#include "core/limits.h"

namespace gearjax {

RateLimiter::RateLimiter(const RateLimiterSpec& spec, int64_t capacity) : spec_(spec) {
  const RateLimiterSpec& l = spec_;
  if (l.min_size < 1) throw InvalidArgument("min_size must be >= 1");
  if (l.min_size > capacity) {
    throw InvalidArgument("min_size (" + std::to_string(l.min_size) + ") exceeds capacity (" +
                          std::to_string(capacity) + "): sampling could never start");
  }
  if (!(l.samples_per_insert >= 0 && l.samples_per_insert <= kMaxSamplesPerInsert)) {
    throw InvalidArgument("samples_per_insert must be in [0, 1e9]");
  }
  // The diffs are infinite without a ratio; with one they stay within
  // min_size * 1e9 +- 1e15.
  const double bound = static_cast<double>(capacity) * kMaxSamplesPerInsert + kMaxErrorBuffer;
  for (double d : {l.min_diff, l.max_diff}) {
    if (std::isnan(d) || (l.samples_per_insert > 0 && !(std::fabs(d) <= bound))) {
      throw InvalidArgument("the rate limiter's diff bounds are out of range");
    }
  }
  if (!(l.min_diff <= l.max_diff)) throw InvalidArgument("min_diff must be <= max_diff");
  if (!(l.timeout_seconds >= 0 && l.timeout_seconds <= kMaxTimeoutSeconds)) {
    throw InvalidArgument("timeout must be in [0, 1e9] seconds");
  }
}

bool RateLimiter::CanSample(const LimiterState& s, int64_t batch) const {
  if (s.size < spec_.min_size) return false;
  const double diff = static_cast<double>(s.inserts) * spec_.samples_per_insert - s.samples;
  return diff - static_cast<double>(batch) >= spec_.min_diff;
}

bool RateLimiter::CanInsert(const LimiterState& s) const {
  if (s.size + s.writers < spec_.min_size) return true;
  const double inserts = static_cast<double>(s.inserts + s.writers + 1);
  return inserts * spec_.samples_per_insert - s.samples <= spec_.max_diff;
}

std::string RateLimiter::Describe(const LimiterState& s) const {
  std::ostringstream out;
  out << "size=" << s.size << ", min_size=" << spec_.min_size << ", inserts=" << s.inserts
      << ", samples=" << s.samples;
  if (spec_.samples_per_insert > 0) {
    out << ", samples_per_insert=" << spec_.samples_per_insert << ", allowed diff=["
        << spec_.min_diff << ", " << spec_.max_diff << "]";
  }
  return out.str();
}

}  // namespace gearjax
