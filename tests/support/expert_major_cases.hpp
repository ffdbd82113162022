#pragma once
// What the tests of the expert-major engines (low_latency and symmetric) share: they have one
// interface and one expected output (DESIGN.md, "low_latency and symmetric interface:
// expert-major"). A case (one shape, inputs drawn per rank), buffer options for it, the reference's
// outputs with the synthetic expert, poisoned outputs, and the bitwise comparison of an engine's
// outputs with the reference's or another engine's. Host only and free of GoogleTest, so that the
// CPU and CUDA suites and the process-per-rank test can all use it; the device transfers are in
// cuda/expert_major_round_trip.hpp and the GoogleTest reporting in support/expert_major_gtest.hpp.
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {

// ---- cases ----------------------------------------------------------------------------------------

// One shape on one node: its inputs are drawn from a seed, per rank.
struct Case {
  std::string name;
  int ranks = 2;
  std::vector<int64_t> tokens;  // per rank
  int64_t max_tokens = 8;
  int hidden = 256;
  int topk = 2;
  int num_experts = 8;
  workload::Routing routing = workload::Routing::random;
  reference::LowLatencyOptions fp8;
  // The dispatch's expert_capacity (0: ranks * max_tokens rows per local expert).
  int64_t capacity = 0;
  // The symmetric engine's combine path (Config::symmetric_combine) of the case's buffers.
  SymmetricCombine symmetric_combine = SymmetricCombine::automatic;
  // The symmetric engine's dispatch source (Config::symmetric_dispatch) of the case's buffers.
  SymmetricDispatch symmetric_dispatch = SymmetricDispatch::automatic;
};

// GoogleTest prints a parameter by its name.
void PrintTo(const Case& c, std::ostream* out);

Case make(std::string name, int ranks, std::vector<int64_t> tokens, int64_t max_tokens, int topk,
          int num_experts, int hidden = 256);
Case with_fp8(Case c, bool round_scale, bool use_ue8m0);
Case with_routing(Case c, workload::Routing routing);
Case with_capacity(Case c, int64_t capacity);
Case with_symmetric_combine(Case c, SymmetricCombine path);
Case with_symmetric_dispatch(Case c, SymmetricDispatch path);
// Each case four times, forcing the push and the pull combine, each after a publish and a zero-copy
// dispatch: "<case>_push" and "<case>_pull" (publish), "<case>_push_zero_copy" and "<case>_pull_zero_copy".
std::vector<Case> on_both_combine_paths(const std::vector<Case>& cases);
// Rows per local expert in c's outputs: c.capacity, or ranks * max_tokens when it is 0.
int64_t rows_per_expert(const Case& c);
// The most rows any local expert of any rank receives from these inputs (each (token, slot) with an
// expert is one row): the smallest capacity that does not overflow.
int64_t max_expert_rows(const std::vector<workload::RankData>& data, int num_experts);
// The first expert (global id) with more rows than `capacity`, and its rows; {-1, 0} for none.
std::pair<int64_t, int64_t> first_overflow(const std::vector<workload::RankData>& data, int num_experts,
                                           int64_t capacity);
// How a CapacityError names the first expert of `data` past c.capacity: "for expert E (on rank R)".
std::string overflow_names(const Case& c, const std::vector<workload::RankData>& data);

// Inputs of `c` where every (token, slot) names its own expert (one row per expert at most, so a
// capacity of 1 fits; c.num_experts must be at least ranks * max_tokens * topk): rank r's pair
// (t, j) goes to expert (r * max * K + t * K + j) % E.
std::vector<workload::RankData> one_row_per_expert(const Case& c, uint64_t seed);

// A capacity a test runs a case with, and the inputs for it.
struct CapacityRun {
  Case c;
  std::vector<workload::RankData> data;
};
// `base` with capacities exactly the largest expert's rows (on inputs drawn from `seed`), larger (up
// to ranks * max), and 1 (on one_row_per_expert inputs, with enough experts). Names say which.
std::vector<CapacityRun> capacity_runs(const Case& base, uint64_t seed);

// The inputs as the survivors of rank masks route them (Buffer::update_mask): a masked rank's tokens are
// dropped (every slot -1) and a slot whose expert is on a masked rank is -1. The reference on these is
// what the survivors of a masked call must get.
std::vector<workload::RankData> survivors_routing(std::vector<workload::RankData> data, const Case& c,
                                                  const std::set<int>& masked);

// The workload shape that draws c's inputs.
workload::Shape shape_of(const Case& c);

// The expert-major regions a buffer has, each sized for the case's max_tokens. The normal engine
// gets the smallest region there is (one token).
enum class Regions { low_latency, symmetric, both };
Regions regions_of(Engine engine);

// Rank `rank` of `c` on the CPU backend (cuda_buffer_options gives the CUDA one).
BufferOptions buffer_options(const Case& c, int rank, Regions regions,
                             double timeout_seconds = Config::kDefaultTimeoutSeconds);

// Runs body(group, buffer) on every rank (threads) with a connected CPU buffer; buffers stay alive
// until every rank is done.
void with_buffers(const Case& c, Regions regions, const std::function<void(Group&, Buffer&)>& body,
                  double timeout_seconds = Config::kDefaultTimeoutSeconds);

// ---- tensors --------------------------------------------------------------------------------------

// The byte that fills preallocated outputs, so that anything a call leaves unwritten shows.
constexpr uint8_t kPoison = 0xA5;

// A host tensor filled with kPoison.
Tensor poisoned(DType dtype, std::initializer_list<int64_t> dims);
// Whether every byte of a host tensor is still kPoison.
bool all_poison(const TensorView& host);
// `tensor` [a, b, c] as [a * b, c].
TensorView flat(const TensorView& tensor);
// The rows of local expert `local` of a [L, rows, C] tensor, as [rows, C].
TensorView expert_rows(const TensorView& tensor, int64_t local);
// A host copy (undefined stays undefined): the CPU engine's outputs may alias its heap.
Tensor host_copy(const TensorView& tensor);

// The experts: the workload's synthetic expert on every row of recv_x [L, C, H] (rows past
// recv_count too; combine never reads them). Needs bf16, or fp8 with f32 scales. bf16 [L, C, H].
Tensor expert_outputs(const TensorView& recv_x, const TensorView& recv_x_scales, int rank);

// ---- what every rank should get ---------------------------------------------------------------------

struct Expected {
  std::vector<workload::RankData> data;                         // [R]: every rank's inputs
  std::vector<reference::LowLatencyDispatchOutput> dispatched;  // [R]
  // [R]: expert_outputs on the reference's recv_x, and the reference's combine of them. Both empty
  // with use_ue8m0 (the synthetic expert needs f32 scales to dequantise recv_x), and when an expert
  // overflows the capacity (such a combine is refused).
  std::vector<Tensor> ys;
  std::vector<Tensor> combined;
  bool overflows = false;  // some expert receives more rows than the capacity
  // [R] each, or empty: the combine biases (CombineArgs::bias0 / bias1; undefined where not passed)
  // that `combined` was computed with, and that the combines of a round trip pass.
  std::vector<Tensor> bias0, bias1;
  // Whether `combined` is the LogFMT-10 combine (CombineArgs::use_logfmt), which the round trips pass.
  bool use_logfmt = false;
};

Expected expected_from(std::vector<workload::RankData> data, int num_experts, const Topology& topology,
                       int64_t max_tokens, const reference::LowLatencyOptions& fp8, int64_t capacity = 0);
// For inputs of `c` that a test drew (or changed) itself.
Expected expected_from(const Case& c, std::vector<workload::RankData> data);
// Inputs drawn from `seed`.
Expected expected_for(const Case& c, uint64_t seed);
// `expected` with combine biases (workload::combine_bias from `seed`: bias0 with `first`, bias1 with
// `second`), its `combined` recomputed with them. Not for use_ue8m0 or overflowing cases.
Expected with_biases(const Case& c, Expected expected, uint64_t seed, bool first, bool second);
// `expected` with its combine in LogFMT-10 (use_logfmt), `combined` recomputed so (biases kept).
Expected with_logfmt(const Case& c, Expected expected);
// `expected` with every other expert output row scaled by 2^-6, so that its rows' 128-channel blocks
// include both blocks LogFMT casts (all |y| < 1) and blocks it leaves in bf16 (before with_logfmt).
Expected with_rows_in_both_formats(Expected expected);
// How many of the ys' 128-channel blocks LogFMT casts, and how many it does not.
std::pair<int64_t, int64_t> cast_and_plain_blocks(const Expected& expected);

// ---- calls ----------------------------------------------------------------------------------------

LowLatencyDispatchArgs dispatch_args(const Case& c, const TensorView& x, const TensorView& topk_idx,
                                     Stream stream = nullptr);
LowLatencyDispatchArgs dispatch_args(const Case& c, const workload::RankData& data);
LowLatencyCombineArgs combine_args(const TensorView& topk_idx, const TensorView& topk_weights,
                                   const LowLatencyHandle& handle, const TensorView& y,
                                   Stream stream = nullptr);
LowLatencyCombineArgs combine_args(const workload::RankData& data, const LowLatencyHandle& handle,
                                   const TensorView& y);
// Sets args.bias0 / bias1 to `expected`'s biases of `rank` (none when it has none), and
// args.use_logfmt to expected.use_logfmt.
void attach_biases(const Expected& expected, int rank, LowLatencyCombineArgs& args);

// The call of `engine` (low_latency or symmetric).
LowLatencyDispatchResult dispatch_with(Engine engine, Buffer& buffer, const LowLatencyDispatchArgs& args);
LowLatencyCombineResult combine_with(Engine engine, Buffer& buffer, const LowLatencyCombineArgs& args);

// A round trip's preallocated outputs, poisoned; undefined ones leave the allocation to the library.
struct PoisonedOutputs {
  Tensor recv_x, recv_x_scales, recv_count, layout_range, src_info;
  Tensor combined_x;  // bf16 [N, H]

  void attach(LowLatencyDispatchArgs& args) const;
  void attach(LowLatencyCombineArgs& args) const;
  // The dispatch's defined outputs, for checking that a refused call wrote nothing.
  std::vector<Tensor> dispatch_outputs() const;
};

// Makes a poisoned tensor: on the host (`poisoned`), or on a device.
using MakePoisoned = std::function<Tensor(DType, std::initializer_list<int64_t>)>;
// The outputs of a round trip of `c` on a rank with `num_tokens` tokens.
PoisonedOutputs poisoned_outputs(const Case& c, int64_t num_tokens, const MakePoisoned& make = poisoned);

// Poisoned outputs whose per-expert tensors (recv_x, recv_x_scales, src_info: [L, C, ...]) are views at
// the start of larger tensors with kGuardRows more rows, so that a write past expert L - 1's C rows
// (an overflow written out of bounds) shows in the guard rows; a write past another expert's C rows
// shows in the next expert's rows.
struct GuardedOutputs {
  static constexpr int64_t kGuardRows = 16;
  PoisonedOutputs out;          // the views (and the other outputs, whole)
  std::vector<Tensor> backing;  // the larger tensors, [L * C + kGuardRows, ...]
  // Per backing tensor, its guard rows (after the view).
  std::vector<TensorView> guards() const;
};
GuardedOutputs guarded_outputs(const Case& c, int64_t num_tokens, const MakePoisoned& make = poisoned);

// ---- comparison -------------------------------------------------------------------------------------

// Mismatches found on rank threads, collected under a lock; the test's own thread reports them
// (expect_none in support/expert_major_gtest.hpp).
class Failures {
 public:
  void add(int rank, const std::string& what);
  std::vector<std::string> lines() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

// One rank's outputs, on the host.
struct Outputs {
  Tensor recv_x, recv_x_scales, recv_count, layout_range, src_info, combined_x;
};

// A dispatch's outputs as views: of anything that has them by these names (the reference's, an
// engine's result, Outputs, or the PoisonedOutputs that a captured call writes). Implicit, so that a
// check takes any of them.
struct DispatchView {
  TensorView recv_x, recv_x_scales, recv_count, layout_range, src_info;

  template <typename AnyOutputs>
  DispatchView(const AnyOutputs& out)
      : recv_x(out.recv_x),
        recv_x_scales(out.recv_x_scales),
        recv_count(out.recv_count),
        layout_range(out.layout_range),
        src_info(out.src_info) {}
};

void compare(const TensorView& actual, const TensorView& expected, const std::string& what, int rank,
             Failures& failures, int64_t rows = -1);

// `got` against `want`, named "... vs <against>". recv_x and its scales are compared on the received
// rows only (recv_count of `want`); the rest is unspecified. The rest whole.
void check_dispatch(const DispatchView& got, const DispatchView& want, const std::string& against, int rank,
                    Failures& failures);
// The dispatch, and combined_x where `want` has one.
void check_outputs(const Outputs& got, const Outputs& want, const std::string& against, int rank,
                   Failures& failures);
// The reference's outputs of `rank` (combined_x undefined with use_ue8m0).
Outputs reference_outputs(const Expected& expected, int rank);

// The CPU backend's `engine` on every rank's inputs of `expected`, combining the reference's
// expert outputs with expected's biases and use_logfmt: its outputs per rank (combined_x undefined
// with use_ue8m0). With `receive_hook` the combine's receive half runs through its hook.
std::vector<Outputs> run_cpu_engine(Engine engine, const Case& c, const Expected& expected,
                                    bool receive_hook = false);

// ---- bad input and timeouts -------------------------------------------------------------------------

// One CPU rank of a small case (4 tokens, k = 2, 4 experts, max 4) with poisoned, preallocated
// outputs, for the bad-input tests.
struct SingleRank {
  Case c = make("single", 1, {4}, 4, 2, 4);
  std::unique_ptr<Buffer> buffer;
  workload::RankData data;
  PoisonedOutputs out;

  explicit SingleRank(Regions regions);
  // Draws `data` (again: a test that spoiled it gets the good inputs back).
  void draw_inputs();
  // dispatch_args of `data`, with the poisoned outputs.
  LowLatencyDispatchArgs args() const;
  bool untouched() const;
};

// The message of the Exception that `call` throws, or what happened instead.
template <typename Exception, typename Call>
std::string refused(Call&& call) {
  try {
    call();
  } catch (const Exception& error) {
    return error.what();
  } catch (const std::exception& error) {
    return std::string("not the expected exception: ") + error.what();
  }
  return "no exception";
}

// What a call that should time out did.
struct Caught {
  bool timed_out = false;
  std::string message;  // TimeoutError's message, or what happened instead
  double seconds = 0;   // how long the call took
};
Caught catch_timeout(const std::function<void()>& call);

// Whether `call` is refused with an Error other than TimeoutError: a buffer is unusable after a
// timeout.
bool refused_after_timeout(const std::function<void()>& call);

// Holds the silent rank of a timeout test back (a minute at most) until the calling rank returns,
// so that its buffer stays alive meanwhile; the calling rank opens it on scope exit, also on a throw.
class PeerGate {
 public:
  void wait() const { released_.wait_for(std::chrono::seconds(60)); }
  class Opener {
   public:
    explicit Opener(PeerGate& gate) : gate_(gate) {}
    Opener(const Opener&) = delete;
    Opener& operator=(const Opener&) = delete;
    ~Opener() { gate_.promise_.set_value(); }

   private:
    PeerGate& gate_;
  };
  Opener open_on_exit() { return Opener(*this); }

 private:
  std::promise<void> promise_;
  std::shared_future<void> released_ = promise_.get_future().share();
};

}  // namespace switchyard::testing::expert_major
