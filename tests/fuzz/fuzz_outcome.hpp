#pragma once
// What every fuzzed call must do: return, or throw a switchyard::Error (or a subclass) naming what was
// wrong. Anything else is a finding: the target aborts, so that libFuzzer saves the input.
#include <exception>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::fuzz {

// Prints `what` and aborts (libFuzzer then writes the input to crash-<sha1>).
[[noreturn]] void finding(const std::string& what);

enum class Outcome { returned, invalid_argument, other_error };

// Runs `call`. A TimeoutError is a finding too: the fuzzed buffers have one rank, which never waits
// on a peer, so a timeout means a wait that bad input left unbounded or unreleased.
template <typename Call>
Outcome checked_call(const char* what, Call&& call) {
  try {
    call();
    return Outcome::returned;
  } catch (const InvalidArgument&) {
    return Outcome::invalid_argument;
  } catch (const TimeoutError& error) {
    finding(std::string(what) + ": a 1-rank call timed out: " + error.what());
  } catch (const Error&) {
    return Outcome::other_error;
  } catch (const std::exception& error) {
    finding(std::string(what) + ": threw a std::exception that is not a switchyard::Error: " + error.what());
  } catch (...) {
    finding(std::string(what) + ": threw something that is not a std::exception");
  }
}

}  // namespace switchyard::fuzz
