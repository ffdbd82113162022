#include "problem.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/low_latency_protocol.hpp"

namespace switchyard::bench {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Refuse runs estimated to need more than this fraction of physical memory.
constexpr double kMaxMemoryFraction = 0.8;

int64_t dispatch_row_bytes(const BenchOptions& options) {
  int64_t bytes = int64_t{options.hidden} * static_cast<int64_t>(dtype_size(options.dtype));
  if (options.dtype == DType::fp8_e4m3) bytes += int64_t{options.hidden} / kFp8ScaleBlock * 4;
  return bytes;
}

// low_latency rows: bf16, or fp8 with f32 scales per 128 channels (use_fp8).
int64_t low_latency_dispatch_row_bytes(const BenchOptions& options) {
  if (options.dtype == DType::fp8_e4m3)
    return int64_t{options.hidden} + int64_t{options.hidden} / kFp8ScaleBlock * 4;
  return int64_t{options.hidden} * 2;
}

// Source tokens of every rank with at least one valid top-k slot (negative ids are empty slots).
int64_t routed_tokens(const std::vector<workload::RankData>& inputs) {
  int64_t routed = 0;
  for (const workload::RankData& data : inputs) {
    const int64_t num_tokens = data.topk_idx.size(0), topk = data.topk_idx.size(1);
    const int64_t* ids = data.topk_idx.as<const int64_t>();
    for (int64_t token = 0; token < num_tokens; ++token) {
      routed += std::any_of(ids + token * topk, ids + (token + 1) * topk, [](int64_t id) { return id >= 0; });
    }
  }
  return routed;
}

// `tokens` per rank and `capacity` (0, N or kAutoExpertCapacity); `name` for the progress line.
// `by_link`: count the rows by link across nodes (low_latency; symmetric runs on one node only).
void make_low_latency_reference(const BenchOptions& options, Progress& progress, LowLatencyReference& ll,
                                int64_t tokens, int64_t capacity, const std::string& name, bool by_link) {
  const Topology& topology = options.topology;
  const int num_ranks = topology.num_ranks;
  ll.present = true;
  // The calls' max_tokens_per_rank: the library refuses 0, while 0 tokens on every rank is a valid step.
  ll.max_tokens_per_rank = std::max<int64_t>(1, tokens);
  const int64_t max_tokens = ll.max_tokens_per_rank;
  ll.shape = shape_of(options);
  ll.shape.tokens_per_rank = tokens;
  ll.shape.dtype = DType::bf16;  // the engine casts to fp8 itself (use_fp8)
  progress.update("generating the " + name + " inputs");
  ll.inputs = workload::generate(ll.shape, options.seed);
  ll.ll_options.use_fp8 = options.dtype == DType::fp8_e4m3;
  ll.expert_capacity = capacity == kAutoExpertCapacity
                           ? auto_expert_capacity(ll.inputs, options.num_experts, max_tokens)
                           : capacity;
  ll.rows_per_expert = ll.expert_capacity > 0 ? ll.expert_capacity : num_ranks * max_tokens;

  progress.update("computing the " + name + " reference");
  std::vector<reference::RankInputs> rank_inputs;
  for (int rank = 0; rank < num_ranks; ++rank) rank_inputs.push_back(ll.inputs[rank].inputs());
  ll.dispatched = reference::low_latency_dispatch(rank_inputs, options.num_experts, topology, max_tokens,
                                                  ll.ll_options, ll.expert_capacity);
  // An explicit capacity below the largest expert's rows: the engine raises CapacityError (the run
  // fails with it), and there is no combine to compare with.
  for (const reference::LowLatencyDispatchOutput& received : ll.dispatched) {
    const int32_t* counts = received.recv_count.as<const int32_t>();
    for (int64_t l = 0; l < received.recv_count.numel(); ++l) {
      if (counts[l] > ll.rows_per_expert) {
        throw UsageError("--expert-capacity: expected at least the " + std::to_string(counts[l]) +
                         " rows a local expert receives in these inputs (auto picks it), got " +
                         std::to_string(ll.expert_capacity));
      }
    }
  }
  std::vector<TensorView> ys;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const reference::LowLatencyDispatchOutput& received = ll.dispatched[rank];
    ll.expert_outputs.push_back(
        expert_major_synthetic_expert(received.recv_x, received.recv_x_scales, received.recv_count, rank));
    ys.push_back(ll.expert_outputs.back());
  }
  ll.combined = reference::low_latency_combine(ys, rank_inputs, options.num_experts, topology, max_tokens,
                                               ll.expert_capacity);

  for (const reference::LowLatencyDispatchOutput& received : ll.dispatched) {
    const int32_t* counts = received.recv_count.as<const int32_t>();
    int64_t rank_rows = 0;
    for (int64_t l = 0; l < received.recv_count.numel(); ++l) rank_rows += counts[l];
    ll.traffic.received_rows_by_rank.push_back(rank_rows);
    ll.traffic.delivered_rows += rank_rows;
  }
  ll.traffic.routed_tokens = routed_tokens(ll.inputs);
  ll.traffic.remote_rows = expert_major_remote_rows(ll.dispatched, options.devices);
  ll.traffic.dispatch_row_bytes = low_latency_dispatch_row_bytes(options);
  ll.traffic.combine_row_bytes = int64_t{options.hidden} * 2;
  ll.traffic.input_row_bytes = int64_t{options.hidden} * 2;  // bf16 inputs, cast by the engine with use_fp8
  for (const workload::RankData& data : ll.inputs) ll.traffic.source_tokens += data.x.size(0);
  if (by_link && !topology.is_single_node()) {
    ll.traffic.direct_nodes =
        direct_node_traffic(ll.inputs, topology, options.num_experts, options.backend == Backend::cuda);
    const int64_t by_link = ll.traffic.direct_nodes->rdma_rows + ll.traffic.direct_nodes->nvlink_rows;
    if (by_link != ll.traffic.delivered_rows) {
      throw std::logic_error("switchyard-bench: low_latency rows by link " + std::to_string(by_link) +
                             " differ from the reference's delivered rows " +
                             std::to_string(ll.traffic.delivered_rows));
    }
    const common::LowLatencyDispatchMessage message{
        static_cast<uint32_t>(options.hidden * (ll.ll_options.use_fp8 ? 1 : 2)),
        static_cast<uint32_t>(ll.ll_options.use_fp8 ? options.hidden / kFp8ScaleBlock : 0)};
    ll.traffic.direct_nodes->dispatch_message_bytes = static_cast<int64_t>(message.bytes());
  }
}

// Host bytes of an expert-major reference and the engine's outputs, all ranks: per rank, the
// expert-major tensors [L, rows_per_expert, H] (reference recv_x, reference y, the engine's y; the
// engine's recv_x is touched only where rows arrive, as its poison is) and the tokens' own tensors.
double low_latency_data_bytes(const BenchOptions& options, int64_t tokens_per_rank, double rows_per_expert) {
  const double ranks = options.topology.num_ranks;
  const double local_experts = static_cast<double>(options.num_experts) / ranks;
  const double rows = local_experts * rows_per_expert;
  const double row = static_cast<double>(low_latency_dispatch_row_bytes(options));
  const double tokens = static_cast<double>(tokens_per_rank) * ranks;
  const double token_bytes = tokens * (options.hidden * 2.0 * 3 + options.topk * 12.0);
  return ranks * rows * (row + 2 * options.hidden * 2.0 + 4) + token_bytes;
}

}  // namespace

NodeTraffic node_traffic(const std::vector<workload::RankData>& inputs, const Topology& topology,
                         int num_experts) {
  NodeTraffic traffic;
  const int experts_per_rank = num_experts / topology.num_ranks;
  std::vector<char> rank_hit(static_cast<size_t>(topology.num_ranks));
  std::vector<char> node_hit(static_cast<size_t>(topology.num_nodes()));
  for (int source = 0; source < topology.num_ranks; ++source) {
    const Tensor& topk_idx = inputs[source].topk_idx;
    const int64_t num_tokens = topk_idx.size(0), topk = topk_idx.size(1);
    const int64_t* idx = topk_idx.as<const int64_t>();
    const int source_node = topology.node_of(source);
    for (int64_t token = 0; token < num_tokens; ++token) {
      std::fill(rank_hit.begin(), rank_hit.end(), 0);
      std::fill(node_hit.begin(), node_hit.end(), 0);
      for (int64_t k = 0; k < topk; ++k) {
        const int64_t expert = idx[token * topk + k];
        if (expert < 0) continue;
        const int rank = static_cast<int>(expert / experts_per_rank);
        if (rank_hit[rank]) continue;
        rank_hit[rank] = 1;
        const int node = topology.node_of(rank);
        ++traffic.nvlink_rows;
        if (node != source_node) ++traffic.direct_rdma_rows;
        if (node_hit[node]) continue;
        node_hit[node] = 1;
        ++(node == source_node ? traffic.own_node_rows : traffic.rdma_rows);
      }
    }
  }
  return traffic;
}

DirectNodeTraffic direct_node_traffic(const std::vector<workload::RankData>& inputs, const Topology& topology,
                                      int num_experts, bool landed_adds) {
  DirectNodeTraffic traffic;
  const int experts_per_rank = num_experts / topology.num_ranks;
  for (int source = 0; source < topology.num_ranks; ++source) {
    const Tensor& topk_idx = inputs[source].topk_idx;
    const int64_t num_tokens = topk_idx.size(0), topk = topk_idx.size(1);
    const int64_t* idx = topk_idx.as<const int64_t>();
    const int source_node = topology.node_of(source);
    for (int64_t token = 0; token < num_tokens; ++token) {
      bool leaves = false;
      for (int64_t k = 0; k < topk; ++k) {
        const int64_t expert = idx[token * topk + k];
        if (expert < 0) continue;
        const bool remote = topology.node_of(static_cast<int>(expert / experts_per_rank)) != source_node;
        ++(remote ? traffic.rdma_rows : traffic.nvlink_rows);
        leaves = leaves || remote;
      }
      if (leaves) ++traffic.leaving_tokens;
    }
  }
  // Every rank signals every expert once per phase, whatever its count (0 included).
  const int64_t other_node_ranks = topology.num_ranks - topology.ranks_per_node;
  traffic.rdma_count_signals = int64_t{topology.num_ranks} * other_node_ranks * experts_per_rank;
  traffic.nvlink_count_signals = int64_t{topology.num_ranks} * topology.ranks_per_node * experts_per_rank;
  traffic.rdma_landed_adds = landed_adds ? traffic.rdma_rows : 0;
  return traffic;
}

Tensor expert_major_synthetic_expert(const TensorView& recv_x, const TensorView& recv_x_scales,
                                     const TensorView& recv_count, int rank) {
  const int64_t local_experts = recv_x.shape[0];
  const int64_t rows_per_expert = recv_x.shape[1];
  const int64_t hidden = recv_x.shape[2];
  const bool fp8 = recv_x.dtype == DType::fp8_e4m3;
  const int64_t num_scales = fp8 ? hidden / kFp8ScaleBlock : 0;
  Tensor y = Tensor::empty(DType::bf16, {local_experts, rows_per_expert, hidden});
  std::memset(y.data(), 0, y.nbytes());
  const size_t x_row_bytes = static_cast<size_t>(hidden) * dtype_size(recv_x.dtype);
  for (int64_t l = 0; l < local_experts; ++l) {
    // A wrong count (an engine that failed its check) must not read past the expert's rows.
    const int64_t count = std::min<int64_t>(recv_count.as<const int32_t>()[l], rows_per_expert);
    if (count <= 0) continue;
    const TensorView rows(recv_x.as<uint8_t>() + l * rows_per_expert * x_row_bytes, recv_x.dtype,
                          {count, hidden});
    TensorView scales;
    if (fp8) {
      scales = TensorView(recv_x_scales.as<float>() + l * rows_per_expert * num_scales, DType::f32,
                          {count, num_scales});
    }
    const Tensor expert_y = workload::synthetic_expert(rows, scales, rank);
    std::memcpy(y.as<uint16_t>() + l * rows_per_expert * hidden, expert_y.data(), expert_y.nbytes());
  }
  return y;
}

int64_t auto_expert_capacity(const std::vector<workload::RankData>& inputs, int num_experts,
                             int64_t max_tokens_per_rank) {
  std::vector<int64_t> rows(static_cast<size_t>(num_experts), 0);
  for (const workload::RankData& data : inputs) {
    const int64_t* ids = data.topk_idx.as<const int64_t>();
    for (int64_t i = 0; i < data.topk_idx.numel(); ++i) {
      if (ids[i] >= 0) ++rows[static_cast<size_t>(ids[i])];
    }
  }
  const int64_t most = rows.empty() ? 0 : *std::max_element(rows.begin(), rows.end());
  const int64_t rounded =
      std::max<int64_t>(1, (most + kExpertCapacityMultiple - 1) / kExpertCapacityMultiple) *
      kExpertCapacityMultiple;
  return std::min<int64_t>(rounded, static_cast<int64_t>(inputs.size()) * max_tokens_per_rank);
}

int64_t rank_major_remote_rows(const std::vector<workload::RankData>& inputs, int num_experts,
                               const DeviceMap& devices) {
  if (devices.empty() || inputs.empty()) return 0;
  const int num_ranks = static_cast<int>(inputs.size());
  const int experts_per_rank = num_experts / num_ranks;
  int64_t remote = 0;
  std::vector<char> rank_hit(static_cast<size_t>(num_ranks));
  for (int source = 0; source < num_ranks; ++source) {
    const Tensor& topk_idx = inputs[source].topk_idx;
    const int64_t num_tokens = topk_idx.size(0), topk = topk_idx.size(1);
    const int64_t* idx = topk_idx.as<const int64_t>();
    for (int64_t token = 0; token < num_tokens; ++token) {
      std::fill(rank_hit.begin(), rank_hit.end(), 0);
      for (int64_t k = 0; k < topk; ++k) {
        const int64_t expert = idx[token * topk + k];
        if (expert < 0) continue;
        const int rank = static_cast<int>(expert / experts_per_rank);
        if (rank_hit[rank]) continue;
        rank_hit[rank] = 1;
        if (!devices.same_device(source, rank)) ++remote;
      }
    }
  }
  return remote;
}

int64_t expert_major_remote_rows(const std::vector<reference::LowLatencyDispatchOutput>& dispatched,
                                 const DeviceMap& devices) {
  if (devices.empty()) return 0;
  int64_t remote = 0;
  const int num_ranks = static_cast<int>(dispatched.size());
  for (int destination = 0; destination < num_ranks; ++destination) {
    // layout_range [L, R, 2]: (begin, count) of each source rank's rows on each local expert.
    const Tensor& range = dispatched[destination].layout_range;
    const int32_t* begin_count = range.as<const int32_t>();
    const int64_t local_experts = range.size(0);
    for (int64_t l = 0; l < local_experts; ++l) {
      for (int source = 0; source < num_ranks; ++source) {
        if (devices.same_device(source, destination)) continue;
        remote += begin_count[(l * num_ranks + source) * 2 + 1];
      }
    }
  }
  return remote;
}

std::optional<NodeBytes> Traffic::node_bytes() const {
  if (nodes) {
    NodeBytes bytes;
    bytes.rdma_dispatch = nodes->rdma_rows * dispatch_row_bytes;
    bytes.nvlink_dispatch = nodes->nvlink_rows * dispatch_row_bytes;
    bytes.direct_rdma_dispatch = nodes->direct_rdma_rows * dispatch_row_bytes;
    bytes.rdma_combine = nodes->rdma_rows * combine_row_bytes;
    bytes.nvlink_combine = nodes->nvlink_rows * combine_row_bytes;
    bytes.direct_rdma_combine = nodes->direct_rdma_rows * combine_row_bytes;
    bytes.own_node_dispatch = nodes->own_node_rows * dispatch_row_bytes;
    bytes.own_node_combine = nodes->own_node_rows * combine_row_bytes;
    return bytes;
  }
  if (direct_nodes) {
    const DirectNodeTraffic& link = *direct_nodes;
    NodeBytes bytes;
    bytes.forwarded = false;
    // cuda/low_latency/link.cuh: dispatch puts the message and its source fields, combine the bf16
    // row; the count signals follow, per (expert, source rank).
    bytes.rdma_dispatch_signals = bytes.rdma_combine_signals =
        link.rdma_count_signals + link.rdma_landed_adds;
    bytes.rdma_dispatch =
        link.rdma_rows * link.dispatch_message_bytes + bytes.rdma_dispatch_signals * kSignalBytes;
    bytes.nvlink_dispatch =
        link.nvlink_rows * link.dispatch_message_bytes + link.nvlink_count_signals * kSignalBytes;
    bytes.rdma_combine = link.rdma_rows * combine_row_bytes + bytes.rdma_combine_signals * kSignalBytes;
    bytes.nvlink_combine = link.nvlink_rows * combine_row_bytes + link.nvlink_count_signals * kSignalBytes;
    bytes.direct_rdma_dispatch = bytes.rdma_dispatch;
    bytes.direct_rdma_combine = bytes.rdma_combine;
    return bytes;
  }
  return std::nullopt;
}

workload::Shape shape_of(const BenchOptions& options) {
  workload::Shape shape;
  shape.topology = options.topology;
  shape.tokens_per_rank = options.tokens_per_rank;
  shape.hidden = options.hidden;
  shape.topk = options.topk;
  shape.num_experts = options.num_experts;
  shape.dtype = options.dtype;
  shape.with_weights = true;
  shape.routing = workload::Routing::random;
  return shape;
}

Problem make_problem(const BenchOptions& options, Progress& progress) {
  Problem problem;
  problem.shape = shape_of(options);
  const Topology& topology = options.topology;
  const int num_ranks = topology.num_ranks;

  if (options.runs(BenchEngine::low_latency)) {
    make_low_latency_reference(options, progress, problem.low_latency, options.ll_tokens_per_rank, 0,
                               "low_latency", /*by_link=*/true);
  }
  if (options.runs(BenchEngine::symmetric)) {
    if (problem.low_latency.present && options.symmetric_tokens_per_rank == options.ll_tokens_per_rank &&
        options.expert_capacity == 0) {
      problem.symmetric = problem.low_latency;  // the same calls: share the inputs and reference
      problem.symmetric.traffic.direct_nodes.reset();
    } else {
      make_low_latency_reference(options, progress, problem.symmetric, options.symmetric_tokens_per_rank,
                                 options.expert_capacity, "symmetric", /*by_link=*/false);
    }
  }
  // The expert-major engines need neither the --tokens inputs nor their reference.
  if (!options.runs_rank_major()) return problem;

  progress.update("generating inputs");
  problem.inputs = workload::generate(problem.shape, options.seed);

  progress.update("computing the reference");
  NormalReference& normal = problem.normal;
  std::vector<reference::RankInputs> rank_inputs;
  std::vector<int64_t> num_tokens_per_source;
  for (int rank = 0; rank < num_ranks; ++rank) {
    rank_inputs.push_back(problem.inputs[rank].inputs());
    num_tokens_per_source.push_back(problem.shape.tokens_of(rank));
    normal.layouts.push_back(reference::layout(problem.inputs[rank].topk_idx, options.num_experts, topology));
  }
  normal.dispatched = reference::normal_dispatch(rank_inputs, options.num_experts, topology);

  std::vector<TensorView> ys, weights;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const reference::NormalDispatchOutput& received = normal.dispatched[rank];
    normal.expert_outputs.push_back(
        workload::synthetic_expert(received.recv_x, received.recv_x_scales, rank));
    ys.push_back(normal.expert_outputs.back());
    weights.push_back(received.recv_topk_weights);
  }
  normal.combined =
      reference::normal_combine(ys, weights, normal.dispatched, num_tokens_per_source, topology);

  Traffic& traffic = problem.traffic;
  for (const reference::Layout& layout : normal.layouts) {
    for (int count : layout.num_tokens_per_rank) traffic.delivered_rows += count;
  }
  for (const reference::NormalDispatchOutput& received : normal.dispatched)
    traffic.received_rows_by_rank.push_back(received.recv_x.size(0));
  traffic.routed_tokens = routed_tokens(problem.inputs);
  traffic.dispatch_row_bytes = dispatch_row_bytes(options);
  traffic.combine_row_bytes = int64_t{options.hidden} * 2;
  traffic.input_row_bytes = traffic.dispatch_row_bytes;  // x (and its fp8 scales) in the --dtype
  for (const workload::RankData& data : problem.inputs) traffic.source_tokens += data.x.size(0);
  traffic.remote_rows = rank_major_remote_rows(problem.inputs, options.num_experts, options.devices);
  if (!topology.is_single_node()) {
    traffic.nodes = node_traffic(problem.inputs, topology, options.num_experts);
    if (traffic.nodes->nvlink_rows != traffic.delivered_rows) {
      throw std::logic_error("switchyard-bench: NVLink rows " + std::to_string(traffic.nodes->nvlink_rows) +
                             " differ from the layout's delivered rows " +
                             std::to_string(traffic.delivered_rows));
    }
  }
  return problem;
}

void check_fits_in_memory(const BenchOptions& options) {
  const double ranks = options.topology.num_ranks;
  const double tokens = static_cast<double>(options.tokens_per_rank) * ranks;
  const double metadata_bytes = options.topk * (8.0 + 4.0);  // topk_idx + topk_weights per row
  // Each token reaches at most min(R, K) ranks; every delivered row is held by the reference and by
  // the engine: recv_x, y and metadata.
  const double delivered = tokens * std::min(ranks, static_cast<double>(options.topk));
  const double row = static_cast<double>(dispatch_row_bytes(options));
  const double token_bytes =
      tokens * (row + metadata_bytes + 2 * (options.hidden * 2.0 + options.topk * 4.0));
  const double delivered_bytes = 2 * delivered * (row + options.hidden * 2.0 + metadata_bytes);
  double data_bytes = token_bytes + delivered_bytes;
  const bool low_latency = options.runs_expert_major();
  const double ranks_count = options.topology.num_ranks;
  if (options.runs(BenchEngine::low_latency)) {
    data_bytes += low_latency_data_bytes(options, options.ll_tokens_per_rank,
                                         ranks_count * static_cast<double>(options.ll_tokens_per_rank));
  }
  if (options.runs(BenchEngine::symmetric)) {
    const double all_rows = ranks_count * static_cast<double>(options.symmetric_tokens_per_rank);
    // auto: uniform routing gives an expert about R * N * K / E rows; allow half again, plus a tile.
    const double expected_rows = all_rows * options.topk / options.num_experts;
    const double capacity = options.expert_capacity == 0  ? all_rows
                            : options.expert_capacity > 0 ? static_cast<double>(options.expert_capacity)
                                                          : std::min(all_rows, 1.5 * expected_rows + 64);
    data_bytes += low_latency_data_bytes(options, options.symmetric_tokens_per_rank, capacity);
    // --symmetric-heap on: x and the expert outputs also live in every rank's heap (bf16).
    if (options.symmetric_heap) {
      data_bytes += ranks_count * 2.0 * options.hidden *
                    (static_cast<double>(options.symmetric_tokens_per_rank) +
                     capacity * options.num_experts / std::max(1, options.topology.num_ranks));
    }
  }
  double heap_bytes = 0;  // host memory on cpu only; one engine's Buffers at a time
  if (options.backend == Backend::cpu) {
    BufferSizing sizing;
    sizing.max_tokens_per_rank = std::max<int64_t>(options.tokens_per_rank, 1);
    sizing.hidden = options.hidden;
    sizing.topk = options.topk;
    sizing.num_experts = options.num_experts;
    sizing.dtype = options.dtype;
    heap_bytes = ranks * static_cast<double>(normal_heap_bytes(options.topology, options.config, sizing));
    if (low_latency) {
      sizing.max_tokens_per_rank = std::max<int64_t>(options.ll_tokens_per_rank, 1);
      sizing.low_latency_max_tokens_per_rank = sizing.max_tokens_per_rank;
      const double ll_heap =
          ranks * static_cast<double>(normal_heap_bytes(options.topology, options.config, sizing) +
                                      low_latency_heap_bytes(options.topology, sizing));
      sizing.low_latency_max_tokens_per_rank = 0;
      sizing.max_tokens_per_rank = std::max<int64_t>(options.symmetric_tokens_per_rank, 1);
      sizing.symmetric_max_tokens_per_rank = sizing.max_tokens_per_rank;
      const double symmetric_heap =
          ranks * static_cast<double>(normal_heap_bytes(options.topology, options.config, sizing) +
                                      symmetric_heap_bytes(options.topology, sizing));
      heap_bytes = std::max(heap_bytes, symmetric_heap);
      heap_bytes = std::max(heap_bytes, ll_heap);
    }
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return;
  const double available = static_cast<double>(pages) * static_cast<double>(page_size);
  if (data_bytes + heap_bytes <= kMaxMemoryFraction * available) return;

  char message[600];
  if (heap_bytes > data_bytes) {
    std::snprintf(
        message, sizeof(message),
        "--ranks: expected a run that fits in host memory (%.1f GiB here), got %d ranks whose symmetric "
        "heaps need about %.1f GiB (fewer --ranks, --channels or --ring-slots shrink them; low_latency's "
        "grow with --experts x --ll-tokens)",
        available / kGiB, options.topology.num_ranks, heap_bytes / kGiB);
  } else {
    // The symmetric engine's outputs at the default expert capacity (every token of every rank, R x N rows
    // per expert) are what outgrows memory at prefill sizes: name the flag that shrinks them.
    const bool full_capacity = options.runs(BenchEngine::symmetric) && options.expert_capacity == 0;
    std::snprintf(
        message, sizeof(message),
        "--tokens: expected a run that fits in host memory (%.1f GiB here), got %lld tokens per rank%s on "
        "%d ranks (needs about %.1f GiB)%s",
        available / kGiB, static_cast<long long>(options.tokens_per_rank),
        low_latency ? (" (--ll-tokens " + std::to_string(options.ll_tokens_per_rank) +
                       ", --symmetric-tokens " + std::to_string(options.symmetric_tokens_per_rank) + ")")
                          .c_str()
                    : "",
        options.topology.num_ranks, (data_bytes + heap_bytes) / kGiB,
        full_capacity ? "; --expert-capacity auto sizes the symmetric engine's outputs for the routing "
                        "(R x N rows per expert by default)"
                      : "");
  }
  throw UsageError(message);
}

}  // namespace switchyard::bench
