// Software prefetch that the compiler keeps. GCC drops __builtin_prefetch
// calls in a loop that does nothing else (it counts them as free of side
// effects and deletes the loop), which silently removed the gather's
// prefetching once; an asm statement marked volatile cannot be deleted.
#pragma once

namespace gearjax {

// Asks for the cache line at p to be brought into every cache level (also
// before a write: prefetchw is missing on some x86 processors).
inline void PrefetchForRead(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__aarch64__)
  asm volatile("prfm pldl1keep, %a0" : : "p"(p));
#else
  __builtin_prefetch(p, 0, 3);
#endif
}

}  // namespace gearjax
