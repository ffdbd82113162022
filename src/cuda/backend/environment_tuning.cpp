#include "cuda/backend/environment_tuning.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::cuda {

uint32_t tuning_from_environment(const char* name, long low, long high, long multiple, const char* what) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return 0;
  // strtol alone would take a leading space or sign; digits only, and a value too large to hold is refused.
  const bool digits = std::strspn(text, "0123456789") == std::strlen(text);
  errno = 0;
  const long value = digits ? std::strtol(text, nullptr, 10) : 0;
  if (!digits || errno == ERANGE || value < low || value > high || (multiple > 1 && value % multiple != 0)) {
    throw InvalidArgument(std::string(name) + ": expected an integer " + std::to_string(low) + ".." +
                          std::to_string(high) +
                          (multiple > 1 ? " and a multiple of " + std::to_string(multiple) : std::string()) +
                          " (" + what + "), got '" + text + "'");
  }
  return static_cast<uint32_t>(value);
}

int choice_index_from_environment(const char* name, const std::vector<const char*>& spellings,
                                  const char* what) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return -1;
  for (size_t index = 0; index < spellings.size(); ++index) {
    if (std::strcmp(text, spellings[index]) == 0) return static_cast<int>(index);
  }
  std::string listed;
  for (size_t index = 0; index < spellings.size(); ++index) {
    listed += index == 0 ? "" : index + 1 == spellings.size() ? " or " : ", ";
    listed += spellings[index];
  }
  throw InvalidArgument(std::string(name) + ": expected " + listed + " (" + what + "), got '" + text + "'");
}

}  // namespace switchyard::cuda
