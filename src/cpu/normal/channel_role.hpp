#pragma once
// A role of a channel (sender, coordinator, forwarder, receiver) as a non-blocking state machine,
// and the loop that drives a channel's roles with the bounded-wait policy.
#include <atomic>
#include <string>
#include <utility>
#include <vector>

namespace switchyard::cpu {

class ChannelRole {
 public:
  virtual ~ChannelRole() = default;
  // Does whatever is possible now; true when anything moved.
  virtual bool step() = 0;
  virtual bool done() const = 0;
  // " waiting for ..." (with the peer), for a timeout message.
  virtual std::string waiting_for() const = 0;
  virtual const char* name() const = 0;
};

// Gives a role with step()/done()/waiting_for() (the intranode ones) a name and this interface.
template <typename Role>
class NamedRole final : public ChannelRole {
 public:
  template <typename... Args>
  NamedRole(const char* name, Args&&... args) : role_(std::forward<Args>(args)...), name_(name) {}
  bool step() override { return role_.step(); }
  bool done() const override { return role_.done(); }
  std::string waiting_for() const override { return role_.waiting_for(); }
  const char* name() const override { return name_; }

 private:
  Role role_;
  const char* name_;
};

// Steps `roles` (in pipeline order) until all are done. Raises TimeoutError naming every unfinished
// role, the latest pipeline stage first, when none progresses for `timeout_seconds`.
void drive_roles(const std::vector<ChannelRole*>& roles, int rank, const char* operation, int channel,
                 double timeout_seconds, const std::atomic<bool>& abort);

}  // namespace switchyard::cpu
