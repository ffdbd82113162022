#pragma once
// The CPU `normal` engine on one node: the pipeline protocol of DESIGN.md run by host threads, one
// thread per channel, each driving that channel's sender and receiver roles. Across nodes the backend
// runs the hierarchical engine instead (cpu/internode/engine.hpp); both share the call's steps around
// the roles (cpu/normal/call.hpp).
#include "core/engine.hpp"
#include "cpu/backend/host_heap.hpp"
#include "cpu/normal/call.hpp"

namespace switchyard::cpu {

class NormalEngine final : public detail::NormalUnit {
 public:
  NormalEngine(HostHeap& heap, detail::BufferId owner) : calls_(heap, owner) {}

  DispatchResult dispatch(const detail::DispatchPlan& plan) override;
  CombineResult combine(const detail::CombinePlan& plan) override;

 private:
  NormalCalls calls_;
};

}  // namespace switchyard::cpu
