#pragma once
// The expert-major engines' calls (`low_latency` and `symmetric`): every argument checked on the
// host against the engine's region of the heap, then a plan the backend runs as it is.
#include <memory>

#include "common/low_latency_protocol.hpp"
#include "common/symmetric_home_rows.hpp"
#include "common/symmetric_protocol.hpp"
#include "core/backend.hpp"
#include "core/plan_context.hpp"

namespace switchyard::detail {

// The buffer was sized with the engine's region (and, for symmetric, has every rank in one
// load/store domain). `what`: the call, for the message.
void check_low_latency_region(const BufferOptions& options, const char* what);
void check_symmetric_region(const BufferOptions& options, const char* what);

// The data of `handle`, which must come from an `engine`_dispatch of the Buffer `owner`.
const ExpertMajorHandleData& low_latency_handle(const LowLatencyHandle* handle, Engine engine,
                                                detail::BufferId owner);

// A dispatch's handle as every expert-major engine on every backend starts it: who made it, for which
// engine's combine, and the call's shape (expert_capacity resolved). Each engine adds its own tables.
std::shared_ptr<ExpertMajorHandleData> make_expert_major_handle(const ExpertMajorDispatchPlan& plan,
                                                                BufferId owner, Engine engine);

// Each checks the engine's own refusals first, then the arguments shared by both engines.
LowLatencyDispatchPlan plan_low_latency_dispatch(const LowLatencyDispatchArgs& args,
                                                 const PlanContext& buffer,
                                                 const common::LowLatencyLayout& layout);
// `staging`: this rank's combine staging area, where zero-copy outputs are.
LowLatencyCombinePlan plan_low_latency_combine(const LowLatencyCombineArgs& args, const PlanContext& buffer,
                                               const common::LowLatencyLayout& layout, void* staging);
// `heap_base`: this rank's heap, where the heap-resident tensors are (SymmetricDispatchPlan::x_heap_offset,
// SymmetricCombinePlan::y_heap_offset).
SymmetricDispatchPlan plan_symmetric_dispatch(const LowLatencyDispatchArgs& args, const PlanContext& buffer,
                                              const common::SymmetricLayout& layout,
                                              const uint8_t* heap_base);
// `rows_at_home` (the MoE layer's MoeExpertOutput::home): the expert phase writes the rows into their homes,
// so args.x is none and the plan's y is null (SymmetricCombinePlan::rows_at_home).
SymmetricCombinePlan plan_symmetric_combine(const LowLatencyCombineArgs& args, const PlanContext& buffer,
                                            const common::SymmetricLayout& layout, const uint8_t* heap_base,
                                            bool rows_at_home = false);

// Where the rows of the dispatch behind `plan` go home for its combine (common/symmetric_home_rows.hpp), in
// `heap` (this rank's, with its peers' offsets) under `mask`: every field but the ones the engine alone
// knows, the combine's half (or the counter it follows) and the dispatch's overflow flag.
common::SymmetricHomeRows symmetric_home_rows(const SymmetricCombinePlan& plan, const common::SymHeap& heap,
                                              common::RankMaskView mask);

// The heap-resident tensors' views (Buffer::symmetric_input, Buffer::symmetric_expert_output,
// Buffer::symmetric_receive), checked against the sizing; `handle` is a symmetric dispatch's of this buffer.
TensorView symmetric_input_view(const PlanContext& buffer, const common::SymmetricLayout& layout,
                                uint8_t* heap_base, int64_t num_tokens, int hidden);
TensorView symmetric_expert_output_view(const PlanContext& buffer, const common::SymmetricLayout& layout,
                                        uint8_t* heap_base, const ExpertMajorHandleData& handle, int hidden);
// The heap receive area's views for `expert_capacity` rows per local expert (0: num_ranks *
// symmetric_max_tokens_per_rank) of `hidden` channels (0: sizing.hidden), for every local expert of the
// sizing (the MoE layer narrows them to its own).
SymmetricReceiveViews symmetric_receive_views(const PlanContext& buffer,
                                              const common::SymmetricLayout& layout, uint8_t* heap_base,
                                              int64_t expert_capacity, int hidden);

// The pull combine reads every rank's y where it is: through a plain pointer only when `pointers_shared`
// (ranks as threads of one process, on one device), else only the heap-resident expert outputs.
// InvalidArgument naming x otherwise, before anything is written.
void check_pull_reaches_y(const SymmetricCombinePlan& plan, bool pointers_shared);

}  // namespace switchyard::detail
