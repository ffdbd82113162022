#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "switchyard/dtype.hpp"
#include "switchyard/topology.hpp"

namespace switchyard {

// How the `symmetric` engine's combine moves expert outputs home (DESIGN.md, "Symmetric engine").
//   push: each expert row is written into its home rank's combine buffer, a barrier, then every home
//         reduces locally. Works across processes (and GPUs) of one load/store domain. On one device
//         it moves every row three times (read y, write the home's buffer, re-read it).
//   pull: every home reduces straight from the expert ranks' y, read once. Needs every rank of the
//         Buffer to be a thread of this process (CPU) and on one device (CUDA), since a home follows
//         a peer's plain y pointer.
//   automatic: pull where it can work (known at connect, the same on every rank), push otherwise.
enum class SymmetricCombine : uint8_t { automatic, push, pull };
const char* symmetric_combine_name(SymmetricCombine path);

// Where the `symmetric` engine's dispatch pulls a source's bf16 rows from (DESIGN.md, "Symmetric engine").
//   publish: each source first copies its rows into its symmetric input buffer, and the receivers pull
//            them from there. Works across processes (and GPUs) of one load/store domain; on one device
//            it moves every source row twice more than needed (read x, write the input buffer).
//   zero_copy: the receivers pull straight from the caller's x, whose address each source announces in
//            its heap; the dispatch returns only when no peer reads x any more. Needs every rank of the
//            Buffer to be a thread of this process (CPU) and on one device (CUDA). fp8 calls always
//            publish (the cast halves the bytes pulled).
//   automatic: zero_copy where it can work (known at connect, the same on every rank), publish otherwise;
//            and on CUDA, where every receiver's outputs are reachable, the push instead (below).
//   push: not a request (Config::validate refuses it), but what Buffer::symmetric_dispatch_path() reports
//            where `automatic` resolved to it: the CUDA engine with every rank a thread of this process on
//            one device. No row is pulled: each source reads its tokens once and writes them into their
//            receivers' outputs (bf16 rows as they are, fp8 cast once), the bytes of the minimal bound.
//            With ranks in separate processes or on several GPUs a call pushes where every rank passes
//            outputs in its heap receive area (BufferSizing::symmetric_heap_receive_rows_per_expert),
//            whatever the path says. SWITCHYARD_SYMMETRIC_PULL=tma|warps turns the push off (an A/B knob).
// A named publish or zero_copy keeps every call pulled (fp8 calls pulled are published: the cast).
enum class SymmetricDispatch : uint8_t { automatic, publish, zero_copy, push };
const char* symmetric_dispatch_name(SymmetricDispatch path);

// Tuning of the pipeline (`normal`) engine, and the bound on every wait.
struct Config {
  // A channel owns a contiguous range of each source rank's tokens, with one ring per
  // (channel, source rank) on every destination. On CUDA a channel is a pair of blocks (a sender
  // and a receiver). kAutoChannels picks per backend: 4 host threads on CPU; on CUDA as many as
  // fit co-resident with the other ranks on the same GPU, at most kMaxAutoCudaChannels.
  int num_channels = kAutoChannels;
  // Token slots in each ring. Smaller than one rank's traffic is fine: the ring wraps under
  // head/tail flow control.
  int ring_slots = kDefaultRingSlots;
  // The sender publishes its tail after this many tokens, and the receiver its head after this many
  // (fewer at the end). Must be <= ring_slots.
  int chunk_tokens = kDefaultChunkTokens;
  // Every spin-wait gives up after this long and raises TimeoutError naming rank, role and channel.
  double timeout_seconds = kDefaultTimeoutSeconds;
  // The expert-major engines (low_latency, symmetric): a wait on a peer that times out masks that peer
  // (Buffer::update_mask) and the call goes on without it, instead of raising TimeoutError (DeepEP's
  // enable_shrink). The outputs of the call in which that happens may still hold rows the peer sent
  // before it stopped; from the next call on they are the survivors' (Buffer::update_mask).
  // Buffer::query_mask names the masked peers. The normal engine's waits always raise.
  bool mask_ranks_on_timeout = false;
  // The `symmetric` engine's combine path; forcing `pull` where it cannot work is refused at connect.
  SymmetricCombine symmetric_combine = SymmetricCombine::automatic;
  // The `symmetric` engine's dispatch source; forcing `zero_copy` where it cannot work is refused at connect.
  SymmetricDispatch symmetric_dispatch = SymmetricDispatch::automatic;

  static constexpr int kAutoChannels = 0;
  static constexpr int kMaxChannels = 1024;
  static constexpr int kDefaultCpuChannels = 4;
  // NOTES: DeepEP uses 20-24 SMs for intranode kernels; 16 channels = 32 blocks leaves most of an
  // H200's 132 SMs to the experts.
  static constexpr int kMaxAutoCudaChannels = 16;
  static constexpr int kDefaultRingSlots = 128;
  static constexpr int kDefaultChunkTokens = 16;
  // NOTES: long enough for a loaded 2-core CI machine running 8 ranks as threads.
  static constexpr double kDefaultTimeoutSeconds = 30.0;

  // Throws InvalidArgument naming the offending field.
  void validate() const;
  std::string to_string() const;
};

// The `normal` engine's tuning for one call (DeepEP's per-call Config): a field left 0 keeps the
// Buffer's Config value. Results never depend on it (DESIGN.md: the receive order and the reduction
// order are fixed), only time and heap footprint do. Every rank's call must use the same channel count
// (it is part of the call's signature). Checked when the call is planned, naming the field:
//   num_channels  1..Buffer::max_num_channels(): on CUDA, as many as stay co-resident with the other
//                 ranks sharing the GPU (2 blocks each); a combine and a cached dispatch run with
//                 their dispatch's channels (DispatchHandle::num_channels), so there only that count
//                 (or 0) is accepted, as DeepEP requires the dispatch's num_sms there;
//   ring_slots    >= 1, and the call's rings must fit the heap's normal region;
//   chunk_tokens  1..ring_slots (the call's).
struct CallTuning {
  int num_channels = 0;
  int ring_slots = 0;
  int chunk_tokens = 0;

  bool is_default() const { return num_channels == 0 && ring_slots == 0 && chunk_tokens == 0; }
  std::string to_string() const;
};

// The largest call a buffer must serve; used to size the symmetric heap.
struct BufferSizing {
  int64_t max_tokens_per_rank = 4096;
  int hidden = 7168;
  int topk = 8;
  int num_experts = 256;
  DType dtype = DType::bf16;  // fp8 rows are smaller, but carry scales
  // The `low_latency` engine's capacity: the largest max_tokens_per_rank of its calls, which may
  // use up to `hidden` channels, `topk` slots and `num_experts` experts. 0: no low-latency region.
  int64_t low_latency_max_tokens_per_rank = 0;
  // The `symmetric` engine's capacity, likewise (its own region, after the low-latency one).
  // 0: no symmetric region.
  int64_t symmetric_max_tokens_per_rank = 0;
  // The `symmetric` engine's heap-resident tensors, in its region of every rank's heap
  // (Buffer::symmetric_input, Buffer::symmetric_expert_output). A caller that writes its tokens or its
  // expert outputs there lets every peer read them in place, also with ranks in separate processes and
  // on several GPUs: the dispatch then skips its publish copy, and the pull combine works there too.
  // Each reserves its bytes in every rank's heap (the region needs symmetric_max_tokens_per_rank > 0).
  bool symmetric_heap_input = false;                  // x: bf16 [symmetric_max_tokens_per_rank, hidden]
  int64_t symmetric_heap_output_rows_per_expert = 0;  // y: bf16 [num_experts / R, rows, hidden]; 0: none
  // Dispatch outputs that every source writes into (the CUDA engine's push, also across processes and
  // GPUs), of symmetric_heap_receive_dtype:
  //   fp8_e4m3 (the default): e4m3 recv_x [num_experts / R, rows, hidden] and f32 scales [num_experts / R,
  //     rows, hidden / 128], for fp8 dispatches with f32 scales (the MoE layer's, when they fit its
  //     capacity);
  //   bf16: bf16 recv_x [num_experts / R, rows, hidden], for bf16 dispatches (no scales).
  // A symmetric_dispatch whose outputs are views of them (Buffer::symmetric_receive) is pushed instead of
  // pulled. 0: none.
  int64_t symmetric_heap_receive_rows_per_expert = 0;
  DType symmetric_heap_receive_dtype = DType::fp8_e4m3;
  // The `normal` engine's dispatch input in every rank's heap (docs/normal-in-place.md): rows for x of up
  // to this many tokens and `hidden` channels, bf16, or fp8 with its scales (Buffer::normal_input). When it
  // is > 0, every `normal` dispatch on the Buffer takes its x (and x_scales) from those views, each source
  // leaves its routing (send lists, topk_idx and weights, K <= `topk`) beside them, and the receivers pull
  // the rows and the routing in place, without rings. One node only. 0: none.
  int64_t normal_heap_input_tokens = 0;
  // The `normal` engine's combine input in every rank's heap (docs/normal-in-place.md): the expert outputs
  // of up to this many received rows, bf16 [rows, hidden], and their f32 top-k weights [rows, topk]
  // (Buffer::normal_combine_input). When it is > 0, every `normal` combine on the Buffer takes its x (and
  // topk_weights) from those views, and each home rank reads its tokens' rows from the expert ranks' heaps
  // in place (nothing is sent). At most num_ranks * max_tokens_per_rank. One node only. 0: none.
  int64_t normal_heap_combine_rows = 0;
};

// Bytes of symmetric heap the `normal` engine needs per rank for calls up to `sizing`.
size_t normal_heap_bytes(const Topology& topology, const Config& config, const BufferSizing& sizing);

// Of normal_heap_bytes(), the RDMA region of the hierarchical engine (counters, receive rings and send
// buffers for the other nodes' RDMA peers): 0 within one node. The rest is the NVLink stage's rings.
size_t normal_rdma_heap_bytes(const Topology& topology, const Config& config, const BufferSizing& sizing);

// Bytes of the `low_latency` engine's region for calls up to `sizing` (0 when
// low_latency_max_tokens_per_rank is 0). A Buffer's heap is the normal region followed by this one.
size_t low_latency_heap_bytes(const Topology& topology, const BufferSizing& sizing);

// Bytes of the `symmetric` engine's region for calls up to `sizing` (0 when
// symmetric_max_tokens_per_rank is 0). It follows the low-latency region.
size_t symmetric_heap_bytes(const Topology& topology, const BufferSizing& sizing);

}  // namespace switchyard
