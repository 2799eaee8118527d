// RowWordsMany (see row_words_cpu.h).
#include "core/row_words_cpu.h"

#include <algorithm>

#include "core/cpu_simd.h"

namespace gearjax {
namespace {

// out[i] = RowWords(seed, first + i) for i in [begin, end).
void RowWordsScalar(const uint32_t seed[2], int64_t first, int64_t begin, int64_t end,
                    Words4* out) {
  for (int64_t i = begin; i < end; ++i) out[i] = RowWords(seed, first + i);
}

#if defined(GEARJAX_HAVE_AVX2_KERNELS)
// Philox's 32 x 32 -> 64-bit products of eight lanes: the high and low words.
GEARJAX_AVX2 inline void MulHiLo(__m256i x, __m256i m, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(x, m);                       // lanes 0, 2, 4, 6
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), m);  // lanes 1, 3, 5, 7
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0b10101010);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0b10101010);
}

// Philox4x32x10 of random.h for rows row0 .. row0 + 7 into out[0 .. 7],
// lane l holding row row0 + l. `row0` is a multiple of 8, so the rows' low
// counter words are row0's plus the lane, without a carry into the high word.
GEARJAX_AVX2 void EightRows(const uint32_t seed[2], int64_t row0, Words4* out) {
  const uint64_t row = static_cast<uint64_t>(row0);
  __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(row))),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i c1 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(row >> 32)));
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();  // attempt 0
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  uint32_t key0 = seed[0], key1 = seed[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    __m256i hi0, lo0, hi1, lo1;
    MulHiLo(c0, m0, &hi0, &lo0);
    MulHiLo(c2, m1, &hi1, &lo1);
    const __m256i next0 =
        _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(key0)));
    const __m256i next2 =
        _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(key1)));
    c0 = next0;
    c1 = lo1;
    c2 = next2;
    c3 = lo0;
  }
  // Lanes to rows: a 4 x 8 transpose of 32-bit words into eight Words4.
  const __m256i a = _mm256_unpacklo_epi32(c0, c1), b = _mm256_unpacklo_epi32(c2, c3);
  const __m256i c = _mm256_unpackhi_epi32(c0, c1), d = _mm256_unpackhi_epi32(c2, c3);
  const __m256i rows04 = _mm256_unpacklo_epi64(a, b), rows15 = _mm256_unpackhi_epi64(a, b);
  const __m256i rows26 = _mm256_unpacklo_epi64(c, d), rows37 = _mm256_unpackhi_epi64(c, d);
  __m256i* dst = reinterpret_cast<__m256i*>(out);
  _mm256_storeu_si256(dst + 0, _mm256_permute2x128_si256(rows04, rows15, 0x20));
  _mm256_storeu_si256(dst + 1, _mm256_permute2x128_si256(rows26, rows37, 0x20));
  _mm256_storeu_si256(dst + 2, _mm256_permute2x128_si256(rows04, rows15, 0x31));
  _mm256_storeu_si256(dst + 3, _mm256_permute2x128_si256(rows26, rows37, 0x31));
}

GEARJAX_AVX2 __attribute__((flatten)) void RowWordsAvx2(const uint32_t seed[2], int64_t first,
                                                         int64_t n, Words4* out) {
  // Rows one at a time up to a multiple of 8, then eight at a time.
  const int64_t head = std::min(n, (8 - first % 8) % 8);
  RowWordsScalar(seed, first, 0, head, out);
  const int64_t whole = head + (n - head) / 8 * 8;
  for (int64_t i = head; i < whole; i += 8) EightRows(seed, first + i, out + i);
  RowWordsScalar(seed, first, whole, n, out);
}
#endif

}  // namespace

void RowWordsMany(const uint32_t seed[2], int64_t first, int64_t n, Words4* out) {
  static_assert(sizeof(Words4) == 16, "four words, no padding: eight rows fill four stores");
#if defined(GEARJAX_HAVE_AVX2_KERNELS)
  if (ActiveSimdLevel() == SimdLevel::kAvx2) return RowWordsAvx2(seed, first, n, out);
#endif
  RowWordsScalar(seed, first, 0, n, out);
}

}  // namespace gearjax
