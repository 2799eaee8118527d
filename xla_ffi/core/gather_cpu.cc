// CPU gather (see gather_cpu.h).
#include "core/gather_cpu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/prefetch.h"
#include "core/window.h"

namespace gearjax {
namespace {

// Fills `steps` steps at dst with the column's pad step; `one_byte` says the
// pad step is one byte repeated (zeros, say), so memset does.
void FillPad(uint8_t* dst, int64_t steps, const ColumnSpec& column, bool one_byte) {
  if (steps <= 0) return;
  const std::vector<uint8_t>& pad = column.pad_step;
  const int64_t step_bytes = column.step_bytes;
  if (one_byte) {
    std::memset(dst, pad[0], steps * step_bytes);
    return;
  }
  // Copy one step, then double the filled prefix until done.
  std::memcpy(dst, pad.data(), step_bytes);
  int64_t filled = 1;
  while (filled < steps) {
    const int64_t n = std::min(filled, steps - filled);
    std::memcpy(dst + filled * step_bytes, dst, n * step_bytes);
    filled += n;
  }
}

// Rows whose first bytes are prefetched ahead of the copy, and how many bytes
// of each of their windows: enough for the row-start cache misses of small
// windows to overlap instead of running one after another; for large windows
// the hardware prefetcher takes over after the first lines. Rows of a few
// cache lines take so little copying that a miss needs more of them ahead.
constexpr int64_t kPrefetchRows = 4;
constexpr int64_t kPrefetchRowsSmall = 24;
constexpr int64_t kSmallRowBytes = 256;
constexpr int64_t kPrefetchBytes = 4096;
constexpr int64_t kCacheLine = 64;

// memcpy for a row's bytes; copies of at most 16 bytes (one-step windows of
// a scalar column, say) without a library call.
inline void CopyBytes(uint8_t* dst, const uint8_t* src, int64_t n) {
  if (n > 16) {
    std::memcpy(dst, src, static_cast<size_t>(n));
  } else if (n >= 8) {  // two 8-byte moves, overlapping when n < 16
    uint64_t head, tail;
    std::memcpy(&head, src, 8);
    std::memcpy(&tail, src + n - 8, 8);
    std::memcpy(dst, &head, 8);
    std::memcpy(dst + n - 8, &tail, 8);
  } else if (n >= 4) {
    uint32_t head, tail;
    std::memcpy(&head, src, 4);
    std::memcpy(&tail, src + n - 4, 4);
    std::memcpy(dst, &head, 4);
    std::memcpy(dst + n - 4, &tail, 4);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

// What the row loop needs of one column, read from the table once per call
// rather than once per row.
struct ColumnRun {
  const uint8_t* slot0;  // step 0 of slot 0
  size_t slot_bytes;     // one slot: max_length steps
  int64_t step_bytes;
  uint8_t* out;          // row 0 of the output
  const ColumnSpec* spec;
  bool pad_one_byte;
};

void PrefetchWindow(const ColumnRun* runs, int num_columns, const Draw& d) {
  for (int c = 0; c < num_columns; ++c) {
    const ColumnRun& run = runs[c];
    const uint8_t* src = run.slot0 + static_cast<size_t>(d.slot) * run.slot_bytes +
                         static_cast<size_t>(d.start * run.step_bytes);
    const int64_t bytes = std::min(d.valid * run.step_bytes, kPrefetchBytes);
    // A pointer stepped by itself: with `src + offset` GCC 12 may compute the
    // address in an extra instruction of this loop, which runs once a cache
    // line of every row (count_against: 5,400 instructions of a 256-row
    // sample).
    const uint8_t* const end = src + bytes;
    for (const uint8_t* line = src; line < end; line += kCacheLine) PrefetchForRead(line);
  }
}

// Rows [row_begin, row_end)'s mask and timesteps: row b's real steps are
// its [offset, offset + valid), step start + (w - offset) of the trajectory;
// padding is masked out with timestep 0 (gearjax/_window_steps.py derives the
// same in XLA). Rows are short (tens of steps), so a compiler-vectorised loop
// spends most of its time entering and leaving the vector loop: four steps at
// a time in SSE2 (x86-64's baseline), the rest one by one. w - offset < valid
// in unsigned arithmetic tests both ends at once.
void WriteWindowSteps(const Draw* draws, int64_t row_begin, int64_t row_end, int64_t width,
                      bool pad_left, const SampleOutputs& out) {
  const uint32_t steps = static_cast<uint32_t>(width);
  for (int64_t b = row_begin; b < row_end; ++b) {
    const Draw& d = draws[b];
    const int64_t offset = WindowOffset(d.valid, width, pad_left);
    bool* mask = out.mask + b * width;
    int32_t* timestep = out.timestep + b * width;
    const uint32_t first = static_cast<uint32_t>(offset);
    const uint32_t valid = static_cast<uint32_t>(d.valid);
    const int32_t shift = static_cast<int32_t>(d.start - offset);  // timestep - w of real steps
    uint32_t w = 0;
#if defined(__SSE2__)
    const __m128i lane = _mm_setr_epi32(0, 1, 2, 3);
    const __m128i sign = _mm_set1_epi32(INT32_MIN);  // unsigned order through signed compares
    const __m128i first4 = _mm_set1_epi32(static_cast<int32_t>(first));
    const __m128i valid4 = _mm_set1_epi32(static_cast<int32_t>(valid ^ 0x80000000u));
    const __m128i shift4 = _mm_set1_epi32(shift);
    const __m128i one = _mm_set1_epi8(1);
    for (; w + 4 <= steps; w += 4) {
      const __m128i step = _mm_add_epi32(_mm_set1_epi32(static_cast<int32_t>(w)), lane);
      const __m128i real =
          _mm_cmplt_epi32(_mm_xor_si128(_mm_sub_epi32(step, first4), sign), valid4);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(timestep + w),
                       _mm_and_si128(real, _mm_add_epi32(step, shift4)));
      // Lanes of all ones or zeros, narrowed to bytes of 1 or 0.
      const __m128i bytes = _mm_and_si128(_mm_packs_epi16(_mm_packs_epi32(real, real), real), one);
      const int32_t four = _mm_cvtsi128_si32(bytes);
      std::memcpy(mask + w, &four, 4);
    }
#endif
    for (; w < steps; ++w) {
      const bool real = w - first < valid;
      mask[w] = real;
      timestep[w] = real ? static_cast<int32_t>(w) + shift : 0;
    }
  }
}

}  // namespace

void GatherRows(const Table& table, const Draw* draws, int64_t row_begin, int64_t row_end,
                int64_t width, bool pad_left, const SampleOutputs& out) {
  const int num_columns = table.num_columns();
  // Per thread, reused: no allocation per call once it has grown.
  thread_local std::vector<ColumnRun> scratch;
  scratch.resize(static_cast<size_t>(num_columns));
  ColumnRun* runs = scratch.data();
  int64_t row_bytes = 0;
  for (int c = 0; c < num_columns; ++c) {
    const int64_t step_bytes = table.step_bytes(c);
    runs[c] = {table.StepPointer(c, 0, 0),
               static_cast<size_t>(table.spec().max_length) * static_cast<size_t>(step_bytes),
               step_bytes,
               out.columns[c],
               &table.spec().columns[c],
               table.pad_is_one_byte(c)};
    row_bytes += width * step_bytes;
  }
  const int64_t ahead = row_bytes <= kSmallRowBytes ? kPrefetchRowsSmall : kPrefetchRows;
  for (int64_t b = row_begin; b < std::min(row_end, row_begin + ahead); ++b) {
    PrefetchWindow(runs, num_columns, draws[b]);
  }
  for (int64_t b = row_begin; b < row_end; ++b) {
    if (b + ahead < row_end) PrefetchWindow(runs, num_columns, draws[b + ahead]);
    const Draw& d = draws[b];
    out.keys[b] = d.key;
    out.start[b] = static_cast<int32_t>(d.start);
    out.probability[b] = d.probability;
    out.table_size[b] = d.table_size;
    out.valid[b] = static_cast<int32_t>(d.valid);
    const int64_t offset = WindowOffset(d.valid, width, pad_left);
    const int64_t pad = width - d.valid;
    for (int c = 0; c < num_columns; ++c) {
      const ColumnRun& run = runs[c];
      const int64_t step_bytes = run.step_bytes;
      uint8_t* row = run.out + b * width * step_bytes;
      CopyBytes(row + offset * step_bytes,
                run.slot0 + static_cast<size_t>(d.slot) * run.slot_bytes +
                    static_cast<size_t>(d.start * step_bytes),
                d.valid * step_bytes);
      if (pad > 0) {
        FillPad(pad_left ? row : row + d.valid * step_bytes, pad, *run.spec, run.pad_one_byte);
      }
    }
  }
  if (out.mask != nullptr) WriteWindowSteps(draws, row_begin, row_end, width, pad_left, out);
}

}  // namespace gearjax
