#pragma once
// The expert-major engines (low_latency and symmetric) on the GPU, on top of the host support
// (support/expert_major_cases.hpp): a rank's stream and buffer, inputs up, poisoned outputs on the
// device, outputs down; and the process-per-rank test's round trip with its bitwise comparison. No
// GoogleTest dependency (the process-per-rank test uses it): mismatches come back as text.
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/symmetric_protocol.hpp"
#include "cuda/cuda_round_trip.hpp"
#include "support/expert_major_cases.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing {

namespace expert_major {

// Throws on a CUDA error. Inside rank threads an exception (not an ASSERT, which would only leave
// this rank's lambda) makes run_ranks abort the group, so the other ranks stop instead of waiting.
void check_cuda(cudaError_t status, const char* what);

// Rank `rank` of `c` on the CUDA backend, on its device_for_rank (cuda/rank_device.hpp).
BufferOptions cuda_buffer_options(const Case& c, int rank, Regions regions, double timeout_seconds);

// One rank on the GPU: a non-blocking stream of its own on options.device (ranks as threads must
// never meet on the legacy stream), which it makes the calling thread's current device, and a
// connected buffer. Tensors allocated on `stream` must go before it does.
struct GpuRank {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<Buffer> buffer;

  // Connected to the group's other ranks.
  GpuRank(const BufferOptions& options, Group& group);
  // A single rank, connected to itself.
  explicit GpuRank(const BufferOptions& options);
  GpuRank(const GpuRank&) = delete;
  GpuRank& operator=(const GpuRank&) = delete;
  ~GpuRank();

 private:
  GpuRank(const BufferOptions& options, Group* group);
};

// Runs body(group, buffer, stream) on every rank (threads) of `c` with a GpuRank; the body
// synchronises its stream before returning, and buffers stay alive until every rank is done.
void with_gpu_ranks(const Case& c, Regions regions,
                    const std::function<void(Group&, Buffer&, cudaStream_t)>& body, double timeout_seconds);

// One rank's inputs on the device.
struct DeviceInputs {
  Tensor x, topk_idx, topk_weights;
};
DeviceInputs upload_inputs(const workload::RankData& data, int device, cudaStream_t stream);

// poisoned_outputs on `device`, ordered on `stream`.
PoisonedOutputs poisoned_device_outputs(const Case& c, int64_t num_tokens, int device, cudaStream_t stream);

// A dispatch's outputs, down to the host after the work queued on `stream` (combined_x undefined).
Outputs download(const DispatchView& on_device, cudaStream_t stream);

// Whether every byte of a device tensor is still kPoison.
bool all_poison_on_device(const TensorView& device_tensor, cudaStream_t stream);

// Empty when this rank's latest symmetric dispatch announced `views` (Buffer::symmetric_receive's, `rows`
// per local expert) for the sources' fp8 push: its source record (the half with the later sequence, read
// from this rank's heap after the work queued on `stream`) says recv_at heap, at the views' offsets, with
// capacity `rows`. Else what it announced. Also empty where SWITCHYARD_SYMMETRIC_PULL forces a pull.
std::string check_push_announced(Buffer& buffer, const SymmetricReceiveViews& views, int64_t rows,
                                 cudaStream_t stream);

// This rank's latest symmetric dispatch's source record (the half with the later sequence), read from its
// heap after the work queued on `stream`: where it told the sources to find its outputs (recv_at).
common::SymmetricSourceRecord latest_source_record(Buffer& buffer, cudaStream_t stream);

}  // namespace expert_major

// ---- the process-per-rank round trip ------------------------------------------------------------------

struct ExpertMajorCall {
  Engine engine = Engine::low_latency;  // low_latency or symmetric
  int64_t max_tokens_per_rank = 0;
  int num_experts = 0;
  // use_ue8m0 is refused: the synthetic expert needs f32 scales to dequantise recv_x.
  reference::LowLatencyOptions fp8;
  // Both calls with return_recv_hook, each hook run right after its send half (low_latency only).
  bool hooks = false;
  // symmetric only: x copied into Buffer::symmetric_input before each dispatch, and y into
  // Buffer::symmetric_expert_output before each combine, and the calls given those views (the buffer
  // needs BufferSizing::symmetric_heap_input and symmetric_heap_output_rows_per_expert).
  bool heap_tensors = false;
  // symmetric bf16, or fp8 with f32 scales, only: each dispatch's out_recv_x (and out_recv_x_scales) are the
  // heap receive area's views (the buffer's area of the call's dtype) (Buffer::symmetric_receive, poisoned
  // before the dispatch), so that every source pushes its rows straight into them, also across processes;
  // each dispatch is checked to have announced the push. The buffer needs
  // BufferSizing::symmetric_heap_receive_rows_per_expert >= R * max_tokens_per_rank. The area is one per
  // buffer: each call is dispatched and its outputs downloaded before the next dispatch.
  bool heap_receive = false;
};

// What every rank should get, from all ranks' inputs.
using ExpertMajorExpected = expert_major::Expected;

ExpertMajorExpected expert_major_expected(const ExpertMajorCall& call, const Topology& topology,
                                          const std::vector<workload::RankData>& data);

// One rank's outputs, on the host.
using ExpertMajorRun = expert_major::Outputs;

// Dispatches every data[i] on this rank, back to back (consecutive calls alternate the buffer's
// halves, so two calls cover both), then combines them in the reverse order. ys[i] is this rank's
// expert outputs for data[i] (host, bf16 [L, R * max, H]). Every output is a poisoned tensor passed
// in. With call.heap_receive the dispatches are not in flight together: each one's outputs come down
// before the next dispatch, and a dispatch that did not announce the push adds a line to `failures`
// (when given). Synchronises `stream`.
std::vector<ExpertMajorRun> run_expert_major_on_device(Buffer& buffer, const ExpertMajorCall& call,
                                                       const std::vector<const workload::RankData*>& data,
                                                       const std::vector<TensorView>& ys, cudaStream_t stream,
                                                       std::vector<std::string>* failures = nullptr);

// Appends one line per mismatch with the reference to `failures`, each naming the rank and `label`.
// recv_x and its scales are compared on received rows only (the rest is unspecified).
void compare_expert_major(const ExpertMajorRun& run, const ExpertMajorExpected& expected, int rank,
                          const std::string& label, std::vector<std::string>* failures);

}  // namespace switchyard::testing
