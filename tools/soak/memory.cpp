#include "memory.hpp"

#include <malloc.h>

#include <fstream>
#include <string>

namespace switchyard::soak {

// NOTES: glibc raises its mmap threshold (up to 32 MiB) whenever a large block is freed; from then on
// blocks below it (a case's heaps, its tensors) come from the arenas, and after one large case the
// RSS stayed about 150 MiB higher for the rest of a run although nothing leaked (malloc_trim did not
// return it). A fixed threshold turns off that adjustment: every block from 64 KiB up is a mapping of
// its own, unmapped when freed, and a leaked one stays in the RSS.
constexpr int kMmapThresholdBytes = 64 * 1024;

void return_large_blocks_on_free() {
  mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
}

size_t host_rss_bytes() {
  malloc_trim(0);
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmRSS:  1234 kB"
  }
  return 0;
}

}  // namespace switchyard::soak
