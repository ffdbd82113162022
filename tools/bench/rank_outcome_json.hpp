#pragma once
// A forked rank's outcome, or why it failed, as the bytes it hands its parent (JSON).
#include <exception>
#include <string>

#include "rank_run.hpp"

namespace switchyard::bench {

std::string encode_outcome(const RankOutcome& outcome);
// What the rank threw, keeping the kind that decides how the runner reports it: InvalidArgument (the
// library refused the configuration), Unsupported, UsageError, or any other failure.
std::string encode_failure(std::exception_ptr failure);
// The outcome; rethrows, as its kind, a failure the rank encoded.
RankOutcome decode_outcome(const std::string& bytes);

}  // namespace switchyard::bench
