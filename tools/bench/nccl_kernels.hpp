#pragma once
// The nccl baseline's own kernels: what a framework runs around its all-to-alls (Megatron's and
// vLLM's "all-to-all" dispatchers): routing each token to its destination ranks, packing the rows
// per destination, turning the received expert ids into local ones, and summing the returned rows.
// Each launcher queues one kernel on `stream` and throws SystemError when the launch fails.
// In every build with CUDA (they need no NCCL; tests/bench checks them on one GPU).
#include <cuda_runtime.h>

#include <cstdint>

#include "nccl_layout.hpp"

namespace switchyard::bench {

// From topk_idx alone: the route table, and per destination its row and per-expert counts
// (NcclCounts) into `send_counts`.
struct NcclRouteArgs {
  const int64_t* topk_idx = nullptr;  // [num_tokens, topk], -1 = no expert
  int topk = 0;
  NcclCounts counts;
  NcclRouteTable route;            // written: num_tokens x num_ranks slots
  int32_t* send_counts = nullptr;  // written: counts.size()
};
void launch_nccl_route(const NcclRouteArgs& args, cudaStream_t stream);

// Copies every (token, destination) row into the send buffers, destination-major, tokens ascending
// within a destination (the route table's order).
struct NcclPackArgs {
  const uint8_t* x = nullptr;  // [num_tokens, x_row_bytes]
  int64_t x_row_bytes = 0;
  const float* x_scales = nullptr;  // [num_tokens, num_scales], fp8 only (null otherwise)
  int num_scales = 0;
  const int64_t* topk_idx = nullptr;    // [num_tokens, topk], global expert ids
  const float* topk_weights = nullptr;  // [num_tokens, topk]
  int topk = 0;
  NcclCounts counts;
  NcclRouteTable route;
  const int32_t* send_counts = nullptr;  // from the route kernel: the segments' sizes
  uint8_t* send_x = nullptr;             // [sent rows, x_row_bytes]
  float* send_scales = nullptr;          // [sent rows, num_scales], fp8 only
  int64_t* send_topk_idx = nullptr;      // [sent rows, topk]
  float* send_topk_weights = nullptr;    // [sent rows, topk]
};
void launch_nccl_pack(const NcclPackArgs& args, cudaStream_t stream);

// In place on the received rows: a slot whose expert lives on `rank` gets its local id, every other
// slot -1 and weight 0 (the normal engine's recv_topk_idx / recv_topk_weights).
struct NcclLocalizeArgs {
  int64_t* topk_idx = nullptr;    // [num_rows, topk]
  float* topk_weights = nullptr;  // [num_rows, topk]
  int64_t num_rows = 0;
  int topk = 0;
  int rank = 0;
  int experts_per_rank = 0;
};
void launch_nccl_localize(const NcclLocalizeArgs& args, cudaStream_t stream);

// The combine's reduction on the source: for each token the returned rows of its destination ranks,
// summed as DESIGN.md fixes it (per node in ascending rank order in fp32, rounded to bf16 once per
// node, then the node partials in fp32, rounded once; the weights the same way in fp32), so that the
// result equals the reference's bit for bit.
struct NcclReduceArgs {
  const uint16_t* returned_x = nullptr;     // bf16 [sent rows, hidden], the send buffer's order
  const float* returned_weights = nullptr;  // f32 [sent rows, topk]
  int64_t hidden = 0;
  int topk = 0;
  int ranks_per_node = 1;
  NcclCounts counts;
  NcclRouteTable route;
  const int32_t* send_counts = nullptr;
  uint16_t* combined_x = nullptr;     // bf16 [num_tokens, hidden]
  float* combined_weights = nullptr;  // f32 [num_tokens, topk]
};
void launch_nccl_reduce(const NcclReduceArgs& args, cudaStream_t stream);

}  // namespace switchyard::bench
