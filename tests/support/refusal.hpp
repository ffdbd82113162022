#pragma once
// What the tests of refused input share: run a call that must throw InvalidArgument and return its
// message (a GoogleTest failure, and an empty message, when it throws anything else or nothing).
#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::testing {

template <typename Call>
std::string invalid_argument_message(Call&& call) {
  try {
    call();
  } catch (const InvalidArgument& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "expected InvalidArgument, got another exception: " << error.what();
    return {};
  }
  ADD_FAILURE() << "expected InvalidArgument, got no exception";
  return {};
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace switchyard::testing
