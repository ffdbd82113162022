#pragma once
// One `Buffer` per rank: it owns the rank's symmetric heap and runs the engines over it.
//
//   Buffer buffer(options);                       // every rank
//   auto handles = group.allgather(buffer.local_handle());
//   buffer.connect(handles);                      // every rank, same order
//   auto layout = buffer.get_dispatch_layout(topk_idx, num_experts);
//   auto recv = buffer.dispatch({.x = x, .topk_idx = topk_idx, ...});
//   ... experts run on recv.recv_x ...
//   auto out = buffer.combine({.x = y, .handle = &recv.handle});
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "switchyard/config.hpp"
#include "switchyard/expert_major.hpp"
#include "switchyard/group.hpp"
#include "switchyard/tensor.hpp"
#include "switchyard/topology.hpp"

namespace switchyard {

enum class Backend : uint8_t { cpu, cuda };
enum class Engine : uint8_t { normal, low_latency, symmetric };
// How peers reach this rank's heap: plain memory shared by threads of one process, or POSIX shared
// memory (CPU) / CUDA IPC (CUDA) for one process per rank.
enum class HeapSharing : uint8_t { threads, processes };

// How a rank reaches ranks on other nodes (the hierarchical `normal` engine, `low_latency` across
// nodes): only puts into peers' heaps and signals, with RDMA's ordering (src/transport/transport.hpp).
//   loopback: emulated inside one machine over the mapped heaps, optionally late and out of order.
//   nccl_gin: NCCL's device API (GPU-initiated puts with signals) over the caller's communicator.
enum class TransportKind : uint8_t { loopback, nccl_gin };

struct TransportOptions {
  TransportKind kind = TransportKind::loopback;
  // loopback: every operation lands after a random delay of up to this many microseconds, puts in any
  // order and a signal after the operations to the same peer before it (0: at once, in order). Unset:
  // SWITCHYARD_LOOPBACK_DELAY_US, else 0. At most kMaxLoopbackDelayMicroseconds.
  std::optional<uint32_t> loopback_max_delay_us;
  // loopback: the delays' seed (varied per rank, so every run with one seed delays alike). Unset:
  // SWITCHYARD_LOOPBACK_SEED, else a fixed one.
  std::optional<uint64_t> loopback_seed;
  // nccl_gin: the caller's ncclComm_t over every rank of the topology (not owned; switchyard never
  // creates one: that needs the caller's bootstrap).
  void* nccl_comm = nullptr;

  // NOTES: a second covers any emulated network; more would only turn a test into a hang.
  static constexpr uint32_t kMaxLoopbackDelayMicroseconds = 1000000;
};

const char* backend_name(Backend backend);
const char* engine_name(Engine engine);
const char* transport_kind_name(TransportKind kind);
// True when this build has the CUDA backend and a CUDA device is visible.
bool cuda_available();

struct BufferOptions {
  Topology topology;
  int rank = 0;
  Backend backend = Backend::cpu;
  int device = 0;  // CUDA device ordinal of this rank
  HeapSharing sharing = HeapSharing::threads;
  Config config;
  // Sizes the heap for the largest call: normal_heap_bytes() + low_latency_heap_bytes() +
  // symmetric_heap_bytes(), rounded.
  BufferSizing sizing;
  // Overrides the heap size. The low-latency and symmetric regions (sized by `sizing`) then take
  // the end of the heap and the normal engine the rest.
  size_t heap_bytes = 0;
  // How ranks on other nodes are reached; unused within one node.
  TransportOptions transport;
};

// What get_dispatch_layout computes from topk_idx. Tensors live on the backend's device.
struct DispatchLayout {
  Tensor num_tokens_per_rank;    // i32 [R]: tokens with at least one expert on each rank
  Tensor num_tokens_per_node;    // i32 [R / ranks_per_node]
  Tensor num_tokens_per_expert;  // i32 [E]
  Tensor is_token_in_rank;       // bool [N, R]
  // Where set (the CUDA backend): i32 words of one allocation holding the four above, each at a
  // 128-byte aligned offset. A binding may hand it over once and view the four in it: a framework
  // tensor made per output costs more host time than the call's kernel (bench/NOTES.md, session 12).
  Tensor storage;
};

// get_dispatch_layout's outputs, given by the caller: a framework that allocates its own tensors (as
// DeepEP's binding does) spares the call an allocation and its outputs a conversion. All four, each with
// its output's dtype and shape (DispatchLayout), on the backend's device. On CUDA, counts that are
// consecutive parts of one allocation (num_tokens_per_rank, then num_tokens_per_node, then
// num_tokens_per_expert) are cleared with one memset instead of three.
struct DispatchLayoutOutputs {
  TensorView num_tokens_per_rank;
  TensorView num_tokens_per_node;
  TensorView num_tokens_per_expert;
  TensorView is_token_in_rank;
};

namespace detail {
struct NormalHandleData;
struct BufferAccess;
}  // namespace detail

// Everything combine (or a cached dispatch) needs to replay a dispatch's routing. Opaque; cheap to
// copy. Valid only with the Buffer that made it.
class DispatchHandle {
 public:
  DispatchHandle() = default;
  explicit DispatchHandle(std::shared_ptr<const detail::NormalHandleData> data) : data_(std::move(data)) {}
  bool valid() const { return data_ != nullptr; }
  const detail::NormalHandleData& data() const { return *data_; }
  // Tokens this rank received (known only after the host has synchronised; -1 in worst-case mode).
  int64_t num_recv_tokens() const;
  // Source tokens on this rank.
  int64_t num_tokens() const;
  // The routing as the library keeps it, for callers that rebuild another library's handle from it
  // (switchyard.deep_ep). On the backend's device, ready once the dispatch's stream has run it;
  // combine and cached dispatch read them, so they are not to be written. With C = num_channels():
  Tensor is_token_in_rank() const;  // bool [N, R]
  // i32 [M]: each received row's source token (worst-case mode: num_worst_tokens rows, unspecified past M).
  Tensor recv_src_token() const;
  // i32 [R * C + 1]: the rows of (source s, channel c) are [start[s * C + c], start[s * C + c + 1]).
  Tensor recv_channel_start() const;
  int num_channels() const;

 private:
  std::shared_ptr<const detail::NormalHandleData> data_;
};

// A dispatch's outputs made by the caller once it knows their rows (DispatchArgs::allocate_outputs). Any left
// undefined is allocated by the library, as without an allocator.
struct DispatchOutputs {
  TensorView recv_x;             // x's dtype [rows, H]
  TensorView recv_x_scales;      // f32 [rows, H / 128], fp8 x only
  TensorView recv_topk_idx;      // i64 [rows, K], with topk_idx only
  TensorView recv_topk_weights;  // f32 [rows, K], with topk_weights only
};

struct DispatchArgs {
  TensorView x;         // bf16 [N, H], or fp8_e4m3 [N, H] with x_scales
  TensorView x_scales;  // f32 [N, H / 128], fp8 only; or its transpose, see x_scales_column_major
  // The fp8 scales as DeepEP's users pass them, column-major: x_scales is then given as its transpose,
  // f32 [H / 128, N] (contiguous), and the scale of token t's block b is x_scales[b * N + t]. Read in
  // place (no copy). recv_x_scales stays row-major [M, H / 128] either way. Only with fp8 x.
  bool x_scales_column_major = false;
  TensorView topk_idx;      // i64 [N, K], -1 = no expert; may be omitted with a cached handle or a layout
  TensorView topk_weights;  // f32 [N, K]; optional, only with topk_idx
  int num_experts = 0;      // may be omitted (0) with a cached handle
  // num_recv_tokens_per_expert is rounded up to a multiple of this.
  int expert_alignment = 1;
  // From get_dispatch_layout on the same topk_idx; computed here when null. Without topk_idx
  // (DeepEP's dispatch with topk_idx=None) the layout alone routes the tokens: token t goes to every
  // rank d with is_token_in_rank[t, d], recv_topk_idx and recv_topk_weights are not made, and each
  // receiver's num_recv_tokens_per_expert sums what the sources' num_tokens_per_expert say for its
  // experts (as DeepEP does); the combine that follows is the plain sum of the copies. Read during this
  // call only (on CUDA: by work queued on `stream`): the handle keeps its own copy of is_token_in_rank,
  // so the caller may free or reuse the layout once the call is done with it.
  const DispatchLayout* layout = nullptr;
  // Replays the routing of an earlier dispatch: no layout, no count exchange, no host sync.
  const DispatchHandle* cached_handle = nullptr;
  // This call's tuning (DeepEP's per-call Config); all 0: the Buffer's. A cached dispatch runs with the
  // cached dispatch's channels.
  CallTuning tuning;
  // > 0: worst-case mode. Outputs have exactly this many rows and the host never waits for the
  // counts; rows past the received ones have topk_idx -1 and weight 0 (recv_x there is unspecified).
  int64_t num_worst_tokens = 0;
  // Optional preallocated outputs (needed for CUDA graph capture); allocated when undefined.
  TensorView out_recv_x, out_recv_x_scales, out_recv_topk_idx, out_recv_topk_weights;
  // Optional, instead of out_recv_*: makes the outputs once the call knows their rows (the rows this rank
  // receives, or num_worst_tokens), as DeepEP's binding allocates its outputs with torch after the count
  // exchange. Called once, on the calling thread, during the call; what it returns is checked as out_recv_*
  // are (dtype, shape, the Buffer's device) and must stay allocated until the call's work is done (on CUDA:
  // written in `stream` order). NOTES: after the count exchange every rank must finish its call, so an
  // allocator that throws or returns outputs that are refused leaves the peers' calls to time out, as an
  // out_recv_x of the wrong rows does.
  std::function<DispatchOutputs(int64_t rows)> allocate_outputs;
  Stream stream = nullptr;
};

// On CUDA the outputs the library allocates (those neither given as out_recv_* nor made by allocate_outputs)
// share one allocation (one stream-ordered allocation per call instead of four): its memory returns to the
// pool once every one of them is gone.
struct DispatchResult {
  Tensor recv_x;             // [M, H], x's dtype, ordered by source rank, then source token
  Tensor recv_x_scales;      // f32 [M, H / 128] (fp8 only)
  Tensor recv_topk_idx;      // i64 [M, K]: local expert ids; other ranks' slots are -1
  Tensor recv_topk_weights;  // f32 [M, K]: 0 where recv_topk_idx is -1
  // M, and per local expert the (aligned) counts; -1 / empty in worst-case mode.
  int64_t num_recv_tokens = -1;
  std::vector<int> num_recv_tokens_per_expert;
  // The same counts where the backend keeps them (device memory on CUDA): i32 [local_experts]
  // and i32 [1]. Valid in every mode, once the stream has run the dispatch.
  Tensor recv_expert_counts;
  Tensor recv_token_count;
  DispatchHandle handle;
};

struct CombineArgs {
  TensorView x;             // bf16 [M, H]: one row per received token, in dispatch's order
  TensorView topk_weights;  // f32 [M, K]; optional, reduced like x
  const DispatchHandle* handle = nullptr;
  // This call's tuning; all 0: the Buffer's ring slots and chunk, and always the dispatch's channels.
  CallTuning tuning;
  // Optional bf16 [N, H] each (N: this rank's tokens of the dispatch): added to every token's combined
  // row in the fp32 accumulator, which starts at bias0 + bias1 (an absent bias counts as +0.0) instead
  // of +0.0; the rows (or node partials) are then added in the usual order and the sum is rounded
  // once (docs/deep_ep.md, "Combine bias"). DeepEP's `bias` tuple.
  TensorView bias0, bias1;
  TensorView out_combined_x, out_combined_topk_weights;  // optional preallocated outputs
  Stream stream = nullptr;
};

// On CUDA, combined_x and combined_topk_weights, where the library allocates both, share one allocation.
struct CombineResult {
  Tensor combined_x;             // bf16 [N, H]
  Tensor combined_topk_weights;  // f32 [N, K], when topk_weights was given
};

// The normal engine's heap-resident dispatch input as views (Buffer::normal_input).
struct NormalInputViews {
  TensorView x;         // bf16 or fp8_e4m3 [num_tokens, hidden]
  TensorView x_scales;  // f32 [num_tokens, hidden / 128] for fp8; undefined for bf16
};

// The normal engine's heap-resident combine input as views (Buffer::normal_combine_input).
struct NormalCombineInputViews {
  TensorView x;             // bf16 [rows, hidden]: the expert outputs, one per received row
  TensorView topk_weights;  // f32 [rows, K] (K the dispatch's); undefined for a dispatch without top-k
};

// The symmetric engine's heap receive area as views (Buffer::symmetric_receive): a dispatch's out_recv_x
// (and, for fp8, out_recv_x_scales) in this rank's heap. L = BufferSizing::num_experts / R.
struct SymmetricReceiveViews {
  TensorView recv_x;         // BufferSizing::symmetric_heap_receive_dtype [L, expert_capacity, hidden]
  TensorView recv_x_scales;  // f32 [L, expert_capacity, hidden / 128] (fp8); undefined for bf16
};

class Buffer {
 public:
  explicit Buffer(const BufferOptions& options);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Opaque bytes that let peers map this rank's heap. Exchange them and pass all, indexed by rank,
  // to connect() on every rank.
  Bytes local_handle() const;
  void connect(const std::vector<Bytes>& all_handles);
  bool is_connected() const;

  DispatchLayout get_dispatch_layout(const TensorView& topk_idx, int num_experts, Stream stream = nullptr);
  // The same into the caller's tensors; the result's tensors borrow them.
  DispatchLayout get_dispatch_layout(const TensorView& topk_idx, int num_experts,
                                     const DispatchLayoutOutputs& out, Stream stream = nullptr);
  DispatchResult dispatch(const DispatchArgs& args);
  CombineResult combine(const CombineArgs& args);

  // The `low_latency` engine (switchyard/expert_major.hpp). Needs
  // BufferSizing::low_latency_max_tokens_per_rank > 0; it has its own heap region, so it may be
  // used on the same Buffer as `normal`.
  LowLatencyDispatchResult low_latency_dispatch(const LowLatencyDispatchArgs& args);
  LowLatencyCombineResult low_latency_combine(const LowLatencyCombineArgs& args);
  // bf16 [L, R * max, H] in this rank's heap, for `handle`'s dispatch: experts may write their
  // outputs here, then combine with zero_copy = true skips copying them in. Valid until the next
  // low-latency combine.
  TensorView low_latency_combine_buffer(const LowLatencyHandle& handle);

  // The `symmetric` engine (DeepGEMM Mega-MoE design; switchyard/expert_major.hpp, "symmetric"):
  // the low_latency interface and outputs, bit for bit, in one stage each way (pull dispatch; push
  // combine with one cross-rank barrier, or where all ranks are threads on one device a pull combine
  // that reads every expert output once: symmetric_combine_path()). Needs
  // BufferSizing::symmetric_max_tokens_per_rank > 0; it has its own heap region, so it may be used on the
  // same Buffer as `normal` and `low_latency`. Its handles are for symmetric_combine only. return_recv_hook
  // and zero_copy raise Unsupported.
  LowLatencyDispatchResult symmetric_dispatch(const LowLatencyDispatchArgs& args);
  LowLatencyCombineResult symmetric_combine(const LowLatencyCombineArgs& args);
  // The path symmetric_combine takes on this connected buffer: push (rows into the homes' combine
  // buffers, a barrier, a local reduction; across processes and GPUs) or pull (each home reduces
  // straight from the experts' outputs, read once; ranks as threads of one process on one device).
  // Config::symmetric_combine chooses; `auto` resolves at connect, alike on every rank.
  SymmetricCombine symmetric_combine_path() const;
  // How symmetric_dispatch moves rows on this connected buffer: publish (each source copies its rows into
  // its heap first, the receivers pull them; across processes and GPUs), zero_copy (the receivers pull
  // straight from the callers' x, each row read once; ranks as threads of one process on one device; the
  // dispatch returns only once no peer reads x, so x may be overwritten right after it on the caller's
  // stream), or push (the CUDA engine under `auto` where every rank is a thread of this process on one
  // device: each source reads its tokens once and writes them into their receivers' outputs, bf16 rows as
  // they are, fp8 cast once, with f32 scales; UE8M0 calls are pulled). fp8 calls that pull publish (the
  // cast). Config::symmetric_dispatch chooses; `auto` resolves at connect, alike on every rank. With ranks
  // in separate processes or on several GPUs, a call whose outputs lie in the heap receive area on every
  // rank (symmetric_receive below) is pushed under `auto` whatever this says.
  SymmetricDispatch symmetric_dispatch_path() const;
  // The symmetric engine's heap-resident tensors (BufferSizing::symmetric_heap_input,
  // symmetric_heap_output_rows_per_expert, symmetric_heap_receive_rows_per_expert): views of this rank's
  // heap, on the buffer's device, valid while the Buffer lives. Every peer maps this heap, so tensors
  // written here are read (or written) in place on every path:
  //   symmetric_input: bf16 [num_tokens, hidden]. A symmetric_dispatch whose x is this view (or a leading
  //     part of it) pulls its bf16 rows from there, with no publish copy, whatever symmetric_dispatch_path()
  //     says, also across processes and GPUs; it returns once no peer reads them (x may then be refilled).
  //   symmetric_expert_output: bf16 [L, C, hidden] for `handle`'s dispatch (C its expert_capacity; hidden 0:
  //     the dispatch's). The pull combine reads y from there; with ranks in separate processes or on several
  //     GPUs, Config::symmetric_combine = pull needs it (every combine's x must be this view) and auto keeps
  //     push. The combine returns once no peer reads it.
  //   symmetric_receive: of BufferSizing::symmetric_heap_receive_dtype: fp8_e4m3 recv_x [L, C, hidden] and
  //     f32 recv_x_scales [L, C, hidden / 128], or bf16 recv_x [L, C, hidden] alone (L = num_experts / R of
  //     the sizing; C = expert_capacity, 0: R * symmetric_max_tokens_per_rank, as a dispatch's 0 with
  //     max_tokens_per_rank at that capacity; hidden a multiple of 128 for fp8 and of 8 for bf16, 0:
  //     sizing.hidden). Passed as the outputs of a symmetric_dispatch of that dtype (fp8: use_fp8 with f32
  //     scales, not use_ue8m0; bf16: config.symmetric_dispatch auto) on every rank, with that dispatch's C
  //     and hidden, they let every source write its rows straight into them (the CUDA engine's push), also
  //     with ranks in separate processes and on several GPUs; elsewhere the dispatch pulls into them as
  //     into any outputs. A dispatch with fewer experts than the sizing's passes a leading part (its L
  //     experts).
  // One of each per buffer: a view is rewritten by whoever writes it next, the caller included (a second
  // dispatch into the receive views rewrites the first one's rows).
  TensorView symmetric_input(int64_t num_tokens, int hidden);
  // The normal engine's heap-resident dispatch input (BufferSizing::normal_heap_input_tokens > 0;
  // docs/normal-in-place.md): x [num_tokens, hidden] of `dtype` (bf16, or fp8_e4m3 with row-major x_scales
  // [num_tokens, hidden / 128]) in this rank's heap, valid while the Buffer lives. On such a Buffer every
  // `normal` dispatch takes these views as its x and x_scales (the caller writes its tokens there first),
  // and a receiver reads a source's rows from the source's heap where the backend can. The dispatch returns
  // once no peer reads them any more, so the caller may refill the views after it (on CUDA: on its stream).
  NormalInputViews normal_input(int64_t num_tokens, int hidden, DType dtype = DType::bf16);
  // The normal engine's heap-resident combine input (BufferSizing::normal_heap_combine_rows > 0;
  // docs/normal-in-place.md), for the combine of `handle`'s dispatch: x bf16 [rows, hidden] (rows: the
  // dispatch's received rows, or its num_worst_tokens; hidden 0: sizing.hidden) and topk_weights f32
  // [rows, K] in this rank's heap. On such a Buffer every `normal` combine takes these views as its x (and
  // topk_weights, when it passes weights): the caller writes its expert outputs there, and each home rank
  // reads its tokens' rows in place where the backend can. The combine returns once no peer reads them.
  NormalCombineInputViews normal_combine_input(const DispatchHandle& handle, int hidden = 0);
  TensorView symmetric_expert_output(const LowLatencyHandle& handle, int hidden = 0);
  SymmetricReceiveViews symmetric_receive(int64_t expert_capacity, int hidden = 0);

  // Rank masks (DeepEP's enable_shrink): this rank's view of which peers have left. A masked rank
  // takes no part in this buffer's low_latency and symmetric calls: its experts receive nothing,
  // slots routed to them are dropped (as if topk_idx held -1 there), nothing is sent to it and
  // nothing awaited from it. So the survivors go on, without a new Buffer, with outputs bitwise those of
  // the reference on the routing with the masked ranks' experts removed (and the masked ranks sending
  // nothing). Mask alike on every survivor; Config::mask_ranks_on_timeout also masks a peer that a
  // wait timed out on. A rank masked in its own view sends and receives nothing (recv_count 0,
  // combined_x +0.0). Unmask (or clean_mask) only a rank that has made every call since it was masked
  // (the engines number their calls alike on every rank). On CUDA these are stream-ordered on
  // `stream` (nullptr: the buffer's own) and the kernels read the mask when they run, so a captured
  // graph follows later updates. The normal engine refuses calls while update_mask has masked a rank.
  // update_mask and clean_mask are refused while a low-latency hook is pending (both halves of a call
  // must see one mask).
  void update_mask(int rank, bool masked, Stream stream = nullptr);
  // i32 [R], 1 where a rank is masked, on this buffer's device (filled on `stream` on CUDA).
  Tensor query_mask(Stream stream = nullptr);
  void clean_mask(Stream stream = nullptr);

  // Waits for this buffer's work on `stream` (nullptr: the buffer's own stream) and raises any
  // error a kernel recorded (TimeoutError naming rank, role and channel). On CPU, calls complete
  // before they return and this only returns. Calls also report earlier kernels' errors.
  void synchronize(Stream stream = nullptr);

  int rank() const;
  const Topology& topology() const;
  Backend backend() const;
  const Config& config() const;
  size_t heap_bytes() const;
  // The `normal` engine's channels: what a call runs with by default (Config::num_channels, resolved
  // per backend), and the most a call's CallTuning may ask for (on CUDA known once connected: every
  // channel's 2 blocks of every rank sharing the GPU must be resident at once).
  int num_channels() const;
  int max_num_channels() const;

  class Impl;

 private:
  // What layers built on a Buffer (MoeLayer) reach of it, inside the library only.
  friend struct detail::BufferAccess;
  std::unique_ptr<Impl> impl_;
};

}  // namespace switchyard
