#include "cuda/backend/shared_wait_backoff.hpp"

#include <cstdlib>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::cuda {

uint32_t shared_wait_backoff_ns_from_environment() {
  const char* text = std::getenv("SWITCHYARD_SHARED_WAIT_BACKOFF_NS");
  if (text == nullptr || *text == '\0') return 0;
  const std::string value = text;
  // Digits only (no sign, space or suffix), and few enough that the value cannot overflow before the check.
  const bool digits = value.size() <= 7 && value.find_first_not_of("0123456789") == std::string::npos;
  if (digits) {
    const unsigned long ns = std::strtoul(value.c_str(), nullptr, 10);
    if (ns <= kMaxSharedWaitBackoffNs) return static_cast<uint32_t>(ns);
  }
  throw InvalidArgument(
      "SWITCHYARD_SHARED_WAIT_BACKOFF_NS: expected a whole number of ns in 0.." +
      std::to_string(kMaxSharedWaitBackoffNs) +
      " (how long a warp waiting on another warp of its block sleeps between polls), got '" + value + "'");
}

}  // namespace switchyard::cuda
