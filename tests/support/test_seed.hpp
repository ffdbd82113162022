#pragma once
// Seeds for randomised tests: fixed by default so CI is reproducible, overridable with the
// environment variable SWITCHYARD_TEST_SEED to draw other inputs. Tests print the seed on failure.
#include <cstdint>
#include <cstdlib>
#include <string>

namespace switchyard::testing {

inline uint64_t base_seed() {
  const char* text = std::getenv("SWITCHYARD_TEST_SEED");
  if (text != nullptr && *text != '\0') return std::strtoull(text, nullptr, 0);
  return 0x5717c4a4d5eedull;
}

// A seed per test case, so that cases draw different inputs from one base seed.
inline uint64_t seed_for(const std::string& name) {
  uint64_t hash = 14695981039346656037ull;
  for (char c : name) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 1099511628211ull;
  }
  return base_seed() ^ hash;
}

}  // namespace switchyard::testing
