#include "support/normal_round_trip.hpp"

#include <algorithm>
#include <cstring>

namespace switchyard::testing {

namespace {

// `second`'s tensor equals `first`'s bit for bit (its first `rows` rows; -1: all).
void expect_identical(const Tensor& second, const Tensor& first, int64_t rows, const std::string& what,
                      std::vector<std::string>* failures) {
  std::string why;
  if (!workload::bitwise_equal(second, first, &why, rows))
    failures->push_back("second run's " + what + ": " + why);
}

Tensor poisoned(DType dtype, std::initializer_list<int64_t> dims) {
  Tensor tensor = Tensor::empty(dtype, dims);
  workload::poison(tensor);
  return tensor;
}

std::string where(int rank, const std::string& what) {
  return "rank " + std::to_string(rank) + " " + what;
}

void compare(const TensorView& actual, const TensorView& expected, int64_t rows, int rank,
             const std::string& what, std::vector<std::string>* failures) {
  std::string why;
  if (!workload::bitwise_equal(actual, expected, &why, rows))
    failures->push_back(where(rank, what) + ": " + why);
}

void expect_rows(const Tensor& tensor, int64_t rows, int rank, const std::string& what,
                 std::vector<std::string>* failures) {
  if (!tensor.defined()) {
    failures->push_back(where(rank, what) + ": expected a tensor with " + std::to_string(rows) +
                        " rows, got none");
  } else if (tensor.view().ndim < 1 || tensor.size(0) != rows) {
    failures->push_back(where(rank, what) + ": expected " + std::to_string(rows) + " rows, got " +
                        tensor.view().describe());
  }
}

// A preallocated output must be the tensor the result refers to.
void expect_same_storage(const Tensor& result, const Tensor& passed, int rank, const std::string& what,
                         std::vector<std::string>* failures) {
  if (passed.defined() && result.data() != passed.data()) {
    failures->push_back(where(rank, what) +
                        ": expected the result in the preallocated out_ tensor, got other storage");
  }
}

}  // namespace

Tensor transpose_scales(const TensorView& scales) {
  const int64_t num_tokens = scales.shape[0], num_scales = scales.shape[1];
  Tensor transposed = Tensor::empty(DType::f32, {num_scales, num_tokens});
  const float* from = scales.as<const float>();
  float* to = transposed.as<float>();
  for (int64_t token = 0; token < num_tokens; ++token) {
    for (int64_t block = 0; block < num_scales; ++block)
      to[block * num_tokens + token] = from[token * num_scales + block];
  }
  return transposed;
}

void set_x_scales(DispatchArgs& args, const workload::RankData& data, bool column_major, Tensor& storage) {
  if (!column_major || !data.x_scales.defined()) {
    args.x_scales = data.x_scales;
    return;
  }
  storage = transpose_scales(data.x_scales);
  args.x_scales = storage;
  args.x_scales_column_major = true;
}

void set_x(DispatchArgs& args, Buffer& buffer, const workload::RankData& data,
           const RoundTripOptions& options, Tensor& storage) {
  if (!options.x_in_heap || options.staged) {  // staged: the Buffer copies them into its heap input
    args.x = data.x;
    set_x_scales(args, data, options.scales_column_major, storage);
    return;
  }
  const NormalInputViews views =
      buffer.normal_input(data.x.size(0), static_cast<int>(data.x.size(1)), data.x.dtype());
  if (data.x.nbytes() > 0) std::memcpy(views.x.data, data.x.data(), data.x.nbytes());
  args.x = views.x;
  if (data.x_scales.defined()) {
    if (data.x_scales.nbytes() > 0)
      std::memcpy(views.x_scales.data, data.x_scales.data(), data.x_scales.nbytes());
    args.x_scales = views.x_scales;
  }
}

Tensor i32_tensor(const std::vector<int>& values) {
  Tensor tensor = Tensor::empty(DType::i32, {static_cast<int64_t>(values.size())});
  if (!values.empty()) std::memcpy(tensor.data(), values.data(), values.size() * sizeof(int));
  return tensor;
}

Tensor bool_tensor(const std::vector<uint8_t>& values, int64_t rows, int64_t cols) {
  Tensor tensor = Tensor::empty(DType::boolean, {rows, cols});
  if (!values.empty()) std::memcpy(tensor.data(), values.data(), values.size());
  return tensor;
}

BufferSizing sizing_for(const workload::Shape& shape) {
  BufferSizing sizing;
  sizing.max_tokens_per_rank = 0;
  for (int rank = 0; rank < shape.topology.num_ranks; ++rank) {
    sizing.max_tokens_per_rank = std::max(sizing.max_tokens_per_rank, shape.tokens_of(rank));
  }
  sizing.hidden = shape.hidden;
  sizing.topk = shape.topk;
  sizing.num_experts = shape.num_experts;
  sizing.dtype = shape.dtype;
  return sizing;
}

std::vector<RankBiases> make_biases(const workload::Shape& shape, uint64_t seed, Biases which) {
  std::vector<RankBiases> biases;
  if (which == Biases::none) return biases;
  for (int rank = 0; rank < shape.topology.num_ranks; ++rank) {
    RankBiases rank_biases;
    if (which == Biases::first || which == Biases::both) {
      rank_biases.bias0 = workload::combine_bias(shape, seed, rank, 0);
    }
    if (which == Biases::second || which == Biases::both) {
      rank_biases.bias1 = workload::combine_bias(shape, seed, rank, 1);
    }
    biases.push_back(std::move(rank_biases));
  }
  return biases;
}

Expected compute_expected(const workload::Shape& shape, const std::vector<workload::RankData>& data,
                          int expert_alignment, std::vector<RankBiases> biases) {
  const int num_ranks = shape.topology.num_ranks;
  Expected expected;
  expected.biases = std::move(biases);
  std::vector<reference::CombineBias> reference_biases;
  for (const RankBiases& rank_biases : expected.biases) {
    reference_biases.push_back({rank_biases.bias0, rank_biases.bias1});
  }
  std::vector<reference::RankInputs> inputs;
  std::vector<int64_t> num_tokens;
  for (int rank = 0; rank < num_ranks; ++rank) {
    expected.layouts.push_back(reference::layout(data[rank].topk_idx, shape.num_experts, shape.topology));
    inputs.push_back(data[rank].inputs());
    num_tokens.push_back(shape.tokens_of(rank));
  }
  expected.dispatched =
      reference::normal_dispatch(inputs, shape.num_experts, shape.topology, expert_alignment);
  std::vector<TensorView> ys, weights;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const reference::NormalDispatchOutput& out = expected.dispatched[rank];
    expected.ys.push_back(workload::synthetic_expert(out.recv_x, out.recv_x_scales, rank));
    ys.push_back(expected.ys.back());
    if (shape.with_weights) weights.push_back(out.recv_topk_weights);
  }
  expected.combined = reference::normal_combine(ys, weights, expected.dispatched, num_tokens, shape.topology,
                                                reference_biases);
  return expected;
}

Expected compute_expected_without_topk(const workload::Shape& shape,
                                       const std::vector<workload::RankData>& data, int expert_alignment) {
  const int num_ranks = shape.topology.num_ranks;
  Expected expected;
  std::vector<reference::RankInputs> inputs;
  std::vector<std::vector<uint8_t>> is_token_in_rank;
  std::vector<std::vector<int>> num_tokens_per_expert;
  std::vector<int64_t> num_tokens;
  for (int rank = 0; rank < num_ranks; ++rank) {
    expected.layouts.push_back(reference::layout(data[rank].topk_idx, shape.num_experts, shape.topology));
    is_token_in_rank.push_back(expected.layouts.back().is_token_in_rank);
    num_tokens_per_expert.push_back(expected.layouts.back().num_tokens_per_expert);
    reference::RankInputs routed_by_rank;
    routed_by_rank.x = data[rank].x;
    routed_by_rank.x_scales = data[rank].x_scales;
    inputs.push_back(routed_by_rank);
    num_tokens.push_back(shape.tokens_of(rank));
  }
  expected.dispatched = reference::normal_dispatch_by_rank(
      inputs, is_token_in_rank, num_tokens_per_expert, shape.num_experts, shape.topology, expert_alignment);
  std::vector<TensorView> ys;
  for (int rank = 0; rank < num_ranks; ++rank) {
    const reference::NormalDispatchOutput& out = expected.dispatched[rank];
    expected.ys.push_back(workload::synthetic_expert(out.recv_x, out.recv_x_scales, rank));
    ys.push_back(expected.ys.back());
  }
  expected.combined = reference::normal_combine(ys, {}, expected.dispatched, num_tokens, shape.topology);
  return expected;
}

void prepare_dispatch_outputs(RankRun& run, DispatchArgs& args, const workload::Shape& shape, int64_t rows,
                              bool with_topk) {
  run.out_recv_x = poisoned(shape.dtype, {rows, shape.hidden});
  args.out_recv_x = run.out_recv_x;
  if (shape.dtype == DType::fp8_e4m3) {
    run.out_recv_x_scales = poisoned(DType::f32, {rows, shape.hidden / 128});
    args.out_recv_x_scales = run.out_recv_x_scales;
  }
  if (with_topk) {
    run.out_recv_topk_idx = poisoned(DType::i64, {rows, shape.topk});
    args.out_recv_topk_idx = run.out_recv_topk_idx;
    if (shape.with_weights) {
      run.out_recv_topk_weights = poisoned(DType::f32, {rows, shape.topk});
      args.out_recv_topk_weights = run.out_recv_topk_weights;
    }
  }
}

void use_output_allocator(RankRun& run, DispatchArgs& args, const workload::Shape& shape, bool with_topk) {
  args.allocate_outputs = [&run, shape, with_topk](int64_t rows) {
    ++run.allocator_calls;
    run.allocator_rows = rows;
    DispatchArgs made;
    prepare_dispatch_outputs(run, made, shape, rows, with_topk);
    return DispatchOutputs{made.out_recv_x, made.out_recv_x_scales, made.out_recv_topk_idx,
                           made.out_recv_topk_weights};
  };
}

void run_combine(RankRun& run, Buffer& buffer, const workload::Shape& shape, const workload::RankData& data,
                 const Expected& expected, const RoundTripOptions& options, bool with_weights) {
  run.y = workload::synthetic_expert(run.dispatch.recv_x, run.dispatch.recv_x_scales, buffer.rank());
  CombineArgs args;
  args.x = run.y;
  if (with_weights) args.topk_weights = run.dispatch.recv_topk_weights;
  if (options.y_in_heap && !options.staged) {
    // The expert outputs (and weights) written where the home ranks read them in place.
    const NormalCombineInputViews views = buffer.normal_combine_input(run.dispatch.handle, shape.hidden);
    if (run.y.nbytes() > 0) std::memcpy(views.x.data, run.y.data(), run.y.nbytes());
    args.x = views.x;
    if (with_weights) {
      const Tensor& weights = run.dispatch.recv_topk_weights;
      if (weights.nbytes() > 0) std::memcpy(views.topk_weights.data, weights.data(), weights.nbytes());
      args.topk_weights = views.topk_weights;
    }
  }
  args.handle = &run.dispatch.handle;
  args.tuning = options.combine_tuning;
  if (!expected.biases.empty()) {
    args.bias0 = expected.biases[buffer.rank()].bias0;
    args.bias1 = expected.biases[buffer.rank()].bias1;
  }
  if (options.preallocate_outputs) {
    const int64_t num_tokens = data.x.size(0);
    run.out_combined_x = poisoned(DType::bf16, {num_tokens, shape.hidden});
    args.out_combined_x = run.out_combined_x;
    if (with_weights) {
      run.out_combined_topk_weights = poisoned(DType::f32, {num_tokens, shape.topk});
      args.out_combined_topk_weights = run.out_combined_topk_weights;
    }
  }
  run.combine = buffer.combine(args);
}

int64_t output_rows(const Expected& expected, int rank, const RoundTripOptions& options) {
  return options.num_worst_tokens > 0 ? options.num_worst_tokens
                                      : static_cast<int64_t>(expected.dispatched[rank].recv_src_rank.size());
}

RankRun run_round_trip(Buffer& buffer, const workload::Shape& shape, const workload::RankData& data,
                       const Expected& expected, const RoundTripOptions& options) {
  RankRun run;
  run.layout = buffer.get_dispatch_layout(data.topk_idx, shape.num_experts);
  DispatchArgs args;
  Tensor column_major_scales;
  set_x(args, buffer, data, options, column_major_scales);
  args.topk_idx = data.topk_idx;
  args.topk_weights = data.topk_weights;
  args.num_experts = shape.num_experts;
  args.expert_alignment = options.expert_alignment;
  args.layout = options.pass_layout ? &run.layout : nullptr;
  args.num_worst_tokens = options.num_worst_tokens;
  args.tuning = options.dispatch_tuning;
  if (options.preallocate_outputs) {
    prepare_dispatch_outputs(run, args, shape, output_rows(expected, buffer.rank(), options), true);
  } else if (options.output_allocator) {
    use_output_allocator(run, args, shape, true);
  }
  run.dispatch = buffer.dispatch(args);
  run_combine(run, buffer, shape, data, expected, options, shape.with_weights);
  return run;
}

RankRun run_round_trip_without_topk(Buffer& buffer, const workload::Shape& shape,
                                    const workload::RankData& data, const Expected& expected,
                                    const RoundTripOptions& options) {
  RankRun run;
  run.layout = buffer.get_dispatch_layout(data.topk_idx, shape.num_experts);
  DispatchArgs args;
  Tensor column_major_scales;
  set_x(args, buffer, data, options, column_major_scales);
  args.num_experts = shape.num_experts;
  args.expert_alignment = options.expert_alignment;
  args.layout = &run.layout;  // the routing: no topk_idx
  args.num_worst_tokens = options.num_worst_tokens;
  args.tuning = options.dispatch_tuning;
  if (options.preallocate_outputs) {
    prepare_dispatch_outputs(run, args, shape, output_rows(expected, buffer.rank(), options), false);
  } else if (options.output_allocator) {
    use_output_allocator(run, args, shape, false);
  }
  run.dispatch = buffer.dispatch(args);
  run_combine(run, buffer, shape, data, expected, options, false);
  return run;
}

RankRun run_cached_round_trip(Buffer& buffer, const workload::Shape& shape, const workload::RankData& data,
                              const Expected& expected, const RoundTripOptions& options, const RankRun& first,
                              bool with_topk) {
  RankRun run;
  DispatchArgs args;
  Tensor column_major_scales;
  set_x(args, buffer, data, options, column_major_scales);
  if (with_topk) {
    args.topk_idx = data.topk_idx;
    args.topk_weights = data.topk_weights;
  }
  args.cached_handle = &first.dispatch.handle;
  args.num_worst_tokens = options.num_worst_tokens;
  args.tuning = options.dispatch_tuning;
  if (options.preallocate_outputs) {
    prepare_dispatch_outputs(run, args, shape, output_rows(expected, buffer.rank(), options), with_topk);
  } else if (options.output_allocator) {
    use_output_allocator(run, args, shape, with_topk);
  }
  run.dispatch = buffer.dispatch(args);
  run_combine(run, buffer, shape, data, expected, options, with_topk && shape.with_weights);
  return run;
}

void check_layout(const RankRun& run, const Expected& expected, int rank,
                  std::vector<std::string>* failures) {
  const reference::Layout& ref = expected.layouts[rank];
  compare(run.layout.num_tokens_per_rank, i32_tensor(ref.num_tokens_per_rank), -1, rank,
          "layout.num_tokens_per_rank", failures);
  compare(run.layout.num_tokens_per_node, i32_tensor(ref.num_tokens_per_node), -1, rank,
          "layout.num_tokens_per_node", failures);
  compare(run.layout.num_tokens_per_expert, i32_tensor(ref.num_tokens_per_expert), -1, rank,
          "layout.num_tokens_per_expert", failures);
  const int64_t num_ranks = static_cast<int64_t>(ref.num_tokens_per_rank.size());
  const int64_t num_tokens = num_ranks ? static_cast<int64_t>(ref.is_token_in_rank.size()) / num_ranks : 0;
  compare(run.layout.is_token_in_rank, bool_tensor(ref.is_token_in_rank, num_tokens, num_ranks), -1, rank,
          "layout.is_token_in_rank", failures);
}

void check_dispatch(const RankRun& run, const workload::Shape& shape, const Expected& expected, int rank,
                    const RoundTripOptions& options, bool with_topk, std::vector<std::string>* failures) {
  const reference::NormalDispatchOutput& ref = expected.dispatched[rank];
  const DispatchResult& got = run.dispatch;
  const int64_t num_recv = static_cast<int64_t>(ref.recv_src_rank.size());
  const bool worst = options.num_worst_tokens > 0;
  const int64_t rows = worst ? options.num_worst_tokens : num_recv;

  if (!options.preallocate_outputs && options.output_allocator &&
      (run.allocator_calls != 1 || run.allocator_rows != rows)) {
    failures->push_back(where(rank, "allocate_outputs") + ": expected one call with " + std::to_string(rows) +
                        " rows, got " + std::to_string(run.allocator_calls) + " calls, the last with " +
                        std::to_string(run.allocator_rows));
  }
  expect_rows(got.recv_x, rows, rank, "recv_x", failures);
  compare(got.recv_x, ref.recv_x, num_recv, rank, "recv_x", failures);
  expect_same_storage(got.recv_x, run.out_recv_x, rank, "recv_x", failures);
  if (shape.dtype == DType::fp8_e4m3) {
    expect_rows(got.recv_x_scales, rows, rank, "recv_x_scales", failures);
    compare(got.recv_x_scales, ref.recv_x_scales, num_recv, rank, "recv_x_scales", failures);
    expect_same_storage(got.recv_x_scales, run.out_recv_x_scales, rank, "recv_x_scales", failures);
  }
  if (with_topk) {
    expect_rows(got.recv_topk_idx, rows, rank, "recv_topk_idx", failures);
    compare(got.recv_topk_idx, ref.recv_topk_idx, num_recv, rank, "recv_topk_idx", failures);
    expect_same_storage(got.recv_topk_idx, run.out_recv_topk_idx, rank, "recv_topk_idx", failures);
    if (shape.with_weights) {
      expect_rows(got.recv_topk_weights, rows, rank, "recv_topk_weights", failures);
      compare(got.recv_topk_weights, ref.recv_topk_weights, num_recv, rank, "recv_topk_weights", failures);
      expect_same_storage(got.recv_topk_weights, run.out_recv_topk_weights, rank, "recv_topk_weights",
                          failures);
    }
    // Worst-case padding rows: no expert, weight +0.
    if (worst && got.recv_topk_idx.defined() && got.recv_topk_idx.size(0) == rows) {
      for (int64_t row = num_recv; row < rows; ++row) {
        for (int slot = 0; slot < shape.topk; ++slot) {
          const int64_t id = got.recv_topk_idx.as<int64_t>()[row * shape.topk + slot];
          if (id != -1) {
            failures->push_back(where(rank, "recv_topk_idx") + ": padding row " + std::to_string(row) +
                                ", slot " + std::to_string(slot) + ": expected -1, got " +
                                std::to_string(id));
            return;
          }
          if (shape.with_weights && got.recv_topk_weights.defined() &&
              got.recv_topk_weights.size(0) == rows) {
            uint32_t bits;
            std::memcpy(&bits, got.recv_topk_weights.as<float>() + row * shape.topk + slot, sizeof(bits));
            if (bits != 0) {
              failures->push_back(where(rank, "recv_topk_weights") + ": padding row " + std::to_string(row) +
                                  ", slot " + std::to_string(slot) + ": expected +0.0, got bits " +
                                  std::to_string(bits));
              return;
            }
          }
        }
      }
    }
  }

  if (worst) {
    if (got.num_recv_tokens != -1) {
      failures->push_back(where(rank, "num_recv_tokens") + ": expected -1 in worst-case mode, got " +
                          std::to_string(got.num_recv_tokens));
    }
    if (!got.num_recv_tokens_per_expert.empty()) {
      failures->push_back(where(rank, "num_recv_tokens_per_expert") +
                          ": expected empty in worst-case mode, got " +
                          std::to_string(got.num_recv_tokens_per_expert.size()) + " counts");
    }
  } else {
    if (got.num_recv_tokens != num_recv) {
      failures->push_back(where(rank, "num_recv_tokens") + ": expected " + std::to_string(num_recv) +
                          ", got " + std::to_string(got.num_recv_tokens));
    }
    if (got.handle.valid() && got.handle.num_recv_tokens() != num_recv) {
      failures->push_back(where(rank, "handle.num_recv_tokens()") + ": expected " + std::to_string(num_recv) +
                          ", got " + std::to_string(got.handle.num_recv_tokens()));
    }
    compare(i32_tensor(got.num_recv_tokens_per_expert), i32_tensor(ref.num_recv_tokens_per_expert), -1, rank,
            "num_recv_tokens_per_expert", failures);
  }
  if (!got.handle.valid()) failures->push_back(where(rank, "handle") + ": expected a valid handle");
  // The backend's own copies of the counts are valid in every mode.
  compare(got.recv_expert_counts, i32_tensor(ref.num_recv_tokens_per_expert), -1, rank, "recv_expert_counts",
          failures);
  compare(got.recv_token_count, i32_tensor({static_cast<int>(num_recv)}), -1, rank, "recv_token_count",
          failures);
}

void check_combine(const RankRun& run, const workload::Shape& shape, const Expected& expected, int rank,
                   bool with_weights, std::vector<std::string>* failures) {
  (void)shape;
  const reference::NormalCombineOutput& ref = expected.combined[rank];
  compare(run.combine.combined_x, ref.combined_x, -1, rank, "combined_x", failures);
  expect_same_storage(run.combine.combined_x, run.out_combined_x, rank, "combined_x", failures);
  if (with_weights) {
    compare(run.combine.combined_topk_weights, ref.combined_topk_weights, -1, rank, "combined_topk_weights",
            failures);
    expect_same_storage(run.combine.combined_topk_weights, run.out_combined_topk_weights, rank,
                        "combined_topk_weights", failures);
  }
}

void check_identical_rows(const RankRun& second, const RankRun& first, int64_t compared_rows,
                          std::vector<std::string>* failures) {
  expect_identical(second.dispatch.recv_x, first.dispatch.recv_x, compared_rows, "recv_x", failures);
  expect_identical(second.dispatch.recv_x_scales, first.dispatch.recv_x_scales, compared_rows,
                   "recv_x_scales", failures);
  expect_identical(second.dispatch.handle.recv_src_token(), first.dispatch.handle.recv_src_token(),
                   compared_rows, "handle's recv_src_token", failures);
}

void check_identical(const RankRun& second, const RankRun& first, int64_t compared_rows,
                     std::vector<std::string>* failures) {
  check_identical_rows(second, first, compared_rows, failures);
  expect_identical(second.dispatch.recv_topk_idx, first.dispatch.recv_topk_idx, -1, "recv_topk_idx",
                   failures);
  expect_identical(second.dispatch.recv_topk_weights, first.dispatch.recv_topk_weights, -1,
                   "recv_topk_weights", failures);
  expect_identical(second.combine.combined_x, first.combine.combined_x, -1, "combined_x", failures);
  expect_identical(second.combine.combined_topk_weights, first.combine.combined_topk_weights, -1,
                   "combined_topk_weights", failures);
}

}  // namespace switchyard::testing
