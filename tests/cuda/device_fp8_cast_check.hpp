#pragma once
// A device-side check for the GPU tests: does the device toolkit's hardware fp8 cast
// (device/fp8_cast.cuh, which every engine's kernels use) agree with the shared software cast on every
// float? (Implemented in device_fp8_cast_check.cu.)
#include <cstdint>
#include <stdexcept>
#include <string>

namespace switchyard::testing {

struct Fp8CastMismatches {
  uint64_t count;       // floats whose casts differ
  uint32_t first_bits;  // the smallest such float's bits (0xffffffff when none)
};

// Runs on the current device (synchronises it: call it with no other work running).
Fp8CastMismatches count_device_fp8_cast_mismatches();

}  // namespace switchyard::testing
