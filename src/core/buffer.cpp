// Buffer: validation on the host, then the backend. Nothing reaches a backend unchecked.
#include "switchyard/buffer.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "common/fp8_cast.hpp"
#include "core/backend.hpp"
#include "core/device_memory.hpp"
#include "core/handle_format.hpp"
#include "core/low_latency_sizing.hpp"
#include "core/normal_sizing.hpp"
#include "core/symmetric_sizing.hpp"
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
// NOTES: a signal carries a 32-bit row count; far beyond any decode batch.
constexpr int64_t kMaxLowLatencyTokens = int64_t{1} << 20;

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
        sizing.num_experts < 1 || sizing.low_latency_max_tokens_per_rank < 0 ||
        sizing.low_latency_max_tokens_per_rank > kMaxLowLatencyTokens) {
      throw InvalidArgument("sizing: expected max_tokens_per_rank >= 0, hidden >= 1, topk in 1.." +
                            std::to_string(kMaxTopk) + ", num_experts >= 1; got max_tokens_per_rank=" +
                            std::to_string(sizing.max_tokens_per_rank) + " hidden=" + std::to_string(sizing.hidden) +
                            " topk=" + std::to_string(sizing.topk) + " num_experts=" + std::to_string(sizing.num_experts) +
                            "; low_latency_max_tokens_per_rank in 0.." + std::to_string(kMaxLowLatencyTokens) +
                            ", got " + std::to_string(sizing.low_latency_max_tokens_per_rank));
    }
    if (sizing.symmetric_max_tokens_per_rank < 0 || sizing.symmetric_max_tokens_per_rank > kMaxLowLatencyTokens) {
      throw InvalidArgument("sizing.symmetric_max_tokens_per_rank: expected 0.." +
                            std::to_string(kMaxLowLatencyTokens) + ", got " +
                            std::to_string(sizing.symmetric_max_tokens_per_rank));
    }
    // The heap: the normal region, then the low-latency region, then the symmetric region (so all
    // engines can share a Buffer).
    const size_t low_latency_bytes = low_latency_heap_bytes(options_.topology, sizing);
    const size_t symmetric_bytes = symmetric_heap_bytes(options_.topology, sizing);
    const size_t tail_bytes = low_latency_bytes + symmetric_bytes;
    if (options_.heap_bytes) {
      heap_bytes_ = options_.heap_bytes;
      if (heap_bytes_ < tail_bytes) {
        throw InvalidArgument("heap_bytes: expected at least low_latency_heap_bytes() + symmetric_heap_bytes() = " +
                              std::to_string(tail_bytes) + " for sizing.low_latency_max_tokens_per_rank " +
                              std::to_string(sizing.low_latency_max_tokens_per_rank) +
                              " and sizing.symmetric_max_tokens_per_rank " +
                              std::to_string(sizing.symmetric_max_tokens_per_rank) + ", got " +
                              std::to_string(heap_bytes_));
      }
      normal_region_bytes_ = tail_bytes == 0 ? heap_bytes_
                                             : (heap_bytes_ - tail_bytes) / common::kLowLatencySignalAlignment *
                                                   common::kLowLatencySignalAlignment;
    } else {
      normal_region_bytes_ = common::align_up(normal_heap_bytes(options_.topology, options_.config, sizing),
                                              common::kLowLatencySignalAlignment);
      heap_bytes_ = normal_region_bytes_ + tail_bytes;
    }
    low_latency_layout_ = detail::low_latency_layout(options_.topology, sizing, normal_region_bytes_);
    symmetric_layout_ = detail::symmetric_layout(options_.topology, sizing, normal_region_bytes_ + low_latency_bytes);
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
    detail::DispatchPlan plan = plan_dispatch(args);
    return guarded([&] { return backend_->normal_dispatch(plan); });
  }

  CombineResult combine(const CombineArgs& args) {
    check_usable("combine");
    detail::CombinePlan plan = plan_combine(args);
    return guarded([&] { return backend_->normal_combine(plan); });
  }

  LowLatencyDispatchResult low_latency_dispatch(const LowLatencyDispatchArgs& args) {
    check_usable("low_latency_dispatch");
    check_low_latency_ready("low_latency_dispatch");
    // NOTES: its receive slots hold R * max rows per expert in the heap whatever recv_x's size, so a
    // capacity would only shrink the outputs; the symmetric engine is the one meant for it.
    if (args.expert_capacity != 0) {
      throw Unsupported("low_latency_dispatch: expert_capacity is not supported by the low_latency engine (expected "
                        "0, got " + std::to_string(args.expert_capacity) + "); use symmetric_dispatch for "
                        "per-expert capacities");
    }
    detail::LowLatencyDispatchPlan plan;
    plan.layout = low_latency_layout_;
    plan_expert_major_dispatch(args, low_latency_capacity(), plan);
    LowLatencyDispatchResult result = guarded([&] { return backend_->low_latency_dispatch(plan); });
    if (result.hook) result.hook = guarded_hook(std::move(result.hook));
    return result;
  }

  LowLatencyCombineResult low_latency_combine(const LowLatencyCombineArgs& args) {
    check_usable("low_latency_combine");
    check_low_latency_ready("low_latency_combine");
    detail::LowLatencyCombinePlan plan;
    plan.layout = low_latency_layout_;
    plan_expert_major_combine(args, Engine::low_latency, low_latency_layout_.hidden,
                              backend_->low_latency_staging(low_latency_layout_), plan);
    LowLatencyCombineResult result = guarded([&] { return backend_->low_latency_combine(plan); });
    if (result.hook) result.hook = guarded_hook(std::move(result.hook));
    return result;
  }

  LowLatencyDispatchResult symmetric_dispatch(const LowLatencyDispatchArgs& args) {
    check_usable("symmetric_dispatch");
    check_symmetric_region("symmetric_dispatch");
    if (args.return_recv_hook) {
      throw Unsupported("symmetric_dispatch: return_recv_hook is not supported by the symmetric engine (one stage: "
                        "there is no send half to split off); use low_latency_dispatch for hooks");
    }
    detail::SymmetricDispatchPlan plan;
    plan.layout = symmetric_layout_;
    plan_expert_major_dispatch(args, symmetric_capacity(), plan);
    return guarded([&] { return backend_->symmetric_dispatch(plan); });
  }

  LowLatencyCombineResult symmetric_combine(const LowLatencyCombineArgs& args) {
    check_usable("symmetric_combine");
    check_symmetric_region("symmetric_combine");
    if (args.return_recv_hook) {
      throw Unsupported("symmetric_combine: return_recv_hook is not supported by the symmetric engine (one stage: "
                        "there is no send half to split off); use low_latency_combine for hooks");
    }
    if (args.zero_copy) {
      throw Unsupported("symmetric_combine: zero_copy is not supported by the symmetric engine (rows are pushed "
                        "straight from x into the home ranks); pass the expert outputs as x");
    }
    detail::SymmetricCombinePlan plan;
    plan.layout = symmetric_layout_;
    plan_expert_major_combine(args, Engine::symmetric, symmetric_layout_.hidden, nullptr, plan);
    return guarded([&] { return backend_->symmetric_combine(plan); });
  }

  TensorView low_latency_combine_buffer(const LowLatencyHandle& handle) {
    check_usable("low_latency_combine_buffer");
    check_low_latency_region("low_latency_combine_buffer");
    const detail::LowLatencyHandleData& data = low_latency_handle(&handle, Engine::low_latency);
    const Device device = backend_->device();
    return TensorView(backend_->low_latency_staging(low_latency_layout_), DType::bf16,
                      {data.local_experts, data.topology.num_ranks * data.max_tokens_per_rank, data.hidden}, device,
                      device == Device::cuda ? options_.device : 0);
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

  // ---- low_latency ----------------------------------------------------------------------------

  void check_low_latency_region(const char* what) const {
    if (options_.sizing.low_latency_max_tokens_per_rank <= 0) {
      throw InvalidArgument(std::string(what) + ": expected a buffer with a low-latency region "
                            "(BufferSizing::low_latency_max_tokens_per_rank > 0), got one sized without it");
    }
  }

  void check_symmetric_region(const char* what) const {
    if (options_.sizing.symmetric_max_tokens_per_rank <= 0) {
      throw InvalidArgument(std::string(what) + ": expected a buffer with a symmetric region "
                            "(BufferSizing::symmetric_max_tokens_per_rank > 0), got one sized without it");
    }
    // NOTES: the engine pulls from and pushes into every peer's heap by address: it needs one
    // load/store domain, and across nodes there are only a transport's puts.
    if (!options_.topology.is_single_node()) {
      throw Unsupported(std::string(what) + ": the symmetric engine needs every rank in one load/store domain "
                        "(ranks_per_node == num_ranks), got topology " + options_.topology.to_string() +
                        "; across nodes use low_latency (cpu) or normal");
    }
  }

  void check_low_latency_ready(const char* what) const {
    check_low_latency_region(what);
    if (hook_pending_) {
      throw InvalidArgument(std::string(what) + ": expected the hook of this buffer's previous low-latency call "
                            "(return_recv_hook) to have been called first, got it still pending");
    }
  }

  // The receive half runs once, under the same timeout policy as a call.
  std::function<void()> guarded_hook(std::function<void()> receive) {
    hook_pending_ = true;
    auto called = std::make_shared<bool>(false);
    return [this, receive = std::move(receive), called] {
      if (*called) throw InvalidArgument("hook: expected one call, got a second");
      *called = true;
      hook_pending_ = false;
      if (failed_) {
        throw Error("hook: this buffer timed out earlier and its peers' state is unknown; create a new Buffer on "
                    "every rank");
      }
      guarded([&] {
        receive();
        return 0;
      });
    };
  }

  const detail::LowLatencyHandleData& low_latency_handle(const LowLatencyHandle* handle, Engine engine) const {
    if (!handle || !handle->valid()) {
      throw InvalidArgument(std::string("handle: expected the handle of a ") + engine_name(engine) +
                            "_dispatch on this buffer, got none");
    }
    const detail::LowLatencyHandleData& data = handle->data();
    if (data.owner != this) {
      throw InvalidArgument("handle: expected a handle made by this Buffer, got one from another Buffer");
    }
    if (data.engine != engine) {
      throw InvalidArgument(std::string("handle: expected the handle of a ") + engine_name(engine) +
                            "_dispatch, got one of a " + engine_name(data.engine) + "_dispatch");
    }
    return data;
  }

  // What an expert-major engine's region holds, and the sizing field that sets its token capacity.
  struct ExpertMajorCapacity {
    int hidden;
    int64_t max_tokens_per_rank;
    int num_experts;
    int topk;
    const char* max_tokens_field;
  };
  ExpertMajorCapacity low_latency_capacity() const {
    const common::LowLatencyLayout& layout = low_latency_layout_;
    return {layout.hidden, layout.max_tokens_per_rank, layout.num_experts(), layout.topk,
            "BufferSizing::low_latency_max_tokens_per_rank"};
  }
  ExpertMajorCapacity symmetric_capacity() const {
    const common::SymmetricLayout& layout = symmetric_layout_;
    return {layout.hidden, layout.max_tokens_per_rank, layout.num_experts(), layout.topk,
            "BufferSizing::symmetric_max_tokens_per_rank"};
  }

  // `tensor`, when given, must be `dtype` with exactly `dims`.
  void expect_output(const TensorView& tensor, const char* name, DType dtype, std::initializer_list<int64_t> dims,
                     const char* what) const {
    if (!tensor.defined()) return;
    detail::expect_tensor(tensor, name, dtype, static_cast<int>(dims.size()), backend_->device());
    int dim = 0;
    for (int64_t size : dims) detail::expect_dim(tensor, name, dim++, size, what);
  }

  // Fills `plan` (the engine's layout aside) from `args`, checked against `capacity`.
  void plan_expert_major_dispatch(const LowLatencyDispatchArgs& args, const ExpertMajorCapacity& capacity,
                                  detail::ExpertMajorDispatchPlan& plan) const {
    const Device device = backend_->device();
    const int num_ranks = options_.topology.num_ranks;
    plan.rank = options_.rank;
    plan.topology = options_.topology;
    plan.config = options_.config;
    plan.args = args;

    if (args.use_ue8m0 && !args.use_fp8) {
      throw InvalidArgument("use_ue8m0: expected use_fp8 with it (UE8M0 packs fp8 scales), got use_fp8 = false");
    }
    if (args.round_scale && !args.use_fp8) {
      throw InvalidArgument("round_scale: expected use_fp8 with it (it rounds fp8 scales), got use_fp8 = false");
    }
    plan.use_fp8 = args.use_fp8;
    plan.use_ue8m0 = args.use_ue8m0;
    plan.round_scale = args.round_scale || args.use_ue8m0;

    detail::expect_tensor(args.x, "x", DType::bf16, 2, device);
    plan.num_tokens = args.x.shape[0];
    const int64_t hidden = args.x.shape[1];
    const int64_t multiple = args.use_fp8 ? common::kScaleBlock : 8;
    if (hidden < 1 || hidden % multiple != 0) {
      throw InvalidArgument("x: expected hidden a positive multiple of " + std::to_string(multiple) +
                            (args.use_fp8 ? " (one fp8 scale per 128 channels)" : " (16-byte rows)") + ", got " +
                            args.x.describe());
    }
    if (hidden > capacity.hidden) {
      throw InvalidArgument("x: expected hidden at most " + std::to_string(capacity.hidden) +
                            " (BufferSizing::hidden), got " + args.x.describe());
    }
    plan.hidden = static_cast<int>(hidden);

    if (args.max_tokens_per_rank < 1 || args.max_tokens_per_rank > capacity.max_tokens_per_rank) {
      throw InvalidArgument("max_tokens_per_rank: expected 1.." + std::to_string(capacity.max_tokens_per_rank) +
                            " (" + capacity.max_tokens_field + "), got " + std::to_string(args.max_tokens_per_rank));
    }
    plan.max_tokens_per_rank = args.max_tokens_per_rank;
    const int64_t all_rows = num_ranks * plan.max_tokens_per_rank;
    if (args.expert_capacity < 0 || args.expert_capacity > all_rows) {
      throw InvalidArgument("expert_capacity: expected 0 (num_ranks * max_tokens_per_rank = " +
                            std::to_string(all_rows) + " rows per local expert) or 1.." + std::to_string(all_rows) +
                            ", got " + std::to_string(args.expert_capacity));
    }
    plan.expert_capacity = args.expert_capacity == 0 ? all_rows : args.expert_capacity;
    if (plan.num_tokens > plan.max_tokens_per_rank) {
      throw InvalidArgument("x: expected at most max_tokens_per_rank (" + std::to_string(plan.max_tokens_per_rank) +
                            ") tokens, got " + args.x.describe());
    }

    check_num_experts(args.num_experts);
    if (args.num_experts > capacity.num_experts) {
      throw InvalidArgument("num_experts: expected at most " + std::to_string(capacity.num_experts) +
                            " (BufferSizing::num_experts, rounded down to a multiple of num_ranks), got " +
                            std::to_string(args.num_experts));
    }
    plan.num_experts = args.num_experts;
    plan.local_experts = args.num_experts / num_ranks;

    detail::expect_tensor(args.topk_idx, "topk_idx", DType::i64, 2, device);
    detail::expect_dim(args.topk_idx, "topk_idx", 0, plan.num_tokens, "num_tokens of x");
    check_topk(args.topk_idx.shape[1]);
    if (args.topk_idx.shape[1] > capacity.topk) {
      throw InvalidArgument("topk_idx: expected at most " + std::to_string(capacity.topk) +
                            " columns (BufferSizing::topk), got " + args.topk_idx.describe());
    }
    plan.topk = static_cast<int>(args.topk_idx.shape[1]);
    if (args.topk_idx.device == Device::cpu) {
      detail::expect_expert_ids(args.topk_idx, plan.num_experts);
      // Each (token, slot) is one row; a token naming an expert twice takes two of its slots.
      std::vector<int64_t> rows_per_expert(plan.num_experts, 0);
      const int64_t* ids = args.topk_idx.as<const int64_t>();
      for (int64_t i = 0; i < args.topk_idx.numel(); ++i) {
        if (ids[i] >= 0 && ++rows_per_expert[ids[i]] > plan.max_tokens_per_rank) {
          throw InvalidArgument("topk_idx: expected at most max_tokens_per_rank (" +
                                std::to_string(plan.max_tokens_per_rank) + ") rows per expert from one rank, got " +
                                "more for expert " + std::to_string(ids[i]) + " (a token that names an expert in "
                                "several slots sends one row per slot)");
        }
      }
    }

    // Rows per expert: expert_capacity, or num_ranks * max_tokens_per_rank when it is 0.
    const int64_t rows = plan.expert_capacity;
    const int64_t local = plan.local_experts;
    expect_output(args.out_recv_x, "out_recv_x", plan.use_fp8 ? DType::fp8_e4m3 : DType::bf16,
                  {local, rows, hidden}, "[local_experts, expert_capacity, hidden]");
    if (!plan.use_fp8) {
      detail::expect_undefined(args.out_recv_x_scales, "out_recv_x_scales", "scales come only with use_fp8");
    } else if (plan.use_ue8m0) {
      expect_output(args.out_recv_x_scales, "out_recv_x_scales", DType::i32,
                    {local, rows, common::ue8m0_words(plan.hidden / common::kScaleBlock)},
                    "[local_experts, expert_capacity, ceil(hidden / 512)]");
    } else {
      expect_output(args.out_recv_x_scales, "out_recv_x_scales", DType::f32,
                    {local, rows, hidden / common::kScaleBlock},
                    "[local_experts, expert_capacity, hidden / 128]");
    }
    expect_output(args.out_recv_count, "out_recv_count", DType::i32, {local}, "[local_experts]");
    expect_output(args.out_layout_range, "out_layout_range", DType::i32, {local, num_ranks, 2},
                  "[local_experts, num_ranks, 2]");
    expect_output(args.out_src_info, "out_src_info", DType::i32, {local, rows}, "[local_experts, expert_capacity]");
  }

  // Fills `plan` (the engine's layout aside) from `args`. `staging`: where zero-copy outputs are
  // (null when the engine has none; the caller refuses zero_copy then).
  void plan_expert_major_combine(const LowLatencyCombineArgs& args, Engine engine, int capacity_hidden, void* staging,
                                 detail::ExpertMajorCombinePlan& plan) const {
    const Device device = backend_->device();
    plan.rank = options_.rank;
    plan.topology = options_.topology;
    plan.config = options_.config;
    plan.args = args;
    const detail::LowLatencyHandleData& handle = low_latency_handle(args.handle, engine);
    if (!handle.received.load(std::memory_order_acquire)) {
      throw InvalidArgument("handle: expected a dispatch whose receive half has run, got one whose hook "
                            "(return_recv_hook) was not called");
    }
    plan.handle = &handle;
    const int64_t rows = handle.rows_per_expert();  // the dispatch's expert_capacity
    const int64_t local = handle.local_experts;

    if (args.zero_copy) {
      if (args.x.defined() && args.x.data != staging) {
        throw InvalidArgument("x: expected none (or low_latency_combine_buffer's view) with zero_copy, got " +
                              args.x.describe());
      }
      plan.hidden = handle.hidden;
      plan.y = static_cast<const uint16_t*>(staging);
    } else {
      detail::expect_tensor(args.x, "x", DType::bf16, 3, device);
      detail::expect_dim(args.x, "x", 0, local, "local_experts of the dispatch");
      detail::expect_dim(args.x, "x", 1, rows,
                         "expert_capacity of the dispatch, num_ranks * max_tokens_per_rank when it was 0");
      const int64_t hidden = args.x.shape[2];
      if (hidden < 1 || hidden % 8 != 0 || hidden > capacity_hidden) {
        throw InvalidArgument("x: expected hidden a positive multiple of 8 (16-byte rows) and at most " +
                              std::to_string(capacity_hidden) + " (BufferSizing::hidden), got " +
                              args.x.describe());
      }
      plan.hidden = static_cast<int>(hidden);
      plan.y = args.x.as<const uint16_t>();
    }

    detail::expect_tensor(args.topk_idx, "topk_idx", DType::i64, 2, device);
    detail::expect_dim(args.topk_idx, "topk_idx", 0, handle.num_tokens, "num_tokens of the dispatch");
    detail::expect_dim(args.topk_idx, "topk_idx", 1, handle.topk, "k of the dispatch");
    if (args.topk_idx.device == Device::cpu && handle.topk_idx.view().device == Device::cpu) {
      const int64_t* ids = args.topk_idx.as<const int64_t>();
      const int64_t* dispatched = handle.topk_idx.as<const int64_t>();
      for (int64_t i = 0; i < args.topk_idx.numel(); ++i) {
        if (ids[i] != -1 && ids[i] != dispatched[i]) {
          throw InvalidArgument("topk_idx: expected the dispatch's expert ids (or -1 to leave a slot out), got " +
                                std::to_string(ids[i]) + " at token " + std::to_string(i / handle.topk) + ", slot " +
                                std::to_string(i % handle.topk) + " where the dispatch had " +
                                std::to_string(dispatched[i]));
        }
      }
    }
    detail::expect_tensor(args.topk_weights, "topk_weights", DType::f32, 2, device);
    detail::expect_dim(args.topk_weights, "topk_weights", 0, handle.num_tokens, "num_tokens of the dispatch");
    detail::expect_dim(args.topk_weights, "topk_weights", 1, handle.topk, "k of the dispatch");
    expect_output(args.out_combined_x, "out_combined_x", DType::bf16, {handle.num_tokens, plan.hidden},
                  "[num_tokens, hidden of x]");
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

  // `needed`: detail::normal_call_bytes of the call (the intranode layout, plus the RDMA region).
  void check_heap(size_t needed, const char* what, int hidden) const {
    if (needed > normal_region_bytes_) {
      throw InvalidArgument(std::string(what) + ": expected a call that fits the normal region of the buffer's heap (" +
                            std::to_string(normal_region_bytes_) + " of " + std::to_string(heap_bytes_) +
                            " bytes), got one needing " +
                            std::to_string(needed) + " (hidden=" + std::to_string(hidden) +
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
    check_heap(detail::normal_call_bytes(plan), "dispatch", plan.hidden);
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
    check_heap(detail::normal_call_bytes(plan), "combine", plan.hidden);
    plan.signature = call_signature(2, plan.hidden, plan.topk, plan.has_weights, plan.config.num_channels);
    return plan;
  }

  BufferOptions options_;
  size_t heap_bytes_ = 0;
  size_t normal_region_bytes_ = 0;             // the normal engine's part: [0, normal_region_bytes_)
  common::LowLatencyLayout low_latency_layout_{};  // then this
  common::SymmetricLayout symmetric_layout_{};     // then this, at the end
  std::unique_ptr<detail::BackendImpl> backend_;
  bool connected_ = false;
  bool failed_ = false;
  bool hook_pending_ = false;  // a low-latency receive half awaits its hook
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
LowLatencyDispatchResult Buffer::low_latency_dispatch(const LowLatencyDispatchArgs& args) {
  return impl_->low_latency_dispatch(args);
}
LowLatencyCombineResult Buffer::low_latency_combine(const LowLatencyCombineArgs& args) {
  return impl_->low_latency_combine(args);
}
LowLatencyDispatchResult Buffer::symmetric_dispatch(const LowLatencyDispatchArgs& args) {
  return impl_->symmetric_dispatch(args);
}
LowLatencyCombineResult Buffer::symmetric_combine(const LowLatencyCombineArgs& args) {
  return impl_->symmetric_combine(args);
}
TensorView Buffer::low_latency_combine_buffer(const LowLatencyHandle& handle) {
  return impl_->low_latency_combine_buffer(handle);
}
void Buffer::synchronize(Stream stream) { impl_->synchronize(stream); }
int Buffer::rank() const { return impl_->options().rank; }
const Topology& Buffer::topology() const { return impl_->options().topology; }
Backend Buffer::backend() const { return impl_->options().backend; }
const Config& Buffer::config() const { return impl_->options().config; }
size_t Buffer::heap_bytes() const { return impl_->heap_bytes(); }

}  // namespace switchyard
