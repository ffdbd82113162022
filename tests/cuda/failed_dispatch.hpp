#pragma once
// A dispatch that fails on one rank after the count exchange, as every rank sees it (the stand-in tests of
// normal_engine_cuda_test.cpp and internode_cuda_test.cpp): the failing rank must raise InvalidArgument, the
// others must complete, and a clean round trip after it must be right everywhere.
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "switchyard/errors.hpp"

namespace switchyard::testing {

// In rank `rank`'s thread: `call` must raise InvalidArgument on `failing_rank`, whose message goes into
// `message`, and complete on every other rank; anything else is added to `failures`.
inline void expect_refused_on_one_rank(int rank, int failing_rank, const std::function<void()>& call,
                                       std::string* message, std::vector<std::string>* failures) {
  try {
    call();
    if (rank == failing_rank) failures->push_back("expected an InvalidArgument");
  } catch (const InvalidArgument& error) {
    *message = error.what();
    if (rank != failing_rank) failures->push_back(std::string("refused: ") + error.what());
  } catch (const std::exception& error) {
    failures->push_back(std::string("threw: ") + error.what());
  }
}

// Then `round_trip` (a clean dispatch and combine, compared with the reference into `failures`) must not
// raise.
inline void expect_round_trip_after_the_failure(const std::function<void()>& round_trip,
                                                std::vector<std::string>* failures) {
  try {
    round_trip();
  } catch (const std::exception& error) {
    failures->push_back(std::string("the round trip after the failure threw: ") + error.what());
  }
}

}  // namespace switchyard::testing
