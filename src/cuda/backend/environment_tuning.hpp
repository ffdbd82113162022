#pragma once
// The CUDA backend's numeric tuning overrides from the environment (SWITCHYARD_SYMMETRIC_STORE_READ_LAG,
// SWITCHYARD_SYMMETRIC_PIECE_BYTES): one parser, so that every such variable is read and refused alike.
#include <cstdint>

namespace switchyard::cuda {

// Unset or empty gives 0 (each caller's "the default"); anything but a whole number written in decimal digits
// alone (no sign, space or suffix) in [low, high], and with `multiple` > 1 a multiple of it, is refused
// naming the variable, the range and `what` it sets.
uint32_t tuning_from_environment(const char* name, long low, long high, long multiple, const char* what);

}  // namespace switchyard::cuda
