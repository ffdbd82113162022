#pragma once
// Memory the soak measures before and after its round trips: this process's resident host memory,
// and (cuda) the device's free memory.
#include <cstddef>

namespace switchyard::soak {

// Makes the allocator return every large block to the system when it is freed, so that RSS measures
// live memory. Call once, before the first allocation that matters.
void return_large_blocks_on_free();

// VmRSS of /proc/self/status, in bytes, after handing the allocator's free memory back to the
// system (malloc_trim): what remains is live memory, so a leak shows and a free list does not.
size_t host_rss_bytes();

constexpr double kMiB = 1024.0 * 1024.0;

// NOTES: ASan keeps freed memory in a quarantine (256 MiB by default) and TSan keeps shadow memory
// for what was freed, so their RSS grows by design; under them the growth is printed but not judged
// (ASan's leak check at exit covers leaks there).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizedAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizedAllocator = true;
#else
constexpr bool kSanitizedAllocator = false;
#endif
#else
constexpr bool kSanitizedAllocator = false;
#endif

}  // namespace switchyard::soak
