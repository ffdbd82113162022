#pragma once
// What core asks of a backend. Core validates every argument on the host and hands the backend a
// plan with the shapes already checked; backends never see bad input.
#include <memory>
#include <vector>

#include "common/low_latency_protocol.hpp"
#include "common/sym_heap.hpp"
#include "common/symmetric_protocol.hpp"
#include "core/buffer_identity.hpp"
#include "core/expert_major_handle.hpp"
#include "core/moe_plan.hpp"
#include "core/normal_handle.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::detail {

// A validated `normal` dispatch.
struct DispatchPlan {
  int rank = 0;
  Topology topology;
  Config config;
  int64_t num_tokens = 0;  // N
  int hidden = 0;          // H
  DType dtype = DType::bf16;
  bool has_scales = false;   // fp8: x_scales [N, H / 128]
  int topk = 0;              // K; 0 when topk_idx is omitted (cached dispatch)
  bool has_weights = false;  // topk_weights given
  int num_experts = 0;
  int local_experts = 0;
  int expert_alignment = 1;
  int64_t num_worst_tokens = 0;
  const NormalHandleData* cached = nullptr;  // replay this routing
  const DispatchLayout* layout = nullptr;    // precomputed layout, or null
  DispatchArgs args;                         // the caller's tensors (outputs may be undefined)
  uint64_t signature = 0;                    // same on every rank for a matching call
};

// A validated `normal` combine.
struct CombinePlan {
  int rank = 0;
  Topology topology;
  Config config;
  int hidden = 0;
  bool has_weights = false;
  int topk = 0;
  const NormalHandleData* handle = nullptr;
  CombineArgs args;
  uint64_t signature = 0;
};

// A validated expert-major dispatch (the `low_latency` and `symmetric` engines share the interface).
struct ExpertMajorDispatchPlan {
  int rank = 0;
  Topology topology;
  Config config;
  int64_t num_tokens = 0;  // N
  int hidden = 0;          // H
  int topk = 0;            // K
  int num_experts = 0;
  int local_experts = 0;
  int64_t max_tokens_per_rank = 0;
  // Rows per local expert in the outputs: args.expert_capacity, or R * max_tokens_per_rank for 0.
  int64_t expert_capacity = 0;
  bool use_fp8 = false;
  bool round_scale = false;  // true also with use_ue8m0
  bool use_ue8m0 = false;
  // x arrived as fp8_e4m3 with the caller's x_scales (symmetric only, use_fp8): its rows and scales are
  // carried as given, never cast.
  bool x_fp8 = false;
  // What every rank's call must agree on (core/call_signature.hpp): the engines publish it to their
  // peers and refuse a call whose peers' differ.
  uint64_t signature = 0;
  LowLatencyDispatchArgs args;  // the caller's tensors (outputs may be undefined)
};

// A validated expert-major combine.
struct ExpertMajorCombinePlan {
  int rank = 0;
  Topology topology;
  Config config;
  int hidden = 0;  // H' of the expert outputs
  const ExpertMajorHandleData* handle = nullptr;
  // The expert outputs bf16 [L, C, H']: args.x, or with zero_copy the staging area (C = R * max).
  const uint16_t* y = nullptr;
  uint64_t signature = 0;  // as the dispatch's
  LowLatencyCombineArgs args;
};

// A validated `low_latency` dispatch and combine.
struct LowLatencyDispatchPlan : ExpertMajorDispatchPlan {
  common::LowLatencyLayout layout;  // the region in every rank's heap
};
struct LowLatencyCombinePlan : ExpertMajorCombinePlan {
  common::LowLatencyLayout layout;
};

// A validated `symmetric` dispatch and combine (no hooks, no zero copy).
struct SymmetricDispatchPlan : ExpertMajorDispatchPlan {
  common::SymmetricLayout layout;  // the region in every rank's heap
  // Where x lies in this rank's heap when it is the heap-resident input (Buffer::symmetric_input): its
  // offset from the heap base, which every peer can follow; -1 otherwise.
  int64_t x_heap_offset = -1;
};
struct SymmetricCombinePlan : ExpertMajorCombinePlan {
  common::SymmetricLayout layout;
  // Likewise for y and the heap-resident expert outputs (Buffer::symmetric_expert_output).
  int64_t y_heap_offset = -1;
};

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

  // `out`: the caller's outputs (checked), or nullptr to allocate them.
  virtual DispatchLayout get_dispatch_layout(const TensorView& topk_idx, int num_experts, Stream stream,
                                             const DispatchLayoutOutputs* out) = 0;
  virtual DispatchResult normal_dispatch(const DispatchPlan& plan) = 0;
  virtual CombineResult normal_combine(const CombinePlan& plan) = 0;

  // The `low_latency` engine. With return_recv_hook the result's hook runs the receive half.
  virtual LowLatencyDispatchResult low_latency_dispatch(const LowLatencyDispatchPlan& plan) = 0;
  virtual LowLatencyCombineResult low_latency_combine(const LowLatencyCombinePlan& plan) = 0;
  // This rank's heap (on the backend's device): core hands out views of it (the low-latency combine's
  // staging area, the symmetric engine's heap-resident tensors) and recognises them in calls.
  virtual uint8_t* heap_base() = 0;

  // The `symmetric` engine: one-stage pull dispatch and push combine over the symmetric heap.
  virtual LowLatencyDispatchResult symmetric_dispatch(const SymmetricDispatchPlan& plan) = 0;
  virtual LowLatencyCombineResult symmetric_combine(const SymmetricCombinePlan& plan) = 0;
  // The symmetric combine's path on this buffer, push or pull (Config::symmetric_combine, resolved at
  // connect; push before).
  virtual SymmetricCombine symmetric_combine_path() const = 0;
  // Where the symmetric dispatch pulls bf16 rows from, publish or zero_copy (Config::symmetric_dispatch,
  // resolved at connect; publish before).
  virtual SymmetricDispatch symmetric_dispatch_path() const = 0;

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
