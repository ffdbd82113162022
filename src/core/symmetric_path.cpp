#include "core/symmetric_path.hpp"

#include "switchyard/errors.hpp"

namespace switchyard::detail {

SymmetricCombine resolve_symmetric_combine(SymmetricCombine requested, bool pull_possible, const std::string& needs,
                                           const std::string& found) {
  switch (requested) {
    case SymmetricCombine::push:
      return SymmetricCombine::push;
    case SymmetricCombine::pull:
      if (!pull_possible) {
        throw Unsupported("config.symmetric_combine: pull needs " + needs + "; got " + found +
                          " (use push, or auto to pick pull only where it works)");
      }
      return SymmetricCombine::pull;
    case SymmetricCombine::automatic:
      break;
  }
  return pull_possible ? SymmetricCombine::pull : SymmetricCombine::push;
}

}  // namespace switchyard::detail
