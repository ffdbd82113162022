#include "fault_injection.hpp"

#include <cstdlib>
#include <string>

namespace switchyard::bench {

int forgotten_timed_iteration() {
  const char* text = std::getenv("SWITCHYARD_BENCH_FORGET_TIMED_ITERATION");
  if (!text) return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && value > 0 && value < 1'000'000 ? static_cast<int>(value) : 0;
}

}  // namespace switchyard::bench
