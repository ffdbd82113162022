#pragma once
// What a layer built on a Buffer (MoeLayer) reaches of it, inside the library: the state its plans read,
// the symmetric region, allocation where the backend computes, and the backend's MoE expert phase under
// the Buffer's usability and timeout policy. Defined in core/buffer.cpp, where Buffer::Impl is.
#include <initializer_list>

#include "common/symmetric_home_rows.hpp"
#include "common/symmetric_protocol.hpp"
#include "core/backend.hpp"
#include "core/engine_plans.hpp"
#include "core/moe_plan.hpp"
#include "core/plan_context.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::detail {

struct BufferAccess {
  // Valid while the Buffer lives. Throws as a call would on an unconnected or failed buffer (`what`:
  // the caller's name for the message).
  static PlanContext plan_context(const Buffer& buffer, const char* what);
  static const common::SymmetricLayout& symmetric_layout(const Buffer& buffer);
  // This rank's heap, where the symmetric region's heap-resident tensors are.
  static uint8_t* heap_base(Buffer& buffer);
  static Tensor allocate(Buffer& buffer, DType dtype, std::initializer_list<int64_t> dims);
  // The MoE layer's expert phase on the buffer's backend (BackendImpl::make_moe_experts).
  static std::unique_ptr<MoeExperts> make_moe_experts(Buffer& buffer, const MoeExpertsPlan& plan);
  static void run_moe_experts(Buffer& buffer, MoeExperts& experts, const MoeExpertsCall& call);
  // Buffer::symmetric_combine in two halves, and between them where the expert phase of the dispatch
  // behind `plan` writes its rows home (MoeExpertOutput::home): the engine's description of those places.
  // `rows_at_home`: the plan of such a combine (no x; SymmetricCombinePlan::rows_at_home).
  static SymmetricCombinePlan plan_symmetric_combine(Buffer& buffer, const LowLatencyCombineArgs& args,
                                                     bool rows_at_home);
  static common::SymmetricHomeRows symmetric_home_rows(Buffer& buffer, const SymmetricCombinePlan& plan);
  static LowLatencyCombineResult run_symmetric_combine(Buffer& buffer, const SymmetricCombinePlan& plan);
};

}  // namespace switchyard::detail
