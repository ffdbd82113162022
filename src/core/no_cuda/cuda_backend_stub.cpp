// Builds without the CUDA backend: every CUDA entry point says so.
#include "core/backend.hpp"
#include "core/device_memory.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::detail {

namespace {
[[noreturn]] void no_cuda() {
  throw Unsupported(
      "backend: expected a build with the CUDA backend (configure with SWITCHYARD_CUDA=ON), "
      "got a CPU-only build");
}
}  // namespace

std::shared_ptr<void> allocate_cuda_bytes(size_t, int, void*) {
  no_cuda();
}
void copy_cuda_rows(void*, size_t, const void*, size_t, size_t, size_t, int, void*) {
  no_cuda();
}
bool cuda_backend_available() {
  return false;
}
std::unique_ptr<BackendImpl> make_cuda_backend(const BackendCreateInfo&) {
  no_cuda();
}

}  // namespace switchyard::detail
