// The CUDA backend: the device symmetric heap, the streams, the device error block and its
// translation into exceptions, the memory-pool policy; the engines (cuda/<engine>/) do the calls.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <sstream>

#include "core/backend.hpp"
#include "core/expert_capacity.hpp"
#include "core/handle_format.hpp"
#include "core/normal_sizing.hpp"
#include "cuda/backend/call_services.hpp"
#include "cuda/backend/capturing_stream_device.hpp"
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/device_connections.hpp"
#include "cuda/backend/device_heap.hpp"
#include "cuda/backend/nccl_gin_choice.hpp"
#include "cuda/backend/rank_mask.hpp"
#include "cuda/backend/signal_scope.hpp"
#include "cuda/internode/engine.hpp"
#include "cuda/low_latency/engine.hpp"
#include "cuda/moe/experts.hpp"
#include "cuda/normal/engine.hpp"
#include "cuda/symmetric/engine.hpp"
#include "device/cuda_check.hpp"

namespace switchyard::cuda {

namespace {

// NOTES: the kernels give a warp group at most 32 warps, one or more per peer.
constexpr int kMaxCudaRanks = 32;

}  // namespace

class CudaBackend final : public detail::BackendImpl, private CallServices {
 public:
  explicit CudaBackend(const detail::BackendCreateInfo& info)
      : options_(*info.options),
        device_(info.options->device),
        heap_(info.heap_bytes, info.options->rank, info.options->topology.num_ranks, info.options->device,
              info.options->sharing),
        owner_(info.owner),
        symmetric_(services(), info.owner) {
    // SWITCHYARD_DEPENDENT_LAUNCH is read here, before anything is allocated, so that a bad value is refused
    // when the buffer is made rather than at its first launch (cuda/backend/dependent_launch.hpp).
    dependent_launches();
    if (options_.topology.num_ranks > kMaxCudaRanks) {
      throw Unsupported("topology.num_ranks: the CUDA normal engine supports up to " +
                        std::to_string(kMaxCudaRanks) + " ranks in one load/store domain, got " +
                        std::to_string(options_.topology.num_ranks));
    }
    SY_CUDA_CHECK(cudaSetDevice(device_));
    prepare_capturing_stream_checks();
    SY_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
    error_record_.allocate(1);
    SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&abort_flag_), sizeof(int32_t)));
    SY_CUDA_CHECK(cudaMemset(abort_flag_, 0, sizeof(int32_t)));
    SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&error_claim_), sizeof(int32_t)));
    SY_CUDA_CHECK(cudaMemset(error_claim_, 0, sizeof(int32_t)));
    SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&barrier_epoch_), sizeof(uint64_t)));
    SY_CUDA_CHECK(cudaMemset(barrier_epoch_, 0, sizeof(uint64_t)));
    // Those memsets ran on the legacy stream, which the ranks' non-blocking streams do not wait for.
    SY_CUDA_CHECK(cudaDeviceSynchronize());
    SY_CUDA_CHECK(cudaStreamCreateWithFlags(&own_stream_, cudaStreamNonBlocking));
    mask_ = std::make_unique<DeviceRankMask>(options_.topology.num_ranks, device_);
    // The engines prepare their kernels once, before any rank launches: changing a kernel's
    // attributes later could wait for its running instances, i.e. for peers that wait for us.
    normal_ = std::make_unique<NormalEngine>(options_, owner_, services());
    symmetric_.prepare(device_, sm_count_);
    prepare_moe_kernels(device_);
    low_latency_ = std::make_unique<LowLatencyEngine>(options_, heap_, sm_count_, owner_, services());
    // Across nodes, `normal` is the hierarchical engine (its kernels are prepared here too).
    if (!options_.topology.is_single_node()) {
      internode_ =
          std::make_unique<InternodeEngine>(options_, info.heap_bytes, sm_count_, owner_, services());
    }
    // The engines (core/engine.hpp): this backend's one registration point.
    engines_.normal = internode_ ? static_cast<detail::NormalUnit*>(internode_.get()) : normal_.get();
    engines_.low_latency = low_latency_.get();
    engines_.symmetric = &symmetric_;
    // Stream-ordered allocations come from the device's default pool. By default the pool returns
    // free memory to the driver at every synchronisation, and unmapping can wait for the whole
    // device, i.e. for peers that wait for us: keep it.
    cudaMemPool_t pool;
    SY_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
    uint64_t keep_everything = UINT64_MAX;
    SY_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
    // Nor may the pool make one rank's stream wait for another's pending free to reuse its memory:
    // such a hidden dependency between ranks' streams can deadlock ranks that spin on each other.
    int no = 0;
    SY_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no));
    channels_ = options_.config.num_channels != Config::kAutoChannels
                    ? options_.config.num_channels
                    : std::max(1, std::min(Config::kMaxAutoCudaChannels, sm_count_ / 2));
    max_channels_ = channels_;  // until connect() knows how many ranks share the GPU
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (own_stream_) cudaStreamSynchronize(own_stream_), cudaStreamDestroy(own_stream_);
    cudaFree(abort_flag_);
    cudaFree(barrier_epoch_);
    cudaFree(error_claim_);
  }

  Device device() const override { return Device::cuda; }
  int num_channels() const override { return channels_; }
  int max_num_channels() const override { return max_channels_; }
  Bytes local_handle() const override { return heap_.local_handle(); }

  void connect(const std::vector<Bytes>& all_handles) override {
    std::vector<Bytes> payloads;
    for (const Bytes& handle : all_handles) payloads.push_back(detail::handle_payload(handle));
    heap_.connect(payloads);
    symmetric_.connect(options_.config, options_.sharing, options_.topology.num_ranks,
                       heap_.ranks_on_this_device(),
                       options_.sizing.symmetric_heap_output_rows_per_expert > 0);
    // Every block of every rank on this GPU spins on the others: all must be resident at once.
    const int sharing_ranks = heap_.ranks_on_this_device();
    // ... and as threads, every rank needs its own hardware queue (cuda/backend/device_connections.hpp).
    if (options_.sharing == HeapSharing::threads) {
      check_rank_threads_fit_connections(sharing_ranks, device_, std::getenv(kDeviceConnectionsVariable));
    }
    const int fitting_channels = sm_count_ / (2 * sharing_ranks);
    max_channels_ = std::max(1, std::min(fitting_channels, Config::kMaxChannels));
    if (options_.config.num_channels == Config::kAutoChannels) {
      channels_ = std::min(channels_, fitting_channels);
      if (channels_ < 1) {
        throw Unsupported("topology: " + std::to_string(sharing_ranks) + " ranks share GPU " +
                          std::to_string(device_) + ", but each needs 2 resident blocks and the GPU has " +
                          std::to_string(sm_count_) + " SMs");
      }
    } else if (channels_ > fitting_channels) {
      throw InvalidArgument(
          "config.num_channels: expected at most " + std::to_string(fitting_channels) + " (" +
          std::to_string(sharing_ranks) + " ranks share this GPU's " + std::to_string(sm_count_) +
          " SMs, and every rank's 2 blocks per channel must be resident at once to avoid deadlock), "
          "got " +
          std::to_string(channels_));
    }
  }

  Tensor allocate(DType dtype, std::initializer_list<int64_t> dims) override {
    return Tensor::empty(dtype, dims, Device::cuda, device_);
  }

  DispatchLayout get_dispatch_layout(const TensorView& topk_idx, int num_experts, Stream stream_handle,
                                     const DispatchLayoutOutputs* out) override {
    SY_CUDA_CHECK(cudaSetDevice(device_));
    const cudaStream_t stream = resolve(stream_handle);
    throw_pending_device_error();
    return normal_->layout(topk_idx, num_experts, kernel_context(common::NormalHeapLayout{}),
                           call_env(stream), out);
  }

  uint8_t* heap_base() override { return heap_.view().base; }

  // The unfused path (cuda/moe/experts.hpp): CUTLASS grouped GEMMs and the SwiGLU kernel.
  std::unique_ptr<detail::MoeExperts> make_moe_experts(const detail::MoeExpertsPlan& plan) override {
    SY_CUDA_CHECK(cudaSetDevice(device_));
    const common::SymmetricLayout layout = plan.symmetric;
    return std::make_unique<CudaMoeExperts>(plan, own_stream_, [this, layout](cudaStream_t stream) {
      symmetric_.barrier(layout, expert_major_call_context(), stream);
    });
  }
  void run_moe_experts(detail::MoeExperts& experts, const detail::MoeExpertsCall& call) override {
    SY_CUDA_CHECK(cudaSetDevice(device_));
    detail::MoeExpertsCall resolved = call;
    resolved.stream = resolve(static_cast<Stream>(call.stream));
    experts.run(resolved);
  }

  void update_mask(int rank, bool masked, Stream stream) override {
    SY_CUDA_CHECK(cudaSetDevice(device_));
    mask_->set(rank, masked, resolve(stream));
  }
  Tensor query_mask(Stream stream) override {
    SY_CUDA_CHECK(cudaSetDevice(device_));
    const cudaStream_t resolved = resolve(stream);
    return mask_->snapshot(resolved, alloc_stream(resolved));
  }
  void clean_mask(Stream stream) override {
    SY_CUDA_CHECK(cudaSetDevice(device_));
    mask_->clear(resolve(stream));
  }

  void synchronize(Stream stream) override {
    SY_CUDA_CHECK(cudaSetDevice(device_));
    SY_CUDA_CHECK(cudaStreamSynchronize(resolve(stream)));
    throw_pending_device_error();
  }

 private:
  // What the engines ask when a call starts; private, so that only this backend hands it out.
  CallServices& services() { return *this; }
  // CallServices:
  CallStart begin_normal_call(Stream stream_handle, const Config& call) override {
    SY_CUDA_CHECK(cudaSetDevice(device_));
    const cudaStream_t stream = resolve(stream_handle);
    ++call_index_;
    throw_pending_device_error();
    return {normal_call_context(call), call_env(stream)};
  }
  CallStart begin_expert_major_call(Stream stream_handle) override {
    SY_CUDA_CHECK(cudaSetDevice(device_));
    const cudaStream_t stream = resolve(stream_handle);
    return {expert_major_call_context(), call_env(stream)};
  }

  // The stream of a call: the caller's, which must belong to this buffer's GPU (a kernel launched on
  // another GPU's stream would run there, on memory it cannot reach), or the buffer's own.
  cudaStream_t resolve(Stream stream) const {
    if (!stream) return own_stream_;
    const cudaStream_t caller = static_cast<cudaStream_t>(stream);
    // NOTES: CUDA refuses cudaStreamGetDevice and cudaStreamGetId on a capturing stream, and the refusal
    // invalidates the capture; a capturing stream's GPU is asked of its context instead, on every call (a
    // capture is not the hot path), and left unchecked where the driver cannot say.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(caller, &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone) {
      const std::optional<int> capturing_device = capturing_stream_device(caller);
      if (capturing_device && *capturing_device != device_) refuse_stream_of_gpu(*capturing_device);
      return caller;
    }
    // NOTES: a framework passes the same stream call after call, so a stream that passed the device check
    // is not checked again. It is known by its id, unique for the life of the program, not by its handle: a
    // destroyed stream's handle can come back as a new stream of another GPU, which must be checked.
    unsigned long long id = 0;
    const cudaError_t identified = cudaStreamGetId(caller, &id);
    if (identified == cudaSuccess && checked_stream_id_ == id) return caller;
    int stream_device = -1;
    const cudaError_t queried =
        identified != cudaSuccess ? identified : cudaStreamGetDevice(caller, &stream_device);
    if (queried != cudaSuccess) {
      cudaGetLastError();  // not sticky; clear it so later calls do not report it
      throw InvalidArgument(std::string("stream: expected a CUDA stream, got one that CUDA refused (") +
                            (identified != cudaSuccess ? "cudaStreamGetId" : "cudaStreamGetDevice") +
                            "): " + cudaGetErrorName(queried));
    }
    if (stream_device != device_) refuse_stream_of_gpu(stream_device);
    checked_stream_id_ = id;
    return caller;
  }
  [[noreturn]] void refuse_stream_of_gpu(int stream_device) const {
    throw InvalidArgument("stream: expected a stream of this buffer's GPU " + std::to_string(device_) +
                          ", got one of GPU " + std::to_string(stream_device));
  }
  cudaStream_t alloc_stream(cudaStream_t stream) const { return stream == own_stream_ ? nullptr : stream; }
  // Stream-ordered allocations go on the caller's stream; not on the buffer's own, which dies with
  // the buffer while results may live on.
  CallEnv call_env(cudaStream_t stream) {
    return {stream, alloc_stream(stream), heap_.ranks_on_this_device(),
            [this] { throw_pending_device_error(); }};
  }

  KernelContext kernel_context(const common::NormalHeapLayout& layout) const {
    KernelContext context{};
    context.heap = heap_.view();
    context.layout = layout;
    context.rank = options_.rank;
    context.num_ranks = options_.topology.num_ranks;
    context.num_channels = channels_;
    context.chunk_tokens = static_cast<uint32_t>(options_.config.chunk_tokens);
    context.timeout_ns = static_cast<uint64_t>(options_.config.timeout_seconds * 1e9);
    context.error = error_record_.device();
    context.abort_flag = abort_flag_;
    context.error_claim = error_claim_;
    context.barrier_epoch = barrier_epoch_;
    context.call_index = call_index_;
    context.mask = mask_->view();
    context.mask_on_timeout = options_.config.mask_ranks_on_timeout;
    context.peers_on_this_gpu =
        signals_at_gpu_scope(gpu_scope_signals_, heap_.ranks_on_this_device(), options_.topology.num_ranks);
    return context;
  }

  // A `normal` call's context: its channels and chunk are the plan's (the Buffer's, or the call's
  // CallTuning); the engine fills in the heap layout.
  KernelContext normal_call_context(const Config& call) const {
    KernelContext context = kernel_context(common::NormalHeapLayout{});
    context.num_channels = call.num_channels;
    context.chunk_tokens = static_cast<uint32_t>(call.chunk_tokens);
    return context;
  }

  // A new call of an expert-major engine (low_latency, symmetric): errors of earlier kernels are
  // raised first. Their kernels use no normal heap layout (each engine's region travels in its launch).
  KernelContext expert_major_call_context() {
    ++call_index_;
    throw_pending_device_error();
    return kernel_context(common::NormalHeapLayout{});
  }

  // A kernel of this rank recorded a failure: report it, as the right error type. Bad input leaves the
  // Buffer usable; a broken protocol does not (its kernels gave up for good, kAbortedForGood), so every
  // later call is refused with the same type of error, saying so, rather than returning having done
  // nothing.
  void throw_pending_device_error() {
    if (stopped_) std::rethrow_exception(stopped_);
    common::DeviceErrorBlock* const record = error_record_.host();
    if (!__atomic_load_n(&record->complete, __ATOMIC_ACQUIRE)) {
      if (!__atomic_load_n(&record->gave_up, __ATOMIC_ACQUIRE)) return;
    }
    // Read again after gave_up: a failure that won the claim completed its record before setting gave_up.
    if (!__atomic_load_n(&record->complete, __ATOMIC_ACQUIRE)) {
      // A failure stopped the kernels for good, but its record lost the claim to another failure's (one
      // the host reported and cleared: a refused call, bad input): refused all the same, saying so.
      stopped_ = std::make_exception_ptr(Error(
          "rank " + std::to_string(options_.rank) +
          ": refused: this Buffer's kernels stopped for good at a failure on the device whose record was "
          "lost to another failure's; destroy this Buffer and make a new one (on every rank)"));
      std::rethrow_exception(stopped_);
    }
    const common::DeviceErrorBlock error = *record;
    const auto target = static_cast<common::WaitTarget>(error.target);
    const bool expert_major = std::string(common::wait_role_engine(error.role)) != "normal";
    // A call refused because the ranks' calls differ, where the refusal left the protocol whole: at a
    // `normal` opening barrier (record_call_mismatch, kAbortedThisCall); in the symmetric kernels, which
    // record it without stopping a wait and still pass their barriers and release their done words; in the
    // low_latency kernels, whose waits stop for that call alone (low_latency::ShapeRefusal). The `normal`
    // engines' other call_signature records (a notify's) stop the rank for good.
    const bool refused_whole =
        target == common::WaitTarget::call_signature &&
        (error.role == static_cast<int32_t>(common::WaitRole::barrier) || expert_major);
    const bool usable = target == common::WaitTarget::invalid_expert ||
                        target == common::WaitTarget::expert_capacity ||
                        (expert_major && target == common::WaitTarget::capacity) || refused_whole;
    if (usable) {
      // Bad input, not a broken protocol (an expert id out of range; an expert-major call with more rows
      // for one expert than max_tokens_per_rank, which wrote nothing; an expert past its
      // expert_capacity, whose call completed on every rank; ranks whose calls differ, refused_whole):
      // clear the block so that later failures are reported too. The record is complete, so its kernel
      // wrote its last word.
      // gave_up stays: a failure for good that lost the claim to this record is still to be refused.
      const int32_t gave_up = __atomic_load_n(&record->gave_up, __ATOMIC_ACQUIRE);
      std::memset(record, 0, sizeof(*record));
      record->gave_up = gave_up;
      SY_CUDA_CHECK(cudaMemset(error_claim_, 0, sizeof(int32_t)));
      throw_device_error(error, expert_major);
    }
    try {
      throw_device_error(error, expert_major);
    } catch (const TimeoutError& first) {
      stopped_ = std::make_exception_ptr(TimeoutError(refused_after(first)));
      throw;
    } catch (const CapacityError& first) {
      stopped_ = std::make_exception_ptr(CapacityError(refused_after(first)));
      throw;
    } catch (const InvalidArgument& first) {
      stopped_ = std::make_exception_ptr(InvalidArgument(refused_after(first)));
      throw;
    }
  }

  // What every call after a failure that stopped this rank's kernels for good is refused with.
  std::string refused_after(const Error& first) const {
    return "rank " + std::to_string(options_.rank) +
           ": refused: this Buffer's kernels stopped for good at an earlier failure on the device, reported "
           "then as: " +
           first.what() + "; destroy this Buffer and make a new one (on every rank)";
  }

  // The failure recorded in `error`, as its error type.
  [[noreturn]] void throw_device_error(const common::DeviceErrorBlock& error, bool expert_major) const {
    std::ostringstream message;
    message << "rank " << error.rank << " (cuda " << common::wait_role_engine(error.role) << ", "
            << common::wait_role_name(error.role);
    if (error.channel >= 0) message << ", channel " << error.channel;
    message << ")";
    switch (static_cast<common::WaitTarget>(error.target)) {
      case common::WaitTarget::invalid_expert:
        throw InvalidArgument("topk_idx: expected expert ids in [-1, " + std::to_string(error.expected) +
                              "), got " + std::to_string(error.observed) + " (found on the device by " +
                              message.str() + ")");
      case common::WaitTarget::call_signature: {
        // The symmetric dispatch's shape includes whether it pushes (cuda/symmetric/push.cuh), which across
        // processes follows where each rank's outputs are: name the arguments that decide it.
        const bool dispatch = error.role == static_cast<int32_t>(common::WaitRole::symmetric_dispatch);
        throw InvalidArgument(
            std::string(common::wait_role_engine(error.role)) +
            ": expected every rank to call with the same shape; rank " + std::to_string(error.peer) +
            "'s call differs from rank " + std::to_string(error.rank) + "'s (found on the device by " +
            message.str() + ")" +
            (dispatch
                 ? std::string("; a dispatch across processes pushes when its out_recv_x (and, for "
                               "fp8, out_recv_x_scales) lie in the heap receive area "
                               "(BufferSizing::symmetric_heap_receive_rows_per_expert): on every rank, or on "
                               "none")
                 : std::string()));
      }
      case common::WaitTarget::expert_capacity: {
        const std::string what =
            detail::expert_capacity_message(error.expected, error.channel, error.peer, error.observed);
        if (error.role == static_cast<int32_t>(common::WaitRole::symmetric_combine)) {
          throw CapacityError("symmetric_combine: refused (nothing written): its dispatch overflowed: " +
                              what);
        }
        // The record's channel field holds the expert here (named in `what`), not a channel.
        throw CapacityError(what + " (found on the device by rank " + std::to_string(error.rank) + " (cuda " +
                            common::wait_role_engine(error.role) + ", " + common::wait_role_name(error.role) +
                            "))");
      }
      case common::WaitTarget::capacity:
        if (expert_major) {
          throw InvalidArgument("topk_idx: expected at most max_tokens_per_rank (" +
                                std::to_string(error.expected) + ") rows per expert from one rank, got " +
                                std::to_string(error.observed) + " (found on the device by " + message.str() +
                                ")");
        }
        throw InvalidArgument("num_worst_tokens: expected at least the " + std::to_string(error.observed) +
                              " tokens this rank receives, got " + std::to_string(error.expected));
      default:
        message << ": timed out after " << static_cast<double>(error.waited_ns) * 1e-9 << " s waiting for "
                << common::wait_target_name(error.target);
        if (error.peer >= 0) message << " from rank " << error.peer;
        message << " (expected >= " << error.expected << ", saw " << error.observed << "; in call "
                << error.call << " of this buffer, after " << error.barriers << " barriers)";
        throw TimeoutError(message.str());
    }
  }

  BufferOptions options_;
  int device_;
  DeviceHeap heap_;
  detail::BufferId owner_;
  int sm_count_ = 0;
  int channels_ = 1;
  int max_channels_ = 1;  // CallTuning::num_channels bound: what stays co-resident (connect)
  MappedHostWords<common::DeviceErrorBlock> error_record_;  // one block, written by the device
  int32_t* abort_flag_ = nullptr;
  cudaStream_t own_stream_ = nullptr;
  // The id (cudaStreamGetId) of the last caller's stream found on this GPU; none before the first check.
  mutable std::optional<unsigned long long> checked_stream_id_;
  uint64_t* barrier_epoch_ = nullptr;
  int32_t* error_claim_ = nullptr;
  int32_t call_index_ = 0;
  // SWITCHYARD_SIGNAL_SCOPE, read once (cuda/backend/signal_scope.hpp).
  const bool gpu_scope_signals_ = gpu_scope_signals_allowed_by_environment();
  // Set once a failure stopped this rank's kernels for good: what every later call is refused with.
  std::exception_ptr stopped_;
  std::unique_ptr<DeviceRankMask> mask_;
  std::unique_ptr<NormalEngine> normal_;
  SymmetricEngine symmetric_;
  std::unique_ptr<LowLatencyEngine> low_latency_;
  std::unique_ptr<InternodeEngine> internode_;
};

}  // namespace switchyard::cuda

namespace switchyard::detail {

std::unique_ptr<BackendImpl> make_cuda_backend(const BackendCreateInfo& info) {
  // Before anything is allocated.
  if (info.options->transport.kind == TransportKind::nccl_gin)
    cuda::refuse_nccl_gin(info.options->transport, info.options->device);
  return std::make_unique<cuda::CudaBackend>(info);
}

}  // namespace switchyard::detail
