#pragma once
// The CUDA backend's tuning overrides from the environment: numeric ones
// (SWITCHYARD_SYMMETRIC_STORE_READ_LAG, SWITCHYARD_SYMMETRIC_PIECE_BYTES) and named choices
// (SWITCHYARD_SYMMETRIC_PULL, SWITCHYARD_SYMMETRIC_ROUTING, SWITCHYARD_NORMAL_COUNTS): one parser of each
// kind, so that every such variable is read and refused alike.
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

namespace switchyard::cuda {

// Unset or empty gives 0 (each caller's "the default"); anything but a whole number written in decimal digits
// alone (no sign, space or suffix) in [low, high], and with `multiple` > 1 a multiple of it, is refused
// naming the variable, the range and `what` it sets.
uint32_t tuning_from_environment(const char* name, long low, long high, long multiple, const char* what);

// Which of `spellings` (exact, case-sensitive) the variable holds: its index, or -1 when it is unset or
// empty. Anything else is refused naming the variable, the spellings ("a, b or c") and `what` it sets.
int choice_index_from_environment(const char* name, const std::vector<const char*>& spellings,
                                  const char* what);

// The choice the variable names among `choices` (spelling, value), or `unset` when it is unset or empty;
// refused as choice_index_from_environment says.
template <typename Choice>
Choice choice_from_environment(const char* name, Choice unset,
                               std::initializer_list<std::pair<const char*, Choice>> choices,
                               const char* what) {
  std::vector<const char*> spellings;
  for (const auto& choice : choices) spellings.push_back(choice.first);
  const int index = choice_index_from_environment(name, spellings, what);
  return index < 0 ? unset : (choices.begin() + index)->second;
}

}  // namespace switchyard::cuda
