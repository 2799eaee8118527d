// What a shard's owner has served to the `xla` exchange of a sharded table
// (gearjax/sharded/exchange.py): rows asked of it, rows it sent (whole
// blocks where an all-to-all moves the block size, not the rows asked; the
// rows asked where a ragged all-to-all moves exactly those), their bytes, and
// how often each block size ran (block 0: the ragged exchange). Read by
// ShardedTable.stats().
#pragma once

#include <cstdint>
#include <map>

#include "core/thread_annotations.h"

namespace gearjax {

struct ExchangeTotals {
  int64_t serves = 0;       // owner calls (one per global sample)
  int64_t rows_asked = 0;   // rows requesters asked of this shard
  int64_t rows_sent = 0;    // rows in the blocks sent: requesters x block
  int64_t bytes_asked = 0;  // the rows asked, in bytes of columns
  int64_t bytes_sent = 0;   // the blocks sent, in bytes of columns
  std::map<int64_t, int64_t> serves_by_block;  // block size (0: ragged) -> serves
};

class ExchangeCounters {
 public:
  // One owner call at `block` (0: ragged): `rows_asked` rows asked of it,
  // `rows_sent` rows sent, each of `row_bytes`. Throws InvalidArgument on a
  // negative count, fewer rows sent than asked, or a total that would
  // overflow int64 (nothing is then recorded).
  void Record(int64_t block, int64_t rows_asked, int64_t rows_sent, int64_t row_bytes);
  ExchangeTotals Totals() const;

 private:
  mutable Mutex mu_;
  ExchangeTotals totals_ GEARJAX_GUARDED_BY(mu_);
};

}  // namespace gearjax
