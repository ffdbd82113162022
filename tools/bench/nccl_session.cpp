// The `nccl` baseline on one rank: what a framework does without an EP library (the Megatron and
// vLLM "all-to-all" dispatchers), on normal's inputs, checked against normal's reference.
//
//   prepare   routing (untimed, as normal's get_dispatch_layout): from topk_idx, each token's row
//             among those sent to each destination rank, and the counts per destination
//   dispatch  pack the rows destination-major (x, fp8 scales, top-k ids and weights), exchange the
//             counts (grouped ncclSend/ncclRecv), wait for them on the host (the receive sizes),
//             exchange the rows (grouped ncclSend/ncclRecv, received in source rank order, so
//             recv_x is in the reference's rank-major order), turn the ids into local ones
//   expert    the same synthetic expert as normal (on the host, once; a device copy per input set)
//   combine   send each source its rows' results back the same way, sum them on the source in the
//             reference's order into combined_x (and the weights into combined_topk_weights)
//
// One blocking communicator per rank (PyTorch's default), made from a unique id shared through the
// ranks' group. NCCL refuses two ranks on one GPU, so this engine needs one GPU per rank.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engines.hpp"
#include "nccl_build.hpp"
#include "switchyard/errors.hpp"
#include "transfer.hpp"
#include "workload/workload.hpp"

#if SWITCHYARD_BENCH_WITH_NCCL
#include "cuda_check.hpp"
#include "nccl_communicator.hpp"
#include "nccl_kernels.hpp"
#endif

namespace switchyard::bench {

std::string nccl_unavailable_reason(const BenchOptions& options) {
  if (options.backend != Backend::cuda) {
    return "not available on the cpu backend: the NCCL baseline runs on GPUs (--backend cuda)";
  }
  if (!SWITCHYARD_BENCH_WITH_NCCL) return kNcclBuildNote;
  if (options.devices.shares_a_device()) {
    const size_t gpus = options.devices.distinct_devices().size();
    return "not available when ranks share a GPU: NCCL refuses two ranks on one device, and here " +
           std::to_string(options.topology.num_ranks) + " ranks use " + std::to_string(gpus) + " GPU" +
           (gpus == 1 ? "" : "s") + " (--devices " + options.devices.request_text() + ", " +
           std::to_string(options.devices.visible_devices) +
           " visible); it needs one GPU per rank: at least --ranks visible GPUs";
  }
  return "";
}

#if SWITCHYARD_BENCH_WITH_NCCL
namespace {

constexpr const char* kEngineName = "nccl";

// Host memory the counts are copied into, pinned so that the copy is asynchronous and the host's
// wait for it stays bounded (NcclCommunicator::wait).
class PinnedCounts {
 public:
  explicit PinnedCounts(size_t count) : count_(count) {
    check_cuda(cudaMallocHost(reinterpret_cast<void**>(&values_), bytes()), "cudaMallocHost (nccl counts)");
  }
  ~PinnedCounts() { cudaFreeHost(values_); }
  PinnedCounts(const PinnedCounts&) = delete;
  PinnedCounts& operator=(const PinnedCounts&) = delete;
  int32_t* data() const { return values_; }
  size_t bytes() const { return count_ * sizeof(int32_t); }
  int32_t operator[](size_t i) const { return values_[i]; }

 private:
  size_t count_;
  int32_t* values_ = nullptr;
};

// A device view of the first `rows` rows of a capacity buffer (the received rows).
TensorView first_rows(const Tensor& buffer, int64_t rows) {
  TensorView view = buffer.view();
  view.shape[0] = rows;
  return view;
}

// The address of row `row` of a row-major tensor.
void* row_pointer(const Tensor& tensor, int64_t row) {
  const TensorView& view = tensor.view();
  int64_t row_bytes = static_cast<int64_t>(dtype_size(view.dtype));
  for (int dim = 1; dim < view.ndim; ++dim) row_bytes *= view.shape[dim];
  return static_cast<uint8_t*>(view.data) + row * row_bytes;
}

class NcclSession final : public EngineSession {
 public:
  explicit NcclSession(const SessionContext& context)
      : context_(context),
        stream_(cuda_stream(context.stream)),
        expected_layout_(context.problem->normal.layouts.at(context.rank)),
        expected_dispatch_(context.problem->normal.dispatched.at(context.rank)),
        expected_combine_(context.problem->normal.combined.at(context.rank)),
        num_ranks_(context.options->topology.num_ranks),
        counts_layout_{num_ranks_, context.options->num_experts / num_ranks_},
        // First, before anything else can fail on this rank: the peers wait for it in ncclCommInitRank.
        communicator_(
            std::make_unique<NcclCommunicator>(*context.group, context.options->config.timeout_seconds)),
        host_send_counts_(static_cast<size_t>(counts_layout_.size())),
        host_recv_counts_(static_cast<size_t>(counts_layout_.size())) {
    const BenchOptions& options = *context.options;
    const workload::RankData& data = context.problem->inputs.at(context.rank);
    const Stream stream = context.stream;
    const size_t set_bytes =
        data.x.nbytes() + data.x_scales.nbytes() + data.topk_idx.nbytes() + data.topk_weights.nbytes();
    const int sets = input_set_count(set_bytes, backend_cache_bytes(Backend::cuda, stream));
    for (int set = 0; set < sets; ++set) {
      input_sets_.push_back(InputSet{to_backend(data.x, Backend::cuda, stream),
                                     to_backend(data.x_scales, Backend::cuda, stream),
                                     to_backend(data.topk_idx, Backend::cuda, stream),
                                     to_backend(data.topk_weights, Backend::cuda, stream)});
    }
    expert_outputs_.resize(input_sets_.size());

    num_tokens_ = data.x.size(0);
    fp8_ = options.dtype == DType::fp8_e4m3;
    const int64_t hidden = options.hidden, topk = options.topk;
    const int64_t num_scales = fp8_ ? hidden / kFp8ScaleBlock : 0;
    // Capacities that no routing can exceed: a token goes to at most min(R, K) ranks, and each source
    // sends a rank each of its tokens at most once.
    const int64_t send_capacity = num_tokens_ * std::min<int64_t>(num_ranks_, topk);
    int64_t recv_capacity = 0;
    for (const workload::RankData& source : context.problem->inputs) recv_capacity += source.x.size(0);

    route_slots_ = allocate_on_backend(Backend::cuda, DType::i32, {num_tokens_, num_ranks_}, stream);
    send_counts_ = allocate_on_backend(Backend::cuda, DType::i32, {counts_layout_.size()}, stream);
    recv_counts_ = allocate_on_backend(Backend::cuda, DType::i32, {counts_layout_.size()}, stream);
    send_x_ = allocate_on_backend(Backend::cuda, options.dtype, {send_capacity, hidden}, stream);
    recv_x_ = allocate_on_backend(Backend::cuda, options.dtype, {recv_capacity, hidden}, stream);
    if (fp8_) {
      send_scales_ = allocate_on_backend(Backend::cuda, DType::f32, {send_capacity, num_scales}, stream);
      recv_scales_ = allocate_on_backend(Backend::cuda, DType::f32, {recv_capacity, num_scales}, stream);
    }
    send_topk_idx_ = allocate_on_backend(Backend::cuda, DType::i64, {send_capacity, topk}, stream);
    recv_topk_idx_ = allocate_on_backend(Backend::cuda, DType::i64, {recv_capacity, topk}, stream);
    send_topk_weights_ = allocate_on_backend(Backend::cuda, DType::f32, {send_capacity, topk}, stream);
    recv_topk_weights_ = allocate_on_backend(Backend::cuda, DType::f32, {recv_capacity, topk}, stream);
    returned_x_ = allocate_on_backend(Backend::cuda, DType::bf16, {send_capacity, hidden}, stream);
    returned_weights_ = allocate_on_backend(Backend::cuda, DType::f32, {send_capacity, topk}, stream);
    combined_x_ = allocate_on_backend(Backend::cuda, DType::bf16, {num_tokens_, hidden}, stream);
    combined_weights_ = allocate_on_backend(Backend::cuda, DType::f32, {num_tokens_, topk}, stream);
    send_capacity_ = send_capacity;
    recv_capacity_ = recv_capacity;
    x_row_bytes_ = hidden * static_cast<int64_t>(dtype_size(options.dtype));
  }

  int num_input_sets() const override { return static_cast<int>(input_sets_.size()); }

  void poison_outputs() override {
    for (const Tensor* output :
         {&recv_x_, &recv_scales_, &recv_topk_idx_, &recv_topk_weights_, &combined_x_, &combined_weights_}) {
      poison_on_backend(*output, context_.stream);
    }
  }

  void prepare(int iteration) override {
    NcclRouteArgs args;
    args.topk_idx = inputs_for(iteration).topk_idx.as<const int64_t>();
    args.topk = context_.options->topk;
    args.counts = counts_layout_;
    args.route = route_table();
    args.send_counts = send_counts_.as<int32_t>();
    launch_nccl_route(args, stream_);
  }

  void dispatch(int iteration) override {
    const InputSet& inputs = inputs_for(iteration);
    NcclPackArgs pack;
    pack.x = inputs.x.as<const uint8_t>();
    pack.x_row_bytes = x_row_bytes_;
    pack.x_scales = fp8_ ? inputs.x_scales.as<const float>() : nullptr;
    pack.num_scales = fp8_ ? context_.options->hidden / kFp8ScaleBlock : 0;
    pack.topk_idx = inputs.topk_idx.as<const int64_t>();
    pack.topk_weights = inputs.topk_weights.as<const float>();
    pack.topk = context_.options->topk;
    pack.counts = counts_layout_;
    pack.route = route_table();
    pack.send_counts = send_counts_.as<const int32_t>();
    pack.send_x = send_x_.as<uint8_t>();
    pack.send_scales = fp8_ ? send_scales_.as<float>() : nullptr;
    pack.send_topk_idx = send_topk_idx_.as<int64_t>();
    pack.send_topk_weights = send_topk_weights_.as<float>();
    launch_nccl_pack(pack, stream_);

    exchange_counts();
    communicator_->wait(stream_, "every rank's counts (dispatch)");
    read_counts();

    NcclCommunicator& nccl = *communicator_;
    nccl.check(ncclGroupStart(), "ncclGroupStart (dispatch rows)");
    for (int peer = 0; peer < num_ranks_; ++peer) {
      const int64_t sent = send_rows_[peer], received = recv_rows_[peer];
      const int64_t send_at = send_offsets_[peer], receive_at = recv_offsets_[peer];
      if (sent > 0) {
        send_bytes(row_pointer(send_x_, send_at), sent * x_row_bytes_, peer, "x");
        if (fp8_) send_bytes(row_pointer(send_scales_, send_at), sent * scale_row_bytes(), peer, "x_scales");
        send_bytes(row_pointer(send_topk_idx_, send_at), sent * topk_row_bytes(8), peer, "topk_idx");
        send_bytes(row_pointer(send_topk_weights_, send_at), sent * topk_row_bytes(4), peer, "topk_weights");
      }
      if (received > 0) {
        receive_bytes(row_pointer(recv_x_, receive_at), received * x_row_bytes_, peer, "x");
        if (fp8_)
          receive_bytes(row_pointer(recv_scales_, receive_at), received * scale_row_bytes(), peer,
                        "x_scales");
        receive_bytes(row_pointer(recv_topk_idx_, receive_at), received * topk_row_bytes(8), peer,
                      "topk_idx");
        receive_bytes(row_pointer(recv_topk_weights_, receive_at), received * topk_row_bytes(4), peer,
                      "topk_weights");
      }
    }
    nccl.check(ncclGroupEnd(), "ncclGroupEnd (dispatch rows)");

    NcclLocalizeArgs localize;
    localize.topk_idx = recv_topk_idx_.as<int64_t>();
    localize.topk_weights = recv_topk_weights_.as<float>();
    localize.num_rows = num_recv_;
    localize.topk = context_.options->topk;
    localize.rank = context_.rank;
    localize.experts_per_rank = counts_layout_.experts_per_rank;
    launch_nccl_localize(localize, stream_);
  }

  // As normal's: the synthetic expert on the host, once, on the first check iteration's recv_x; a
  // device copy per input set, reused by every later iteration of the set.
  void expert(int iteration) override {
    Tensor& y = expert_outputs_[input_set_of(iteration)];
    if (y.defined()) return;
    if (!host_expert_output_.defined()) {
      Tensor recv_x = to_host(first_rows(recv_x_, num_recv_), context_.stream);
      Tensor recv_x_scales = fp8_ ? to_host(first_rows(recv_scales_, num_recv_), context_.stream) : Tensor();
      host_expert_output_ = workload::synthetic_expert(recv_x, recv_x_scales, context_.rank);
    }
    y = to_backend(host_expert_output_, Backend::cuda, context_.stream);
    const bool every_set_has_y = std::all_of(expert_outputs_.begin(), expert_outputs_.end(),
                                             [](const Tensor& output) { return output.defined(); });
    if (every_set_has_y) host_expert_output_ = Tensor();
  }

  void combine(int iteration) override {
    const Tensor& y = expert_outputs_[input_set_of(iteration)];
    const int64_t y_row_bytes = int64_t{context_.options->hidden} * 2;
    NcclCommunicator& nccl = *communicator_;
    nccl.check(ncclGroupStart(), "ncclGroupStart (combine rows)");
    for (int peer = 0; peer < num_ranks_; ++peer) {
      // Back to each source the results of the rows it sent, in its order; into the places its send
      // buffer had them.
      const int64_t received = recv_rows_[peer], sent = send_rows_[peer];
      if (received > 0) {
        send_bytes(row_pointer(y, recv_offsets_[peer]), received * y_row_bytes, peer, "y");
        send_bytes(row_pointer(recv_topk_weights_, recv_offsets_[peer]), received * topk_row_bytes(4), peer,
                   "topk_weights");
      }
      if (sent > 0) {
        receive_bytes(row_pointer(returned_x_, send_offsets_[peer]), sent * y_row_bytes, peer, "y");
        receive_bytes(row_pointer(returned_weights_, send_offsets_[peer]), sent * topk_row_bytes(4), peer,
                      "topk_weights");
      }
    }
    nccl.check(ncclGroupEnd(), "ncclGroupEnd (combine rows)");

    NcclReduceArgs reduce;
    reduce.returned_x = returned_x_.as<const uint16_t>();
    reduce.returned_weights = returned_weights_.as<const float>();
    reduce.hidden = context_.options->hidden;
    reduce.topk = context_.options->topk;
    reduce.ranks_per_node = context_.options->topology.ranks_per_node;
    reduce.counts = counts_layout_;
    reduce.route = route_table();
    reduce.send_counts = send_counts_.as<const int32_t>();
    reduce.combined_x = combined_x_.as<uint16_t>();
    reduce.combined_weights = combined_weights_.as<float>();
    launch_nccl_reduce(reduce, stream_);
  }

  Difference first_difference() override {
    const int64_t expected_rows = expected_dispatch_.recv_x.size(0);
    std::vector<int> sent_rows(static_cast<size_t>(num_ranks_));
    for (int rank = 0; rank < num_ranks_; ++rank)
      sent_rows[rank] = host_send_counts_[counts_layout_.rows_index(rank)];

    Comparison compare(context_.stream);
    compare.begin(Stage::layout);
    compare.ints("rows sent to each rank (num_tokens_per_rank)", sent_rows,
                 expected_layout_.num_tokens_per_rank);

    compare.begin(Stage::dispatch);
    compare.integer("num_recv_tokens", num_recv_, expected_rows);
    compare.tensor("recv_x", first_rows(recv_x_, num_recv_), expected_dispatch_.recv_x);
    if (fp8_)
      compare.tensor("recv_x_scales", first_rows(recv_scales_, num_recv_), expected_dispatch_.recv_x_scales);
    compare.tensor("recv_topk_idx", first_rows(recv_topk_idx_, num_recv_), expected_dispatch_.recv_topk_idx);
    compare.tensor("recv_topk_weights", first_rows(recv_topk_weights_, num_recv_),
                   expected_dispatch_.recv_topk_weights);
    compare.ints("num_recv_tokens_per_expert", num_recv_tokens_per_expert_,
                 expected_dispatch_.num_recv_tokens_per_expert);

    compare.begin(Stage::combine);
    compare.tensor("combined_x", combined_x_, expected_combine_.combined_x);
    compare.tensor("combined_topk_weights", combined_weights_, expected_combine_.combined_topk_weights);
    return compare.result();
  }

  void dump(DumpDirectory& dump) override {
    const int rank = context_.rank;
    const InputSet& inputs = input_sets_.front();
    auto write = [&](const char* name, const TensorView& tensor) {
      dump.write(kEngineName, rank, name, to_host(tensor, context_.stream));
    };
    write("x", inputs.x);
    write("scales", inputs.x_scales);
    write("topk_idx", inputs.topk_idx);
    write("topk_weights", inputs.topk_weights);
    write("recv_x", first_rows(recv_x_, num_recv_));
    if (fp8_) write("recv_x_scales", first_rows(recv_scales_, num_recv_));
    write("recv_topk_idx", first_rows(recv_topk_idx_, num_recv_));
    write("recv_topk_weights", first_rows(recv_topk_weights_, num_recv_));
    dump.write(kEngineName, rank, "num_recv_tokens_per_expert", num_recv_tokens_per_expert_);
    write("y", expert_outputs_.front());
    write("combined_x", combined_x_);
    write("combined_topk_weights", combined_weights_);
  }

  void synchronize() override { communicator_->wait(stream_, "the rank's stream"); }

  std::string note() const override {
    return "NCCL " + nccl_runtime_version() +
           ": one blocking communicator per rank, grouped ncclSend/ncclRecv of counts, rows and results";
  }

 private:
  struct InputSet {
    Tensor x, x_scales, topk_idx, topk_weights;
  };
  int input_set_of(int iteration) const { return iteration % static_cast<int>(input_sets_.size()); }
  const InputSet& inputs_for(int iteration) const { return input_sets_[input_set_of(iteration)]; }

  NcclRouteTable route_table() const {
    return NcclRouteTable{route_slots_.as<int32_t>(), num_tokens_, num_ranks_};
  }
  int64_t scale_row_bytes() const { return int64_t{context_.options->hidden} / kFp8ScaleBlock * 4; }
  int64_t topk_row_bytes(int element_bytes) const { return int64_t{context_.options->topk} * element_bytes; }

  void send_bytes(const void* data, int64_t bytes, int peer, const char* what) {
    communicator_->check(
        ncclSend(data, static_cast<size_t>(bytes), ncclUint8, peer, communicator_->get(), stream_),
        std::string("ncclSend (") + what + " to rank " + std::to_string(peer) + ")");
  }
  void receive_bytes(void* data, int64_t bytes, int peer, const char* what) {
    communicator_->check(
        ncclRecv(data, static_cast<size_t>(bytes), ncclUint8, peer, communicator_->get(), stream_),
        std::string("ncclRecv (") + what + " from rank " + std::to_string(peer) + ")");
  }

  // Each rank sends destination d its counts row for d and receives source s's row for it into row s.
  void exchange_counts() {
    const int stride = counts_layout_.stride();
    NcclCommunicator& nccl = *communicator_;
    nccl.check(ncclGroupStart(), "ncclGroupStart (counts)");
    for (int peer = 0; peer < num_ranks_; ++peer) {
      nccl.check(ncclSend(send_counts_.as<int32_t>() + counts_layout_.rows_index(peer), stride, ncclInt32,
                          peer, nccl.get(), stream_),
                 "ncclSend (counts to rank " + std::to_string(peer) + ")");
      nccl.check(ncclRecv(recv_counts_.as<int32_t>() + counts_layout_.rows_index(peer), stride, ncclInt32,
                          peer, nccl.get(), stream_),
                 "ncclRecv (counts from rank " + std::to_string(peer) + ")");
    }
    nccl.check(ncclGroupEnd(), "ncclGroupEnd (counts)");
    check_cuda(cudaMemcpyAsync(host_send_counts_.data(), send_counts_.data(), host_send_counts_.bytes(),
                               cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync (nccl send counts to the host)");
    check_cuda(cudaMemcpyAsync(host_recv_counts_.data(), recv_counts_.data(), host_recv_counts_.bytes(),
                               cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync (nccl receive counts to the host)");
  }

  // The segments on both sides and the per-expert totals, from the counts on the host. The capacities
  // bound every possible routing; a count beyond them is a bug, reported before any row moves.
  void read_counts() {
    send_rows_.assign(num_ranks_, 0);
    recv_rows_.assign(num_ranks_, 0);
    send_offsets_.assign(num_ranks_, 0);
    recv_offsets_.assign(num_ranks_, 0);
    num_recv_tokens_per_expert_.assign(counts_layout_.experts_per_rank, 0);
    int64_t sent = 0, received = 0;
    for (int peer = 0; peer < num_ranks_; ++peer) {
      send_offsets_[peer] = sent;
      recv_offsets_[peer] = received;
      send_rows_[peer] = host_send_counts_[counts_layout_.rows_index(peer)];
      recv_rows_[peer] = host_recv_counts_[counts_layout_.rows_index(peer)];
      sent += send_rows_[peer];
      received += recv_rows_[peer];
      for (int local = 0; local < counts_layout_.experts_per_rank; ++local) {
        num_recv_tokens_per_expert_[local] += host_recv_counts_[counts_layout_.expert_index(peer, local)];
      }
    }
    if (sent > send_capacity_ || received > recv_capacity_) {
      throw SystemError("switchyard-bench: nccl rank " + std::to_string(context_.rank) + ": the counts say " +
                        std::to_string(sent) + " rows to send and " + std::to_string(received) +
                        " to receive, beyond the buffers' " + std::to_string(send_capacity_) + " and " +
                        std::to_string(recv_capacity_));
    }
    num_recv_ = received;
  }

  SessionContext context_;
  cudaStream_t stream_ = nullptr;
  const reference::Layout& expected_layout_;
  const reference::NormalDispatchOutput& expected_dispatch_;
  const reference::NormalCombineOutput& expected_combine_;
  const int num_ranks_;
  const NcclCounts counts_layout_;
  std::unique_ptr<NcclCommunicator> communicator_;  // destroyed last: the buffers below go first
  PinnedCounts host_send_counts_, host_recv_counts_;

  std::vector<InputSet> input_sets_;
  std::vector<Tensor> expert_outputs_;  // y per input set, on the device
  Tensor host_expert_output_;           // y on the host, until every set has its copy
  int64_t num_tokens_ = 0;
  bool fp8_ = false;
  int64_t x_row_bytes_ = 0;
  int64_t send_capacity_ = 0, recv_capacity_ = 0;
  Tensor route_slots_, send_counts_, recv_counts_;
  Tensor send_x_, send_scales_, send_topk_idx_, send_topk_weights_;
  Tensor recv_x_, recv_scales_, recv_topk_idx_, recv_topk_weights_;  // received rows first
  Tensor returned_x_, returned_weights_;                             // combine, the send buffer's order
  Tensor combined_x_, combined_weights_;

  // From the last dispatch's counts.
  std::vector<int64_t> send_rows_, recv_rows_, send_offsets_, recv_offsets_;
  int64_t num_recv_ = 0;
  std::vector<int> num_recv_tokens_per_expert_;
};

}  // namespace

void prepare_nccl_environment() {
  // NOTES: NVLink multicast (NVLS) stays off on the multi-GPU machines (GPU.md): a program using it
  // can put a host's shared GPUs out of service. p2p never needs it; keep a value the user set.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
}

std::unique_ptr<EngineSession> make_nccl_session(const SessionContext& context) {
  return std::make_unique<NcclSession>(context);
}

#else

void prepare_nccl_environment() {}

std::unique_ptr<EngineSession> make_nccl_session(const SessionContext& /*context*/) {
  throw Unsupported(std::string("switchyard-bench: nccl is ") + kNcclBuildNote);
}

#endif

}  // namespace switchyard::bench
