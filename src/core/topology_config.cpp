#include <sstream>

#include "switchyard/config.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/topology.hpp"

namespace switchyard {

void Topology::validate() const {
  if (num_ranks < 1) {
    throw InvalidArgument("topology.num_ranks: expected >= 1, got " + std::to_string(num_ranks));
  }
  if (ranks_per_node < 1 || ranks_per_node > num_ranks || num_ranks % ranks_per_node != 0) {
    throw InvalidArgument("topology.ranks_per_node: expected a divisor of num_ranks (" +
                          std::to_string(num_ranks) + ") in [1, num_ranks], got " +
                          std::to_string(ranks_per_node));
  }
}

std::string Topology::to_string() const {
  std::ostringstream out;
  out << num_ranks << " ranks (" << num_nodes() << " node" << (num_nodes() == 1 ? "" : "s") << " x "
      << ranks_per_node << ")";
  return out.str();
}

const char* symmetric_combine_name(SymmetricCombine path) {
  switch (path) {
    case SymmetricCombine::automatic:
      return "auto";
    case SymmetricCombine::push:
      return "push";
    case SymmetricCombine::pull:
      return "pull";
  }
  return "unknown";
}

const char* symmetric_dispatch_name(SymmetricDispatch path) {
  switch (path) {
    case SymmetricDispatch::automatic:
      return "auto";
    case SymmetricDispatch::publish:
      return "publish";
    case SymmetricDispatch::zero_copy:
      return "zero_copy";
    case SymmetricDispatch::push:
      return "push";
  }
  return "unknown";
}

void Config::validate() const {
  if (num_channels < 0 || num_channels > kMaxChannels) {
    throw InvalidArgument("config.num_channels: expected 1.." + std::to_string(kMaxChannels) +
                          " or 0 (auto), got " + std::to_string(num_channels));
  }
  if (ring_slots < 1) {
    throw InvalidArgument("config.ring_slots: expected >= 1, got " + std::to_string(ring_slots));
  }
  if (chunk_tokens < 1 || chunk_tokens > ring_slots) {
    throw InvalidArgument("config.chunk_tokens: expected 1..ring_slots (" + std::to_string(ring_slots) +
                          "), got " + std::to_string(chunk_tokens));
  }
  if (!(timeout_seconds > 0)) {
    throw InvalidArgument("config.timeout_seconds: expected > 0, got " + std::to_string(timeout_seconds));
  }
  if (symmetric_combine != SymmetricCombine::automatic && symmetric_combine != SymmetricCombine::push &&
      symmetric_combine != SymmetricCombine::pull) {
    throw InvalidArgument("config.symmetric_combine: expected auto, push or pull, got " +
                          std::to_string(static_cast<int>(symmetric_combine)));
  }
  if (symmetric_dispatch != SymmetricDispatch::automatic &&
      symmetric_dispatch != SymmetricDispatch::publish &&
      symmetric_dispatch != SymmetricDispatch::zero_copy) {
    // push is a path auto resolves to (where it can), not one a caller asks for.
    throw InvalidArgument(std::string("config.symmetric_dispatch: expected auto, publish or zero_copy (auto "
                                      "pushes where it can), got ") +
                          (symmetric_dispatch == SymmetricDispatch::push
                               ? std::string("push")
                               : std::to_string(static_cast<int>(symmetric_dispatch))));
  }
}

std::string CallTuning::to_string() const {
  std::ostringstream out;
  out << "tuning(channels=" << num_channels << " ring_slots=" << ring_slots
      << " chunk_tokens=" << chunk_tokens << ")";
  return out.str();
}

std::string Config::to_string() const {
  std::ostringstream out;
  out << "channels=" << (num_channels == kAutoChannels ? std::string("auto") : std::to_string(num_channels))
      << " ring_slots=" << ring_slots << " chunk_tokens=" << chunk_tokens << " timeout=" << timeout_seconds
      << "s symmetric_combine=" << symmetric_combine_name(symmetric_combine)
      << " symmetric_dispatch=" << symmetric_dispatch_name(symmetric_dispatch)
      << " mask_ranks_on_timeout=" << (mask_ranks_on_timeout ? "true" : "false");
  return out.str();
}

}  // namespace switchyard
