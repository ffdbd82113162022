#include "support/expert_major_cases.hpp"

#include <algorithm>
#include <cstring>
#include <ostream>
#include <utility>

#include "common/logfmt.hpp"
#include "common/numeric.hpp"

namespace switchyard::testing::expert_major {

// ---- cases ----------------------------------------------------------------------------------------

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

Case make(std::string name, int ranks, std::vector<int64_t> tokens, int64_t max_tokens, int topk,
          int num_experts, int hidden) {
  Case c;
  c.name = std::move(name);
  c.ranks = ranks;
  c.tokens = std::move(tokens);
  c.max_tokens = max_tokens;
  c.topk = topk;
  c.num_experts = num_experts;
  c.hidden = hidden;
  return c;
}

Case with_fp8(Case c, bool round_scale, bool use_ue8m0) {
  c.fp8 = {true, round_scale, use_ue8m0};
  return c;
}

Case with_routing(Case c, workload::Routing routing) {
  c.routing = routing;
  return c;
}

Case with_capacity(Case c, int64_t capacity) {
  c.capacity = capacity;
  return c;
}

Case with_symmetric_combine(Case c, SymmetricCombine path) {
  c.symmetric_combine = path;
  return c;
}

Case with_symmetric_dispatch(Case c, SymmetricDispatch path) {
  c.symmetric_dispatch = path;
  return c;
}

std::vector<Case> on_both_combine_paths(const std::vector<Case>& cases) {
  std::vector<Case> both;
  for (const Case& c : cases) {
    for (SymmetricDispatch source : {SymmetricDispatch::publish, SymmetricDispatch::zero_copy}) {
      for (SymmetricCombine path : {SymmetricCombine::push, SymmetricCombine::pull}) {
        Case named = with_symmetric_dispatch(with_symmetric_combine(c, path), source);
        named.name += std::string("_") + symmetric_combine_name(path);
        if (source == SymmetricDispatch::zero_copy) named.name += "_zero_copy";
        both.push_back(std::move(named));
      }
    }
  }
  return both;
}

int64_t rows_per_expert(const Case& c) {
  return c.capacity > 0 ? c.capacity : c.ranks * c.max_tokens;
}

int64_t max_expert_rows(const std::vector<workload::RankData>& data, int num_experts) {
  std::vector<int64_t> rows(num_experts, 0);
  for (const workload::RankData& rank : data) {
    const int64_t* ids = rank.topk_idx.as<const int64_t>();
    for (int64_t i = 0; i < rank.topk_idx.numel(); ++i) {
      if (ids[i] >= 0) ++rows[ids[i]];
    }
  }
  return rows.empty() ? 0 : *std::max_element(rows.begin(), rows.end());
}

std::pair<int64_t, int64_t> first_overflow(const std::vector<workload::RankData>& data, int num_experts,
                                           int64_t capacity) {
  std::vector<int64_t> rows(num_experts, 0);
  for (const workload::RankData& rank : data) {
    const int64_t* ids = rank.topk_idx.as<const int64_t>();
    for (int64_t i = 0; i < rank.topk_idx.numel(); ++i) {
      if (ids[i] >= 0) ++rows[ids[i]];
    }
  }
  for (int expert = 0; expert < num_experts; ++expert) {
    if (rows[expert] > capacity) return {expert, rows[expert]};
  }
  return {-1, 0};
}

std::string overflow_names(const Case& c, const std::vector<workload::RankData>& data) {
  const int64_t expert = first_overflow(data, c.num_experts, c.capacity).first;
  return "for expert " + std::to_string(expert) + " (on rank " +
         std::to_string(expert / (c.num_experts / c.ranks)) + ")";
}

std::vector<workload::RankData> one_row_per_expert(const Case& c, uint64_t seed) {
  std::vector<workload::RankData> data = workload::generate(shape_of(c), seed);
  for (int rank = 0; rank < c.ranks; ++rank) {
    int64_t* ids = data[rank].topk_idx.as<int64_t>();
    for (int64_t i = 0; i < data[rank].topk_idx.numel(); ++i) {
      ids[i] = (rank * c.max_tokens * c.topk + i) % c.num_experts;
    }
  }
  return data;
}

std::vector<CapacityRun> capacity_runs(const Case& base, uint64_t seed) {
  std::vector<CapacityRun> runs;
  std::vector<workload::RankData> drawn = workload::generate(shape_of(base), seed);
  const int64_t full = std::max<int64_t>(1, max_expert_rows(drawn, base.num_experts));
  runs.push_back({with_capacity(base, full), drawn});
  runs.back().c.name += "_exactly_full";
  runs.push_back({with_capacity(base, std::min(full + 7, base.ranks * base.max_tokens)), drawn});
  runs.back().c.name += "_larger";
  Case one = with_capacity(base, 1);
  one.num_experts =
      std::max<int>(base.num_experts, static_cast<int>(base.ranks * base.max_tokens * base.topk));
  one.num_experts += (base.ranks - one.num_experts % base.ranks) % base.ranks;  // a multiple of ranks
  one.name += "_one_row";
  runs.push_back({one, one_row_per_expert(one, seed)});
  return runs;
}

std::vector<workload::RankData> survivors_routing(std::vector<workload::RankData> data, const Case& c,
                                                  const std::set<int>& masked) {
  const int local_experts = c.num_experts / c.ranks;
  for (int rank = 0; rank < c.ranks; ++rank) {
    Tensor& topk_idx = data[rank].topk_idx;
    Tensor copy = Tensor::empty(DType::i64, {topk_idx.size(0), topk_idx.size(1)});
    const int64_t* from = topk_idx.as<const int64_t>();
    int64_t* to = copy.as<int64_t>();
    for (int64_t i = 0; i < topk_idx.numel(); ++i) {
      const bool dropped = masked.count(rank) != 0 ||
                           (from[i] >= 0 && masked.count(static_cast<int>(from[i] / local_experts)) != 0);
      to[i] = dropped ? -1 : from[i];
    }
    topk_idx = copy;
  }
  return data;
}

workload::Shape shape_of(const Case& c) {
  workload::Shape shape;
  shape.topology = Topology::single_node(c.ranks);
  shape.tokens_per_rank_list = c.tokens;
  shape.hidden = c.hidden;
  shape.topk = c.topk;
  shape.num_experts = c.num_experts;
  shape.routing = c.routing;
  return shape;
}

Regions regions_of(Engine engine) {
  if (engine == Engine::low_latency) return Regions::low_latency;
  if (engine == Engine::symmetric) return Regions::symmetric;
  throw InvalidArgument(std::string("engine: expected low_latency or symmetric, got ") + engine_name(engine));
}

BufferOptions buffer_options(const Case& c, int rank, Regions regions, double timeout_seconds) {
  BufferOptions options;
  options.topology = Topology::single_node(c.ranks);
  options.rank = rank;
  options.config.timeout_seconds = timeout_seconds;
  options.config.symmetric_combine = c.symmetric_combine;
  options.config.symmetric_dispatch = c.symmetric_dispatch;
  options.sizing.max_tokens_per_rank = 1;  // the normal engine is not used
  options.sizing.hidden = c.hidden;
  options.sizing.topk = c.topk;
  options.sizing.num_experts = c.num_experts;
  if (regions != Regions::symmetric) options.sizing.low_latency_max_tokens_per_rank = c.max_tokens;
  if (regions != Regions::low_latency) options.sizing.symmetric_max_tokens_per_rank = c.max_tokens;
  return options;
}

void with_buffers(const Case& c, Regions regions, const std::function<void(Group&, Buffer&)>& body,
                  double timeout_seconds) {
  run_ranks(c.ranks, [&](Group& group) {
    Buffer buffer(buffer_options(c, group.rank(), regions, timeout_seconds));
    buffer.connect(group.allgather(buffer.local_handle()));
    body(group, buffer);
    group.barrier();
  });
}

// ---- tensors --------------------------------------------------------------------------------------

Tensor poisoned(DType dtype, std::initializer_list<int64_t> dims) {
  Tensor tensor = Tensor::empty(dtype, dims);
  workload::poison(tensor);
  return tensor;
}

bool all_poison(const TensorView& host) {
  const uint8_t* bytes = host.as<const uint8_t>();
  for (size_t i = 0; i < host.nbytes(); ++i) {
    if (bytes[i] != kPoison) return false;
  }
  return true;
}

TensorView flat(const TensorView& tensor) {
  TensorView view = tensor;
  view.ndim = 2;
  view.shape = {tensor.shape[0] * tensor.shape[1], tensor.shape[2], 0, 0};
  return view;
}

TensorView expert_rows(const TensorView& tensor, int64_t local) {
  TensorView view = tensor;
  view.ndim = 2;
  view.shape = {tensor.shape[1], tensor.shape[2], 0, 0};
  view.data =
      static_cast<uint8_t*>(view.data) + local * tensor.shape[1] * tensor.shape[2] * dtype_size(tensor.dtype);
  return view;
}

Tensor host_copy(const TensorView& tensor) {
  if (!tensor.defined()) return Tensor();
  Tensor copy = Tensor::empty_like_shape(tensor.dtype, tensor.shape, tensor.ndim, Device::cpu, 0);
  if (tensor.nbytes() > 0) std::memcpy(copy.data(), tensor.data, tensor.nbytes());
  return copy;
}

Tensor expert_outputs(const TensorView& recv_x, const TensorView& recv_x_scales, int rank) {
  Tensor rows = workload::synthetic_expert(
      flat(recv_x), recv_x_scales.defined() ? flat(recv_x_scales) : TensorView(), rank);
  Tensor y = Tensor::empty(DType::bf16, {recv_x.shape[0], recv_x.shape[1], recv_x.shape[2]});
  std::memcpy(y.data(), rows.data(), rows.nbytes());
  return y;
}

// ---- what every rank should get ---------------------------------------------------------------------

Expected expected_from(std::vector<workload::RankData> data, int num_experts, const Topology& topology,
                       int64_t max_tokens, const reference::LowLatencyOptions& fp8, int64_t capacity) {
  Expected expected;
  expected.data = std::move(data);
  std::vector<reference::RankInputs> inputs;
  for (const auto& rank_data : expected.data) inputs.push_back(rank_data.inputs());
  expected.dispatched =
      reference::low_latency_dispatch(inputs, num_experts, topology, max_tokens, fp8, capacity);
  expected.overflows = capacity > 0 && max_expert_rows(expected.data, num_experts) > capacity;
  if (fp8.use_ue8m0 || expected.overflows) return expected;
  std::vector<TensorView> ys;
  for (int rank = 0; rank < topology.num_ranks; ++rank) {
    const reference::LowLatencyDispatchOutput& received = expected.dispatched[rank];
    expected.ys.push_back(expert_outputs(received.recv_x, received.recv_x_scales, rank));
    ys.push_back(expected.ys.back());
  }
  expected.combined = reference::low_latency_combine(ys, inputs, num_experts, topology, max_tokens, capacity);
  return expected;
}

Expected expected_from(const Case& c, std::vector<workload::RankData> data) {
  return expected_from(std::move(data), c.num_experts, Topology::single_node(c.ranks), c.max_tokens, c.fp8,
                       c.capacity);
}

Expected expected_for(const Case& c, uint64_t seed) {
  return expected_from(c, workload::generate(shape_of(c), seed));
}

namespace {

// `expected.combined` recomputed by the reference with its biases and use_logfmt.
void recombine(const Case& c, Expected& expected) {
  std::vector<reference::CombineBias> biases;
  if (!expected.bias0.empty() || !expected.bias1.empty()) {
    biases.resize(c.ranks);
    for (int rank = 0; rank < c.ranks; ++rank) {
      if (!expected.bias0.empty()) biases[rank].bias0 = expected.bias0[rank];
      if (!expected.bias1.empty()) biases[rank].bias1 = expected.bias1[rank];
    }
  }
  std::vector<reference::RankInputs> inputs;
  for (const auto& rank_data : expected.data) inputs.push_back(rank_data.inputs());
  std::vector<TensorView> ys(expected.ys.begin(), expected.ys.end());
  expected.combined =
      reference::low_latency_combine(ys, inputs, c.num_experts, Topology::single_node(c.ranks), c.max_tokens,
                                     c.capacity, biases, expected.use_logfmt);
}

}  // namespace

Expected with_biases(const Case& c, Expected expected, uint64_t seed, bool first, bool second) {
  const workload::Shape shape = shape_of(c);
  expected.bias0.assign(c.ranks, Tensor());
  expected.bias1.assign(c.ranks, Tensor());
  for (int rank = 0; rank < c.ranks; ++rank) {
    if (first) expected.bias0[rank] = workload::combine_bias(shape, seed, rank, 0);
    if (second) expected.bias1[rank] = workload::combine_bias(shape, seed, rank, 1);
  }
  recombine(c, expected);
  return expected;
}

Expected with_logfmt(const Case& c, Expected expected) {
  expected.use_logfmt = true;
  recombine(c, expected);
  return expected;
}

Expected with_rows_in_both_formats(Expected expected) {
  for (Tensor& y : expected.ys) {
    uint16_t* values = y.as<uint16_t>();
    const int64_t hidden = y.size(2);
    for (int64_t row = 0; row < y.size(0) * y.size(1); row += 2) {
      for (int64_t col = 0; col < hidden; ++col) {
        uint16_t& value = values[row * hidden + col];
        value = common::float_to_bf16(common::bf16_to_float(value) * 0.015625f);
      }
    }
  }
  return expected;
}

std::pair<int64_t, int64_t> cast_and_plain_blocks(const Expected& expected) {
  int64_t cast = 0, plain = 0;
  for (const Tensor& y : expected.ys) {
    const uint16_t* values = y.as<const uint16_t>();
    for (int64_t begin = 0; begin < y.numel(); begin += common::kLogfmtBlock) {
      (common::logfmt_block_of(values + begin, common::kLogfmtBlock).cast ? cast : plain) += 1;
    }
  }
  return {cast, plain};
}

// ---- calls ----------------------------------------------------------------------------------------

LowLatencyDispatchArgs dispatch_args(const Case& c, const TensorView& x, const TensorView& topk_idx,
                                     Stream stream) {
  LowLatencyDispatchArgs args;
  args.x = x;
  args.topk_idx = topk_idx;
  args.max_tokens_per_rank = c.max_tokens;
  args.num_experts = c.num_experts;
  args.use_fp8 = c.fp8.use_fp8;
  args.round_scale = c.fp8.round_scale;
  args.use_ue8m0 = c.fp8.use_ue8m0;
  args.expert_capacity = c.capacity;
  args.stream = stream;
  return args;
}

LowLatencyDispatchArgs dispatch_args(const Case& c, const workload::RankData& data) {
  return dispatch_args(c, data.x, data.topk_idx);
}

LowLatencyCombineArgs combine_args(const TensorView& topk_idx, const TensorView& topk_weights,
                                   const LowLatencyHandle& handle, const TensorView& y, Stream stream) {
  LowLatencyCombineArgs args;
  args.x = y;
  args.topk_idx = topk_idx;
  args.topk_weights = topk_weights;
  args.handle = &handle;
  args.stream = stream;
  return args;
}

LowLatencyCombineArgs combine_args(const workload::RankData& data, const LowLatencyHandle& handle,
                                   const TensorView& y) {
  return combine_args(data.topk_idx, data.topk_weights, handle, y);
}

void attach_biases(const Expected& expected, int rank, LowLatencyCombineArgs& args) {
  args.bias0 = expected.bias0.empty() ? TensorView() : expected.bias0[rank].view();
  args.bias1 = expected.bias1.empty() ? TensorView() : expected.bias1[rank].view();
  args.use_logfmt = expected.use_logfmt;
}

LowLatencyDispatchResult dispatch_with(Engine engine, Buffer& buffer, const LowLatencyDispatchArgs& args) {
  return regions_of(engine) == Regions::symmetric ? buffer.symmetric_dispatch(args)
                                                  : buffer.low_latency_dispatch(args);
}

LowLatencyCombineResult combine_with(Engine engine, Buffer& buffer, const LowLatencyCombineArgs& args) {
  return regions_of(engine) == Regions::symmetric ? buffer.symmetric_combine(args)
                                                  : buffer.low_latency_combine(args);
}

void PoisonedOutputs::attach(LowLatencyDispatchArgs& args) const {
  args.out_recv_x = recv_x;
  args.out_recv_x_scales = recv_x_scales;
  args.out_recv_count = recv_count;
  args.out_layout_range = layout_range;
  args.out_src_info = src_info;
}

void PoisonedOutputs::attach(LowLatencyCombineArgs& args) const {
  args.out_combined_x = combined_x;
}

std::vector<Tensor> PoisonedOutputs::dispatch_outputs() const {
  std::vector<Tensor> outputs;
  for (const Tensor* tensor : {&recv_x, &recv_x_scales, &recv_count, &layout_range, &src_info}) {
    if (tensor->defined()) outputs.push_back(*tensor);
  }
  return outputs;
}

PoisonedOutputs poisoned_outputs(const Case& c, int64_t num_tokens, const MakePoisoned& make) {
  const int64_t local = c.num_experts / c.ranks;
  const int64_t rows = rows_per_expert(c);
  PoisonedOutputs out;
  out.recv_x = make(c.fp8.use_fp8 ? DType::fp8_e4m3 : DType::bf16, {local, rows, c.hidden});
  if (c.fp8.use_ue8m0) {
    out.recv_x_scales = make(DType::i32, {local, rows, (c.hidden / 128 + 3) / 4});  // 4 UE8M0 bytes a word
  } else if (c.fp8.use_fp8) {
    out.recv_x_scales = make(DType::f32, {local, rows, c.hidden / 128});
  }
  out.recv_count = make(DType::i32, {local});
  out.layout_range = make(DType::i32, {local, c.ranks, 2});
  out.src_info = make(DType::i32, {local, rows});
  out.combined_x = make(DType::bf16, {num_tokens, c.hidden});
  return out;
}

GuardedOutputs guarded_outputs(const Case& c, int64_t num_tokens, const MakePoisoned& make) {
  GuardedOutputs guarded;
  guarded.out = poisoned_outputs(c, num_tokens, make);
  const int64_t local = c.num_experts / c.ranks;
  const int64_t rows = rows_per_expert(c);
  for (Tensor* view : {&guarded.out.recv_x, &guarded.out.recv_x_scales, &guarded.out.src_info}) {
    if (!view->defined()) continue;
    const TensorView shape = view->view();
    const int64_t columns = shape.ndim == 3 ? shape.shape[2] : 1;
    Tensor backing = make(shape.dtype, {local * rows + GuardedOutputs::kGuardRows, columns});
    TensorView inner = backing.view();
    inner.ndim = shape.ndim;
    inner.shape = shape.shape;
    *view = Tensor::borrow(inner);
    guarded.backing.push_back(std::move(backing));
  }
  return guarded;
}

std::vector<TensorView> GuardedOutputs::guards() const {
  std::vector<TensorView> guards;
  for (const Tensor& tensor : backing) {
    TensorView guard = tensor.view();
    const int64_t rows = guard.shape[0] - kGuardRows;
    guard.data = static_cast<uint8_t*>(guard.data) + rows * guard.shape[1] * dtype_size(guard.dtype);
    guard.shape[0] = kGuardRows;
    guards.push_back(guard);
  }
  return guards;
}

// ---- comparison -------------------------------------------------------------------------------------

void Failures::add(int rank, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  lines_.push_back("rank " + std::to_string(rank) + ": " + what);
}

std::vector<std::string> Failures::lines() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_;
}

void compare(const TensorView& actual, const TensorView& expected, const std::string& what, int rank,
             Failures& failures, int64_t rows) {
  std::string why;
  if (!workload::bitwise_equal(actual, expected, &why, rows)) failures.add(rank, what + ": " + why);
}

namespace {

// Same presence, dtype and shape: the per-expert row views assume them.
bool same_layout(const TensorView& got, const TensorView& want, const std::string& what, int rank,
                 Failures& failures) {
  if (got.defined() == want.defined() &&
      (!want.defined() || (got.dtype == want.dtype && got.shape == want.shape))) {
    return true;
  }
  failures.add(rank, what + ": expected " + (want.defined() ? want.describe() : "none") + ", got " +
                         (got.defined() ? got.describe() : "none"));
  return false;
}

}  // namespace

void check_dispatch(const DispatchView& got, const DispatchView& want, const std::string& against, int rank,
                    Failures& failures) {
  const std::string vs = " vs " + against;
  compare(got.recv_count, want.recv_count, "recv_count" + vs, rank, failures);
  compare(got.layout_range, want.layout_range, "layout_range" + vs, rank, failures);
  compare(got.src_info, want.src_info, "src_info" + vs, rank, failures);
  if (!same_layout(got.recv_x, want.recv_x, "recv_x" + vs, rank, failures) ||
      !same_layout(got.recv_x_scales, want.recv_x_scales, "recv_x_scales" + vs, rank, failures)) {
    return;
  }
  for (int64_t local = 0; local < want.recv_x.shape[0]; ++local) {
    // The rows that exist: an expert past its capacity keeps its first C.
    const int64_t count = std::min<int64_t>(want.recv_count.as<const int32_t>()[local], want.recv_x.shape[1]);
    const std::string which = " of local expert " + std::to_string(local) + vs;
    compare(expert_rows(got.recv_x, local), expert_rows(want.recv_x, local), "recv_x" + which, rank, failures,
            count);
    if (want.recv_x_scales.defined()) {
      compare(expert_rows(got.recv_x_scales, local), expert_rows(want.recv_x_scales, local),
              "recv_x_scales" + which, rank, failures, count);
    }
  }
}

void check_outputs(const Outputs& got, const Outputs& want, const std::string& against, int rank,
                   Failures& failures) {
  check_dispatch(got, want, against, rank, failures);
  if (want.combined_x.defined())
    compare(got.combined_x, want.combined_x, "combined_x vs " + against, rank, failures);
}

Outputs reference_outputs(const Expected& expected, int rank) {
  const reference::LowLatencyDispatchOutput& want = expected.dispatched[rank];
  Outputs outputs{want.recv_x,       want.recv_x_scales, want.recv_count,
                  want.layout_range, want.src_info,      Tensor()};
  if (!expected.combined.empty()) outputs.combined_x = expected.combined[rank];
  return outputs;
}

std::vector<Outputs> run_cpu_engine(Engine engine, const Case& c, const Expected& expected,
                                    bool receive_hook) {
  std::vector<Outputs> outputs(c.ranks);
  with_buffers(c, regions_of(engine), [&](Group& group, Buffer& buffer) {
    const int rank = group.rank();
    const workload::RankData& data = expected.data[rank];
    const LowLatencyDispatchResult dispatched = dispatch_with(engine, buffer, dispatch_args(c, data));
    Outputs& out = outputs[rank];
    out.recv_x = host_copy(dispatched.recv_x);
    out.recv_x_scales = host_copy(dispatched.recv_x_scales);
    out.recv_count = host_copy(dispatched.recv_count);
    out.layout_range = host_copy(dispatched.layout_range);
    out.src_info = host_copy(dispatched.src_info);
    if (!expected.ys.empty()) {
      LowLatencyCombineArgs args = combine_args(data, dispatched.handle, expected.ys[rank]);
      attach_biases(expected, rank, args);
      args.return_recv_hook = receive_hook;
      LowLatencyCombineResult combined = combine_with(engine, buffer, args);
      if (combined.hook) combined.hook();
      out.combined_x = host_copy(combined.combined_x);
    }
  });
  return outputs;
}

// ---- bad input and timeouts -------------------------------------------------------------------------

SingleRank::SingleRank(Regions regions) {
  buffer = std::make_unique<Buffer>(buffer_options(c, 0, regions));
  buffer->connect({buffer->local_handle()});
  draw_inputs();
  out = poisoned_outputs(c, data.x.size(0));
}

void SingleRank::draw_inputs() {
  data = workload::generate(shape_of(c), 3)[0];
}

LowLatencyDispatchArgs SingleRank::args() const {
  LowLatencyDispatchArgs args = dispatch_args(c, data);
  out.attach(args);
  return args;
}

bool SingleRank::untouched() const {
  for (const Tensor& tensor : out.dispatch_outputs()) {
    if (!all_poison(tensor)) return false;
  }
  return true;
}

Caught catch_timeout(const std::function<void()>& call) {
  Caught caught;
  const auto start = std::chrono::steady_clock::now();
  try {
    call();
    caught.message = "no exception";
  } catch (const TimeoutError& error) {
    caught.timed_out = true;
    caught.message = error.what();
  } catch (const std::exception& error) {
    caught.message = std::string("not a TimeoutError: ") + error.what();
  }
  caught.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return caught;
}

bool refused_after_timeout(const std::function<void()>& call) {
  try {
    call();
  } catch (const TimeoutError&) {
  } catch (const Error&) {
    return true;
  }
  return false;
}

}  // namespace switchyard::testing::expert_major
