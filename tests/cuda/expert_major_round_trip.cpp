#include "cuda/expert_major_round_trip.hpp"

#include <cuda_runtime.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "common/symmetric_protocol.hpp"
#include "core/buffer_access.hpp"
#include "cuda/device_tensors.hpp"
#include "cuda/rank_device.hpp"
#include "cuda/symmetric/engine.hpp"
#include "device/pageable_copy.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::testing {

namespace expert_major {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

BufferOptions cuda_buffer_options(const Case& c, int rank, Regions regions, double timeout_seconds) {
  BufferOptions options = buffer_options(c, rank, regions, timeout_seconds);
  options.backend = Backend::cuda;
  options.device = device_for_rank(rank, options.topology.num_ranks);
  return options;
}

GpuRank::GpuRank(const BufferOptions& options, Group& group) : GpuRank(options, &group) {}

GpuRank::GpuRank(const BufferOptions& options) : GpuRank(options, nullptr) {}

GpuRank::GpuRank(const BufferOptions& options, Group* group) : device(options.device) {
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  buffer = std::make_unique<Buffer>(options);
  buffer->connect(group != nullptr ? group->allgather(buffer->local_handle())
                                   : std::vector<Bytes>{buffer->local_handle()});
}

GpuRank::~GpuRank() {
  buffer.reset();
  cudaStreamDestroy(stream);
}

void with_gpu_ranks(const Case& c, Regions regions,
                    const std::function<void(Group&, Buffer&, cudaStream_t)>& body, double timeout_seconds) {
  run_ranks(c.ranks, [&](Group& group) {
    GpuRank gpu(cuda_buffer_options(c, group.rank(), regions, timeout_seconds), group);
    body(group, *gpu.buffer, gpu.stream);
    group.barrier();
  });
}

DeviceInputs upload_inputs(const workload::RankData& data, int device, cudaStream_t stream) {
  return {to_device(data.x, device, stream), to_device(data.topk_idx, device, stream),
          to_device(data.topk_weights, device, stream)};
}

PoisonedOutputs poisoned_device_outputs(const Case& c, int64_t num_tokens, int device, cudaStream_t stream) {
  return poisoned_outputs(c, num_tokens, [device, stream](DType dtype, std::initializer_list<int64_t> dims) {
    return poisoned_device(dtype, dims, device, stream);
  });
}

Outputs download(const DispatchView& on_device, cudaStream_t stream) {
  Outputs out;
  out.recv_x = to_host(on_device.recv_x, stream);
  out.recv_x_scales = to_host(on_device.recv_x_scales, stream);
  out.recv_count = to_host(on_device.recv_count, stream);
  out.layout_range = to_host(on_device.layout_range, stream);
  out.src_info = to_host(on_device.src_info, stream);
  return out;
}

bool all_poison_on_device(const TensorView& device_tensor, cudaStream_t stream) {
  return all_poison(to_host(device_tensor, stream));
}

common::SymmetricSourceRecord latest_source_record(Buffer& buffer, cudaStream_t stream) {
  const common::SymmetricLayout& layout = detail::BufferAccess::symmetric_layout(buffer);
  uint8_t* heap = detail::BufferAccess::heap_base(buffer);
  common::SymmetricSourceRecord records[common::kSymmetricHalves];
  for (int half = 0; half < common::kSymmetricHalves; ++half) {
    check_cuda(cuda::copy_pageable(&records[half], layout.source_record(heap, half), sizeof(records[half]),
                                   cudaMemcpyDeviceToHost, stream),
               "reading the source record");
  }
  return records[0].sequence > records[1].sequence ? records[0] : records[1];
}

std::string check_push_announced(Buffer& buffer, const SymmetricReceiveViews& views, int64_t rows,
                                 cudaStream_t stream) {
  const cuda::SymmetricPull pull = cuda::symmetric_pull_from_environment();
  if (pull != cuda::SymmetricPull::automatic && pull != cuda::SymmetricPull::push) return "";
  uint8_t* heap = detail::BufferAccess::heap_base(buffer);
  const common::SymmetricSourceRecord record = latest_source_record(buffer, stream);
  const uint64_t recv_x = static_cast<uint64_t>(static_cast<const uint8_t*>(views.recv_x.data) - heap);
  // A bf16 area has no scales: its dispatches announce 0 for them.
  const uint64_t scales =
      views.recv_x_scales.defined()
          ? static_cast<uint64_t>(static_cast<const uint8_t*>(views.recv_x_scales.data) - heap)
          : 0;
  if (record.recv_at == common::SymmetricRowsAt::heap && record.recv_x == recv_x &&
      record.recv_x_scales == scales && record.recv_capacity == rows) {
    return "";
  }
  return "the dispatch (call " + std::to_string(record.sequence) +
         ") did not announce the push into the heap receive area: recv_at " +
         std::to_string(static_cast<uint32_t>(record.recv_at)) + ", recv_x " + std::to_string(record.recv_x) +
         " (expected heap offset " + std::to_string(recv_x) + "), recv_x_scales " +
         std::to_string(record.recv_x_scales) + " (expected " + std::to_string(scales) + "), capacity " +
         std::to_string(record.recv_capacity) + " (expected " + std::to_string(rows) + ")";
}

}  // namespace expert_major

// ---- the process-per-rank round trip ------------------------------------------------------------------

namespace {

using expert_major::Case;
using expert_major::DeviceInputs;
using expert_major::PoisonedOutputs;

// With hooks: runs the receive half. The delay differs per rank, so peers' sends land while this
// rank is still busy elsewhere, which is what the split is for.
void run_hook(const std::function<void()>& hook, const char* call, int rank) {
  if (!hook) {
    throw std::runtime_error(std::string(call) + ": expected a hook with return_recv_hook, got none");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * rank));
  hook();
}

// The shape a call makes on a buffer of `ranks` ranks with rows of `hidden` channels.
Case case_of(const ExpertMajorCall& call, int ranks, int64_t hidden) {
  Case c;
  c.name = engine_name(call.engine);
  c.ranks = ranks;
  c.max_tokens = call.max_tokens_per_rank;
  c.hidden = static_cast<int>(hidden);
  c.num_experts = call.num_experts;
  c.fp8 = call.fp8;
  return c;
}

// One call's device tensors: inputs, expert outputs, and poisoned outputs (anything the engine fails
// to write shows up as 0xA5 bytes).
struct CallOnDevice {
  DeviceInputs in;
  Tensor y;
  PoisonedOutputs out;
  // With ExpertMajorCall::heap_receive: the dispatch's recv_x and recv_x_scales (poisoned before it).
  SymmetricReceiveViews receive;
  LowLatencyDispatchResult dispatched;
};

CallOnDevice upload_call(const Case& c, const workload::RankData& data, const TensorView& y, int device,
                         cudaStream_t stream) {
  CallOnDevice on_device;
  on_device.in = expert_major::upload_inputs(data, device, stream);
  on_device.y = to_device(y, device, stream);
  on_device.out = expert_major::poisoned_device_outputs(c, data.x.size(0), device, stream);
  return on_device;
}

void dispatch_call(Buffer& buffer, const ExpertMajorCall& call, const Case& c, CallOnDevice& on_device,
                   cudaStream_t stream) {
  LowLatencyDispatchArgs args = expert_major::dispatch_args(c, on_device.in.x, on_device.in.topk_idx, stream);
  if (call.heap_tensors) {
    // Stream-ordered after the previous dispatch, which returns only once no peer reads its x.
    const TensorView x =
        buffer.symmetric_input(on_device.in.x.size(0), static_cast<int>(on_device.in.x.size(1)));
    expert_major::check_cuda(
        cudaMemcpyAsync(x.data, on_device.in.x.data(), x.nbytes(), cudaMemcpyDeviceToDevice, stream),
        "copying x into symmetric_input");
    args.x = x;
  }
  args.return_recv_hook = call.hooks;
  on_device.out.attach(args);
  if (call.heap_receive) {
    // Every source pushes its rows straight into this rank's heap receive area (across processes too);
    // poisoned on the stream, so that a row nobody wrote shows as 0xA5 bytes. The dispatch's rows per
    // expert and hidden.
    on_device.receive = buffer.symmetric_receive(expert_major::rows_per_expert(c), c.hidden);
    for (const TensorView* view : {&on_device.receive.recv_x, &on_device.receive.recv_x_scales}) {
      if (!view->defined()) continue;  // a bf16 area has no scales
      expert_major::check_cuda(cudaMemsetAsync(view->data, expert_major::kPoison, view->nbytes(), stream),
                               "poisoning the heap receive area");
    }
    args.out_recv_x = on_device.receive.recv_x;
    if (on_device.receive.recv_x_scales.defined()) args.out_recv_x_scales = on_device.receive.recv_x_scales;
  }
  on_device.dispatched = expert_major::dispatch_with(call.engine, buffer, args);
  if (call.hooks) run_hook(on_device.dispatched.hook, "dispatch", buffer.rank());
}

Tensor combine_call(Buffer& buffer, const ExpertMajorCall& call, const CallOnDevice& on_device,
                    cudaStream_t stream) {
  LowLatencyCombineArgs args = expert_major::combine_args(on_device.in.topk_idx, on_device.in.topk_weights,
                                                          on_device.dispatched.handle, on_device.y, stream);
  if (call.heap_tensors) {
    const TensorView y = buffer.symmetric_expert_output(on_device.dispatched.handle);
    expert_major::check_cuda(
        cudaMemcpyAsync(y.data, on_device.y.data(), y.nbytes(), cudaMemcpyDeviceToDevice, stream),
        "copying y into symmetric_expert_output");
    args.x = y;
  }
  args.return_recv_hook = call.hooks;
  on_device.out.attach(args);
  LowLatencyCombineResult combined = expert_major::combine_with(call.engine, buffer, args);
  if (call.hooks) run_hook(combined.hook, "combine", buffer.rank());
  return combined.combined_x;
}

}  // namespace

ExpertMajorExpected expert_major_expected(const ExpertMajorCall& call, const Topology& topology,
                                          const std::vector<workload::RankData>& data) {
  if (call.fp8.use_ue8m0) {
    throw InvalidArgument("fp8.use_ue8m0: expected false (the synthetic expert needs f32 scales), got true");
  }
  return expert_major::expected_from(data, call.num_experts, topology, call.max_tokens_per_rank, call.fp8);
}

std::vector<ExpertMajorRun> run_expert_major_on_device(Buffer& buffer, const ExpertMajorCall& call,
                                                       const std::vector<const workload::RankData*>& data,
                                                       const std::vector<TensorView>& ys, cudaStream_t stream,
                                                       std::vector<std::string>* failures) {
  if (ys.size() != data.size()) {
    throw InvalidArgument("ys: expected one per call (" + std::to_string(data.size()) + "), got " +
                          std::to_string(ys.size()));
  }
  if (call.heap_receive && (call.engine != Engine::symmetric || call.fp8.use_ue8m0 || call.hooks)) {
    throw InvalidArgument(
        "heap_receive: expected a symmetric bf16 call, or fp8 with f32 scales (not use_ue8m0), and no hooks, "
        "got " +
        std::string(engine_name(call.engine)) + (call.fp8.use_fp8 ? " fp8" : " bf16") +
        (call.fp8.use_ue8m0 ? " ue8m0" : "") + (call.hooks ? " with hooks" : ""));
  }
  std::vector<CallOnDevice> calls;
  std::vector<Case> cases;
  for (size_t i = 0; i < data.size(); ++i) {
    cases.push_back(case_of(call, buffer.topology().num_ranks, data[i]->x.size(1)));
    calls.push_back(upload_call(cases[i], *data[i], ys[i], device_of(buffer), stream));
  }
  std::vector<ExpertMajorRun> runs;
  if (call.heap_receive) {
    // One receive area per buffer: a dispatch's outputs come down before the next dispatch rewrites them
    // (peers push into it only after this rank has reached that dispatch's barrier).
    for (size_t i = 0; i < calls.size(); ++i) {
      dispatch_call(buffer, call, cases[i], calls[i], stream);
      buffer.synchronize(stream);
      runs.push_back(expert_major::download(calls[i].dispatched, stream));
      const std::string announced = expert_major::check_push_announced(
          buffer, calls[i].receive, expert_major::rows_per_expert(cases[i]), stream);
      if (!announced.empty() && failures != nullptr)
        failures->push_back(std::string(engine_name(call.engine)) + (call.fp8.use_fp8 ? " fp8" : " bf16") +
                            " call " + std::to_string(i) + ": " + announced);
    }
  } else {
    for (size_t i = 0; i < calls.size(); ++i) dispatch_call(buffer, call, cases[i], calls[i], stream);
    buffer.synchronize(stream);
    for (const CallOnDevice& on_device : calls)
      runs.push_back(expert_major::download(on_device.dispatched, stream));
  }
  // NOTES: combines in the reverse order of their dispatches, as the thread suites do: the first
  // dispatch's handle must still hold its routing after the later calls.
  std::vector<Tensor> combined(calls.size());
  for (size_t i = calls.size(); i-- > 0;) combined[i] = combine_call(buffer, call, calls[i], stream);
  buffer.synchronize(stream);
  for (size_t i = 0; i < calls.size(); ++i) runs[i].combined_x = to_host(combined[i], stream);
  return runs;
}

void compare_expert_major(const ExpertMajorRun& run, const ExpertMajorExpected& expected, int rank,
                          const std::string& label, std::vector<std::string>* failures) {
  expert_major::Failures found;
  expert_major::check_outputs(run, expert_major::reference_outputs(expected, rank), label, rank, found);
  for (const std::string& line : found.lines()) failures->push_back(line);
}

}  // namespace switchyard::testing
