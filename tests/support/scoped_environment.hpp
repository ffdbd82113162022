#pragma once
// Sets an environment variable for a scope (a test's tuning override), and puts back what it was. Set it
// before any rank thread starts: the environment is the process's.
#include <cstdlib>
#include <string>

namespace switchyard::testing {

class ScopedEnvironment {
 public:
  // Unset for the scope; set() gives it a value.
  explicit ScopedEnvironment(const char* name) : name_(name) {
    const char* saved = std::getenv(name);
    had_ = saved != nullptr;
    if (had_) saved_ = saved;
    unsetenv(name);
  }
  ~ScopedEnvironment() {
    if (had_) {
      setenv(name_, saved_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;
  void set(const char* value) const { setenv(name_, value, 1); }

 private:
  const char* name_;
  bool had_ = false;
  std::string saved_;
};

}  // namespace switchyard::testing
