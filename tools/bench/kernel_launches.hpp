#pragma once
// How the engines' kernels are launched in this run, for the report: as programmatic dependents of the
// stream's previous kernel (SWITCHYARD_DEPENDENT_LAUNCH, src/cuda/backend/dependent_launch.hpp) or as
// ordinary launches. The library reads the variable; the bench asks it, so the report says what ran.
#include <optional>
#include <string>

#include "switchyard/buffer.hpp"

namespace switchyard::bench {

// true: dependent launches; false: ordinary ones; nullopt: the CPU backend, or a build without CUDA.
// A bad value of the variable is refused here, naming it, as the library would refuse it.
std::optional<bool> dependent_launches_for(Backend backend);

// The report's line for it ("" where dependent_launches_for gives nullopt).
std::string dependent_launch_line(Backend backend);

}  // namespace switchyard::bench
