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
  // (token, its own node) when a rank of that node (the source itself included) is a destination:
  // the hierarchical engine sends these through the RDMA path as well (staged, then put to itself:
  // internode_dispatch.cu has a sender and a forwarder per node, its own included), so they are not
  // network bytes but are design bytes.
  int64_t own_node_rows = 0;
  // (token, destination rank), the local node included: the intranode delivery into each GPU's ring.
  int64_t nvlink_rows = 0;
  // (token, destination rank on another node): the RDMA rows if each token went to each GPU directly.
  int64_t direct_rdma_rows = 0;
  // (token, destination node), the own node included: what the RDMA senders stage and put, what the
  // forwarders' reductions write and the RDMA receivers read in combine.
  int64_t staged_rows() const { return rdma_rows + own_node_rows; }
};

// Across nodes, the low_latency engine's rows and signals by link, counted on the host from every
// rank's topk_idx. It has no forwarding: each (token, expert) row goes straight to the expert's rank,
// by stores within the node and by transport puts to other nodes (cuda/low_latency/link.cuh).
struct DirectNodeTraffic {
  int64_t rdma_rows = 0;       // (token, expert) rows whose expert's rank sits on another node
  int64_t nvlink_rows = 0;     // the rest: stores within the node, the own rank included
  int64_t leaving_tokens = 0;  // tokens with an RDMA row: dispatch stages each once in its send area
  // Per phase: one count signal per (expert, source rank) pair, a transport add between nodes and
  // a store within one.
  int64_t rdma_count_signals = 0, nvlink_count_signals = 0;
  // Per phase: the CUDA engine's rows-landed adds, one with each RDMA row's put (puts are unordered,
  // so the receiver counts arrivals); the CPU engine sends none.
  int64_t rdma_landed_adds = 0;
  // One dispatch message as it travels: the row, its fp8 scales and the 16-byte source fields, each
  // 16-byte aligned (common::LowLatencyDispatchMessage::bytes()).
  int64_t dispatch_message_bytes = 0;
};

// A transport signal add (or a count signal's store) moves one 64-bit word.
constexpr int64_t kSignalBytes = 8;

// Bytes per link of one dispatch and one combine, all ranks. normal (forwarded): NodeTraffic rows x
// the row payload. low_latency (direct, not forwarded): DirectNodeTraffic's rows as messages (dispatch)
// or bf16 rows (combine), plus its signals; there is no hierarchy, so direct_rdma_* = rdma_*.
struct NodeBytes {
  bool forwarded = true;
  int64_t rdma_dispatch = 0, nvlink_dispatch = 0, direct_rdma_dispatch = 0;
  int64_t rdma_combine = 0, nvlink_combine = 0, direct_rdma_combine = 0;
  // normal: the (token, own node) rows that go through the RDMA path too (NodeTraffic::own_node_rows):
  // a put to itself, in the design bytes but not across the network. 0 for low_latency.
  int64_t own_node_dispatch = 0, own_node_combine = 0;
  // low_latency: the transport signal adds among the RDMA bytes (kSignalBytes each); 0 for normal.
  int64_t rdma_dispatch_signals = 0, rdma_combine_signals = 0;
};

// The logical traffic of one dispatch + combine, all ranks together.
struct Traffic {
  int64_t delivered_rows = 0;  // (token, destination rank) pairs; low_latency: (token, expert)
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
  // For the minimal bound (minimal_bound.hpp): the source tokens with at least one valid top-k slot
  // (a dispatch must read each of them once, and no other), and the rows each rank receives (DeepEP's
  // per-rank GB/s divides one rank's received bytes by that rank's time).
  int64_t routed_tokens = 0;
  std::vector<int64_t> received_rows_by_rank;
  int64_t dispatch_bytes() const { return delivered_rows * dispatch_row_bytes; }
  int64_t combine_bytes() const { return delivered_rows * combine_row_bytes; }
  int64_t remote_dispatch_bytes() const { return remote_rows * dispatch_row_bytes; }
  int64_t remote_combine_bytes() const { return remote_rows * combine_row_bytes; }
  std::optional<NodeTraffic> nodes;               // normal engine with more than one node only
  std::optional<DirectNodeTraffic> direct_nodes;  // low_latency with more than one node only
  std::optional<NodeBytes> node_bytes() const;
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
  bool present = false;             // only when low_latency runs
  int64_t max_tokens_per_rank = 0;  // the calls' (and the inputs' tokens per rank)
  // The dispatch's expert_capacity: 0 (R * max rows per expert) or the resolved C (--expert-capacity,
  // auto resolved from the inputs); rows_per_expert is what the outputs hold.
  int64_t expert_capacity = 0;
  int64_t rows_per_expert = 0;
  workload::Shape shape;
  std::vector<workload::RankData> inputs;  // host, per rank
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

// The rows by link across nodes, from every rank's topk_idx (negative ids are empty slots; ranks
// hold num_experts / ranks consecutive experts). normal: (token, destination rank) and (token,
// destination node) pairs. low_latency: every valid slot is a row on its expert's rank;
// `landed_adds`: its puts carry a rows-landed add each (the CUDA engine). dispatch_message_bytes is
// left 0 (make_problem sets it from the call's message).
NodeTraffic node_traffic(const std::vector<workload::RankData>& inputs, const Topology& topology,
                         int num_experts);
DirectNodeTraffic direct_node_traffic(const std::vector<workload::RankData>& inputs, const Topology& topology,
                                      int num_experts, bool landed_adds);

// Generates the inputs and computes the reference. Throws InvalidArgument for a shape the
// workload or the reference refuses.
Problem make_problem(const BenchOptions& options, Progress& progress);

// Throws UsageError naming --tokens (or --ranks, when the heaps dominate) when the run would need
// more host memory than the machine has.
void check_fits_in_memory(const BenchOptions& options);

}  // namespace switchyard::bench
