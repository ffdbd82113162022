#pragma once
// The workload every engine runs, and what it must produce: seeded inputs for all ranks, the
// reference outputs, and the bytes each phase moves. Built once per run, read by every rank.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "options.hpp"
#include "progress.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::bench {

// Across nodes (ranks_per_node < ranks), the normal engine's rows by link, counted on the host from
// every rank's topk_idx; a destination rank is one holding at least one of the token's experts.
struct NodeTraffic {
  // (token, node other than the token's own that holds a destination rank): a token crosses the
  // network once per destination node; combine returns one bf16 partial per such pair.
  int64_t rdma_rows = 0;
  // (token, destination rank), the local node included: the intranode delivery into each GPU's ring.
  int64_t nvlink_rows = 0;
  // (token, destination rank on another node): the RDMA rows if each token went to each GPU directly.
  int64_t direct_rdma_rows = 0;
};

// NodeTraffic in bytes: rows x the dispatch (or combine) row payload.
struct NodeBytes {
  int64_t rdma_dispatch = 0, nvlink_dispatch = 0, direct_rdma_dispatch = 0;
  int64_t rdma_combine = 0, nvlink_combine = 0, direct_rdma_combine = 0;
};

// The logical traffic of one dispatch + combine, all ranks together.
struct Traffic {
  int64_t delivered_rows = 0;      // (token, destination rank) pairs; low_latency: (token, expert)
  // Of those, the rows whose source and destination ranks sit on different GPUs (--devices): they
  // cross a link; the rest stay in one device's memory. 0 when all ranks share one device.
  int64_t remote_rows = 0;
  int64_t dispatch_row_bytes = 0;  // hidden * element size (+ hidden / 128 * 4 scale bytes for fp8)
  int64_t combine_row_bytes = 0;   // hidden * 2: combine returns bf16
  // For the design roofline (design_roofline.hpp): the source tokens of all ranks (combine writes one
  // output row of combine_row_bytes each), and the bytes of one x row as the caller passes it, which
  // the sender reads (normal: dispatch_row_bytes; low_latency and symmetric: bf16, cast on the fly).
  int64_t source_tokens = 0;
  int64_t input_row_bytes = 0;
  int64_t dispatch_bytes() const { return delivered_rows * dispatch_row_bytes; }
  int64_t combine_bytes() const { return delivered_rows * combine_row_bytes; }
  int64_t remote_dispatch_bytes() const { return remote_rows * dispatch_row_bytes; }
  int64_t remote_combine_bytes() const { return remote_rows * combine_row_bytes; }
  std::optional<NodeTraffic> nodes;  // normal engine with more than one node only
  std::optional<NodeBytes> node_bytes() const {
    if (!nodes) return std::nullopt;
    NodeBytes bytes;
    bytes.rdma_dispatch = nodes->rdma_rows * dispatch_row_bytes;
    bytes.nvlink_dispatch = nodes->nvlink_rows * dispatch_row_bytes;
    bytes.direct_rdma_dispatch = nodes->direct_rdma_rows * dispatch_row_bytes;
    bytes.rdma_combine = nodes->rdma_rows * combine_row_bytes;
    bytes.nvlink_combine = nodes->nvlink_rows * combine_row_bytes;
    bytes.direct_rdma_combine = nodes->direct_rdma_rows * combine_row_bytes;
    return bytes;
  }
};

// What the `normal` engine must produce on every rank (DESIGN.md, Semantics).
struct NormalReference {
  std::vector<reference::Layout> layouts;                   // per rank
  std::vector<reference::NormalDispatchOutput> dispatched;  // per rank
  std::vector<Tensor> expert_outputs;                       // y per rank: the combine input
  std::vector<reference::NormalCombineOutput> combined;     // per rank
};

// What the `low_latency` engine must produce on every rank, on its own inputs: ll_tokens_per_rank
// tokens per rank, always bf16 (with --dtype fp8 the engine casts them, use_fp8). Its traffic counts
// (token, expert) pairs: every valid top-k slot is one row on its expert.
struct LowLatencyReference {
  bool present = false;  // only when low_latency runs
  int64_t max_tokens_per_rank = 0;  // the calls' (and the inputs' tokens per rank)
  // The dispatch's expert_capacity: 0 (R * max rows per expert) or the resolved C (--expert-capacity,
  // auto resolved from the inputs); rows_per_expert is what the outputs hold.
  int64_t expert_capacity = 0;
  int64_t rows_per_expert = 0;
  workload::Shape shape;
  std::vector<workload::RankData> inputs;                       // host, per rank
  reference::LowLatencyOptions ll_options;
  std::vector<reference::LowLatencyDispatchOutput> dispatched;  // per rank
  std::vector<Tensor> expert_outputs;  // y per rank, bf16 [L, C, H]; rows past recv_count are zero
  std::vector<Tensor> combined;        // per rank, bf16 [N, H]
  Traffic traffic;
};

struct Problem {
  workload::Shape shape;
  std::vector<workload::RankData> inputs;  // host, per rank
  Traffic traffic;
  NormalReference normal;
  LowLatencyReference low_latency;
  // The symmetric engine's: its own tokens (--symmetric-tokens) and expert_capacity; a copy of
  // low_latency's (sharing its tensors) when both are the same.
  LowLatencyReference symmetric;
};

// The most rows any local expert receives from `inputs` (every (token, slot) with an expert is one
// row), rounded up to kExpertCapacityMultiple, and at most ranks * max_tokens_per_rank.
int64_t auto_expert_capacity(const std::vector<workload::RankData>& inputs, int num_experts,
                             int64_t max_tokens_per_rank);

// The synthetic expert on an expert-major recv_x [L, R * max, H] (scales [L, R * max, H / 128] for
// fp8): workload::synthetic_expert on each expert's rows < recv_count[l] (host i32 [L]); the rows past
// them are zero. Host tensors.
Tensor expert_major_synthetic_expert(const TensorView& recv_x, const TensorView& recv_x_scales,
                                     const TensorView& recv_count, int rank);

workload::Shape shape_of(const BenchOptions& options);

// Rows between ranks on different devices. Rank-major (normal, nccl): one per (token, destination
// rank) pair, from every rank's topk_idx (negative ids are empty slots). Expert-major (low_latency):
// one per (token, expert) row each destination received, from the reference's layout_range.
int64_t rank_major_remote_rows(const std::vector<workload::RankData>& inputs, int num_experts,
                               const DeviceMap& devices);
int64_t expert_major_remote_rows(const std::vector<reference::LowLatencyDispatchOutput>& dispatched,
                                 const DeviceMap& devices);

// Generates the inputs and computes the reference. Throws InvalidArgument for a shape the
// workload or the reference refuses.
Problem make_problem(const BenchOptions& options, Progress& progress);

// Throws UsageError naming --tokens (or --ranks, when the heaps dominate) when the run would need
// more host memory than the machine has.
void check_fits_in_memory(const BenchOptions& options);

}  // namespace switchyard::bench
