// Buffer: validation on the host, then the backend. Nothing reaches a backend unchecked.
#include "switchyard/buffer.hpp"

#include <algorithm>

#include "core/backend.hpp"
#include "core/device_memory.hpp"
#include "core/handle_format.hpp"
#include "core/normal_sizing.hpp"
#include "core/validation.hpp"
#include "switchyard/errors.hpp"

namespace switchyard {

const char* backend_name(Backend backend) { return backend == Backend::cpu ? "cpu" : "cuda"; }

const char* engine_name(Engine engine) {
  switch (engine) {
    case Engine::normal: return "normal";
    case Engine::low_latency: return "low_latency";
    case Engine::symmetric: return "symmetric";
  }
  return "?";
}

bool cuda_available() { return detail::cuda_backend_available(); }

int64_t DispatchHandle::num_recv_tokens() const { return data_ ? data_->num_recv_tokens : -1; }
int64_t DispatchHandle::num_tokens() const { return data_ ? data_->num_tokens : 0; }

namespace {

// NOTES: K beyond 32 has no use in today's MoE models and would only grow the ring slots.
constexpr int kMaxTopk = 32;

uint64_t fnv1a(uint64_t hash, int64_t value) {
  for (int i = 0; i < 8; ++i) {
    hash ^= static_cast<uint64_t>(value >> (8 * i)) & 0xffu;
    hash *= 1099511628211ull;
  }
  return hash;
}

template <typename... Values>
uint64_t call_signature(Values... values) {
  uint64_t hash = 14695981039346656037ull;
  for (int64_t value : {static_cast<int64_t>(values)...}) hash = fnv1a(hash, value);
  return hash | 1;  // never 0, so a zeroed heap never matches
}

}  // namespace

class Buffer::Impl {
 public:
  explicit Impl(const BufferOptions& options) : options_(options) {
    options_.topology.validate();
    options_.config.validate();
    if (options_.rank < 0 || options_.rank >= options_.topology.num_ranks) {
      throw InvalidArgument("rank: expected 0.." + std::to_string(options_.topology.num_ranks - 1) + ", got " +
                            std::to_string(options_.rank));
    }
    if (options_.topology.num_ranks > common::kMaxMappedRanks) {
      throw InvalidArgument("topology.num_ranks: expected <= " + std::to_string(common::kMaxMappedRanks) + ", got " +
                            std::to_string(options_.topology.num_ranks));
    }
    const BufferSizing& sizing = options_.sizing;
    if (sizing.max_tokens_per_rank < 0 || sizing.hidden < 1 || sizing.topk < 1 || sizing.topk > kMaxTopk ||
        sizing.num_experts < 1) {
      throw InvalidArgument("sizing: expected max_tokens_per_rank >= 0, hidden >= 1, topk in 1.." +
                            std::to_string(kMaxTopk) + ", num_experts >= 1; got max_tokens_per_rank=" +
                            std::to_string(sizing.max_tokens_per_rank) + " hidden=" + std::to_string(sizing.hidden) +
                            " topk=" + std::to_string(sizing.topk) + " num_experts=" + std::to_string(sizing.num_experts));
    }
    heap_bytes_ = options_.heap_bytes ? options_.heap_bytes
                                      : normal_heap_bytes(options_.topology, options_.config, options_.sizing);
    detail::BackendCreateInfo info{&options_, heap_bytes_, this};
    backend_ = options_.backend == Backend::cpu ? detail::make_cpu_backend(info) : detail::make_cuda_backend(info);
  }

  Bytes local_handle() const {
    detail::HandleHeader header{};
    header.backend = static_cast<uint32_t>(options_.backend);
    header.rank = options_.rank;
    header.num_ranks = options_.topology.num_ranks;
    header.ranks_per_node = options_.topology.ranks_per_node;
    header.sharing = static_cast<uint32_t>(options_.sharing);
    header.heap_bytes = heap_bytes_;
    return detail::pack_handle(header, backend_->local_handle());
  }

  void connect(const std::vector<Bytes>& all_handles) {
    if (connected_) throw InvalidArgument("connect: expected an unconnected buffer, got one already connected");
    const Topology& topology = options_.topology;
    if (static_cast<int>(all_handles.size()) != topology.num_ranks) {
      throw InvalidArgument("all_handles: expected " + std::to_string(topology.num_ranks) +
                            " handles (one per rank), got " + std::to_string(all_handles.size()));
    }
    for (int peer = 0; peer < topology.num_ranks; ++peer) {
      std::string which = "all_handles[" + std::to_string(peer) + "]";
      detail::HandleHeader header = detail::unpack_handle_header(all_handles[peer], which);
      if (header.rank != peer) {
        throw InvalidArgument(which + ": expected the handle of rank " + std::to_string(peer) + ", got rank " +
                              std::to_string(header.rank) + "'s (handles must be ordered by rank)");
      }
      if (header.backend != static_cast<uint32_t>(options_.backend)) {
        throw InvalidArgument(which + ": expected a " + backend_name(options_.backend) + " handle, got a " +
                              backend_name(static_cast<Backend>(header.backend)) + " one");
      }
      if (header.num_ranks != topology.num_ranks || header.ranks_per_node != topology.ranks_per_node) {
        throw InvalidArgument(which + ": expected topology " + topology.to_string() + ", got " +
                              Topology{header.num_ranks, header.ranks_per_node}.to_string());
      }
      if (header.heap_bytes != heap_bytes_) {
        throw InvalidArgument(which + ": expected a heap of " + std::to_string(heap_bytes_) + " bytes (same sizing and "
                              "config on every rank), got " + std::to_string(header.heap_bytes));
      }
      if (header.sharing != static_cast<uint32_t>(options_.sharing)) {
        throw InvalidArgument(which + ": expected the same HeapSharing on every rank, got a mismatch");
      }
    }
    backend_->connect(all_handles);
    connected_ = true;
  }

  DispatchLayout get_dispatch_layout(const TensorView& topk_idx, int num_experts, Stream stream) {
    check_usable("get_dispatch_layout");
    detail::expect_tensor(topk_idx, "topk_idx", DType::i64, 2, backend_->device());
    check_num_experts(num_experts);
    check_topk(topk_idx.shape[1]);
    if (topk_idx.device == Device::cpu) detail::expect_expert_ids(topk_idx, num_experts);
    return backend_->get_dispatch_layout(topk_idx, num_experts, stream);
  }

  DispatchResult dispatch(const DispatchArgs& args) {
    check_usable("dispatch");
    check_single_node("dispatch");
    detail::DispatchPlan plan = plan_dispatch(args);
    return guarded([&] { return backend_->normal_dispatch(plan); });
  }

  CombineResult combine(const CombineArgs& args) {
    check_usable("combine");
    check_single_node("combine");
    detail::CombinePlan plan = plan_combine(args);
    return guarded([&] { return backend_->normal_combine(plan); });
  }

  void synchronize(Stream stream) {
    check_usable("synchronize");
    guarded([&] {
      backend_->synchronize(stream);
      return 0;
    });
  }

  const BufferOptions& options() const { return options_; }
  size_t heap_bytes() const { return heap_bytes_; }
  bool connected() const { return connected_; }

 private:
  // After a timeout the peers' state is unknown; the buffer refuses further work.
  template <typename Fn>
  auto guarded(Fn&& fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const TimeoutError&) {
      failed_ = true;
      throw;
    }
  }

  void check_usable(const char* what) const {
    if (!connected_) {
      throw InvalidArgument(std::string(what) + ": expected a connected buffer (call connect() first), got an "
                            "unconnected one");
    }
    if (failed_) {
      throw Error(std::string(what) + ": this buffer timed out earlier and its peers' state is unknown; create a "
                  "new Buffer on every rank");
    }
  }

  void check_single_node(const char* what) const {
    if (!options_.topology.is_single_node()) {
      throw Unsupported(std::string(what) + ": the normal engine across nodes (ranks_per_node " +
                        std::to_string(options_.topology.ranks_per_node) + " < num_ranks " +
                        std::to_string(options_.topology.num_ranks) +
                        ") needs the hierarchical three-stage engine, which is not implemented yet");
    }
  }

  void check_num_experts(int num_experts) const {
    int ranks = options_.topology.num_ranks;
    if (num_experts < 1 || num_experts % ranks != 0) {
      throw InvalidArgument("num_experts: expected a positive multiple of num_ranks (" + std::to_string(ranks) +
                            "), got " + std::to_string(num_experts));
    }
  }

  void check_topk(int64_t topk) const {
    if (topk < 1 || topk > kMaxTopk) {
      throw InvalidArgument("topk_idx: expected 1.." + std::to_string(kMaxTopk) + " columns (k), got " +
                            std::to_string(topk));
    }
  }

  void check_tokens(int64_t num_tokens) const {
    if (num_tokens > options_.sizing.max_tokens_per_rank) {
      throw InvalidArgument("x: expected at most " + std::to_string(options_.sizing.max_tokens_per_rank) +
                            " tokens (BufferSizing::max_tokens_per_rank), got " + std::to_string(num_tokens));
    }
  }

  void check_heap(const common::NormalHeapLayout& layout, const char* what, int hidden) const {
    if (layout.total_bytes() > heap_bytes_) {
      throw InvalidArgument(std::string(what) + ": expected a call that fits the buffer's heap of " +
                            std::to_string(heap_bytes_) + " bytes, got one needing " +
                            std::to_string(layout.total_bytes()) + " (hidden=" + std::to_string(hidden) +
                            "); size the buffer with BufferSizing for the largest call");
    }
  }

  detail::DispatchPlan plan_dispatch(const DispatchArgs& args) {
    const Device device = backend_->device();
    detail::DispatchPlan plan;
    plan.rank = options_.rank;
    plan.topology = options_.topology;
    plan.config = options_.config;
    plan.config.num_channels = backend_->num_channels();
    plan.args = args;

    const TensorView& x = args.x;
    if (!x.defined()) throw InvalidArgument("x: expected a bf16 or fp8_e4m3 tensor [num_tokens, hidden], got none");
    if (x.dtype != DType::bf16 && x.dtype != DType::fp8_e4m3) {
      throw InvalidArgument("x: expected dtype bf16 or fp8_e4m3, got " + x.describe());
    }
    detail::expect_tensor(x, "x", x.dtype, 2, device);
    plan.num_tokens = x.shape[0];
    plan.dtype = x.dtype;
    if (x.shape[1] < 1 || x.shape[1] > (1 << 20)) {
      throw InvalidArgument("x: expected hidden in 1..1048576, got " + x.describe());
    }
    plan.hidden = static_cast<int>(x.shape[1]);
    if ((plan.hidden * dtype_size(plan.dtype)) % 16 != 0) {
      throw InvalidArgument("x: expected rows that are a multiple of 16 bytes (hidden a multiple of " +
                            std::to_string(16 / dtype_size(plan.dtype)) + " for " + dtype_name(plan.dtype) +
                            "), got " + x.describe());
    }
    check_tokens(plan.num_tokens);

    if (plan.dtype == DType::fp8_e4m3) {
      if (plan.hidden % common::kScaleBlock != 0) {
        throw InvalidArgument("x: expected hidden a multiple of 128 for fp8 (one scale per 128 channels), got " +
                              x.describe());
      }
      detail::expect_tensor(args.x_scales, "x_scales", DType::f32, 2, device);
      detail::expect_dim(args.x_scales, "x_scales", 0, plan.num_tokens, "num_tokens of x");
      detail::expect_dim(args.x_scales, "x_scales", 1, plan.hidden / common::kScaleBlock, "hidden / 128");
      plan.has_scales = true;
    } else {
      detail::expect_undefined(args.x_scales, "x_scales", "x is bf16; scales come only with fp8");
    }

    if (args.cached_handle) {
      if (!args.cached_handle->valid()) throw InvalidArgument("cached_handle: expected a handle from dispatch, got an empty one");
      const detail::NormalHandleData& cached = args.cached_handle->data();
      if (cached.owner != this) {
        throw InvalidArgument("cached_handle: expected a handle made by this Buffer, got one from another Buffer");
      }
      if (cached.num_tokens != plan.num_tokens) {
        throw InvalidArgument("x: expected " + std::to_string(cached.num_tokens) +
                              " tokens (as in the cached dispatch), got " + x.describe());
      }
      if (args.num_experts != 0 && args.num_experts != cached.num_experts) {
        throw InvalidArgument("num_experts: expected " + std::to_string(cached.num_experts) +
                              " (as in the cached dispatch) or 0, got " + std::to_string(args.num_experts));
      }
      if (args.num_worst_tokens != cached.num_worst_tokens) {
        throw InvalidArgument("num_worst_tokens: expected " + std::to_string(cached.num_worst_tokens) +
                              " (as in the cached dispatch), got " + std::to_string(args.num_worst_tokens));
      }
      plan.cached = &cached;
      plan.num_experts = cached.num_experts;
      plan.expert_alignment = cached.expert_alignment;
    } else {
      check_num_experts(args.num_experts);
      plan.num_experts = args.num_experts;
      if (args.expert_alignment < 1) {
        throw InvalidArgument("expert_alignment: expected >= 1, got " + std::to_string(args.expert_alignment));
      }
      plan.expert_alignment = args.expert_alignment;
      if (!args.topk_idx.defined()) {
        throw InvalidArgument("topk_idx: expected an i64 tensor [num_tokens, k], got none (only a cached dispatch may "
                              "omit it)");
      }
    }
    plan.local_experts = plan.num_experts / options_.topology.num_ranks;

    if (args.topk_idx.defined()) {
      detail::expect_tensor(args.topk_idx, "topk_idx", DType::i64, 2, device);
      detail::expect_dim(args.topk_idx, "topk_idx", 0, plan.num_tokens, "num_tokens of x");
      check_topk(args.topk_idx.shape[1]);
      plan.topk = static_cast<int>(args.topk_idx.shape[1]);
      if (args.topk_idx.device == Device::cpu) detail::expect_expert_ids(args.topk_idx, plan.num_experts);
    }
    if (args.topk_weights.defined()) {
      if (!args.topk_idx.defined()) {
        throw InvalidArgument("topk_weights: expected none without topk_idx, got " + args.topk_weights.describe());
      }
      detail::expect_tensor(args.topk_weights, "topk_weights", DType::f32, 2, device);
      detail::expect_dim(args.topk_weights, "topk_weights", 0, plan.num_tokens, "num_tokens of x");
      detail::expect_dim(args.topk_weights, "topk_weights", 1, plan.topk, "k of topk_idx");
      plan.has_weights = true;
    }

    if (args.num_worst_tokens < 0) {
      throw InvalidArgument("num_worst_tokens: expected >= 0, got " + std::to_string(args.num_worst_tokens));
    }
    plan.num_worst_tokens = args.num_worst_tokens;
    if (args.layout) {
      if (plan.cached) throw InvalidArgument("layout: expected none with a cached handle (the handle has the routing)");
      detail::expect_tensor(args.layout->is_token_in_rank, "layout.is_token_in_rank", DType::boolean, 2, device);
      detail::expect_dim(args.layout->is_token_in_rank, "layout.is_token_in_rank", 0, plan.num_tokens, "num_tokens");
      detail::expect_dim(args.layout->is_token_in_rank, "layout.is_token_in_rank", 1, options_.topology.num_ranks,
                         "num_ranks");
      detail::expect_tensor(args.layout->num_tokens_per_expert, "layout.num_tokens_per_expert", DType::i32, 1, device);
      detail::expect_dim(args.layout->num_tokens_per_expert, "layout.num_tokens_per_expert", 0, plan.num_experts,
                         "num_experts");
      plan.layout = args.layout;
    }
    check_dispatch_outputs(plan);
    check_heap(detail::dispatch_heap_layout(plan), "dispatch", plan.hidden);
    plan.signature = call_signature(1, plan.hidden, static_cast<int>(plan.dtype), plan.topk, plan.has_weights,
                                    plan.num_experts, plan.expert_alignment, plan.cached != nullptr,
                                    plan.num_worst_tokens > 0, plan.config.num_channels);
    return plan;
  }

  // Output shapes that are known before the count exchange are checked here; row counts of
  // preallocated outputs outside worst-case mode are checked by the backend once M is known.
  void check_dispatch_outputs(const detail::DispatchPlan& plan) const {
    const Device device = backend_->device();
    const DispatchArgs& args = plan.args;
    detail::expect_optional_tensor(args.out_recv_x, "out_recv_x", plan.dtype, 2, device);
    if (args.out_recv_x.defined()) detail::expect_dim(args.out_recv_x, "out_recv_x", 1, plan.hidden, "hidden");
    if (plan.has_scales) {
      detail::expect_optional_tensor(args.out_recv_x_scales, "out_recv_x_scales", DType::f32, 2, device);
      if (args.out_recv_x_scales.defined()) {
        detail::expect_dim(args.out_recv_x_scales, "out_recv_x_scales", 1, plan.hidden / common::kScaleBlock,
                           "hidden / 128");
      }
    } else {
      detail::expect_undefined(args.out_recv_x_scales, "out_recv_x_scales", "x is bf16");
    }
    if (plan.topk > 0) {
      detail::expect_optional_tensor(args.out_recv_topk_idx, "out_recv_topk_idx", DType::i64, 2, device);
      if (args.out_recv_topk_idx.defined()) detail::expect_dim(args.out_recv_topk_idx, "out_recv_topk_idx", 1, plan.topk, "k");
    } else {
      detail::expect_undefined(args.out_recv_topk_idx, "out_recv_topk_idx", "no topk_idx was given");
    }
    if (plan.has_weights) {
      detail::expect_optional_tensor(args.out_recv_topk_weights, "out_recv_topk_weights", DType::f32, 2, device);
      if (args.out_recv_topk_weights.defined()) {
        detail::expect_dim(args.out_recv_topk_weights, "out_recv_topk_weights", 1, plan.topk, "k");
      }
    } else {
      detail::expect_undefined(args.out_recv_topk_weights, "out_recv_topk_weights", "no topk_weights were given");
    }
    if (plan.num_worst_tokens > 0) {
      for (auto [tensor, name] : {std::pair{&args.out_recv_x, "out_recv_x"}, {&args.out_recv_x_scales, "out_recv_x_scales"},
                                  {&args.out_recv_topk_idx, "out_recv_topk_idx"},
                                  {&args.out_recv_topk_weights, "out_recv_topk_weights"}}) {
        if (tensor->defined()) detail::expect_dim(*tensor, name, 0, plan.num_worst_tokens, "num_worst_tokens");
      }
    }
  }

  detail::CombinePlan plan_combine(const CombineArgs& args) {
    const Device device = backend_->device();
    detail::CombinePlan plan;
    plan.rank = options_.rank;
    plan.topology = options_.topology;
    plan.config = options_.config;
    plan.config.num_channels = backend_->num_channels();
    plan.args = args;
    if (!args.handle || !args.handle->valid()) {
      throw InvalidArgument("handle: expected the handle of a dispatch on this buffer, got none");
    }
    const detail::NormalHandleData& handle = args.handle->data();
    if (handle.owner != this) {
      throw InvalidArgument("handle: expected a handle made by this Buffer, got one from another Buffer");
    }
    plan.handle = &handle;
    detail::expect_tensor(args.x, "x", DType::bf16, 2, device);
    int64_t expected_rows = handle.num_worst_tokens > 0 ? handle.num_worst_tokens : handle.num_recv_tokens;
    detail::expect_dim(args.x, "x", 0, expected_rows,
                       handle.num_worst_tokens > 0 ? "num_worst_tokens of the dispatch" : "tokens received by the dispatch");
    if (args.x.shape[1] < 1 || args.x.shape[1] % 8 != 0 || args.x.shape[1] > (1 << 20)) {
      throw InvalidArgument("x: expected hidden a multiple of 8 (16-byte rows), got " + args.x.describe());
    }
    plan.hidden = static_cast<int>(args.x.shape[1]);
    if (args.topk_weights.defined()) {
      detail::expect_tensor(args.topk_weights, "topk_weights", DType::f32, 2, device);
      detail::expect_dim(args.topk_weights, "topk_weights", 0, expected_rows, "rows of x");
      check_topk(args.topk_weights.shape[1]);
      plan.has_weights = true;
      plan.topk = static_cast<int>(args.topk_weights.shape[1]);
    }
    detail::expect_optional_tensor(args.out_combined_x, "out_combined_x", DType::bf16, 2, device);
    if (args.out_combined_x.defined()) {
      detail::expect_dim(args.out_combined_x, "out_combined_x", 0, handle.num_tokens, "tokens of the dispatch");
      detail::expect_dim(args.out_combined_x, "out_combined_x", 1, plan.hidden, "hidden of x");
    }
    if (plan.has_weights) {
      detail::expect_optional_tensor(args.out_combined_topk_weights, "out_combined_topk_weights", DType::f32, 2, device);
      if (args.out_combined_topk_weights.defined()) {
        detail::expect_dim(args.out_combined_topk_weights, "out_combined_topk_weights", 0, handle.num_tokens,
                           "tokens of the dispatch");
        detail::expect_dim(args.out_combined_topk_weights, "out_combined_topk_weights", 1, plan.topk, "k");
      }
    } else {
      detail::expect_undefined(args.out_combined_topk_weights, "out_combined_topk_weights", "no topk_weights were given");
    }
    check_heap(detail::combine_heap_layout(plan), "combine", plan.hidden);
    plan.signature = call_signature(2, plan.hidden, plan.topk, plan.has_weights, plan.config.num_channels);
    return plan;
  }

  BufferOptions options_;
  size_t heap_bytes_ = 0;
  std::unique_ptr<detail::BackendImpl> backend_;
  bool connected_ = false;
  bool failed_ = false;
};

Buffer::Buffer(const BufferOptions& options) : impl_(std::make_unique<Impl>(options)) {}
Buffer::~Buffer() = default;
Bytes Buffer::local_handle() const { return impl_->local_handle(); }
void Buffer::connect(const std::vector<Bytes>& all_handles) { impl_->connect(all_handles); }
bool Buffer::is_connected() const { return impl_->connected(); }
DispatchLayout Buffer::get_dispatch_layout(const TensorView& topk_idx, int num_experts, Stream stream) {
  return impl_->get_dispatch_layout(topk_idx, num_experts, stream);
}
DispatchResult Buffer::dispatch(const DispatchArgs& args) { return impl_->dispatch(args); }
CombineResult Buffer::combine(const CombineArgs& args) { return impl_->combine(args); }
void Buffer::synchronize(Stream stream) { impl_->synchronize(stream); }
int Buffer::rank() const { return impl_->options().rank; }
const Topology& Buffer::topology() const { return impl_->options().topology; }
Backend Buffer::backend() const { return impl_->options().backend; }
const Config& Buffer::config() const { return impl_->options().config; }
size_t Buffer::heap_bytes() const { return impl_->heap_bytes(); }

}  // namespace switchyard
