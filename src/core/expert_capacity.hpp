#pragma once
// The one message of an expert-major dispatch that delivered more rows to an expert than its
// expert_capacity (switchyard/low_latency.hpp), shared by the CPU engine and the CUDA backend (which
// builds it from the device error block), so that both raise the same text.
#include <cstdint>
#include <string>

namespace switchyard::detail {

// "expert_capacity: expected at most C rows per local expert, got R for expert E (on rank r); ..."
std::string expert_capacity_message(int64_t capacity, int64_t expert, int expert_rank, int64_t rows);

}  // namespace switchyard::detail
