// Reverb's rate limiter, counted in sampled rows. With diff = inserts *
// samples_per_insert - samples, a batch of B rows may be sampled when the
// table holds at least min_size trajectories and diff - B >= min_diff; a
// trajectory may be inserted while the table (with the inserts in flight)
// holds fewer than min_size, or when diff + samples_per_insert <= max_diff.
// Blocked operations wait up to timeout_seconds, then fail with Timeout.
// Without a limiter (the defaults) any non-empty table may be sampled and
// inserts never wait.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace gearjax {

struct RateLimiterSpec {
  int64_t min_size = 1;
  double samples_per_insert = 0.0;
  double min_diff = -std::numeric_limits<double>::infinity();
  double max_diff = std::numeric_limits<double>::infinity();
  double timeout_seconds = 0.0;
};

// The counts the limiter decides on.
struct LimiterState {
  int64_t size;       // trajectories stored
  int64_t writers;    // inserts admitted but not yet published
  int64_t inserts;    // inserts published so far
  double samples;     // rows sampled so far
};

class RateLimiter {
 public:
  // Throws InvalidArgument unless the spec is within limits.h and can ever
  // admit a sample of a table of `capacity` slots.
  RateLimiter(const RateLimiterSpec& spec, int64_t capacity);

  const RateLimiterSpec& spec() const { return spec_; }
  bool CanSample(const LimiterState& s, int64_t batch) const;
  bool CanInsert(const LimiterState& s) const;
  // The state in words, for the errors of blocked calls.
  std::string Describe(const LimiterState& s) const;

 private:
  RateLimiterSpec spec_;
};

}  // namespace gearjax
