#pragma once
// One rank's round trip through an expert-major engine (low_latency or symmetric) on the GPU:
// inputs up, dispatch into poisoned outputs, expert outputs up, combine into a poisoned output,
// everything down; and its bitwise comparison with the reference. The expert outputs are the
// synthetic expert on the reference's recv_x, so the combine is checked on its own even where the
// dispatch is wrong. No GoogleTest dependency (the process-per-rank test uses it): mismatches come
// back as text.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "switchyard/buffer.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing {

struct ExpertMajorCall {
  Engine engine = Engine::low_latency;  // low_latency or symmetric
  int64_t max_tokens_per_rank = 0;
  int num_experts = 0;
  // use_ue8m0 is refused: the synthetic expert needs f32 scales to dequantise recv_x.
  reference::LowLatencyOptions fp8;
  // Both calls with return_recv_hook, each hook run right after its send half (low_latency only).
  bool hooks = false;
};

// What every rank should get, from all ranks' inputs.
struct ExpertMajorExpected {
  std::vector<reference::LowLatencyDispatchOutput> dispatched;  // [R]
  std::vector<Tensor> ys;                                       // [R]: bf16 [L, R * max, H]
  std::vector<Tensor> combined;                                 // [R]: bf16 [N, H]
};

ExpertMajorExpected expert_major_expected(const ExpertMajorCall& call, const Topology& topology,
                                          const std::vector<workload::RankData>& data);

// One rank's outputs, on the host.
struct ExpertMajorRun {
  Tensor recv_x, recv_x_scales, recv_count, layout_range, src_info, combined_x;
};

// Dispatches every data[i] on this rank, back to back (consecutive calls alternate the buffer's
// halves, so two calls cover both), then combines them in the reverse order. ys[i] is this rank's
// expert outputs for data[i] (host, bf16 [L, R * max, H]). Synchronises `stream`.
std::vector<ExpertMajorRun> run_expert_major_on_device(Buffer& buffer, const ExpertMajorCall& call,
                                                       const std::vector<const workload::RankData*>& data,
                                                       const std::vector<TensorView>& ys,
                                                       cudaStream_t stream);

// Appends one line per mismatch with the reference to `failures`, each starting with the rank and
// `label`. recv_x and its scales are compared on received rows only (the rest is unspecified).
void compare_expert_major(const ExpertMajorRun& run, const ExpertMajorExpected& expected, int rank,
                          const std::string& label, std::vector<std::string>* failures);

}  // namespace switchyard::testing
