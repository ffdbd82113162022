#include "core/symmetric_path.hpp"

#include "switchyard/errors.hpp"

namespace switchyard::detail {

SymmetricCombine resolve_symmetric_combine(SymmetricCombine requested, bool pull_possible, bool heap_output,
                                           const std::string& needs, const std::string& found) {
  switch (requested) {
    case SymmetricCombine::push:
      return SymmetricCombine::push;
    case SymmetricCombine::pull:
      if (!pull_possible && !heap_output) {
        throw Unsupported(
            "config.symmetric_combine: pull needs " + needs +
            ", or heap-resident expert outputs (sizing.symmetric_heap_output_rows_per_expert > 0); "
            "got " +
            found + " (use push, or auto to pick pull only where it works)");
      }
      return SymmetricCombine::pull;
    case SymmetricCombine::automatic:
      break;
  }
  return pull_possible ? SymmetricCombine::pull : SymmetricCombine::push;
}

SymmetricDispatch resolve_symmetric_dispatch(SymmetricDispatch requested, bool zero_copy_possible,
                                             const std::string& needs, const std::string& found) {
  switch (requested) {
    case SymmetricDispatch::publish:
      return SymmetricDispatch::publish;
    case SymmetricDispatch::zero_copy:
      if (!zero_copy_possible) {
        throw Unsupported(
            "config.symmetric_dispatch: zero_copy needs " + needs + "; got " + found +
            " (use publish, or auto to pick zero_copy only where it works; with auto, a dispatch "
            "whose x is Buffer::symmetric_input() reads it in place anywhere)");
      }
      return SymmetricDispatch::zero_copy;
    case SymmetricDispatch::automatic:
    case SymmetricDispatch::push:  // refused by Config::validate before any connect; as auto otherwise
      break;
  }
  return zero_copy_possible ? SymmetricDispatch::zero_copy : SymmetricDispatch::publish;
}

}  // namespace switchyard::detail
