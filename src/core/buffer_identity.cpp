#include "core/buffer_identity.hpp"

#include <atomic>

namespace switchyard::detail {

BufferId next_buffer_id() {
  static std::atomic<BufferId> counter{kNoBuffer};
  return ++counter;
}

}  // namespace switchyard::detail
