// Buffer: validation on the host, then the backend. Nothing reaches a backend unchecked.
#include "switchyard/buffer.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "core/backend.hpp"
#include "core/buffer_access.hpp"
#include "core/device_memory.hpp"
#include "core/expert_major_plan.hpp"
#include "core/handle_format.hpp"
#include "core/low_latency_sizing.hpp"
#include "core/normal_plan.hpp"
#include "core/normal_sizing.hpp"
#include "core/symmetric_sizing.hpp"
#include "core/transport_options.hpp"
#include "core/validation.hpp"
#include "switchyard/errors.hpp"

namespace switchyard {

const char* backend_name(Backend backend) {
  return backend == Backend::cpu ? "cpu" : "cuda";
}

const char* engine_name(Engine engine) {
  switch (engine) {
    case Engine::normal:
      return "normal";
    case Engine::low_latency:
      return "low_latency";
    case Engine::symmetric:
      return "symmetric";
  }
  return "?";
}

const char* transport_kind_name(TransportKind kind) {
  switch (kind) {
    case TransportKind::loopback:
      return "loopback";
    case TransportKind::nccl_gin:
      return "nccl_gin";
  }
  return "?";
}

bool cuda_available() {
  return detail::cuda_backend_available();
}

int64_t DispatchHandle::num_recv_tokens() const {
  return data_ ? data_->num_recv_tokens : -1;
}
int64_t DispatchHandle::num_tokens() const {
  return data_ ? data_->num_tokens : 0;
}
Tensor DispatchHandle::is_token_in_rank() const {
  return data_ ? data_->is_token_in_rank : Tensor();
}
Tensor DispatchHandle::recv_src_token() const {
  if (!data_ || !data_->recv_src_token.defined()) return Tensor();
  // NOTES: the CUDA engine allocates every source's capacity before it knows M; the rows past M are
  // not the dispatch's.
  const int64_t rows = data_->num_worst_tokens > 0 ? data_->num_worst_tokens : data_->num_recv_tokens;
  if (rows == data_->recv_src_token.size(0)) return data_->recv_src_token;
  return Tensor::part_of(data_->recv_src_token, 0, DType::i32, {rows});
}
Tensor DispatchHandle::recv_channel_start() const {
  return data_ ? data_->recv_channel_start : Tensor();
}
int DispatchHandle::num_channels() const {
  return data_ ? data_->num_channels : 0;
}

namespace {

using detail::kMaxTopk;

// A handle's backend field as text; a value that names no backend is shown as the number it is.
std::string handle_backend_text(uint32_t value) {
  if (value == static_cast<uint32_t>(Backend::cpu) || value == static_cast<uint32_t>(Backend::cuda)) {
    return std::string("a ") + backend_name(static_cast<Backend>(value)) + " one";
  }
  return "backend value " + std::to_string(value) + ", which names no backend";
}
// NOTES: a signal carries a 32-bit row count; far beyond any decode batch.
constexpr int64_t kMaxLowLatencyTokens = int64_t{1} << 20;

}  // namespace

class Buffer::Impl {
 public:
  explicit Impl(const BufferOptions& options) : options_(options) {
    options_.topology.validate();
    options_.config.validate();
    if (options_.rank < 0 || options_.rank >= options_.topology.num_ranks) {
      throw InvalidArgument("rank: expected 0.." + std::to_string(options_.topology.num_ranks - 1) +
                            ", got " + std::to_string(options_.rank));
    }
    if (options_.topology.num_ranks > common::kMaxMappedRanks) {
      throw InvalidArgument("topology.num_ranks: expected <= " + std::to_string(common::kMaxMappedRanks) +
                            ", got " + std::to_string(options_.topology.num_ranks));
    }
    detail::check_transport_options(options_.transport);
    masked_by_caller_.assign(options_.topology.num_ranks, false);
    const BufferSizing& sizing = options_.sizing;
    if (sizing.max_tokens_per_rank < 0 || sizing.hidden < 1 || sizing.topk < 1 || sizing.topk > kMaxTopk ||
        sizing.num_experts < 1 || sizing.low_latency_max_tokens_per_rank < 0 ||
        sizing.low_latency_max_tokens_per_rank > kMaxLowLatencyTokens) {
      throw InvalidArgument(
          "sizing: expected max_tokens_per_rank >= 0, hidden >= 1, topk in 1.." + std::to_string(kMaxTopk) +
          ", num_experts >= 1; got max_tokens_per_rank=" + std::to_string(sizing.max_tokens_per_rank) +
          " hidden=" + std::to_string(sizing.hidden) + " topk=" + std::to_string(sizing.topk) +
          " num_experts=" + std::to_string(sizing.num_experts) + "; low_latency_max_tokens_per_rank in 0.." +
          std::to_string(kMaxLowLatencyTokens) + ", got " +
          std::to_string(sizing.low_latency_max_tokens_per_rank));
    }
    if (sizing.symmetric_max_tokens_per_rank < 0 ||
        sizing.symmetric_max_tokens_per_rank > kMaxLowLatencyTokens) {
      throw InvalidArgument("sizing.symmetric_max_tokens_per_rank: expected 0.." +
                            std::to_string(kMaxLowLatencyTokens) + ", got " +
                            std::to_string(sizing.symmetric_max_tokens_per_rank));
    }
    check_normal_heap_input_sizing("sizing.normal_heap_input_tokens", sizing.normal_heap_input_tokens,
                                   sizing.max_tokens_per_rank, "max_tokens_per_rank");
    // The heap: the normal region, then the low-latency region, then the symmetric region, then the normal
    // engine's heap-resident input (so all engines can share a Buffer).
    const size_t low_latency_bytes = low_latency_heap_bytes(options_.topology, sizing);
    const size_t symmetric_bytes = symmetric_heap_bytes(options_.topology, sizing);
    check_normal_heap_input_sizing("sizing.normal_heap_combine_rows", sizing.normal_heap_combine_rows,
                                   options_.topology.num_ranks * sizing.max_tokens_per_rank,
                                   "num_ranks * max_tokens_per_rank");
    common::NormalInputLayout input{0, sizing.normal_heap_input_tokens, sizing.hidden, sizing.topk,
                                    options_.topology.num_ranks};
    common::NormalCombineInputLayout combine_input{
        0,           sizing.normal_heap_combine_rows, sizing.hidden,
        sizing.topk, options_.topology.num_ranks,     Config::kMaxChannels};
    const size_t tail_bytes = low_latency_bytes + symmetric_bytes + input.bytes() + combine_input.bytes();
    if (options_.heap_bytes) {
      heap_bytes_ = options_.heap_bytes;
      if (heap_bytes_ < tail_bytes) {
        throw InvalidArgument(
            "heap_bytes: expected at least low_latency_heap_bytes() + symmetric_heap_bytes() + the normal "
            "engine's heap inputs = " +
            std::to_string(tail_bytes) + " for sizing.low_latency_max_tokens_per_rank " +
            std::to_string(sizing.low_latency_max_tokens_per_rank) +
            ", sizing.symmetric_max_tokens_per_rank " + std::to_string(sizing.symmetric_max_tokens_per_rank) +
            ", sizing.normal_heap_input_tokens " + std::to_string(sizing.normal_heap_input_tokens) +
            " and sizing.normal_heap_combine_rows " + std::to_string(sizing.normal_heap_combine_rows) +
            ", got " + std::to_string(heap_bytes_));
      }
      normal_region_bytes_ = tail_bytes == 0
                                 ? heap_bytes_
                                 : (heap_bytes_ - tail_bytes) / common::kLowLatencySignalAlignment *
                                       common::kLowLatencySignalAlignment;
    } else {
      normal_region_bytes_ = common::align_up(normal_heap_bytes(options_.topology, options_.config, sizing),
                                              common::kLowLatencySignalAlignment);
      heap_bytes_ = normal_region_bytes_ + tail_bytes;
    }
    low_latency_layout_ = detail::low_latency_layout(options_.topology, sizing, normal_region_bytes_);
    symmetric_layout_ =
        detail::symmetric_layout(options_.topology, sizing, normal_region_bytes_ + low_latency_bytes);
    input.offset = normal_region_bytes_ + low_latency_bytes + symmetric_bytes;
    normal_input_layout_ = input;
    combine_input.offset = input.offset + input.bytes();
    normal_combine_input_layout_ = combine_input;
    detail::BackendCreateInfo info{&options_, heap_bytes_, id_};
    backend_ =
        options_.backend == Backend::cpu ? detail::make_cpu_backend(info) : detail::make_cuda_backend(info);
  }

  // The normal engine's heap-resident inputs (docs/normal-in-place.md): 0..`most` rows, and none across
  // nodes, where a peer on another node cannot read this heap in place.
  void check_normal_heap_input_sizing(const char* field, int64_t value, int64_t most,
                                      const char* most_text) const {
    if (value < 0 || value > most) {
      throw InvalidArgument(std::string(field) + ": expected 0.." + most_text + " (" + std::to_string(most) +
                            "), got " + std::to_string(value));
    }
    if (value > 0 && !options_.topology.is_single_node()) {
      throw InvalidArgument(std::string(field) +
                            ": expected 0 across nodes (a peer on another node cannot read " +
                            "this heap in place), got " + std::to_string(value) + " with topology " +
                            options_.topology.to_string());
    }
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
    if (connected_)
      throw InvalidArgument("connect: expected an unconnected buffer, got one already connected");
    const Topology& topology = options_.topology;
    if (static_cast<int>(all_handles.size()) != topology.num_ranks) {
      throw InvalidArgument("all_handles: expected " + std::to_string(topology.num_ranks) +
                            " handles (one per rank), got " + std::to_string(all_handles.size()));
    }
    for (int peer = 0; peer < topology.num_ranks; ++peer) {
      std::string which = "all_handles[" + std::to_string(peer) + "]";
      detail::HandleHeader header = detail::unpack_handle_header(all_handles[peer], which);
      if (header.rank != peer) {
        throw InvalidArgument(which + ": expected the handle of rank " + std::to_string(peer) +
                              ", got rank " + std::to_string(header.rank) +
                              "'s (handles must be ordered by rank)");
      }
      if (header.backend != static_cast<uint32_t>(options_.backend)) {
        throw InvalidArgument(which + ": expected a " + backend_name(options_.backend) + " handle, got " +
                              handle_backend_text(header.backend));
      }
      if (header.num_ranks != topology.num_ranks || header.ranks_per_node != topology.ranks_per_node) {
        throw InvalidArgument(which + ": expected topology " + topology.to_string() + ", got " +
                              Topology{header.num_ranks, header.ranks_per_node}.to_string());
      }
      if (header.heap_bytes != heap_bytes_) {
        throw InvalidArgument(which + ": expected a heap of " + std::to_string(heap_bytes_) +
                              " bytes (same sizing and "
                              "config on every rank), got " +
                              std::to_string(header.heap_bytes));
      }
      if (header.sharing != static_cast<uint32_t>(options_.sharing)) {
        throw InvalidArgument(which + ": expected the same HeapSharing on every rank, got a mismatch");
      }
    }
    backend_->connect(all_handles);
    connected_ = true;
  }

  DispatchLayout get_dispatch_layout(const TensorView& topk_idx, int num_experts, Stream stream,
                                     const DispatchLayoutOutputs* out) {
    check_usable("get_dispatch_layout");
    detail::expect_tensor(topk_idx, "topk_idx", DType::i64, 2, backend_->device());
    detail::check_num_experts(num_experts, options_.topology.num_ranks);
    detail::check_topk(topk_idx.shape[1]);
    if (out) check_layout_outputs(*out, topk_idx.shape[0], num_experts);
    if (topk_idx.device == Device::cpu) detail::expect_expert_ids(topk_idx, num_experts);
    return backend_->get_dispatch_layout(topk_idx, num_experts, stream, out);
  }

  void check_layout_outputs(const DispatchLayoutOutputs& out, int64_t num_tokens, int num_experts) const {
    const Device device = backend_->device();
    const int64_t ranks = options_.topology.num_ranks;
    const std::pair<const TensorView*, const char*> counts[] = {
        {&out.num_tokens_per_rank, "out.num_tokens_per_rank"},
        {&out.num_tokens_per_node, "out.num_tokens_per_node"},
        {&out.num_tokens_per_expert, "out.num_tokens_per_expert"}};
    const int64_t sizes[] = {ranks, options_.topology.num_nodes(), num_experts};
    const char* meanings[] = {"num_ranks", "num_nodes", "num_experts"};
    for (int i = 0; i < 3; ++i) {
      detail::expect_tensor(*counts[i].first, counts[i].second, DType::i32, 1, device);
      detail::expect_dim(*counts[i].first, counts[i].second, 0, sizes[i], meanings[i]);
    }
    detail::expect_tensor(out.is_token_in_rank, "out.is_token_in_rank", DType::boolean, 2, device);
    detail::expect_dim(out.is_token_in_rank, "out.is_token_in_rank", 0, num_tokens, "num_tokens of topk_idx");
    detail::expect_dim(out.is_token_in_rank, "out.is_token_in_rank", 1, ranks, "num_ranks");
  }

  DispatchResult dispatch(const DispatchArgs& args) {
    check_usable("dispatch");
    check_unmasked("dispatch");
    detail::DispatchPlan plan = detail::plan_dispatch(args, normal_plan_context());
    return guarded([&] { return unit(&detail::EngineTable::normal, Engine::normal).dispatch(plan); });
  }

  CombineResult combine(const CombineArgs& args) {
    check_usable("combine");
    check_unmasked("combine");
    detail::CombinePlan plan = detail::plan_combine(args, normal_plan_context());
    return guarded([&] { return unit(&detail::EngineTable::normal, Engine::normal).combine(plan); });
  }

  LowLatencyDispatchResult low_latency_dispatch(const LowLatencyDispatchArgs& args) {
    check_usable("low_latency_dispatch");
    check_low_latency_ready("low_latency_dispatch");
    detail::LowLatencyDispatchPlan plan =
        detail::plan_low_latency_dispatch(args, plan_context(), low_latency_layout_);
    LowLatencyDispatchResult result =
        guarded([&] { return unit(&detail::EngineTable::low_latency, Engine::low_latency).dispatch(plan); });
    if (result.hook) result.hook = guarded_hook(std::move(result.hook));
    return result;
  }

  LowLatencyCombineResult low_latency_combine(const LowLatencyCombineArgs& args) {
    check_usable("low_latency_combine");
    check_low_latency_ready("low_latency_combine");
    detail::LowLatencyCombinePlan plan = detail::plan_low_latency_combine(
        args, plan_context(), low_latency_layout_, low_latency_layout_.staging(backend_->heap_base()));
    LowLatencyCombineResult result =
        guarded([&] { return unit(&detail::EngineTable::low_latency, Engine::low_latency).combine(plan); });
    if (result.hook) result.hook = guarded_hook(std::move(result.hook));
    return result;
  }

  LowLatencyDispatchResult symmetric_dispatch(const LowLatencyDispatchArgs& args) {
    check_usable("symmetric_dispatch");
    detail::check_symmetric_region(options_, "symmetric_dispatch");
    detail::SymmetricDispatchPlan plan =
        detail::plan_symmetric_dispatch(args, plan_context(), symmetric_layout_, backend_->heap_base());
    return guarded([&] { return unit(&detail::EngineTable::symmetric, Engine::symmetric).dispatch(plan); });
  }

  LowLatencyCombineResult symmetric_combine(const LowLatencyCombineArgs& args) {
    return run_symmetric_combine(plan_symmetric_combine(args));
  }
  // The two halves of symmetric_combine, for the MoE layer, whose expert phase runs between them when it
  // writes the rows home (detail::BufferAccess).
  detail::SymmetricCombinePlan plan_symmetric_combine(const LowLatencyCombineArgs& args,
                                                      bool rows_at_home = false) {
    check_usable("symmetric_combine");
    detail::check_symmetric_region(options_, "symmetric_combine");
    return detail::plan_symmetric_combine(args, plan_context(), symmetric_layout_, backend_->heap_base(),
                                          rows_at_home);
  }
  LowLatencyCombineResult run_symmetric_combine(const detail::SymmetricCombinePlan& plan) {
    check_usable("symmetric_combine");
    return guarded([&] { return unit(&detail::EngineTable::symmetric, Engine::symmetric).combine(plan); });
  }
  common::SymmetricHomeRows symmetric_home_rows(const detail::SymmetricCombinePlan& plan) {
    check_usable("MoeLayer::forward");
    return guarded([&] { return unit(&detail::EngineTable::symmetric, Engine::symmetric).home_rows(plan); });
  }

  NormalInputViews normal_input(int64_t num_tokens, int hidden, DType dtype) {
    check_usable("normal_input");
    return detail::normal_input_views(normal_plan_context(), num_tokens, hidden, dtype);
  }

  NormalCombineInputViews normal_combine_input(const DispatchHandle& handle, int hidden) {
    check_usable("normal_combine_input");
    return detail::normal_combine_input_views(normal_plan_context(), handle, hidden);
  }

  TensorView symmetric_input(int64_t num_tokens, int hidden) {
    check_usable("symmetric_input");
    detail::check_symmetric_region(options_, "symmetric_input");
    return detail::symmetric_input_view(plan_context(), symmetric_layout_, backend_->heap_base(), num_tokens,
                                        hidden);
  }

  TensorView symmetric_expert_output(const LowLatencyHandle& handle, int hidden) {
    check_usable("symmetric_expert_output");
    detail::check_symmetric_region(options_, "symmetric_expert_output");
    const detail::ExpertMajorHandleData& data = detail::low_latency_handle(&handle, Engine::symmetric, id_);
    return detail::symmetric_expert_output_view(plan_context(), symmetric_layout_, backend_->heap_base(),
                                                data, hidden);
  }

  SymmetricReceiveViews symmetric_receive(int64_t expert_capacity, int hidden) {
    check_usable("symmetric_receive");
    detail::check_symmetric_region(options_, "symmetric_receive");
    return detail::symmetric_receive_views(plan_context(), symmetric_layout_, backend_->heap_base(),
                                           expert_capacity, hidden);
  }

  TensorView low_latency_combine_buffer(const LowLatencyHandle& handle) {
    check_usable("low_latency_combine_buffer");
    detail::check_low_latency_region(options_, "low_latency_combine_buffer");
    const detail::ExpertMajorHandleData& data = detail::low_latency_handle(&handle, Engine::low_latency, id_);
    const Device device = backend_->device();
    return TensorView(low_latency_layout_.staging(backend_->heap_base()), DType::bf16,
                      {data.local_experts, data.topology.num_ranks * data.max_tokens_per_rank, data.hidden},
                      device, device == Device::cuda ? options_.device : 0);
  }

  void update_mask(int rank, bool masked, Stream stream) {
    check_usable("update_mask");
    check_mask_rank(rank, "update_mask");
    check_no_pending_hook("update_mask");
    guarded([&] {
      backend_->update_mask(rank, masked, stream);
      return 0;
    });
    masked_by_caller_[rank] = masked;
  }

  Tensor query_mask(Stream stream) {
    check_usable("query_mask");
    return guarded([&] { return backend_->query_mask(stream); });
  }

  void clean_mask(Stream stream) {
    check_usable("clean_mask");
    check_no_pending_hook("clean_mask");
    guarded([&] {
      backend_->clean_mask(stream);
      return 0;
    });
    masked_by_caller_.assign(masked_by_caller_.size(), false);
  }

  void synchronize(Stream stream) {
    check_usable("synchronize");
    guarded([&] {
      backend_->synchronize(stream);
      return 0;
    });
  }

  SymmetricCombine symmetric_combine_path() const {
    check_usable("symmetric_combine_path");
    return unit(&detail::EngineTable::symmetric, Engine::symmetric).combine_path();
  }

  SymmetricDispatch symmetric_dispatch_path() const {
    check_usable("symmetric_dispatch_path");
    return unit(&detail::EngineTable::symmetric, Engine::symmetric).dispatch_path();
  }

  const BufferOptions& options() const { return options_; }
  size_t heap_bytes() const { return heap_bytes_; }
  int num_channels() const { return backend_->num_channels(); }
  int max_num_channels() const { return backend_->max_num_channels(); }
  bool connected() const { return connected_; }

  // For layers built on the buffer (detail::BufferAccess).
  detail::PlanContext checked_plan_context(const char* what) const {
    check_usable(what);
    return plan_context();
  }
  const common::SymmetricLayout& symmetric_layout() const { return symmetric_layout_; }
  detail::BackendImpl& backend() const { return *backend_; }
  void run_moe_experts(detail::MoeExperts& experts, const detail::MoeExpertsCall& call) {
    check_usable("MoeLayer::forward");
    guarded([&] {
      backend_->run_moe_experts(experts, call);
      return 0;
    });
  }

 private:
  // The engine the backend registered for `engine` (core/engine.hpp).
  template <class Unit>
  Unit& unit(Unit* detail::EngineTable::*slot, Engine engine) const {
    Unit* registered = backend_->engines().*slot;
    if (!registered) {
      throw Unsupported(std::string("engine ") + engine_name(engine) + ": the " +
                        backend_name(options_.backend) + " backend does not run it");
    }
    return *registered;
  }

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
      throw InvalidArgument(std::string(what) +
                            ": expected a connected buffer (call connect() first), got an "
                            "unconnected one");
    }
    if (failed_) {
      throw Error(std::string(what) +
                  ": this buffer timed out earlier and its peers' state is unknown; create a "
                  "new Buffer on every rank");
    }
  }

  void check_mask_rank(int rank, const char* what) const {
    if (rank < 0 || rank >= options_.topology.num_ranks) {
      throw InvalidArgument(std::string(what) + ": rank: expected 0.." +
                            std::to_string(options_.topology.num_ranks - 1) + ", got " +
                            std::to_string(rank));
    }
  }

  // A low-latency call's two halves must see one mask: its send half decided whom to send to (a rank
  // masked in its own view sends nothing), and its receive half, run by the hook, waits accordingly.
  void check_no_pending_hook(const char* what) const {
    if (hook_pending_) {
      throw InvalidArgument(std::string(what) +
                            ": expected no pending low-latency hook (a call's send and receive halves must "
                            "see the same mask), got the previous call's return_recv_hook still to run");
    }
  }

  // The normal engine runs every rank in each call: it has no masked form.
  void check_unmasked(const char* what) const {
    for (int rank = 0; rank < options_.topology.num_ranks; ++rank) {
      if (masked_by_caller_[rank]) {
        throw Unsupported(
            std::string(what) + ": the normal engine needs every rank, and update_mask has masked rank " +
            std::to_string(rank) + "; use low_latency or symmetric with masked ranks, or clean_mask() first");
      }
    }
  }

  void check_low_latency_ready(const char* what) const {
    detail::check_low_latency_region(options_, what);
    if (hook_pending_) {
      throw InvalidArgument(std::string(what) +
                            ": expected the hook of this buffer's previous low-latency call "
                            "(return_recv_hook) to have been called first, got it still pending");
    }
  }

  // The receive half runs once, under the same timeout policy as a call.
  std::function<void()> guarded_hook(std::function<void()> receive) {
    hook_pending_ = true;
    auto called = std::make_shared<bool>(false);
    // The hook may outlive its Buffer (a caller keeps the function); it must then touch nothing of it.
    std::weak_ptr<const int> buffer_alive = alive_;
    return [this, receive = std::move(receive), called, buffer_alive] {
      if (buffer_alive.expired()) {
        throw InvalidArgument(
            "hook: expected the Buffer whose low-latency call returned it to be alive, got one "
            "that was destroyed (its receive half can no longer run)");
      }
      if (*called) throw InvalidArgument("hook: expected one call, got a second");
      *called = true;
      hook_pending_ = false;
      if (failed_) {
        throw Error(
            "hook: this buffer timed out earlier and its peers' state is unknown; create a new Buffer on "
            "every rank");
      }
      guarded([&] {
        receive();
        return 0;
      });
    };
  }

  // What the plans read of this buffer: they check a call's arguments against it and change nothing.
  detail::PlanContext plan_context() const { return {options_, backend_->device(), id_}; }
  detail::NormalPlanContext normal_plan_context() const {
    return {plan_context(), backend_->num_channels(), backend_->max_num_channels(), normal_region_bytes_,
            heap_bytes_,    normal_input_layout_,     normal_combine_input_layout_, backend_->heap_base()};
  }

  const detail::BufferId id_ = detail::next_buffer_id();  // recorded in every handle this buffer makes
  const std::shared_ptr<const int> alive_ =
      std::make_shared<const int>(0);  // expires with the buffer (hooks)
  BufferOptions options_;
  size_t heap_bytes_ = 0;
  size_t normal_region_bytes_ = 0;                   // the normal engine's part: [0, normal_region_bytes_)
  common::LowLatencyLayout low_latency_layout_{};    // then this
  common::SymmetricLayout symmetric_layout_{};       // then this
  common::NormalInputLayout normal_input_layout_{};  // then this
  common::NormalCombineInputLayout normal_combine_input_layout_{};  // then this, at the end
  std::unique_ptr<detail::BackendImpl> backend_;
  bool connected_ = false;
  bool failed_ = false;
  bool hook_pending_ = false;  // a low-latency receive half awaits its hook
  // The ranks update_mask has masked, as the caller set them (a timeout may mask more, on the device):
  // the normal engine refuses its calls while any is. Sized once the topology is checked.
  std::vector<bool> masked_by_caller_;
};

Buffer::Buffer(const BufferOptions& options) : impl_(std::make_unique<Impl>(options)) {}
Buffer::~Buffer() = default;
Bytes Buffer::local_handle() const {
  return impl_->local_handle();
}
void Buffer::connect(const std::vector<Bytes>& all_handles) {
  impl_->connect(all_handles);
}
bool Buffer::is_connected() const {
  return impl_->connected();
}
DispatchLayout Buffer::get_dispatch_layout(const TensorView& topk_idx, int num_experts, Stream stream) {
  return impl_->get_dispatch_layout(topk_idx, num_experts, stream, nullptr);
}
DispatchLayout Buffer::get_dispatch_layout(const TensorView& topk_idx, int num_experts,
                                           const DispatchLayoutOutputs& out, Stream stream) {
  return impl_->get_dispatch_layout(topk_idx, num_experts, stream, &out);
}
DispatchResult Buffer::dispatch(const DispatchArgs& args) {
  return impl_->dispatch(args);
}
CombineResult Buffer::combine(const CombineArgs& args) {
  return impl_->combine(args);
}
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
NormalInputViews Buffer::normal_input(int64_t num_tokens, int hidden, DType dtype) {
  return impl_->normal_input(num_tokens, hidden, dtype);
}

NormalCombineInputViews Buffer::normal_combine_input(const DispatchHandle& handle, int hidden) {
  return impl_->normal_combine_input(handle, hidden);
}

TensorView Buffer::symmetric_input(int64_t num_tokens, int hidden) {
  return impl_->symmetric_input(num_tokens, hidden);
}
TensorView Buffer::symmetric_expert_output(const LowLatencyHandle& handle, int hidden) {
  return impl_->symmetric_expert_output(handle, hidden);
}
SymmetricReceiveViews Buffer::symmetric_receive(int64_t expert_capacity, int hidden) {
  return impl_->symmetric_receive(expert_capacity, hidden);
}
SymmetricCombine Buffer::symmetric_combine_path() const {
  return impl_->symmetric_combine_path();
}
SymmetricDispatch Buffer::symmetric_dispatch_path() const {
  return impl_->symmetric_dispatch_path();
}
TensorView Buffer::low_latency_combine_buffer(const LowLatencyHandle& handle) {
  return impl_->low_latency_combine_buffer(handle);
}
void Buffer::update_mask(int rank, bool masked, Stream stream) {
  impl_->update_mask(rank, masked, stream);
}
Tensor Buffer::query_mask(Stream stream) {
  return impl_->query_mask(stream);
}
void Buffer::clean_mask(Stream stream) {
  impl_->clean_mask(stream);
}
void Buffer::synchronize(Stream stream) {
  impl_->synchronize(stream);
}
int Buffer::rank() const {
  return impl_->options().rank;
}
const Topology& Buffer::topology() const {
  return impl_->options().topology;
}
Backend Buffer::backend() const {
  return impl_->options().backend;
}
const Config& Buffer::config() const {
  return impl_->options().config;
}
size_t Buffer::heap_bytes() const {
  return impl_->heap_bytes();
}
int Buffer::num_channels() const {
  return impl_->num_channels();
}
int Buffer::max_num_channels() const {
  return impl_->max_num_channels();
}

namespace detail {

PlanContext BufferAccess::plan_context(const Buffer& buffer, const char* what) {
  return buffer.impl_->checked_plan_context(what);
}
const common::SymmetricLayout& BufferAccess::symmetric_layout(const Buffer& buffer) {
  return buffer.impl_->symmetric_layout();
}
uint8_t* BufferAccess::heap_base(Buffer& buffer) {
  return buffer.impl_->backend().heap_base();
}
Tensor BufferAccess::allocate(Buffer& buffer, DType dtype, std::initializer_list<int64_t> dims) {
  return buffer.impl_->backend().allocate(dtype, dims);
}
std::unique_ptr<MoeExperts> BufferAccess::make_moe_experts(Buffer& buffer, const MoeExpertsPlan& plan) {
  return buffer.impl_->backend().make_moe_experts(plan);
}
void BufferAccess::run_moe_experts(Buffer& buffer, MoeExperts& experts, const MoeExpertsCall& call) {
  buffer.impl_->run_moe_experts(experts, call);
}
SymmetricCombinePlan BufferAccess::plan_symmetric_combine(Buffer& buffer, const LowLatencyCombineArgs& args,
                                                          bool rows_at_home) {
  return buffer.impl_->plan_symmetric_combine(args, rows_at_home);
}
common::SymmetricHomeRows BufferAccess::symmetric_home_rows(Buffer& buffer,
                                                            const SymmetricCombinePlan& plan) {
  return buffer.impl_->symmetric_home_rows(plan);
}
LowLatencyCombineResult BufferAccess::run_symmetric_combine(Buffer& buffer,
                                                            const SymmetricCombinePlan& plan) {
  return buffer.impl_->run_symmetric_combine(plan);
}

}  // namespace detail

}  // namespace switchyard
