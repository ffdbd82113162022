// The CPU backend: a host symmetric heap and the engines that run over it with host threads.
#include <memory>

#include "core/backend.hpp"
#include "core/handle_format.hpp"
#include "core/symmetric_path.hpp"
#include "cpu/backend/host_heap.hpp"
#include "cpu/backend/rank_mask.hpp"
#include "cpu/internode/engine.hpp"
#include "cpu/low_latency/engine.hpp"
#include "cpu/moe/experts.hpp"
#include "cpu/normal/dispatch_layout.hpp"
#include "cpu/normal/engine.hpp"
#include "cpu/symmetric/engine.hpp"

namespace switchyard::cpu {

class CpuBackend final : public detail::BackendImpl {
 public:
  explicit CpuBackend(const detail::BackendCreateInfo& info)
      : options_(*info.options),
        heap_(info.heap_bytes, info.options->rank, info.options->topology.num_ranks, info.options->sharing),
        mask_(info.options->topology.num_ranks),
        normal_(heap_, info.owner),
        low_latency_(heap_, info.owner, mask_.view(), info.options->transport),
        symmetric_(heap_, info.owner, mask_.view()) {
    // Across nodes, `normal` is the hierarchical engine.
    if (!options_.topology.is_single_node())
      internode_ = std::make_unique<InternodeEngine>(heap_, info.owner, options_.transport);
    // The engines (core/engine.hpp): this backend's one registration point.
    engines_.normal = internode_ ? static_cast<detail::NormalUnit*>(internode_.get()) : &normal_;
    engines_.low_latency = &low_latency_;
    engines_.symmetric = &symmetric_;
  }

  Device device() const override { return Device::cpu; }
  int num_channels() const override {
    return options_.config.num_channels == Config::kAutoChannels ? Config::kDefaultCpuChannels
                                                                 : options_.config.num_channels;
  }
  // A channel is a host thread of each rank: no residency bound, only Config's.
  int max_num_channels() const override { return Config::kMaxChannels; }
  Bytes local_handle() const override { return heap_.local_handle(); }

  void connect(const std::vector<Bytes>& all_handles) override {
    std::vector<Bytes> payloads;
    payloads.reserve(all_handles.size());
    for (const Bytes& handle : all_handles) payloads.push_back(detail::handle_payload(handle));
    heap_.connect(payloads);
    // Pull follows peers' plain y pointers: only threads of this process share an address space.
    const bool threads = options_.sharing == HeapSharing::threads;
    symmetric_.set_pointers_shared(threads);
    symmetric_.set_combine_path(detail::resolve_symmetric_combine(
        options_.config.symmetric_combine, threads, options_.sizing.symmetric_heap_output_rows_per_expert > 0,
        "every rank to be a thread of this process (HeapSharing::threads)",
        threads ? "threads" : "ranks in separate processes (HeapSharing::processes)"));
    // Zero-copy follows peers' plain x pointers: the same condition.
    symmetric_.set_dispatch_path(detail::resolve_symmetric_dispatch(
        options_.config.symmetric_dispatch, threads,
        "every rank to be a thread of this process (HeapSharing::threads)",
        threads ? "threads" : "ranks in separate processes (HeapSharing::processes)"));
  }

  Tensor allocate(DType dtype, std::initializer_list<int64_t> dims) override {
    return Tensor::empty(dtype, dims);
  }

  DispatchLayout get_dispatch_layout(const TensorView& topk_idx, int num_experts, Stream,
                                     const DispatchLayoutOutputs* out) override {
    DispatchLayout layout = compute_dispatch_layout(topk_idx, num_experts, options_.topology);
    return out ? copy_into(layout, *out) : layout;
  }
  uint8_t* heap_base() override { return heap_.base(); }
  void update_mask(int rank, bool masked, Stream) override { mask_.set(rank, masked); }
  Tensor query_mask(Stream) override { return mask_.snapshot(); }
  void clean_mask(Stream) override { mask_.clear(); }
  std::unique_ptr<detail::MoeExperts> make_moe_experts(const detail::MoeExpertsPlan& plan) override {
    return std::make_unique<CpuMoeExperts>(plan);
  }
  void run_moe_experts(detail::MoeExperts& experts, const detail::MoeExpertsCall& call) override {
    experts.run(call);
  }
  // CPU calls complete before they return.
  void synchronize(Stream) override {}

 private:
  BufferOptions options_;
  HostHeap heap_;
  HostRankMask mask_;  // before the engines, which keep a view of it
  NormalEngine normal_;
  LowLatencyEngine low_latency_;
  SymmetricEngine symmetric_;
  std::unique_ptr<InternodeEngine> internode_;
};

}  // namespace switchyard::cpu

namespace switchyard::detail {

std::unique_ptr<BackendImpl> make_cpu_backend(const BackendCreateInfo& info) {
  // Before anything is allocated: GIN puts are issued by GPU threads.
  if (info.options->transport.kind == TransportKind::nccl_gin) {
    throw Unsupported(
        "transport.kind: nccl_gin needs the CUDA backend (its puts are issued from GPU kernels), got backend "
        "cpu; "
        "the CPU backend reaches other nodes through loopback");
  }
  return std::make_unique<cpu::CpuBackend>(info);
}

}  // namespace switchyard::detail
