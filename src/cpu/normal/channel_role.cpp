#include "cpu/normal/channel_role.hpp"

#include "cpu/backend/bounded_wait.hpp"

namespace switchyard::cpu {

void drive_roles(const std::vector<ChannelRole*>& roles, int rank, const char* operation, int channel,
                 double timeout_seconds, const std::atomic<bool>& abort) {
  WaitBudget budget(timeout_seconds, &abort);
  auto all_done = [&] {
    for (const ChannelRole* role : roles) {
      if (!role->done()) return false;
    }
    return true;
  };
  while (!all_done()) {
    bool progressed = false;
    for (ChannelRole* role : roles) {
      if (!role->done()) progressed = role->step() || progressed;
    }
    if (progressed) {
      budget.progressed();
      continue;
    }
    budget.idle([&] {
      std::string message;
      for (auto it = roles.rbegin(); it != roles.rend(); ++it) {
        if ((*it)->done()) continue;
        message += (message.empty() ? "" : "; ") + role_label(rank, operation, (*it)->name(), channel) +
                   (*it)->waiting_for();
      }
      return message;
    });
  }
}

}  // namespace switchyard::cpu
