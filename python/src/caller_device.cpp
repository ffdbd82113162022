#include "caller_device.hpp"

#if SWITCHYARD_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace switchyard::python {

// NOTES: failures here are not switchyard's to report; the runtime's last error is cleared so that
// the library's next launch check does not pick it up.
void CallerDevice::save() {
  if (!cuda_) return;
#if SWITCHYARD_WITH_CUDA
  if (cudaGetDevice(&saved_) != cudaSuccess) {
    cudaGetLastError();
    saved_ = -1;
  }
#endif
}

void CallerDevice::restore() {
  if (saved_ < 0) return;
#if SWITCHYARD_WITH_CUDA
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) cudaGetLastError();
  if (current != saved_ && cudaSetDevice(saved_) != cudaSuccess) cudaGetLastError();
#endif
  saved_ = -1;
}

}  // namespace switchyard::python
