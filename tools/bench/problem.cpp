#include "problem.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

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

}  // namespace

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

  progress.update("inputs", "generating inputs");
  problem.inputs = workload::generate(problem.shape, options.seed);

  progress.update("reference", "computing the reference");
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
  traffic.dispatch_row_bytes = dispatch_row_bytes(options);
  traffic.combine_row_bytes = int64_t{options.hidden} * 2;
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
  const double data_bytes = token_bytes + delivered_bytes;
  double heap_bytes = 0;  // host memory on cpu only
  if (options.backend == Backend::cpu) {
    BufferSizing sizing;
    sizing.max_tokens_per_rank = std::max<int64_t>(options.tokens_per_rank, 1);
    sizing.hidden = options.hidden;
    sizing.topk = options.topk;
    sizing.num_experts = options.num_experts;
    sizing.dtype = options.dtype;
    heap_bytes = ranks * static_cast<double>(normal_heap_bytes(options.topology, options.config, sizing));
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return;
  const double available = static_cast<double>(pages) * static_cast<double>(page_size);
  if (data_bytes + heap_bytes <= kMaxMemoryFraction * available) return;

  char message[400];
  if (heap_bytes > data_bytes) {
    std::snprintf(
        message, sizeof(message),
        "--ranks: expected a run that fits in host memory (%.1f GiB here), got %d ranks whose symmetric "
        "heaps need about %.1f GiB (fewer --ranks, --channels or --ring-slots shrink them)",
        available / kGiB, options.topology.num_ranks, heap_bytes / kGiB);
  } else {
    std::snprintf(
        message, sizeof(message),
        "--tokens: expected a run that fits in host memory (%.1f GiB here), got %lld tokens per rank on "
        "%d ranks (needs about %.1f GiB)",
        available / kGiB, static_cast<long long>(options.tokens_per_rank), options.topology.num_ranks,
        (data_bytes + heap_bytes) / kGiB);
  }
  throw UsageError(message);
}

}  // namespace switchyard::bench
