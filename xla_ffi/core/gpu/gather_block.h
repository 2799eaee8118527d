// The GPU gather's work, written once for nvcc and the host compiler: one
// "block" copies one byte range of one sampled window of one column (real
// steps from the table, padding elsewhere) with its threads striding over
// 16-byte words, so neighbouring lanes touch neighbouring words. The CUDA
// kernel (cuda/gather.cu) runs GatherBlock with CUDA's block and thread
// indices; EmulateGather (gather_plan.cc) runs the very same code on the
// CPU block by block, which is how the kernel's logic is tested on machines
// without a GPU.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/common.h"
#include "core/draw.h"
#include "core/gpu/completion_block.h"
#include "core/window.h"

namespace gearjax {

inline constexpr int kMaxGpuColumns = 32;
inline constexpr int64_t kBytesPerGatherBlock = 64 * 1024;

struct GatherColumn {
  const uint8_t* base;  // column region (device-accessible address)
  const uint8_t* pad;   // one pad step (device-accessible address)
  uint8_t* out;         // [batch, width, step_bytes]
  int64_t step_bytes;
};

struct GatherParams {
  const Draw* draws;  // [batch], readable where the gather runs
  int64_t batch, width, max_length;
  int num_columns;
  bool pad_left;
  int64_t* keys;
  int32_t* start;
  float* probability;
  int64_t* table_size;
  int32_t* valid;
  // Where the gather's blocks report the sample done (gpu_completions.h);
  // done == nullptr: its ticket is returned some other way.
  CompletionView completion;
  GatherColumn columns[kMaxGpuColumns];
};

struct alignas(16) Word16 {
  uint32_t w[4];
};

// Copies n bytes with threads [thread, thread + threads, ...] of a block:
// 16-byte words when source and destination agree modulo 16 (after a short
// byte head), 4-byte words when they agree modulo 4, single bytes otherwise.
GEARJAX_HD void BlockCopy(uint8_t* dst, const uint8_t* src, int64_t n, int64_t thread,
                          int64_t threads) {
  const auto s = reinterpret_cast<uintptr_t>(src);
  const auto d = reinterpret_cast<uintptr_t>(dst);
  int64_t width = ((s ^ d) & 15) == 0 ? 16 : ((s ^ d) & 3) == 0 ? 4 : 1;
  int64_t head = width == 1 ? 0 : static_cast<int64_t>((width - (s & (width - 1))) & (width - 1));
  if (head > n) head = n;
  for (int64_t i = thread; i < head; i += threads) dst[i] = src[i];
  const int64_t words = width == 1 ? 0 : (n - head) / width;
  if (width == 16) {
    const auto* from = reinterpret_cast<const Word16*>(src + head);
    auto* to = reinterpret_cast<Word16*>(dst + head);
    for (int64_t i = thread; i < words; i += threads) to[i] = from[i];
  } else if (width == 4) {
    const auto* from = reinterpret_cast<const uint32_t*>(src + head);
    auto* to = reinterpret_cast<uint32_t*>(dst + head);
    for (int64_t i = thread; i < words; i += threads) to[i] = from[i];
  }
  for (int64_t i = head + words * width + thread; i < n; i += threads) dst[i] = src[i];
}

// Bytes [lo, hi) of a row (whose byte 0 starts a step) that hold padding,
// filled from the pad step: byte i gets pad[i % step_bytes]. 4-byte words
// when the step, the row and the range allow it, single bytes otherwise; in
// either case each thread computes its first position in the pad step once
// and then advances it by its stride, with no division in the loop.
GEARJAX_HD void BlockPad(uint8_t* row, int64_t lo, int64_t hi, const uint8_t* pad,
                         int64_t step_bytes, int64_t thread, int64_t threads) {
  if (lo >= hi) return;
  const bool words = (step_bytes & 3) == 0 && (reinterpret_cast<uintptr_t>(row) & 3) == 0 &&
                     (lo & 3) == 0 && (hi & 3) == 0;
  const int64_t unit = words ? 4 : 1;
  const int64_t period = step_bytes / unit;  // units per pad step
  const int64_t end = hi / unit;
  int64_t i = lo / unit + thread;
  if (i >= end) return;
  int64_t k = i % period;                 // where unit i falls in the pad step
  const int64_t advance = threads % period;
  for (; i < end; i += threads) {
    if (words) {
      uint32_t value;
      memcpy(&value, pad + 4 * k, 4);     // the pad step may be unaligned
      reinterpret_cast<uint32_t*>(row)[i] = value;
    } else {
      row[i] = pad[k];
    }
    k += advance;
    if (k >= period) k -= period;
  }
}

// The work of block (row b, column c, part z) for row b's draw d: row bytes
// [z * kBytesPerGatherBlock, (z + 1) * kBytesPerGatherBlock) of column c of
// row b. Part 0 of column 0 also writes the row's keys, start, probability,
// table size and valid steps.
GEARJAX_HD void GatherBlockOf(const GatherParams& p, const Draw& d, int64_t b, int c, int64_t z,
                              int64_t thread, int64_t threads) {
  const int64_t offset = WindowOffset(d.valid, p.width, p.pad_left);
  if (c == 0 && z == 0 && thread == 0) {
    p.keys[b] = d.key;
    p.start[b] = static_cast<int32_t>(d.start);
    p.probability[b] = d.probability;
    p.table_size[b] = d.table_size;
    p.valid[b] = static_cast<int32_t>(d.valid);
  }
  const GatherColumn& col = p.columns[c];
  const int64_t row_bytes = p.width * col.step_bytes;
  const int64_t lo = z * kBytesPerGatherBlock;
  if (lo >= row_bytes) return;
  const int64_t hi = lo + kBytesPerGatherBlock < row_bytes ? lo + kBytesPerGatherBlock : row_bytes;
  uint8_t* row = col.out + b * row_bytes;
  const int64_t real_lo = offset * col.step_bytes;
  const int64_t real_hi = real_lo + d.valid * col.step_bytes;
  const uint8_t* src = col.base + (d.slot * p.max_length + d.start) * col.step_bytes;
  // [lo, hi) = padding before the real steps, the real steps, padding after.
  const int64_t copy_lo = lo > real_lo ? lo : real_lo;
  const int64_t copy_hi = hi < real_hi ? hi : real_hi;
  BlockPad(row, lo, copy_lo < hi ? copy_lo : hi, col.pad, col.step_bytes, thread, threads);
  if (copy_hi > copy_lo) {
    BlockCopy(row + copy_lo, src + (copy_lo - real_lo), copy_hi - copy_lo, thread, threads);
  }
  BlockPad(row, copy_hi > lo ? copy_hi : lo, hi, col.pad, col.step_bytes, thread, threads);
}

// The gather kernel's block (b, c, z): row b's draw from p.draws.
GEARJAX_HD void GatherBlock(const GatherParams& p, int64_t b, int c, int64_t z, int64_t thread,
                            int64_t threads) {
  GatherBlockOf(p, p.draws[b], b, c, z, thread, threads);
}

// All of row b, every column and part, for its draw d: what one block of the
// fused sample kernel copies (sample_block.h).
GEARJAX_HD void GatherRow(const GatherParams& p, const Draw& d, int64_t b, int64_t thread,
                          int64_t threads) {
  for (int c = 0; c < p.num_columns; ++c) {
    const int64_t row_bytes = p.width * p.columns[c].step_bytes;
    const int64_t parts = (row_bytes + kBytesPerGatherBlock - 1) / kBytesPerGatherBlock;
    for (int64_t z = 0; z < parts; ++z) GatherBlockOf(p, d, b, c, z, thread, threads);
  }
}

// Blocks along z needed for the widest row of the batch.
inline int64_t GatherParts(const GatherParams& p) {
  int64_t widest = 0;
  for (int c = 0; c < p.num_columns; ++c) {
    const int64_t row = p.width * p.columns[c].step_bytes;
    widest = row > widest ? row : widest;
  }
  return (widest + kBytesPerGatherBlock - 1) / kBytesPerGatherBlock;
}

}  // namespace gearjax
