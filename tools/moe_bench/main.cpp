// switchyard-moe-bench: the MoE layer (switchyard/moe.hpp) on the GPU, R ranks as threads or as
// processes, timed per phase against two bounds measured in the same run (see --help).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/numeric.hpp"
#include "cuda/moe/experts.hpp"
#include "cuda/moe/grouped_gemm.hpp"
#include "json_ranks.hpp"
#include "moe_rank.hpp"
#include "moe_shape.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/reference.hpp"
#include "synthetic_weights.hpp"

namespace switchyard::moe_bench {
namespace {

constexpr const char* kDescription =
    "switchyard-moe-bench: the routed MoE layer (symmetric dispatch, CUTLASS grouped GEMM 1, SwiGLU, "
    "grouped\n"
    "GEMM 2, symmetric combine) on CUDA, R ranks sharing the visible GPUs (rank r on GPU r mod count), with\n"
    "synthetic weights made on the GPU. Reported, each the median over --iters of the slowest rank:\n"
    "  layer      one MoeLayer::forward, and its phases (events inside the call)\n"
    "  TFLOPS     2 (2I H + H I) per (token, expert) row, over the layer's time, per GPU\n"
    "  weights    the HBM bound: every touched expert's weights read once, at the read bandwidth\n"
    "             measured in this run; the fraction is bound / layer time\n"
    "  gemm peak  the same grouped GEMMs at full capacity, alone: the plain CUTLASS GEMM's TFLOPS;\n"
    "             the compute bound is the layer's FLOPs at that rate\n"
    "  alone      the layer's two grouped GEMMs on this call's rows, alone (every rank at once), on\n"
    "             synthetic activations (as the layer's rows, never zeros); 'on zeros' is the same on\n"
    "             zeroed operands, which run cooler and faster (shown, not used as the baseline)\n"
    "  tiles      (--gemm-tiles) the fp8 GEMMs alone in every CUTLASS tile, each checked bitwise against\n"
    "             m128's outputs (the layer's tiles: SWITCHYARD_MOE_GEMM_TILES=<gemm 1>,<gemm 2>)\n"
    "  timeline   (--timeline, ranks as threads) each rank's phase marks in the timed call whose last\n"
    "             rank finished at the median, in us from rank 0's start of that call: where the ranks'\n"
    "             phases sit against each other on one GPU (ranks on other GPUs are left out)\n"
    "check: --check-tokens tokens per rank against reference::moe_layer, within docs/MOE.md's tolerance.\n"
    "The last line is the verdict; exit 0 when the check passed, 1 when it failed, 2 on a usage error.";

// --timeline: the timed call whose last rank finished at the median over the calls, each rank's marks of it
// (start, the four phase marks, end) in us from rank 0's start.
void print_timeline(const std::vector<nlohmann::json>& ranks) {
  std::vector<std::pair<double, size_t>> finishes;  // (last rank's end, call)
  for (const nlohmann::json& rank : ranks) {
    if (!rank.contains("timeline_us")) continue;
    const nlohmann::json& calls = rank["timeline_us"];
    finishes.resize(std::max(finishes.size(), calls.size()), {0.0, 0});
    for (size_t call = 0; call < calls.size(); ++call) {
      finishes[call].first = std::max(finishes[call].first, calls[call][5].get<double>());
      finishes[call].second = call;
    }
  }
  if (finishes.empty()) return;
  std::sort(finishes.begin(), finishes.end());
  const size_t call = finishes[finishes.size() / 2].second;
  const double origin = ranks.front()["timeline_us"][call][0].get<double>();  // rank 0's start
  std::printf("timeline   call %zu of the timed calls, us from rank 0's start:\n", call);
  std::printf("  rank      start   dispatch     gemm 1     swiglu     gemm 2        end\n");
  for (const nlohmann::json& rank : ranks) {
    if (!rank.contains("timeline_us")) continue;
    std::printf("  %4d", rank["rank"].get<int>());
    for (const nlohmann::json& mark : rank["timeline_us"][call])
      std::printf(" %10.1f", mark.get<double>() - origin);
    std::printf("\n");
  }
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Per iteration, the slowest rank's value of `key` (or of the sum of two keys); then the median.
double slowest_median(const std::vector<nlohmann::json>& ranks, const std::vector<std::string>& keys) {
  const size_t iterations = ranks.front()[keys.front()].size();
  std::vector<double> per_iteration(iterations, 0.0);
  for (const nlohmann::json& rank : ranks) {
    for (size_t i = 0; i < iterations; ++i) {
      double value = 0.0;
      for (const std::string& key : keys) value += rank[key][i].get<double>();
      per_iteration[i] = std::max(per_iteration[i], value);
    }
  }
  return median(per_iteration);
}

struct Check {
  bool passed = true;
  double worst = 0.0;  // largest |y - y_ref| / S
  std::string why;
};

// The reference on each rank's checked tokens, with host weights made again for the experts they use.
Check check_rows(const MoeBenchOptions& o, const std::vector<workload::RankData>& data,
                 const std::vector<nlohmann::json>& ranks) {
  const bool fp8 = o.weights == DType::fp8_e4m3;
  const int64_t local = o.local_experts(), hidden = o.hidden, inter = o.intermediate;
  const common::MoeWeightLayout layout = o.weight_layout();
  // Full-shape host weights, of which only the used experts are ever written (the pages of the rest
  // are never touched, so never allocated).
  std::vector<Tensor> storage;
  std::vector<MoeWeights> weights;
  for (int rank = 0; rank < o.ranks; ++rank) {
    Tensor w1 = Tensor::empty(o.weights, {local, 2 * inter, hidden});
    Tensor w2 = Tensor::empty(o.weights, {local, hidden, inter});
    Tensor s1, s2;
    if (fp8) {
      s1 = Tensor::empty(DType::f32, {local, 2 * inter / 128, hidden / 128});
      s2 = Tensor::empty(DType::f32, {local, hidden / 128, inter / 128});
    }
    weights.push_back({w1, s1, w2, s2, o.gate_up});
    storage.insert(storage.end(), {w1, w2, s1, s2});
  }
  std::vector<Tensor> inputs_storage;
  std::vector<reference::RankInputs> inputs;
  std::vector<std::vector<int64_t>> tokens_of(static_cast<size_t>(o.ranks));
  std::vector<bool> used(static_cast<size_t>(o.experts), false);
  for (int rank = 0; rank < o.ranks; ++rank) {
    const workload::RankData& mine = data[static_cast<size_t>(rank)];
    tokens_of[static_cast<size_t>(rank)] = checked_tokens(o, mine.x.size(0));
    const int64_t n = static_cast<int64_t>(tokens_of[static_cast<size_t>(rank)].size());
    Tensor x = Tensor::empty(DType::bf16, {n, hidden});
    Tensor idx = Tensor::empty(DType::i64, {n, o.topk});
    Tensor tw = Tensor::empty(DType::f32, {n, o.topk});
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = tokens_of[static_cast<size_t>(rank)][static_cast<size_t>(i)];
      std::copy_n(mine.x.as<const uint16_t>() + t * hidden, hidden, x.as<uint16_t>() + i * hidden);
      std::copy_n(mine.topk_idx.as<const int64_t>() + t * o.topk, o.topk, idx.as<int64_t>() + i * o.topk);
      std::copy_n(mine.topk_weights.as<const float>() + t * o.topk, o.topk, tw.as<float>() + i * o.topk);
      for (int j = 0; j < o.topk; ++j) {
        const int64_t expert = idx.as<int64_t>()[i * o.topk + j];
        if (expert >= 0) used[static_cast<size_t>(expert)] = true;
      }
    }
    inputs_storage.insert(inputs_storage.end(), {x, idx, tw});
    reference::RankInputs in;
    in.x = x;
    in.topk_idx = idx;
    in.topk_weights = tw;
    inputs.push_back(in);
  }
  // The used experts' weights, made again on the host on every core (each is tens of millions of
  // elements at DeepSeek-V3's shape).
  std::vector<int> experts;
  for (int e = 0; e < o.experts; ++e) {
    if (used[static_cast<size_t>(e)]) experts.push_back(e);
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (size_t w = 0; w < std::min<size_t>(cores, experts.size()); ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < experts.size(); i = next++) {
        const int expert = experts[i];
        fill_expert_on_host(weights[static_cast<size_t>(expert / local)], layout,
                            static_cast<int>(expert % local), fp8, o.seed, static_cast<int>(expert / local));
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  std::vector<Tensor> scales;
  const std::vector<Tensor> expected =
      reference::moe_layer(inputs, weights, o.experts, Topology::single_node(o.ranks), 0.0f, &scales);
  Check check;
  const double tau = reference::moe_tolerance(o.weights);
  for (int rank = 0; rank < o.ranks; ++rank) {
    const std::vector<uint16_t> got =
        ranks[static_cast<size_t>(rank)]["checked_rows"].get<std::vector<uint16_t>>();
    const Tensor& want = expected[static_cast<size_t>(rank)];
    const Tensor& s = scales[static_cast<size_t>(rank)];
    if (static_cast<int64_t>(got.size()) != want.numel()) {
      check.passed = false;
      check.why = "rank " + std::to_string(rank) + " returned " + std::to_string(got.size()) +
                  " values, expected " + std::to_string(want.numel());
      continue;
    }
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double diff = std::fabs(static_cast<double>(common::bf16_to_float(got[static_cast<size_t>(i)])) -
                                    common::bf16_to_float(want.as<const uint16_t>()[i]));
      const double bound = s.as<const float>()[i];
      if (diff > 0.0) check.worst = std::max(check.worst, bound > 0.0 ? diff / bound : INFINITY);
      if (!(diff <= tau * bound) && check.passed) {
        check.passed = false;
        check.why = "rank " + std::to_string(rank) + ", checked token " + std::to_string(i / hidden) +
                    " (token " +
                    std::to_string(tokens_of[static_cast<size_t>(rank)][static_cast<size_t>(i / hidden)]) +
                    "), channel " + std::to_string(i % hidden) + ": |dy| " + std::to_string(diff) + " > " +
                    std::to_string(tau * bound);
      }
    }
  }
  return check;
}

// Each rank's answer for the JSON file, without the checked rows (H values per checked token: the bulk
// of the answer, and already judged by the check).
std::vector<nlohmann::json> per_rank_timings(std::vector<nlohmann::json> ranks) {
  for (nlohmann::json& rank : ranks) rank.erase("checked_rows");
  return ranks;
}

int run(const MoeBenchOptions& o) {
  if (o.experts % o.ranks != 0) throw InvalidArgument("--experts: expected a multiple of --ranks");
  if (o.weights == DType::fp8_e4m3 && (o.hidden % 128 != 0 || o.intermediate % 128 != 0)) {
    throw InvalidArgument("--hidden, --intermediate: expected multiples of 128 with fp8 weights");
  }
  if (o.gate_up == MoeGateUp::interleaved && o.intermediate % 128 != 0) {
    throw InvalidArgument("--gate-up interleaved: expected --intermediate a multiple of 128, got " +
                          std::to_string(o.intermediate));
  }
  if (o.gemm_tiles && o.gate_up == MoeGateUp::interleaved && o.weights == DType::fp8_e4m3) {
    throw InvalidArgument(
        "--gemm-tiles: expected --gate-up halves (with fp8 weights the interleaved W1's GEMM 1 is the "
        "SwiGLU epilogue's, in the m128 tile only), got --gate-up interleaved");
  }
  if (o.timeline && o.ranks_as != RanksAs::threads) {
    throw InvalidArgument(
        "--timeline: expected --ranks-as threads (the marks are events of one process), got --ranks-as "
        "processes");
  }
  std::printf(
      "moe-bench: %d ranks as %s, %lld tokens/rank, H %d, I %d, %d experts, top-%d, %s weights, W1 gate/up "
      "%s%s%s\n",
      o.ranks, o.ranks_as == RanksAs::threads ? "threads" : "processes", static_cast<long long>(o.tokens),
      o.hidden, o.intermediate, o.experts, o.topk, o.weights == DType::fp8_e4m3 ? "fp8" : "bf16",
      o.gate_up == MoeGateUp::halves ? "halves"
      : o.weights == DType::fp8_e4m3 ? "interleaved, GEMM 1 with the SwiGLU epilogue"
                                     : "interleaved",
      o.heap_tensors ? ", x and expert outputs in the heap (pull combine)" : "",
      o.expert_output == MoeExpertOutput::home ? ", expert outputs written home by GEMM 2's epilogue" : "");
  std::fflush(stdout);
  // Drawn once, before any fork or CUDA call: forked ranks inherit it.
  const std::vector<workload::RankData> data = workload::generate(o.shape(), o.seed);
  const std::vector<int64_t> rows = rows_per_expert(data, o.experts);
  const int64_t most = *std::max_element(rows.begin(), rows.end());
  const int64_t capacity = o.capacity > 0 ? o.capacity : std::max<int64_t>(1, most);

  const std::vector<nlohmann::json> ranks =
      bench::run_json_ranks(o.ranks, o.ranks_as == RanksAs::processes, o.timeout_seconds + 600.0,
                            [&](Group& group) { return run_moe_rank(o, data, capacity, group); });

  // Work and bytes, per GPU.
  std::map<int, double> touched_bytes, flops_on;
  const double per_row = flops_per_row(o.hidden, o.intermediate);
  const double expert_bytes = weight_bytes_per_expert(o.hidden, o.intermediate, o.weights == DType::fp8_e4m3);
  int64_t total_rows = 0;
  for (int e = 0; e < o.experts; ++e) {
    const int device = ranks[static_cast<size_t>(e / o.local_experts())]["device"].get<int>();
    const int64_t r = std::min(rows[static_cast<size_t>(e)], capacity);
    total_rows += r;
    flops_on[device] += per_row * static_cast<double>(r);
    if (r > 0) touched_bytes[device] += expert_bytes;
  }
  const int gpus = static_cast<int>(flops_on.size());
  double busiest_bytes = 0.0, busiest_flops = 0.0;
  for (const auto& [device, bytes] : touched_bytes) busiest_bytes = std::max(busiest_bytes, bytes);
  for (const auto& [device, flops] : flops_on) busiest_flops = std::max(busiest_flops, flops);

  const double layer = slowest_median(ranks, {"layer_us"});
  const double dispatch = slowest_median(ranks, {"dispatch_us"}), gemm1 = slowest_median(ranks, {"gemm1_us"}),
               swiglu = slowest_median(ranks, {"swiglu_us"}), gemm2 = slowest_median(ranks, {"gemm2_us"}),
               combine = slowest_median(ranks, {"combine_us"});
  const double gemms_in_layer = slowest_median(ranks, {"gemm1_us", "gemm2_us"});
  const double gemms_alone = slowest_median(ranks, {"alone_gemm1_us", "alone_gemm2_us"});
  const double gemms_full = slowest_median(ranks, {"full_gemm1_us", "full_gemm2_us"});
  const double gemms_on_zeros = slowest_median(ranks, {"alone_zeros_gemm1_us", "alone_zeros_gemm2_us"});
  const double full_flops_per_gpu =
      per_row * static_cast<double>(capacity) * o.experts / std::max(1, gpus);  // every expert at capacity
  const double peak_tflops = full_flops_per_gpu / (gemms_full * 1e-6) / 1e12;
  const double hbm_gbps = ranks.front()["hbm_read_gbps"].get<double>();
  const double weight_bound = busiest_bytes / (hbm_gbps * 1e9) * 1e6;
  const double compute_bound = busiest_flops / (peak_tflops * 1e12) * 1e6;
  const double tflops = busiest_flops / (layer * 1e-6) / 1e12;

  std::fprintf(stderr, "moe-bench: checking %d tokens per rank against the reference\n", o.check_tokens);
  const Check check = check_rows(o, data, ranks);
  std::printf(
      "rows %lld (capacity %lld per expert), %.2f TFLOP per GPU, %.2f GB of weights touched per GPU\n",
      static_cast<long long>(total_rows), static_cast<long long>(capacity), busiest_flops / 1e12,
      busiest_bytes / 1e9);
  std::printf("layer      %10.1f us   %7.1f TFLOPS per GPU\n", layer, tflops);
  std::printf(
      "  dispatch %10.1f us\n  gemm 1   %10.1f us\n  swiglu   %10.1f us\n  gemm 2   %10.1f us\n"
      "  combine  %10.1f us\n",
      dispatch, gemm1, swiglu, gemm2, combine);
  if (o.ranks > gpus) {
    // Each phase is a pair of events on the rank's own stream: with ranks sharing a GPU, a rank's phase
    // also spans the other ranks' kernels running beside it, so the phases sum to more than the layer.
    std::printf(
        "  (phases: %d ranks share each GPU, so each phase spans the others' work too; --ranks 1 with "
        "--tokens %lld gives the same rows' phase split)\n",
        o.ranks / std::max(1, gpus), static_cast<long long>(o.tokens) * o.ranks / std::max(1, gpus));
  }
  std::printf("weights    %10.1f us   bound (HBM read %.0f GB/s measured): layer = %.2fx the bound\n",
              weight_bound, hbm_gbps, layer / weight_bound);
  std::printf(
      "gemm peak  %10.1f TFLOPS (the grouped GEMMs at full capacity, alone); compute bound %.1f us: layer = "
      "%.2fx\n",
      peak_tflops, compute_bound, layer / compute_bound);
  std::printf(
      "alone      %10.1f us   the layer's GEMMs alone; inside the layer %.1f us (%.0f%% of alone's speed); "
      "layer = %.2fx the GEMMs alone\n",
      gemms_alone, gemms_in_layer, 100.0 * gemms_alone / gemms_in_layer, layer / gemms_alone);
  std::printf(
      "  on zeros %10.1f us   the same GEMMs on zeroed operands (%.0f%% of the time on synthetic rows)\n",
      gemms_on_zeros, 100.0 * gemms_on_zeros / gemms_alone);
  if (o.timeline) print_timeline(ranks);
  nlohmann::json tiles_report;
  bool tiles_bitwise = true;
  if (o.gemm_tiles && ranks.front().contains("tile_digests")) {
    std::printf(
        "tiles      the fp8 GEMMs alone on this call's rows, by CUTLASS tile, interleaved in every round "
        "(slowest rank's median):\n");
    const std::string base = cuda::grouped_gemm_tile_name(cuda::GroupedGemmTile::m128);
    for (cuda::GroupedGemmTile tile : cuda::kGroupedGemmTiles) {
      const std::string name = cuda::grouped_gemm_tile_name(tile);
      const double first = slowest_median(ranks, {"tile_" + name + "_gemm1_us"});
      const double second = slowest_median(ranks, {"tile_" + name + "_gemm2_us"});
      int differing_ranks = 0;
      for (const nlohmann::json& rank : ranks) {
        differing_ranks += rank["tile_digests"][name] != rank["tile_digests"][base];
      }
      tiles_bitwise = tiles_bitwise && differing_ranks == 0;
      std::printf("  %-15s gemm 1 %9.1f us  gemm 2 %9.1f us  both %9.1f us  %s\n", name.c_str(), first,
                  second, first + second,
                  differing_ranks == 0
                      ? "bitwise = m128"
                      : ("DIFFERS from m128 on " + std::to_string(differing_ranks) + " ranks").c_str());
      tiles_report[name] = {
          {"gemm1_us", first}, {"gemm2_us", second}, {"bitwise_m128", differing_ranks == 0}};
    }
  }
  std::printf(
      "check      %s: %d tokens/rank within the tolerance of the reference, largest |dy| / S %.3g (tau "
      "%.3g)%s%s\n",
      check.passed ? "pass" : "FAIL", o.check_tokens, check.worst, reference::moe_tolerance(o.weights),
      check.passed ? "" : ": ", check.why.c_str());

  if (!o.json.empty()) {
    nlohmann::json report = {{"ranks", o.ranks},
                             {"ranks_as", o.ranks_as == RanksAs::threads ? "threads" : "processes"},
                             {"tokens", o.tokens},
                             {"hidden", o.hidden},
                             {"intermediate", o.intermediate},
                             {"experts", o.experts},
                             {"topk", o.topk},
                             {"weights", o.weights == DType::fp8_e4m3 ? "fp8" : "bf16"},
                             {"capacity", capacity},
                             {"heap_tensors", o.heap_tensors},
                             {"expert_output", o.expert_output == MoeExpertOutput::home ? "home" : "local"},
                             {"rows", total_rows},
                             {"gpus", gpus},
                             {"layer_us", layer},
                             {"phases_us",
                              {{"dispatch", dispatch},
                               {"gemm1", gemm1},
                               {"swiglu", swiglu},
                               {"gemm2", gemm2},
                               {"combine", combine}}},
                             {"tflops_per_gpu", tflops},
                             {"hbm_read_gbps", hbm_gbps},
                             {"weight_bound_us", weight_bound},
                             {"layer_over_weight_bound", layer / weight_bound},
                             {"gemm_peak_tflops", peak_tflops},
                             {"compute_bound_us", compute_bound},
                             {"gemms_alone_us", gemms_alone},
                             {"gemms_alone_on_zeros_us", gemms_on_zeros},
                             {"gemms_in_layer_us", gemms_in_layer},
                             {"gemms_in_layer_speed_of_alone", gemms_alone / gemms_in_layer},
                             {"layer_over_gemms_alone", layer / gemms_alone},
                             {"gemm_tiles", tiles_report},
                             {"check", check.passed ? "pass" : "fail"},
                             {"check_worst_over_s", check.worst},
                             {"per_rank", per_rank_timings(ranks)}};
    std::ofstream(o.json) << report.dump(1) << "\n";
  }
  if (!tiles_bitwise) std::printf("tiles      FAIL: a CUTLASS tile's outputs differ from m128's\n");
  const bool passed = check.passed && tiles_bitwise;
  std::printf("verdict: %s\n", passed         ? "pass"
                               : check.passed ? "FAIL: the GEMM tiles differ"
                                              : ("FAIL: " + check.why).c_str());
  return passed ? 0 : 1;
}

}  // namespace
}  // namespace switchyard::moe_bench

int main(int argc, char** argv) {
  using namespace switchyard::moe_bench;
  MoeBenchOptions o;
  CLI::App app(kDescription, "switchyard-moe-bench");
  std::string ranks_as = "threads", weights = "fp8";
  app.add_option("--ranks", o.ranks, "ranks (default 8)")->check(CLI::Range(1, 1024));
  app.add_option("--ranks-as", ranks_as, "threads|processes (default threads)")
      ->check(CLI::IsMember({"threads", "processes"}));
  app.add_option("--tokens", o.tokens, "tokens per rank (default 128)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--hidden", o.hidden, "H (default 7168)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--intermediate", o.intermediate, "I, each expert's intermediate size (default 2048)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--experts", o.experts, "experts in all, a multiple of --ranks (default 256)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--topk", o.topk, "experts per token (default 8)")->check(CLI::Range(1, 64));
  app.add_option("--weights", weights, "fp8 (e4m3, 128 x 128 block scales) | bf16 (default fp8)")
      ->check(CLI::IsMember({"fp8", "bf16"}));
  app.add_option("--capacity", o.capacity, "rows per local expert (default: the most any expert receives)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--warmup", o.warmup,
                 "untimed calls first (default 3; torch_grouped_gemm.py takes 3 and 10 too)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--iters", o.iters, "timed calls (default 10)")->check(CLI::Range(1, 100000));
  app.add_option("--check-tokens", o.check_tokens,
                 "tokens per rank checked against the reference (default 1)")
      ->check(CLI::Range(0, 64));
  app.add_option("--seed", o.seed, "inputs and weights (default 1)");
  app.add_option("--timeout", o.timeout_seconds, "the buffer's wait bound in seconds (default 120)")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", o.json, "write the results as JSON");
  std::string heap = "off";
  app.add_option(
         "--heap", heap,
         "on: x in Buffer::symmetric_input, the expert outputs and (fp8) the dispatch's outputs in the "
         "heap, with the pull combine and the fp8 push (also as processes) | off (default)")
      ->check(CLI::IsMember({"on", "off"}));
  std::string gate_up = "halves";
  app.add_option("--gate-up", gate_up,
                 "W1's layout: halves (the checkpoint's: gate rows, then up rows; the default) | interleaved "
                 "(64-row gate and up blocks alternating; with fp8 weights GEMM 1 applies SwiGLU and the "
                 "requantisation in its epilogue)")
      ->check(CLI::IsMember({"interleaved", "halves"}));
  std::string expert_output = "local";
  app.add_option(
         "--expert-output", expert_output,
         "where GEMM 2 writes each expert-output row (switchyard::MoeExpertOutput): local (the layer's "
         "workspace, the combine moves it home; the default) | home (straight into its home's combine "
         "buffer from GEMM 2's epilogue; fp8 weights on CUDA)")
      ->check(CLI::IsMember({"local", "home"}));
  app.add_flag("--timeline", o.timeline,
               "also print every rank's phase marks of one timed call on a common origin (ranks as threads)");
  app.add_flag(
      "--gemm-tiles", o.gemm_tiles,
      "also time the fp8 GEMMs alone in every CUTLASS tile on this call's rows, each checked bitwise "
      "against the m128 tile's outputs");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
  o.ranks_as = ranks_as == "threads" ? RanksAs::threads : RanksAs::processes;
  o.heap_tensors = heap == "on";
  o.gate_up = gate_up == "halves" ? switchyard::MoeGateUp::halves : switchyard::MoeGateUp::interleaved;
  o.expert_output =
      expert_output == "home" ? switchyard::MoeExpertOutput::home : switchyard::MoeExpertOutput::local;
  // Ranks as threads each need a hardware queue of the GPU's context
  // (src/cuda/backend/device_connections.hpp), set before the first CUDA call; not for processes (MPS clients
  // asking for 32 fail to start).
  if (o.ranks_as == RanksAs::threads) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  o.weights = weights == "fp8" ? switchyard::DType::fp8_e4m3 : switchyard::DType::bf16;
  try {
    return run(o);
  } catch (const switchyard::Unsupported& error) {
    std::printf("verdict: skipped: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::printf("verdict: FAIL: %s\n", error.what());
    return 1;
  }
}
