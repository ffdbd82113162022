#pragma once
// The error hierarchy. Every message names the argument (or the rank and role), what was expected
// and what was found.
#include <stdexcept>
#include <string>

namespace switchyard {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed something the library cannot accept. Nothing was written.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A feature exists in the API but not for this backend, engine or topology.
class Unsupported : public Error {
 public:
  using Error::Error;
};

// A bounded wait expired: a peer did not arrive, or a ring did not drain.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// An expert-major dispatch (symmetric engine) delivered more rows to one local expert than the
// call's expert_capacity: rows at and past the capacity were not written, the counts are the true
// ones. The call completed on every rank (nothing hangs) and every rank raises it; the Buffer stays
// usable. See switchyard/expert_major.hpp, expert_capacity.
class CapacityError : public Error {
 public:
  using Error::Error;
};

// The platform failed underneath us (CUDA, shared memory, mmap).
class SystemError : public Error {
 public:
  using Error::Error;
};

}  // namespace switchyard
