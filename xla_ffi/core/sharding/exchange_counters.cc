// What a shard's owner has served to the xla exchange (see exchange_counters.h).
#include "core/sharding/exchange_counters.h"

#include "core/common.h"

namespace gearjax {

namespace {

// a * b, or throws InvalidArgument if it leaves int64.
int64_t Product(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) throw InvalidArgument("exchange counter overflow");
  return out;
}

int64_t Sum(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_add_overflow(a, b, &out)) throw InvalidArgument("exchange counter overflow");
  return out;
}

}  // namespace

void ExchangeCounters::Record(int64_t block, int64_t rows_asked, int64_t rows_sent,
                              int64_t row_bytes) {
  if (block < 0 || rows_asked < 0 || rows_sent < 0 || row_bytes < 0) {
    throw InvalidArgument("exchange counts must be >= 0");
  }
  if (rows_sent < rows_asked) throw InvalidArgument("an exchange sent fewer rows than asked");
  const int64_t sent_bytes = Product(rows_sent, row_bytes);
  const int64_t asked_bytes = Product(rows_asked, row_bytes);
  MutexLock lock(mu_);
  // Every sum is checked before any is stored: a throw records nothing.
  const int64_t serves = Sum(totals_.serves, 1);
  const int64_t asked = Sum(totals_.rows_asked, rows_asked);
  const int64_t sent = Sum(totals_.rows_sent, rows_sent);
  const int64_t bytes_asked = Sum(totals_.bytes_asked, asked_bytes);
  const int64_t bytes_sent = Sum(totals_.bytes_sent, sent_bytes);
  totals_.serves = serves;
  totals_.rows_asked = asked;
  totals_.rows_sent = sent;
  totals_.bytes_asked = bytes_asked;
  totals_.bytes_sent = bytes_sent;
  totals_.serves_by_block[block] += 1;
}

ExchangeTotals ExchangeCounters::Totals() const {
  MutexLock lock(mu_);
  return totals_;
}

}  // namespace gearjax
