#pragma once
// What the tests of environment overrides share: each bad value set as the variable must make the read throw
// an InvalidArgument that names the variable and what it expects (`starts`) and quotes the value given.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "support/scoped_environment.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::testing {

template <class Read>
void expect_refused_by_name(const ScopedEnvironment& variable, std::initializer_list<const char*> bad,
                            const std::string& starts, Read read) {
  for (const char* value : bad) {
    variable.set(value);
    try {
      read();
      ADD_FAILURE() << "expected InvalidArgument for '" << value << "'";
    } catch (const InvalidArgument& error) {
      const std::string what = error.what();
      EXPECT_EQ(what.rfind(starts, 0), 0u) << what;
      EXPECT_NE(what.find(std::string("got '") + value + "'"), std::string::npos) << what;
    }
  }
}

}  // namespace switchyard::testing
