#include "cuda/backend/signal_scope.hpp"

#include <cstdlib>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::cuda {

bool gpu_scope_signals_allowed_by_environment() {
  const char* text = std::getenv("SWITCHYARD_SIGNAL_SCOPE");
  if (text == nullptr || *text == '\0') return true;
  const std::string value = text;
  if (value == "gpu") return true;
  if (value == "sys") return false;
  throw InvalidArgument(
      "SWITCHYARD_SIGNAL_SCOPE: expected gpu or sys (the scope of signals between ranks on one GPU), got '" +
      value + "'");
}

}  // namespace switchyard::cuda
