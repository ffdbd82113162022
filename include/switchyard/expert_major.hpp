#pragma once
// The expert-major interface that the `low_latency` and `symmetric` engines share (DESIGN.md,
// "low_latency and symmetric interface: expert-major"). The `low_latency` engine: decode-sized batches
// written directly from each source into per-expert receive slots on the target, and a weighted combine back.
// Used through Buffer::low_latency_dispatch, Buffer::low_latency_combine and
// Buffer::low_latency_combine_buffer.
//
//   auto recv = buffer.low_latency_dispatch({.x = x, .topk_idx = topk_idx, .max_tokens_per_rank = 128,
//                                            .num_experts = 256});
//   ... experts run on recv.recv_x [local_experts, R * 128, hidden], rows < recv.recv_count ...
//   auto out = buffer.low_latency_combine({.x = y, .topk_idx = topk_idx, .topk_weights = w,
//                                          .handle = &recv.handle});
//
// Every rank calls with the same max_tokens_per_rank, num_experts, hidden and options. The buffer
// must be sized for it (BufferSizing::low_latency_max_tokens_per_rank > 0).
//
// Hooks: with return_recv_hook the call does only its send half and returns; `hook()` runs the
// receive half and fills the outputs. Call the hook before this Buffer's next low-latency call
// (the buffer's two halves alternate between consecutive calls; a third call would reuse the half
// the pending receive still reads), and at most once; the Buffer must outlive it.
//
// The `symmetric` engine (Buffer::symmetric_dispatch, Buffer::symmetric_combine) takes the same
// argument structs and returns the same result structs, with bitwise identical outputs; only the
// protocol differs (DESIGN.md, "Symmetric engine"): dispatch is one stage in which each receiver
// pulls its rows from the sources' input buffers after one cross-rank barrier (or, where every rank is
// a thread of this process on one device, straight from the callers' x: Config::symmetric_dispatch;
// the dispatch then ends only once no peer reads x, so x may be overwritten right after it), and
// combine is one stage in which each expert row is pushed into its home rank's combine buffer, then a
// barrier and a local reduction (or pulled in place: Config::symmetric_combine). Separate methods, rather
// than an engine field in the args, keep each engine's handle, region and unsupported options visible at the
// call site:
//
//   auto recv = buffer.symmetric_dispatch({.x = x, .topk_idx = topk_idx, .max_tokens_per_rank = 128,
//                                          .num_experts = 256});
//   auto out = buffer.symmetric_combine({.x = y, .topk_idx = topk_idx, .topk_weights = w,
//                                        .handle = &recv.handle});
//
// It needs BufferSizing::symmetric_max_tokens_per_rank > 0 (its own region). A symmetric handle is
// valid only for symmetric_combine, a low-latency one only for low_latency_combine. The symmetric
// engine has no send/receive split: return_recv_hook (both calls) and zero_copy (combine) raise
// Unsupported naming the option. Every rank must make the same sequence of symmetric calls.
#include <cstdint>
#include <functional>
#include <memory>

#include "switchyard/tensor.hpp"

namespace switchyard {

// cudaStream_t on the CUDA backend (nullptr: the buffer's own non-blocking stream); ignored on CPU. A stream
// of another GPU than the Buffer's is refused (InvalidArgument naming both), also while it is being
// captured where the driver can tell its GPU (not for a green context's stream).
using Stream = void*;

namespace detail {
struct ExpertMajorHandleData;
}

// The routing of a low-latency dispatch, for its combine. Opaque; cheap to copy. Valid only with
// the Buffer that made it.
class ExpertMajorHandle {
 public:
  ExpertMajorHandle() = default;
  explicit ExpertMajorHandle(std::shared_ptr<const detail::ExpertMajorHandleData> data)
      : data_(std::move(data)) {}
  bool valid() const { return data_ != nullptr; }
  const detail::ExpertMajorHandleData& data() const { return *data_; }

 private:
  std::shared_ptr<const detail::ExpertMajorHandleData> data_;
};

struct ExpertMajorDispatchArgs {
  // bf16 [N, H]; H a multiple of 8 (of 128 with use_fp8). The symmetric engine also takes rows the caller
  // already cast: fp8_e4m3 [N, H] (H a multiple of 128) with x_scales; see x_scales.
  TensorView x;
  // f32 [N, H / 128], row-major contiguous, with fp8_e4m3 x only (symmetric engine): the scale of each
  // token's 128-channel blocks. Such rows travel exactly as given, with no cast: recv_x (fp8_e4m3) and
  // recv_x_scales (f32) carry the caller's bytes bit for bit. fp8 x needs use_fp8 = true (it means "the
  // rows are fp8"); round_scale and use_ue8m0 are refused with it (the scales are the caller's). The
  // low_latency engine refuses fp8 x (Unsupported: the symmetric engine carries it), and a dispatch with
  // bf16 x refuses x_scales. Every refusal comes before anything is written.
  TensorView x_scales;
  TensorView topk_idx;  // i64 [N, K]; -1 = no expert. Each (token, slot) is one row on its expert.
  int64_t max_tokens_per_rank = 0;  // N <= this on every rank; recv rows per expert are R times this
  int num_experts = 0;
  // Rows per local expert in recv_x / recv_x_scales / src_info (C below): 0 means
  // R * max_tokens_per_rank (every row that could arrive), else 1..R * max_tokens_per_rank, the same
  // on every rank. A caller sizes its expert buffers by an expected load (uniform routing gives each
  // expert about R * N * K / E rows, far below R * max). The rows keep their order (source rank, then
  // token order); recv_count and layout_range report the TRUE counts, also when they exceed C.
  // Overflow (an expert receives more than C rows): rows at and past C are not written (nothing out
  // of bounds), and the call raises CapacityError naming the expert, its rank, the rows and C, on
  // every rank: on cpu when the call returns (after it completed on all ranks); on cuda where device
  // errors are raised (the next call or synchronize(), like a timeout, with no host sync in the call):
  // where an overflow is possible, call synchronize() on every rank before the next call, so that all
  // raise it at the same point (raised at a later call's entry on some ranks only, it would leave the
  // others waiting in that call until their timeout). The Buffer stays usable. A combine with the handle of
  // an overflowed dispatch is refused: on cuda (where the handle reaches the caller) its kernel pushes and
  // reduces nothing, combined_x is not written, and it raises CapacityError again. The symmetric engine only:
  // low_latency raises Unsupported for a value other than 0 (its receive slots are R * max rows per expert
  // anyway).
  int64_t expert_capacity = 0;
  // Cast to fp8 e4m3 per 128 channels with an amax scale: scale = max(amax, 1e-4) / 448.
  bool use_fp8 = false;
  bool round_scale = false;  // scales rounded up to a power of two (needs use_fp8)
  bool use_ue8m0 = false;    // power-of-two scales stored as UE8M0 bytes, 4 per int32 (needs use_fp8)
  bool return_recv_hook = false;
  // Optional i64 [R] on the buffer's device (DeepEP's dispatch_wait_recv_cost_stats), low_latency only:
  // the receive half adds to entry r the nanoseconds it waited for rank r's rows (summed over this rank's
  // local experts), when it runs (with return_recv_hook, in the hook: keep the tensor until then). A slow
  // or stalled peer shows as a large entry on every other rank. DeepEP counts SM clock cycles; switchyard
  // counts nanoseconds, on both backends. Masked peers are not awaited and add nothing.
  TensorView wait_recv_cost_stats;
  // Optional preallocated outputs (shapes as in ExpertMajorDispatchResult); allocated when undefined.
  // Borrowed for the call (with return_recv_hook, until the hook has run): the handle keeps its own
  // copy of the routing its combine reads (layout_range, src_info), so they may be reused or freed after.
  TensorView out_recv_x, out_recv_x_scales, out_recv_count, out_layout_range, out_src_info;
  Stream stream = nullptr;
};

// L = local experts, R = ranks, max = max_tokens_per_rank, C = expert_capacity (R * max when 0).
struct ExpertMajorDispatchResult {
  // [L, C, H], bf16 (fp8_e4m3 with use_fp8). For local expert l, the rows of source rank 0
  // come first, then rank 1, ...; within a source, (token, slot) order. Rows at and past
  // recv_count[l] are unspecified (not written).
  Tensor recv_x;
  // f32 [L, C, H / 128]; with use_ue8m0 i32 [L, C, ceil(H / 512)], byte i of word w
  // the exponent of scale 4w + i (little-endian, zero-padded). Undefined without use_fp8.
  Tensor recv_x_scales;
  Tensor recv_count;    // i32 [L]: rows received per local expert (the true count, even above C)
  Tensor layout_range;  // i32 [L, R, 2]: (begin, count) of each source rank's rows (true counts)
  Tensor src_info;      // i32 [L, C]: source token index of each row; -1 past recv_count
  ExpertMajorHandle handle;
  // Set with return_recv_hook: runs the receive half (the outputs above are filled only then).
  std::function<void()> hook;
};

struct ExpertMajorCombineArgs {
  // bf16 [L, C, H']: expert outputs, rows as dispatch gave them (only rows < recv_count are
  // read; C is the dispatch's expert_capacity, R * max when it was 0). With zero_copy, omit it (or
  // pass low_latency_combine_buffer's view): the outputs are already in the buffer.
  TensorView x;
  // i64 [N, K]: the dispatch's topk_idx; a slot may be set to -1 to leave that expert out.
  TensorView topk_idx;
  TensorView topk_weights;  // f32 [N, K]
  const ExpertMajorHandle* handle = nullptr;
  // Optional bf16 [N, H'] each: each token's fp32 accumulator starts at bias0 + bias1 (an absent one
  // counts as +0.0) instead of +0.0, then the slots' multiply-adds follow (docs/deep_ep.md, "Combine
  // bias", the same start as the normal combine's). Read when the reduction runs: with
  // return_recv_hook, keep them until the hook has run (on cuda, until its stream has run it).
  TensorView bias0, bias1;
  bool zero_copy = false;
  // DeepEP's use_logfmt (low_latency only, H' a multiple of 128, not with zero_copy): each expert
  // output row travels as LogFMT-10, 10 bits per value with per-128-channel log-scale ranges
  // (src/common/logfmt.hpp), and the combine accumulates the values it decodes, a lossy format. The
  // reference (reference::low_latency_combine's use_logfmt) defines the result bit for bit.
  bool use_logfmt = false;
  bool return_recv_hook = false;
  // Optional i64 [R] (DeepEP's combine_wait_recv_cost_stats), low_latency only: as the dispatch's
  // wait_recv_cost_stats, for the expert outputs each rank sends back.
  TensorView wait_recv_cost_stats;
  TensorView out_combined_x;  // optional bf16 [N, H']
  Stream stream = nullptr;
};

struct ExpertMajorCombineResult {
  // bf16 [N, H']: out[t] = sum over slots j ascending with topk_idx[t, j] >= 0 of
  // topk_weights[t, j] * y[row(t, j)], accumulated in fp32 with fused multiply-add starting from
  // +0.0 (so a token with no valid slot gives +0.0), or from bias0 + bias1, rounded to bf16 once.
  Tensor combined_x;
  std::function<void()> hook;  // set with return_recv_hook: runs the receive half (the reduction)
};

// The names these types had when only the low_latency engine used them.
using LowLatencyHandle = ExpertMajorHandle;
using LowLatencyDispatchArgs = ExpertMajorDispatchArgs;
using LowLatencyDispatchResult = ExpertMajorDispatchResult;
using LowLatencyCombineArgs = ExpertMajorCombineArgs;
using LowLatencyCombineResult = ExpertMajorCombineResult;

}  // namespace switchyard
