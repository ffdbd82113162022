#pragma once
// What core asks of a backend: its services (heap, handles, memory, masks, streams, the MoE layer's
// expert phase) and its engines (core/engine.hpp), registered in one table. Core validates every
// argument on the host and hands an engine a plan with the shapes already checked; backends never see
// bad input.
#include <memory>
#include <vector>

#include "common/sym_heap.hpp"
#include "core/buffer_identity.hpp"
#include "core/engine.hpp"
#include "core/moe_plan.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::detail {

class BackendImpl {
 public:
  virtual ~BackendImpl() = default;

  virtual Device device() const = 0;
  // Channels the `normal` engine runs with: Config::num_channels, or when that is auto, the
  // backend's choice (final once connected, when the CUDA backend knows how many ranks share a GPU).
  virtual int num_channels() const = 0;
  // The most channels one `normal` call may run with (CallTuning::num_channels).
  virtual int max_num_channels() const = 0;
  virtual Bytes local_handle() const = 0;
  // Maps every peer's heap; `all_handles` were checked for count, magic and size by core.
  virtual void connect(const std::vector<Bytes>& all_handles) = 0;

  // Allocates a tensor where this backend computes (host memory or device memory).
  virtual Tensor allocate(DType dtype, std::initializer_list<int64_t> dims) = 0;

  // `out`: the caller's outputs (checked), or nullptr to allocate them. The routing statistics the
  // `normal` engine's callers ask for first (DeepEP's get_dispatch_layout), whatever the topology.
  virtual DispatchLayout get_dispatch_layout(const TensorView& topk_idx, int num_experts, Stream stream,
                                             const DispatchLayoutOutputs* out) = 0;
  // This rank's heap (on the backend's device): core hands out views of it (the low-latency combine's
  // staging area, the symmetric engine's heap-resident tensors) and recognises them in calls.
  virtual uint8_t* heap_base() = 0;

  // Rank masks (Buffer::update_mask; common/rank_mask.hpp): this rank's view, where its engines read
  // it. `rank` was checked by core. Stream-ordered on CUDA.
  virtual void update_mask(int rank, bool masked, Stream stream) = 0;
  virtual Tensor query_mask(Stream stream) = 0;  // a copy: i32 [R], 1 where masked
  virtual void clean_mask(Stream stream) = 0;
  // The MoE layer's expert phase (core/moe_plan.hpp), between its symmetric dispatch and combine: made
  // with the layer (throws Unsupported, naming why, where the backend cannot run it, so that a MoeLayer
  // is refused when it is made, not at its first call), run per call on the call's resolved stream.
  virtual std::unique_ptr<MoeExperts> make_moe_experts(const MoeExpertsPlan& plan) = 0;
  // `call.stream` is the caller's Stream, which the backend resolves.
  virtual void run_moe_experts(MoeExperts& experts, const MoeExpertsCall& call) = 0;

  // Waits for this rank's work on `stream` and raises any error a kernel recorded.
  virtual void synchronize(Stream stream) = 0;

  // The engines, as the backend's constructor registered them.
  const EngineTable& engines() const { return engines_; }

 protected:
  // Filled once by the backend's constructor: its one registration point for engines.
  EngineTable engines_;
};

struct BackendCreateInfo {
  const BufferOptions* options = nullptr;
  size_t heap_bytes = 0;
  BufferId owner = kNoBuffer;  // the Buffer, recorded in handles
};

std::unique_ptr<BackendImpl> make_cpu_backend(const BackendCreateInfo& info);
// Throws Unsupported when built without CUDA.
std::unique_ptr<BackendImpl> make_cuda_backend(const BackendCreateInfo& info);

}  // namespace switchyard::detail
