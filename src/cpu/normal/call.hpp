#pragma once
// The steps of a CPU `normal` call around its channel roles, shared by the one-node engine
// (cpu/normal/engine.cpp) and the hierarchical engine (cpu/internode/engine.cpp), which run their own
// roles between them: ring reset, count exchange (notify), outputs, handle and the roles' contexts.
// `link` is the transport to the ranks of other nodes: null on one node.
#include <exception>
#include <memory>

#include "common/normal_protocol.hpp"
#include "common/sym_heap.hpp"
#include "core/backend.hpp"
#include "cpu/backend/host_heap.hpp"
#include "cpu/normal/combine_roles.hpp"
#include "cpu/normal/dispatch_roles.hpp"
#include "cpu/normal/heap_barrier.hpp"
#include "transport/transport.hpp"

namespace switchyard::cpu {

// The epoch of a handle's routing (NormalHandleData::routing_epoch), 0 for a handle without one: what a
// cached dispatch or a combine on it mixes into its opening stamp (common::routed_signature).
uint64_t routing_epoch_of(const detail::NormalHandleData& handle);

// Send-side routing of a dispatch, for its handle to own: the cached handle's, a copy of the caller's
// layout, or computed here.
Tensor dispatch_routing(const detail::DispatchPlan& plan);

// A dispatch between its first barrier and its return: the handle, the outputs, and the context the
// channel roles read and write.
struct DispatchCall {
  std::shared_ptr<detail::NormalHandleData> handle;
  DispatchResult result;
  DispatchContext context;
  int64_t num_recv = 0;  // tokens this rank receives
  int64_t rows = 0;      // rows of the outputs: num_recv, or num_worst_tokens when padded
  // Why this rank's outputs could not be made after the count exchange (a caller's output of the wrong rows,
  // num_worst_tokens too small, its allocator throwing), or null. The call then runs on outputs of its own,
  // so that its peers get their rows and barriers from it, and finish_dispatch raises this at its end: the
  // failure is this rank's alone instead of every peer's timeout.
  std::exception_ptr failure;
};

// What an engine keeps across its `normal` calls for the steps that use it: the heap, the Buffer's id
// (its handles' owner) and the heap barrier, whose epoch grows with every call.
class NormalCalls {
 public:
  NormalCalls(HostHeap& heap, detail::BufferId owner) : heap_(heap), owner_(owner) {}

  const common::SymHeap& heap() const { return heap_.view(); }
  // Zeroes this rank's intranode rings (every channel, every source), before the call's first
  // barrier.
  void zero_rings(const common::NormalHeapLayout& layout) const;
  // Waits for every rank to arrive (HeapBarrier::arrive_and_wait: `link` reaches the other nodes).
  void arrive_and_wait(const common::NormalHeapLayout& layout, const Config& config, const char* operation,
                       transport::Transport* link = nullptr, int ranks_per_node = 0);
  // The opening barrier of a call: as arrive_and_wait, and every rank must open a call with `signature`
  // (the plan's, routed by its handle's epoch where it has one), or InvalidArgument on every rank that sees
  // another.
  void open_call(const common::NormalHeapLayout& layout, const Config& config, const char* operation,
                 uint64_t signature, transport::Transport* link = nullptr, int ranks_per_node = 0);
  // After the first barrier: makes the handle, exchanges the counts with every rank (notify, ended
  // by a barrier) unless the plan is cached, checks that every rank called with the same shape,
  // allocates the outputs and fills the roles' context. The record for a rank of another node is
  // built locally and put, whole, through `link`; the barrier's signal to the same peer lands after
  // it. Outputs that cannot be made after that are DispatchCall::failure.
  DispatchCall start_dispatch(const detail::DispatchPlan& plan, const common::NormalHeapLayout& layout,
                              const Tensor& is_token_in_rank, transport::Transport* link);

 private:
  // start_dispatch's steps after the counts: the outputs (what can fail on this rank alone; else outputs of
  // the call's own, which nobody reads), then the roles' context.
  void make_dispatch_outputs(const detail::DispatchPlan& plan, DispatchCall& call) const;
  void make_scratch_outputs(const detail::DispatchPlan& plan, DispatchCall& call) const;
  DispatchCall fill_dispatch_context(const detail::DispatchPlan& plan, const common::NormalHeapLayout& layout,
                                     const uint8_t* in_rank, DispatchCall call) const;

  HostHeap& heap_;
  detail::BufferId owner_;
  HeapBarrier barrier_;
};

// After the roles: the rows past the received ones (worst case) route nowhere; hands back the outputs
// and the handle, or raises the call's failure (DispatchCall::failure).
DispatchResult finish_dispatch(const detail::DispatchPlan& plan, DispatchCall& call);

// Before the first barrier of a combine: checks the handle against the plan and allocates (or
// borrows) the outputs.
CombineResult start_combine(const detail::CombinePlan& plan);

// The context the combine roles read and write, over `result`'s outputs.
CombineContext combine_context(const common::SymHeap& heap, const detail::CombinePlan& plan,
                               const common::NormalHeapLayout& layout, CombineResult& result);

}  // namespace switchyard::cpu
