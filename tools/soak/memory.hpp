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

}  // namespace switchyard::soak
