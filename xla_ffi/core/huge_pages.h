// Asking Linux for transparent huge pages on a memory range. Used for the
// table arena (scattered window reads otherwise cost a TLB miss per row) and
// for large output buffers (whose first touch otherwise faults every 4 KiB).
// Advisory: the kernel may decline, and elsewhere this does nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gearjax {

inline constexpr size_t kHugePageSize = size_t{2} << 20;

// Advises huge pages on the whole huge pages inside [data, data + bytes).
inline void AdviseHugePages(void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t first = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (first + kHugePageSize - 1) & ~(kHugePageSize - 1);
  const uintptr_t end = (first + bytes) & ~(kHugePageSize - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace gearjax
