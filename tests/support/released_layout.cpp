#include "support/released_layout.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace switchyard::testing {

namespace {

// A copy of a layout in memory the caller owns and frees, passed to dispatch as borrowed views (as
// the Python layer passes a caller's arrays).
class CallerLayout {
 public:
  explicit CallerLayout(const DispatchLayout& source) {
    layout.num_tokens_per_rank = copy(source.num_tokens_per_rank, 0);
    layout.num_tokens_per_node = copy(source.num_tokens_per_node, 1);
    layout.num_tokens_per_expert = copy(source.num_tokens_per_expert, 2);
    layout.is_token_in_rank = copy(source.is_token_in_rank, 3);
  }

  // Every token routed to the ranks it did not go to, and the counts scribbled over: a handle still
  // reading this memory would route its combine (or a cached dispatch) differently.
  void overwrite_with_other_routing() {
    std::vector<uint8_t>& in_rank = storage_[3];
    for (uint8_t& routed : in_rank) routed ^= 1;
    for (int part = 0; part < 3; ++part) std::memset(storage_[part].data(), 0x5a, storage_[part].size());
  }

  DispatchLayout layout;  // borrowed views of the storage below

 private:
  Tensor copy(const Tensor& source, int part) {
    std::vector<uint8_t>& bytes = storage_[part];
    // NOTES: at least one byte, so that an empty tensor still has a heap block of its own.
    bytes.assign(std::max<size_t>(source.nbytes(), 1), 0);
    if (source.nbytes() > 0) std::memcpy(bytes.data(), source.data(), source.nbytes());
    TensorView view = source.view();
    view.data = bytes.data();
    return Tensor::borrow(view);
  }

  std::vector<uint8_t> storage_[4];
};

}  // namespace

ReleasedLayoutRuns run_round_trip_releasing_layout(Buffer& buffer, const workload::Shape& shape,
                                                   const workload::RankData& data, const Expected& expected,
                                                   const RoundTripOptions& options, bool with_topk) {
  ReleasedLayoutRuns runs;
  RankRun& run = runs.first;
  run.layout = buffer.get_dispatch_layout(data.topk_idx, shape.num_experts);
  auto caller = std::make_unique<CallerLayout>(run.layout);
  DispatchArgs args;
  args.x = data.x;
  args.x_scales = data.x_scales;
  if (with_topk) {
    args.topk_idx = data.topk_idx;
    args.topk_weights = data.topk_weights;
  }
  args.num_experts = shape.num_experts;
  args.expert_alignment = options.expert_alignment;
  args.layout = &caller->layout;
  args.num_worst_tokens = options.num_worst_tokens;
  if (options.preallocate_outputs) {
    prepare_dispatch_outputs(run, args, shape, output_rows(expected, buffer.rank(), options), with_topk);
  }
  run.dispatch = buffer.dispatch(args);

  // The caller is done with its layout once dispatch returned: it reuses the memory, then frees it.
  caller->overwrite_with_other_routing();
  caller.reset();

  run_combine(run, buffer, shape, data, expected, options, with_topk && shape.with_weights);
  runs.cached = run_cached_round_trip(buffer, shape, data, expected, options, run, with_topk);
  return runs;
}

}  // namespace switchyard::testing
