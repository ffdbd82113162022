#pragma once
// The outputs of a `normal` dispatch that its caller made: its out_recv_*, or what its
// DispatchArgs::allocate_outputs returns once the rows are known. The engines (CPU and CUDA, one node and
// across nodes) take these and allocate the rest.
#include <cstdint>

#include "core/engine_plans.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::detail {

// The caller's outputs for `rows` rows (what the engine must not allocate): DispatchArgs::out_recv_*, or
// DispatchArgs::allocate_outputs(rows), called here once and checked (dtype, [rows, cols], `device` and,
// on CUDA, `device_index`), each refused by name ("allocate_outputs: recv_x: ..."); an output the call does
// not make must be undefined. Out_recv_* keep their checks from the plan; their rows are checked here.
DispatchOutputs caller_dispatch_outputs(const DispatchPlan& plan, int64_t rows, Device device,
                                        int device_index);

}  // namespace switchyard::detail
