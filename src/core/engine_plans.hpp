#pragma once
// The plans core hands an engine: one call's arguments, validated on the host, with the shapes, the
// heap region's layout and the signature every rank's call must share. Engines never see bad input.
#include <cstdint>

#include "common/low_latency_protocol.hpp"
#include "common/scales_layout.hpp"
#include "common/symmetric_protocol.hpp"
#include "core/expert_major_handle.hpp"
#include "core/normal_handle.hpp"
#include "core/staged_heap_input.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::detail {

// A validated `normal` dispatch.
struct DispatchPlan {
  int rank = 0;
  Topology topology;
  Config config;
  int64_t num_tokens = 0;  // N
  int hidden = 0;          // H
  DType dtype = DType::bf16;
  bool has_scales = false;   // fp8: x_scales, laid out as scales_layout says
  int topk = 0;              // K; 0 when topk_idx is omitted (cached dispatch)
  bool has_weights = false;  // topk_weights given
  int num_experts = 0;
  int local_experts = 0;
  int expert_alignment = 1;
  int64_t num_worst_tokens = 0;
  const NormalHandleData* cached = nullptr;  // replay this routing
  const DispatchLayout* layout = nullptr;    // precomputed layout, or null
  DispatchArgs args;                         // the caller's tensors (outputs may be undefined)
  common::ScalesLayout scales_layout;        // where args.x_scales holds token t's block b (fp8)
  uint64_t signature = 0;                    // same on every rank for a matching call
  // x (and its scales) are the Buffer's heap-resident input (BufferSizing::normal_heap_input_tokens): a
  // backend may let the receivers read the rows in place (docs/normal-in-place.md).
  bool x_in_heap = false;
  common::NormalInputLayout input{};  // where every rank keeps that input, with x_in_heap
  // With x_in_heap: the caller's x or scales that are not the views, copied into them before the call's
  // first barrier (core/staged_heap_input.hpp); empty when the caller wrote the views.
  StagedHeapInput staged;
  // x in the heap, a cached handle and no topk_idx (DeepEP's cached dispatch): the receivers pull their rows
  // by their own handle's receive order, and the sources leave no routing in their heaps (every other
  // dispatch in place pulls by the routing its sources leave there; docs/normal-in-place.md). Every rank
  // decides alike: the call signature covers `cached` and `topk`.
  bool gather_by_handle = false;
};

// A validated `normal` combine.
struct CombinePlan {
  int rank = 0;
  Topology topology;
  Config config;
  int hidden = 0;
  bool has_weights = false;
  int topk = 0;
  const NormalHandleData* handle = nullptr;
  CombineArgs args;
  uint64_t signature = 0;
  // x (and topk_weights) are the Buffer's heap-resident combine input
  // (BufferSizing::normal_heap_combine_rows): a backend may let each home rank read the rows in place
  // (docs/normal-in-place.md).
  bool y_in_heap = false;
  common::NormalCombineInputLayout combine_input{};  // where every rank keeps that input, with y_in_heap
  // With y_in_heap: the caller's x or weights that are not the views, copied into them first.
  StagedHeapInput staged;
};

// A validated expert-major dispatch (the `low_latency` and `symmetric` engines share the interface).
struct ExpertMajorDispatchPlan {
  int rank = 0;
  Topology topology;
  Config config;
  int64_t num_tokens = 0;  // N
  int hidden = 0;          // H
  int topk = 0;            // K
  int num_experts = 0;
  int local_experts = 0;
  int64_t max_tokens_per_rank = 0;
  // Rows per local expert in the outputs: args.expert_capacity, or R * max_tokens_per_rank for 0.
  int64_t expert_capacity = 0;
  bool use_fp8 = false;
  bool round_scale = false;  // true also with use_ue8m0
  bool use_ue8m0 = false;
  // x arrived as fp8_e4m3 with the caller's x_scales (symmetric only, use_fp8): its rows and scales are
  // carried as given, never cast.
  bool x_fp8 = false;
  // What every rank's call must agree on (core/call_signature.hpp): the engines publish it to their
  // peers and refuse a call whose peers' differ.
  uint64_t signature = 0;
  LowLatencyDispatchArgs args;  // the caller's tensors (outputs may be undefined)
};

// A validated expert-major combine.
struct ExpertMajorCombinePlan {
  int rank = 0;
  Topology topology;
  Config config;
  int hidden = 0;  // H' of the expert outputs
  const ExpertMajorHandleData* handle = nullptr;
  // The expert outputs bf16 [L, C, H']: args.x, or with zero_copy the staging area (C = R * max).
  const uint16_t* y = nullptr;
  uint64_t signature = 0;  // as the dispatch's
  LowLatencyCombineArgs args;
};

// A validated `low_latency` dispatch and combine.
struct LowLatencyDispatchPlan : ExpertMajorDispatchPlan {
  common::LowLatencyLayout layout;  // the region in every rank's heap
};
struct LowLatencyCombinePlan : ExpertMajorCombinePlan {
  common::LowLatencyLayout layout;
};

// A validated `symmetric` dispatch and combine (no hooks, no zero copy).
struct SymmetricDispatchPlan : ExpertMajorDispatchPlan {
  common::SymmetricLayout layout;  // the region in every rank's heap
  // Where x lies in this rank's heap when it is the heap-resident input (Buffer::symmetric_input): its
  // offset from the heap base, which every peer can follow; -1 otherwise.
  int64_t x_heap_offset = -1;
  // Likewise for out_recv_x and out_recv_x_scales in the heap-resident fp8 dispatch outputs
  // (BufferSizing::symmetric_heap_receive_rows_per_expert, Buffer::symmetric_receive), which sources of any
  // process can push into.
  int64_t recv_x_heap_offset = -1;
  int64_t recv_scales_heap_offset = -1;
};
struct SymmetricCombinePlan : ExpertMajorCombinePlan {
  common::SymmetricLayout layout;
  // Likewise for y and the heap-resident expert outputs (Buffer::symmetric_expert_output).
  int64_t y_heap_offset = -1;
  // The MoE layer's expert phase wrote every row into its home's combine buffer already
  // (common/symmetric_home_rows.hpp, MoeExpertOutput::home): the combine moves nothing, y is not read, and
  // it only checks the dispatch's tables, waits at its barrier and reduces. Internal (core/moe_layer.cpp).
  bool rows_at_home = false;
};

}  // namespace switchyard::detail
