#include "fuzz_outcome.hpp"

#include <cstdio>
#include <cstdlib>

namespace switchyard::fuzz {

void finding(const std::string& what) {
  std::fprintf(stderr, "\n==switchyard fuzz finding== %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace switchyard::fuzz
