#pragma once
// One rank's `normal` round trip through the public API (layout, dispatch, synthetic expert,
// combine) and its bitwise comparison with the reference. Shared by the thread-per-rank tests and
// the process-per-rank (MPI) test; it has no GoogleTest dependency, so mismatches come back as text.
#include <cstdint>
#include <string>
#include <vector>

#include "switchyard/buffer.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing {

struct RoundTripOptions {
  int expert_alignment = 1;
  // Pass get_dispatch_layout's result to dispatch (else dispatch computes the layout itself).
  bool pass_layout = true;
  // Pass poisoned out_* tensors (else the library allocates the outputs).
  bool preallocate_outputs = true;
  // Without preallocate_outputs: every dispatch's outputs come from DispatchArgs::allocate_outputs, poisoned
  // tensors of the rows it is called with (kept in the run, like out_*; check_dispatch checks the results are
  // them and that it was called once, with the rows the rank receives).
  bool output_allocator = false;
  // > 0: worst-case mode with this many output rows.
  int64_t num_worst_tokens = 0;
  // Each call's CallTuning (all 0: the Buffer's); the cached dispatch takes dispatch_tuning.
  CallTuning dispatch_tuning;
  CallTuning combine_tuning;
  // fp8: every dispatch (the cached one too) takes its scales column-major, as DeepEP's users pass
  // them (DispatchArgs::x_scales_column_major, the transpose from transpose_scales).
  bool scales_column_major = false;
  // Every dispatch (the cached one too) takes x and its scales from the Buffer's heap-resident input
  // (Buffer::normal_input; the Buffer sized with BufferSizing::normal_heap_input_tokens), copied there
  // first: the receivers read them in place. Host backends only.
  bool x_in_heap = false;
  // Every combine takes its x (and weights) from the Buffer's heap-resident combine input
  // (Buffer::normal_combine_input; BufferSizing::normal_heap_combine_rows), copied there first: each home
  // rank reads the rows in place. Host backends only.
  bool y_in_heap = false;
  // With x_in_heap / y_in_heap: pass the rank's own tensors instead of writing the views, so that the
  // Buffer copies them into its heap input first (core/staged_heap_input.hpp).
  bool staged = false;
};

// f32 scales [N, B] as their transpose [B, N], contiguous: the memory of DeepEP's column-major scales
// (x_scales.T.contiguous().T), as DispatchArgs::x_scales_column_major takes them. On the host.
Tensor transpose_scales(const TensorView& scales);

// args.x_scales from `data`: its row-major scales, or with `column_major` their transpose (kept in
// `storage`, which must outlive the call) and x_scales_column_major set. Nothing for bf16 x.
void set_x_scales(DispatchArgs& args, const workload::RankData& data, bool column_major, Tensor& storage);

// args.x and args.x_scales as `options` asks: the rank's own tensors (the scales perhaps column-major, kept
// in `storage`), or with x_in_heap copies in `buffer`'s heap-resident input (Buffer::normal_input).
void set_x(DispatchArgs& args, Buffer& buffer, const workload::RankData& data,
           const RoundTripOptions& options, Tensor& storage);

// A home rank's combine biases (CombineArgs::bias0 / bias1), undefined where not passed.
struct RankBiases {
  Tensor bias0, bias1;
};

// Which combine biases a round trip passes (the same on every rank).
enum class Biases { none, first, second, both };

// Every rank's biases for `which`, from workload::combine_bias; empty for Biases::none.
std::vector<RankBiases> make_biases(const workload::Shape& shape, uint64_t seed, Biases which);

// What every rank should get, computed by the reference from all ranks' inputs.
struct Expected {
  std::vector<reference::Layout> layouts;                   // [R]
  std::vector<reference::NormalDispatchOutput> dispatched;  // [R]
  std::vector<Tensor> ys;  // [R], the synthetic expert on the reference's recv_x
  std::vector<reference::NormalCombineOutput> combined;  // [R]
  std::vector<RankBiases> biases;  // [R] or empty: what every combine of the round trip passes
};

// `biases`: empty, or one per rank; the combines of round trips against this Expected pass them.
Expected compute_expected(const workload::Shape& shape, const std::vector<workload::RankData>& data,
                          int expert_alignment, std::vector<RankBiases> biases = {});

// A dispatch without top-k (DeepEP's topk_idx=None), routed by the layout of each rank's topk_idx
// (is_token_in_rank, num_tokens_per_expert) alone, then a combine without weights: the reference's
// normal_dispatch_by_rank and normal_combine.
Expected compute_expected_without_topk(const workload::Shape& shape,
                                       const std::vector<workload::RankData>& data, int expert_alignment);

// One rank's outputs, with the poisoned tensors that were passed in (undefined when the library allocated).
struct RankRun {
  DispatchLayout layout;
  DispatchResult dispatch;
  Tensor y;
  CombineResult combine;
  Tensor out_recv_x, out_recv_x_scales, out_recv_topk_idx, out_recv_topk_weights;
  Tensor out_combined_x, out_combined_topk_weights;
  // RoundTripOptions::output_allocator: how often the dispatch called it, and with how many rows.
  int allocator_calls = 0;
  int64_t allocator_rows = -1;
};

// Heap sizing for exactly this shape: the largest call fills the buffer's capacity exactly.
BufferSizing sizing_for(const workload::Shape& shape);

// The steps of a round trip, for round trips that do more between them: the rows of `rank`'s
// dispatch outputs, poisoned out_* tensors for them (kept in `run`), and the synthetic expert on
// run.dispatch's rows, then the combine with run.dispatch.handle.
int64_t output_rows(const Expected& expected, int rank, const RoundTripOptions& options);
void prepare_dispatch_outputs(RankRun& run, DispatchArgs& args, const workload::Shape& shape, int64_t rows,
                              bool with_topk);
// RoundTripOptions::output_allocator's allocator, into `args` (it writes into `run`, which must outlive the
// call).
void use_output_allocator(RankRun& run, DispatchArgs& args, const workload::Shape& shape, bool with_topk);
void run_combine(RankRun& run, Buffer& buffer, const workload::Shape& shape, const workload::RankData& data,
                 const Expected& expected, const RoundTripOptions& options, bool with_weights);

// A connected-buffer round trip on one rank. `expected` gives the receive row count for
// preallocated outputs outside worst-case mode (a caller knows M from an earlier dispatch).
RankRun run_round_trip(Buffer& buffer, const workload::Shape& shape, const workload::RankData& data,
                       const Expected& expected, const RoundTripOptions& options);

// The round trip of compute_expected_without_topk: get_dispatch_layout, then a dispatch given that
// layout and no topk_idx or topk_weights, then a combine without weights.
RankRun run_round_trip_without_topk(Buffer& buffer, const workload::Shape& shape,
                                    const workload::RankData& data, const Expected& expected,
                                    const RoundTripOptions& options);

// A second dispatch replaying `first`'s routing with its handle, then a combine with the new handle.
// With `with_topk` false, topk_idx and topk_weights are omitted (the handle has the routing).
RankRun run_cached_round_trip(Buffer& buffer, const workload::Shape& shape, const workload::RankData& data,
                              const Expected& expected, const RoundTripOptions& options, const RankRun& first,
                              bool with_topk);

// Appends one line per mismatch between `run` and the reference to `failures`.
void check_layout(const RankRun& run, const Expected& expected, int rank, std::vector<std::string>* failures);
void check_dispatch(const RankRun& run, const workload::Shape& shape, const Expected& expected, int rank,
                    const RoundTripOptions& options, bool with_topk, std::vector<std::string>* failures);
void check_combine(const RankRun& run, const workload::Shape& shape, const Expected& expected, int rank,
                   bool with_weights, std::vector<std::string>* failures);
// The rows `second` received (recv_x, its scales, the handle's recv_src_token) equal `first`'s, bit for bit:
// for a cached dispatch without topk_idx, whose other outputs are absent.
void check_identical_rows(const RankRun& second, const RankRun& first, int64_t compared_rows,
                          std::vector<std::string>* failures);
// Every output of `second` equals `first`, bit for bit.
void check_identical(const RankRun& second, const RankRun& first, int64_t compared_rows,
                     std::vector<std::string>* failures);

// Tensor from a host vector, for comparing counts with bitwise_equal.
Tensor i32_tensor(const std::vector<int>& values);
Tensor bool_tensor(const std::vector<uint8_t>& values, int64_t rows, int64_t cols);

}  // namespace switchyard::testing
