#include "cuda_rank.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>

#include "cpu_rank.hpp"
#include "cuda/captured_round_trip.hpp"
#include "cuda/cuda_round_trip.hpp"
#include "cuda/device_tensors.hpp"
#include "cuda/expert_major_round_trip.hpp"
#include "cuda/rank_device.hpp"

namespace switchyard::soak {

namespace em = testing::expert_major;

namespace {

void normal_rounds(const SoakCase& c, const std::vector<Round>& rounds, em::GpuRank& gpu, bool& corrupt,
                   RankReport& report) {
  const int rank = gpu.buffer->rank();
  const workload::Shape shape = rank_major_shape(c);
  for (int index = 0; index < c.round_trips; ++index) {
    const Round& round = rounds[index];
    std::vector<std::string> lines;
    DispatchHandle handle;
    testing::DeviceRun run = testing::run_on_device(*gpu.buffer, shape, round.data[rank], round.normal,
                                                    c.expert_alignment, gpu.stream, nullptr, &handle);
    if (corrupt && flip_one_bit(run.combined_x)) {
      corrupt = false;
      report.corrupted = true;
    }
    testing::compare_with_reference(run, shape, round.normal, rank, &lines);
    if (c.cached_replay) {
      const testing::DeviceRun again = testing::run_on_device(
          *gpu.buffer, shape, round.data[rank], round.normal, c.expert_alignment, gpu.stream, &handle);
      std::vector<std::string> cached;
      testing::compare_with_reference(again, shape, round.normal, rank, &cached);
      for (const std::string& line : cached) lines.push_back("cached dispatch: " + line);
    }
    report.add_round(index, lines);
  }
}

void expert_major_rounds(const SoakCase& c, const std::vector<Round>& rounds, em::GpuRank& gpu, bool& corrupt,
                         RankReport& report) {
  const int rank = gpu.buffer->rank();
  testing::ExpertMajorCall call;
  call.engine = c.library_engine();
  call.max_tokens_per_rank = c.max_tokens;
  call.num_experts = c.num_experts;
  call.fp8 = c.fp8;
  call.hooks = c.hooks;
  call.heap_tensors = c.heap_tensors;
  const int batch = c.back_to_back ? 2 : 1;
  for (int first = 0; first < c.round_trips; first += batch) {
    const int count = std::min(batch, c.round_trips - first);
    std::vector<const workload::RankData*> data;
    std::vector<TensorView> ys;
    for (int i = 0; i < count; ++i) {
      data.push_back(&rounds[first + i].data[rank]);
      ys.push_back(rounds[first + i].expert_major.ys[rank]);
    }
    std::vector<testing::ExpertMajorRun> runs =
        testing::run_expert_major_on_device(*gpu.buffer, call, data, ys, gpu.stream);
    for (int i = 0; i < count; ++i) {
      if (corrupt && flip_one_bit(runs[i].combined_x)) {
        corrupt = false;
        report.corrupted = true;
      }
      std::vector<std::string> lines;
      testing::compare_expert_major(runs[i], rounds[first + i].expert_major, rank, "reference", &lines);
      report.add_round(first + i, lines);
    }
  }
}

void poison(const Tensor& device_tensor, cudaStream_t stream) {
  if (device_tensor.defined() && device_tensor.nbytes() > 0) {
    em::check_cuda(cudaMemsetAsync(device_tensor.data(), em::kPoison, device_tensor.nbytes(), stream),
                   "poison");
  }
}

// The captured round trip. A call refused during the capture leaves the stream capturing: the
// capture is ended (its graph dropped) before the error goes on, so that the stream can be destroyed
// and the next case starts clean.
std::unique_ptr<em::CapturedRoundTrip> capture(const SoakCase& c, const em::Case& call, Group& group,
                                               em::GpuRank& gpu, const em::DeviceInputs& in, const Tensor& y,
                                               const em::PoisonedOutputs& out) {
  try {
    return std::make_unique<em::CapturedRoundTrip>(c.library_engine(), call, group, *gpu.buffer, in, y, out,
                                                   gpu.stream);
  } catch (...) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(gpu.stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(gpu.stream, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
    }
    cudaGetLastError();  // the capture's error is not sticky; the exception carries it
    throw;
  }
}

// Dispatch and combine captured once on the first round's tensors, then replayed for every round
// with its inputs and expert outputs uploaded into the same tensors and the outputs poisoned again.
void graph_replays(const SoakCase& c, const std::vector<Round>& rounds, Group& group, em::GpuRank& gpu,
                   bool& corrupt, RankReport& report) {
  const int rank = group.rank();
  const cudaStream_t stream = gpu.stream;
  const em::Case& call = rounds[0].call;
  const workload::RankData& first = rounds[0].data[rank];
  const em::DeviceInputs in = em::upload_inputs(first, gpu.device, stream);
  const Tensor y = testing::poisoned_device(
      DType::bf16, {c.num_experts / c.topology.num_ranks, em::rows_per_expert(call), c.hidden}, gpu.device,
      stream);
  const em::PoisonedOutputs out = em::poisoned_device_outputs(call, first.x.size(0), gpu.device, stream);
  const std::unique_ptr<em::CapturedRoundTrip> owned = capture(c, call, group, gpu, in, y, out);
  const em::CapturedRoundTrip& captured = *owned;
  for (int index = 0; index < c.round_trips; ++index) {
    const Round& round = rounds[index];
    const workload::RankData& data = round.data[rank];
    testing::upload(in.x, data.x, stream);
    testing::upload(in.topk_idx, data.topk_idx, stream);
    testing::upload(in.topk_weights, data.topk_weights, stream);
    testing::upload(y, round.expert_major.ys[rank], stream);
    for (const Tensor* tensor : {&out.recv_x, &out.recv_x_scales, &out.recv_count, &out.layout_range,
                                 &out.src_info, &out.combined_x}) {
      poison(*tensor, stream);
    }
    captured.launch_dispatch();
    captured.launch_combine();
    gpu.buffer->synchronize(stream);
    em::Outputs got = em::download(out, stream);
    got.combined_x = testing::to_host(out.combined_x, stream);
    if (corrupt && flip_one_bit(got.combined_x)) {
      corrupt = false;
      report.corrupted = true;
    }
    em::Failures failures;
    em::check_outputs(got, em::reference_outputs(round.expert_major, rank), "reference (graph replay)", rank,
                      failures);
    report.add_round(index, failures.lines());
  }
  group.barrier();
}

}  // namespace

RankReport run_cuda_rank(const SoakCase& c, const std::vector<Round>& rounds, Group& group, bool corrupt) {
  RankReport report;
  corrupt = corrupt && group.rank() == 0;
  BufferOptions options = soak_buffer_options(c, group.rank(), HeapSharing::threads);
  options.device = testing::device_for_rank(group.rank(), c.topology.num_ranks);
  em::GpuRank gpu(options, group);
  if (c.is_rank_major()) {
    normal_rounds(c, rounds, gpu, corrupt, report);
  } else if (c.graph_replays) {
    graph_replays(c, rounds, group, gpu, corrupt, report);
  } else {
    expert_major_rounds(c, rounds, gpu, corrupt, report);
  }
  em::check_cuda(cudaStreamSynchronize(gpu.stream), "rank stream");
  // No peer may still read this rank's heap when the Buffer goes.
  group.barrier();
  return report;
}

size_t cuda_free_bytes() {
  em::check_cuda(cudaSetDevice(0), "cudaSetDevice");
  cudaMemPool_t pool;
  em::check_cuda(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
  em::check_cuda(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
  size_t free_bytes = 0, total_bytes = 0;
  em::check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return free_bytes;
}

}  // namespace switchyard::soak
