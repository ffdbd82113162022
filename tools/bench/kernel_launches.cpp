#include "kernel_launches.hpp"

#if defined(SWITCHYARD_WITH_CUDA)
#include "cuda/backend/dependent_launch.hpp"
#endif

namespace switchyard::bench {

std::optional<bool> dependent_launches_for(Backend backend) {
#if defined(SWITCHYARD_WITH_CUDA)
  if (backend == Backend::cuda) return cuda::dependent_launches();
#else
  (void)backend;
#endif
  return std::nullopt;
}

std::string dependent_launch_line(Backend backend) {
  const std::optional<bool> dependent = dependent_launches_for(backend);
  if (!dependent) return "";
  return *dependent ? "kernel launches: programmatic dependents of the stream's previous kernel "
                      "(SWITCHYARD_DEPENDENT_LAUNCH=on)"
                    : "kernel launches: ordinary (SWITCHYARD_DEPENDENT_LAUNCH=off or unset)";
}

}  // namespace switchyard::bench
