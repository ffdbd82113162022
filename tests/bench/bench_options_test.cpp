// switchyard-bench's host logic, testable without a GPU: where each rank runs (--devices), when the
// nccl baseline can run and why not, the rows that cross between devices, the roofline that divides
// them by the peer copy bandwidth, the design roofline's bytes per engine, and launch time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "copy_bandwidth.hpp"
#include "design_roofline.hpp"
#include "engines.hpp"
#include "metrics.hpp"
#include "minimal_bound.hpp"
#include "nccl_build.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "report.hpp"
#include "summary.hpp"
#include "support/test_seed.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::bench {
namespace {

// The UsageError's message, or "" when `action` does not throw one.
template <typename Action>
std::string usage_error_of(Action action) {
  try {
    action();
  } catch (const UsageError& error) {
    return error.what();
  }
  return "";
}

BenchOptions resolve_args(const std::vector<std::string>& args, bool cuda, int visible_devices) {
  return resolve(parse_command_line(args), cuda, visible_devices);
}

TEST(BenchDevices, AutoGivesEachRankItsOwnGpuWhenThereAreEnough) {
  DeviceMap map = map_ranks_to_devices(std::nullopt, 8, Backend::cuda, 8);
  EXPECT_EQ(map.device_of_rank, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(map.shares_a_device());
  EXPECT_NE(map.describe().find("one GPU per rank"), std::string::npos) << map.describe();
  EXPECT_NE(map.describe().find("rank->GPU 0->0 1->1 2->2"), std::string::npos) << map.describe();
  // More GPUs than ranks: the first R.
  EXPECT_EQ(map_ranks_to_devices(kAutoDevices, 2, Backend::cuda, 8).device_of_rank, (std::vector<int>{0, 1}));
}

TEST(BenchDevices, AutoPutsEveryRankOnGpu0WhenThereAreFewerGpusThanRanks) {
  DeviceMap one = map_ranks_to_devices(std::nullopt, 8, Backend::cuda, 1);
  EXPECT_EQ(one.device_of_rank, std::vector<int>(8, 0));
  EXPECT_TRUE(one.shares_a_device());
  EXPECT_EQ(one.distinct_devices(), std::vector<int>{0});
  EXPECT_NE(one.describe().find("every rank on GPU 0"), std::string::npos) << one.describe();
  // With several GPUs, fewer than the ranks, the output says how to spread them.
  DeviceMap two = map_ranks_to_devices(std::nullopt, 8, Backend::cuda, 2);
  EXPECT_EQ(two.device_of_rank, std::vector<int>(8, 0));
  EXPECT_NE(two.describe().find("--devices 2 spreads them"), std::string::npos) << two.describe();
}

TEST(BenchDevices, ExplicitCountSpreadsRanksRoundRobin) {
  DeviceMap map = map_ranks_to_devices(2, 8, Backend::cuda, 8);
  EXPECT_EQ(map.device_of_rank, (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_TRUE(map.shares_a_device());
  EXPECT_EQ(map.distinct_devices(), (std::vector<int>{0, 1}));
  EXPECT_TRUE(map.same_device(0, 6));
  EXPECT_FALSE(map.same_device(0, 3));
  EXPECT_EQ(map.request_text(), "2");
  EXPECT_NE(map.describe().find("rank r on GPU r % 2"), std::string::npos) << map.describe();
  EXPECT_EQ(map_ranks_to_devices(1, 4, Backend::cuda, 8).device_of_rank, std::vector<int>(4, 0));
}

TEST(BenchDevices, MappingsThatDoNotMatchTheMachineAreUsageErrors) {
  std::string more_than_visible = usage_error_of([] { map_ranks_to_devices(4, 8, Backend::cuda, 2); });
  EXPECT_NE(more_than_visible.find("--devices: expected at most the 2 CUDA devices"), std::string::npos)
      << more_than_visible;
  EXPECT_NE(more_than_visible.find("got 4"), std::string::npos) << more_than_visible;
  std::string more_than_ranks = usage_error_of([] { map_ranks_to_devices(8, 4, Backend::cuda, 8); });
  EXPECT_NE(more_than_ranks.find("--devices: expected at most --ranks 4"), std::string::npos)
      << more_than_ranks;
  std::string on_cpu = usage_error_of([] { map_ranks_to_devices(2, 4, Backend::cpu, 0); });
  EXPECT_NE(on_cpu.find("--devices: expected auto with --backend cpu"), std::string::npos) << on_cpu;
  EXPECT_TRUE(map_ranks_to_devices(kAutoDevices, 4, Backend::cpu, 0).empty());
}

TEST(BenchOptions, DevicesFlagParsesAutoAndPositiveCounts) {
  EXPECT_EQ(parse_command_line({"--devices", "auto"}).devices, kAutoDevices);
  EXPECT_EQ(parse_command_line({"--devices=3"}).devices, 3);
  EXPECT_FALSE(parse_command_line({}).devices.has_value());
  for (const char* bad : {"0", "-1", "two", ""}) {
    std::string message = usage_error_of([&] { parse_command_line({"--devices", bad}); });
    EXPECT_EQ(message.rfind("--devices: expected auto or a positive number of GPUs", 0), 0u)
        << bad << ": " << message;
  }
}

TEST(BenchOptions, ResolveMapsRanksToTheVisibleDevices) {
  BenchOptions spread = resolve_args({"--backend", "cuda", "--ranks", "4", "--experts", "16"}, true, 4);
  EXPECT_EQ(spread.devices.device_of_rank, (std::vector<int>{0, 1, 2, 3}));
  BenchOptions shared = resolve_args({"--backend", "cuda", "--ranks", "4", "--experts", "16"}, true, 1);
  EXPECT_EQ(shared.devices.device_of_rank, std::vector<int>(4, 0));
  std::string message = usage_error_of([] {
    resolve_args({"--backend", "cuda", "--ranks", "8", "--devices", "8"}, true, 2);
  });
  EXPECT_NE(message.find("--devices"), std::string::npos) << message;
  EXPECT_TRUE(resolve_args({"--backend", "cpu"}, false, 0).devices.empty());
}

TEST(BenchOptions, EngineAllEndsWithTheNcclBaselineAndNcclCanBeNamed) {
  BenchOptions all = resolve_args({"--backend", "cpu"}, false, 0);
  EXPECT_EQ(all.engines, (std::vector<BenchEngine>{BenchEngine::normal, BenchEngine::low_latency,
                                                   BenchEngine::symmetric, BenchEngine::nccl}));
  EXPECT_TRUE(all.runs_rank_major());
  BenchOptions nccl = resolve_args({"--backend", "cpu", "--engine", "nccl"}, false, 0);
  EXPECT_EQ(nccl.engines, std::vector<BenchEngine>{BenchEngine::nccl});
  EXPECT_FALSE(nccl.engine_was_all);
  // nccl runs on normal's inputs and reference; the expert-major ones are not needed.
  EXPECT_TRUE(nccl.runs_rank_major());
  EXPECT_FALSE(nccl.runs_expert_major());
  EXPECT_STREQ(bench_engine_name(BenchEngine::nccl), "nccl");
  EXPECT_TRUE(is_rank_major(BenchEngine::nccl));
  EXPECT_FALSE(uses_switchyard_buffer(BenchEngine::nccl));
  EXPECT_TRUE(uses_switchyard_buffer(BenchEngine::normal));
}

// The target line: normal and symmetric at 4096 tokens, low_latency at its decode size.
TEST(BenchOptions, SymmetricTokensAndExpertCapacityRunTheSymmetricEngineAtThePrefillShape) {
  BenchOptions target = resolve_args({"--backend", "cuda", "--engine", "all", "--tokens", "4096",
                                      "--symmetric-tokens", "4096", "--expert-capacity", "auto"},
                                     true, 1);
  EXPECT_EQ(target.tokens_per_rank, 4096);
  EXPECT_EQ(target.ll_tokens_per_rank, kDeepSeekV3Shape.ll_tokens);
  EXPECT_EQ(target.symmetric_tokens_per_rank, 4096);
  EXPECT_EQ(target.expert_capacity, kAutoExpertCapacity);
  EXPECT_EQ(target.notes.symmetric_tokens_source, "--symmetric-tokens");
  // Defaults: symmetric follows low_latency, with no capacity (R x max rows per expert).
  BenchOptions defaults = resolve_args({"--backend", "cuda", "--tokens", "4096"}, true, 1);
  EXPECT_EQ(defaults.symmetric_tokens_per_rank, defaults.ll_tokens_per_rank);
  EXPECT_EQ(defaults.expert_capacity, 0);
  BenchOptions alone =
      resolve_args({"--backend", "cpu", "--engine", "symmetric", "--tokens", "32"}, false, 0);
  EXPECT_EQ(alone.symmetric_tokens_per_rank, 32);
  EXPECT_EQ(resolve_args({"--backend", "cpu", "--ranks", "2", "--engine", "symmetric", "--tokens", "8",
                          "--expert-capacity=16"},
                         false, 0)
                .expert_capacity,
            16);
}

TEST(BenchOptions, SymmetricDispatchSourceReachesTheConfigAndBadValuesAreRefusedByName) {
  EXPECT_EQ(resolve_args({"--backend", "cpu", "--engine", "symmetric"}, false, 0).config.symmetric_dispatch,
            SymmetricDispatch::automatic);
  EXPECT_EQ(
      resolve_args({"--backend", "cpu", "--engine", "symmetric", "--symmetric-dispatch", "publish"}, false, 0)
          .config.symmetric_dispatch,
      SymmetricDispatch::publish);
  EXPECT_EQ(
      resolve_args({"--backend", "cpu", "--engine", "symmetric", "--symmetric-dispatch=zero_copy"}, false, 0)
          .config.symmetric_dispatch,
      SymmetricDispatch::zero_copy);
  const std::string message = usage_error_of([] { parse_command_line({"--symmetric-dispatch", "push"}); });
  EXPECT_EQ(message.rfind("--symmetric-dispatch:", 0), 0u) << message;
}

TEST(BenchOptions, ExpertCapacityAndSymmetricTokensAreRefusedByName) {
  auto refused = [](const std::vector<std::string>& args) {
    return usage_error_of([&] { resolve_args(args, false, 0); });
  };
  std::string message = refused({"--backend", "cpu", "--engine", "normal", "--expert-capacity", "auto"});
  EXPECT_EQ(message.rfind("--expert-capacity:", 0), 0u) << message;
  message = refused({"--backend", "cpu", "--engine", "low_latency", "--symmetric-tokens", "64"});
  EXPECT_EQ(message.rfind("--symmetric-tokens:", 0), 0u) << message;
  // More than R x tokens rows per expert.
  message = refused({"--backend", "cpu", "--ranks", "2", "--engine", "symmetric", "--tokens", "8",
                     "--expert-capacity", "17"});
  EXPECT_EQ(message.rfind("--expert-capacity:", 0), 0u) << message;
  EXPECT_NE(message.find("16"), std::string::npos) << message;
  message = usage_error_of([] { parse_command_line({"--expert-capacity", "many"}); });
  EXPECT_EQ(message.rfind("--expert-capacity:", 0), 0u) << message;
  message = usage_error_of([] { parse_command_line({"--symmetric-tokens", "-3"}); });
  EXPECT_EQ(message.rfind("--symmetric-tokens:", 0), 0u) << message;
}

// --start auto: the GPU's clock only where every rank's stream reads the same one.
TEST(BenchOptions, StartAutoHoldsForTheGpuClockOnlyWhereEveryRankIsOnOneGpu) {
  const BenchOptions on_cpu = resolve_args({"--backend", "cpu"}, false, 0);
  EXPECT_EQ(on_cpu.start, StartMode::barrier);
  EXPECT_NE(on_cpu.notes.start_source.find("cpu"), std::string::npos) << on_cpu.notes.start_source;
  const std::vector<std::string> four_ranks = {"--backend", "cuda", "--ranks", "4", "--experts", "16"};
  const BenchOptions one_gpu = resolve_args(four_ranks, true, 1);
  EXPECT_EQ(one_gpu.start, StartMode::timer);
  EXPECT_EQ(one_gpu.start_ahead_us, kDefaultStartAheadMicroseconds);
  const BenchOptions gpu_each = resolve_args(four_ranks, true, 4);
  EXPECT_EQ(gpu_each.start, StartMode::barrier);
  EXPECT_NE(gpu_each.notes.start_source.find("4 GPUs"), std::string::npos) << gpu_each.notes.start_source;
  std::vector<std::string> args = four_ranks;
  args.insert(args.end(), {"--start-ahead-us", "250.5"});
  EXPECT_EQ(resolve_args(args, true, 1).start_ahead_us, 250.5);
  args = four_ranks;
  args.insert(args.end(), {"--start", "barrier"});
  const BenchOptions barrier = resolve_args(args, true, 1);
  EXPECT_EQ(barrier.start, StartMode::barrier);
  EXPECT_EQ(barrier.notes.start_source, "--start barrier");
  EXPECT_STREQ(start_mode_name(StartMode::timer), "timer");
}

TEST(BenchOptions, CacheFlushIsOnByDefaultOffByNameAndABadValueIsRefused) {
  EXPECT_TRUE(resolve_args({"--backend", "cpu"}, false, 0).cache_flush);
  EXPECT_TRUE(resolve_args({"--backend", "cpu", "--cache-flush", "on"}, false, 0).cache_flush);
  EXPECT_FALSE(resolve_args({"--backend", "cpu", "--cache-flush", "off"}, false, 0).cache_flush);
  const std::string message = usage_error_of([] { parse_command_line({"--cache-flush", "sometimes"}); });
  EXPECT_EQ(message, "--cache-flush: expected on|off, got 'sometimes'");
}

TEST(BenchOptions, StartTimerWithoutOneGpuAndABadLeadAreRefusedByName) {
  std::string message = usage_error_of([] {
    resolve_args({"--backend", "cpu", "--start", "timer"}, false, 0);
  });
  EXPECT_EQ(message.rfind("--start timer: expected --backend cuda", 0), 0u) << message;
  EXPECT_NE(message.find("got cpu"), std::string::npos) << message;
  message = usage_error_of([] {
    resolve_args(
        {"--backend", "cuda", "--ranks", "4", "--experts", "16", "--devices", "2", "--start", "timer"}, true,
        2);
  });
  EXPECT_EQ(message,
            "--start timer: expected every rank on one GPU (their clocks differ), got ranks on 2 GPUs");
  message = usage_error_of([] {
    resolve_args({"--backend", "cpu", "--start", "barrier", "--start-ahead-us", "500"}, false, 0);
  });
  EXPECT_EQ(message.rfind("--start-ahead-us: expected --start timer or auto", 0), 0u) << message;
  for (const char* bad : {"0", "-5", "1000001", "inf", "nan", "soon", ""}) {
    message = usage_error_of([&] { parse_command_line({"--start-ahead-us", bad}); });
    EXPECT_EQ(
        message.rfind("--start-ahead-us: expected a number of microseconds above 0 and at most 1000000", 0),
        0u)
        << bad << ": " << message;
  }
  message = usage_error_of([] { parse_command_line({"--start", "soon"}); });
  EXPECT_EQ(message, "--start: expected auto|barrier|timer, got 'soon'");
}

TEST(BenchOptions, AutoExpertCapacityIsTheLargestExpertRoundedUpToSixteenRows) {
  workload::Shape shape;
  shape.topology = Topology::single_node(4);
  shape.tokens_per_rank = 64;
  shape.hidden = 128;
  shape.topk = 4;
  shape.num_experts = 16;
  const std::vector<workload::RankData> inputs = workload::generate(shape, 5);
  std::vector<int64_t> rows(16, 0);
  for (const workload::RankData& data : inputs) {
    for (int64_t i = 0; i < data.topk_idx.numel(); ++i) {
      const int64_t expert = data.topk_idx.as<const int64_t>()[i];
      if (expert >= 0) ++rows[expert];
    }
  }
  const int64_t most = *std::max_element(rows.begin(), rows.end());
  const int64_t capacity = auto_expert_capacity(inputs, 16, 64);
  EXPECT_EQ(capacity % kExpertCapacityMultiple, 0);
  EXPECT_GE(capacity, most);
  EXPECT_LT(capacity, most + kExpertCapacityMultiple);
  // Never above R x max (every row that could arrive).
  EXPECT_EQ(auto_expert_capacity(inputs, 16, 1), 4);
}

TEST(BenchNcclSupport, SaysWhyItCannotRunOnCpuOrOnASharedGpu) {
  EngineSupport on_cpu = engine_support(BenchEngine::nccl, resolve_args({"--backend", "cpu"}, false, 0));
  EXPECT_FALSE(on_cpu.runs_here);
  EXPECT_NE(on_cpu.reason.find("cpu backend"), std::string::npos) << on_cpu.reason;

  const std::vector<std::string> eight_ranks = {"--backend", "cuda", "--ranks", "8"};
  EngineSupport one_gpu = engine_support(BenchEngine::nccl, resolve_args(eight_ranks, true, 1));
  EngineSupport eight_gpus = engine_support(BenchEngine::nccl, resolve_args(eight_ranks, true, 8));
  EXPECT_FALSE(one_gpu.runs_here);
  if (SWITCHYARD_BENCH_WITH_NCCL) {
    EXPECT_NE(one_gpu.reason.find("NCCL refuses two ranks on one device"), std::string::npos)
        << one_gpu.reason;
    EXPECT_NE(one_gpu.reason.find("8 ranks use 1 GPU"), std::string::npos) << one_gpu.reason;
    EXPECT_TRUE(eight_gpus.runs_here) << eight_gpus.reason;
    // Four GPUs for eight ranks share them.
    EXPECT_FALSE(
        engine_support(BenchEngine::nccl,
                       resolve_args({"--backend", "cuda", "--ranks", "8", "--devices", "4"}, true, 8))
            .runs_here);
  } else {
    EXPECT_EQ(one_gpu.reason, kNcclBuildNote);
    EXPECT_FALSE(eight_gpus.runs_here);
    EXPECT_EQ(eight_gpus.reason.rfind("not built", 0), 0u) << eight_gpus.reason;
  }
  // The library's engines do not depend on the map.
  EXPECT_TRUE(engine_support(BenchEngine::normal, resolve_args(eight_ranks, true, 1)).runs_here);
}

workload::RankData rank_with_topk(std::vector<int64_t> topk_idx, int64_t topk) {
  workload::RankData data;
  const int64_t tokens = static_cast<int64_t>(topk_idx.size()) / topk;
  data.topk_idx = Tensor::empty(DType::i64, {tokens, topk});
  for (size_t i = 0; i < topk_idx.size(); ++i) data.topk_idx.as<int64_t>()[i] = topk_idx[i];
  return data;
}

TEST(BenchTraffic, RankMajorRemoteRowsCountTokenDestinationPairsAcrossDevices) {
  // 2 ranks, 4 experts (2 per rank), top-2. Rank 0: token 0 -> experts 0, 2 (ranks 0, 1), token 1 ->
  // expert 1 twice (rank 0 once). Rank 1: token 0 -> expert 3 (rank 1), token 1 -> nothing.
  std::vector<workload::RankData> inputs = {rank_with_topk({0, 2, 1, 1}, 2),
                                            rank_with_topk({3, -1, -1, -1}, 2)};
  EXPECT_EQ(rank_major_remote_rows(inputs, 4, map_ranks_to_devices(2, 2, Backend::cuda, 2)), 1);
  EXPECT_EQ(rank_major_remote_rows(inputs, 4, map_ranks_to_devices(1, 2, Backend::cuda, 2)), 0);
  EXPECT_EQ(rank_major_remote_rows(inputs, 4, DeviceMap{}), 0);  // cpu
}

TEST(BenchTraffic, RankMajorRemoteRowsAreTheRowsBetweenDifferentRanksWithOneGpuEach) {
  workload::Shape shape;
  shape.topology = Topology::single_node(4);
  shape.tokens_per_rank = 96;
  shape.hidden = 128;
  shape.topk = 4;
  shape.num_experts = 16;
  const uint64_t seed = testing::seed_for("bench_remote_rows");
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::vector<workload::RankData> inputs = workload::generate(shape, seed);
  int64_t delivered = 0, to_self = 0;
  for (int source = 0; source < 4; ++source) {
    reference::Layout layout = reference::layout(inputs[source].topk_idx, shape.num_experts, shape.topology);
    for (int destination = 0; destination < 4; ++destination) {
      delivered += layout.num_tokens_per_rank[destination];
      if (destination == source) to_self += layout.num_tokens_per_rank[destination];
    }
  }
  EXPECT_EQ(rank_major_remote_rows(inputs, 16, map_ranks_to_devices(kAutoDevices, 4, Backend::cuda, 4)),
            delivered - to_self);
  // Two GPUs, ranks 0 and 2 on one, 1 and 3 on the other: between them strictly fewer.
  const int64_t two_gpus = rank_major_remote_rows(inputs, 16, map_ranks_to_devices(2, 4, Backend::cuda, 2));
  EXPECT_GT(two_gpus, 0);
  EXPECT_LT(two_gpus, delivered - to_self);
}

TEST(BenchTraffic, ExpertMajorRemoteRowsComeFromTheLayoutRangesOfOtherDevices) {
  // 2 ranks, 1 local expert each; layout_range [1, 2, 2] = (begin, count) per source rank.
  std::vector<reference::LowLatencyDispatchOutput> dispatched(2);
  const int32_t ranges[2][4] = {{0, 3, 3, 2}, {0, 1, 1, 4}};
  for (int destination = 0; destination < 2; ++destination) {
    dispatched[destination].layout_range = Tensor::empty(DType::i32, {1, 2, 2});
    for (int i = 0; i < 4; ++i)
      dispatched[destination].layout_range.as<int32_t>()[i] = ranges[destination][i];
  }
  // Rank 0 receives 2 rows from rank 1; rank 1 receives 1 row from rank 0.
  EXPECT_EQ(expert_major_remote_rows(dispatched, map_ranks_to_devices(2, 2, Backend::cuda, 2)), 3);
  EXPECT_EQ(expert_major_remote_rows(dispatched, map_ranks_to_devices(1, 2, Backend::cuda, 2)), 0);
}

// 100 rows of 1000-byte dispatch rows (fp8-like: smaller than the bf16 x row of 1600) and 800-byte
// combine rows, from 40 source tokens.
Traffic example_traffic() {
  Traffic traffic;
  traffic.delivered_rows = 100;
  traffic.dispatch_row_bytes = 1000;
  traffic.combine_row_bytes = 800;
  traffic.input_row_bytes = 1600;
  traffic.source_tokens = 40;
  traffic.routed_tokens = 38;  // 2 tokens have no expert
  traffic.received_rows_by_rank = {60, 40};
  return traffic;
}

TEST(BenchMinimalBound,
     DispatchReadsEachRoutedTokenOnceAndWritesEachRowOnceCombineReadsEachRowAndWritesEachToken) {
  const MinimalBytes bytes = minimal_bytes(example_traffic());
  EXPECT_EQ(bytes.dispatch, 38 * 1600 + 100 * 1000);
  EXPECT_EQ(bytes.combine, 100 * 800 + 40 * 800);
  // Never more than the old "every row read and written" count, which a reducing combine beat.
  EXPECT_LE(bytes.combine, 2 * 100 * 800);
}

TEST(BenchMinimalBound, OneDeviceDividesTheMemoryBytesByTheCopyBandwidth) {
  CopyBandwidth copy;
  copy.bytes_per_second = 4e12;
  EXPECT_DOUBLE_EQ(*minimal_seconds(1'000'000'000, 0, copy), 1e9 / 4e12);
  // Remote bytes without a peer measurement have no bound.
  EXPECT_FALSE(minimal_seconds(1'000'000'000, 1, copy).has_value());
}

TEST(BenchMinimalBound, RowsBetweenGpusAreBoundByThePeerCopyAndMemoryByTheLocalCopies) {
  CopyBandwidth copy;
  copy.bytes_per_second = 8 * 4e12;  // 8 GPUs' local copies together
  copy.devices = 8;
  copy.peer = PeerCopyBandwidth{};
  copy.peer->all_pairs_bytes_per_second = 8 * 400e9;
  // 7 GB cross links (2.19 ms), 16 GB read and written in memory (0.5 ms): the links bound the phase.
  EXPECT_DOUBLE_EQ(*minimal_seconds(16'000'000'000, 7'000'000'000, copy), 7e9 / 3.2e12);
  // Nearly all local: memory bounds it.
  EXPECT_DOUBLE_EQ(*minimal_seconds(16'000'000'000, 1, copy), 16e9 / 3.2e13);

  EngineResult result;
  result.timed = true;
  result.minimal_dispatch_bytes = result.minimal_combine_bytes = 16'000'000'000;
  result.remote_dispatch_bytes = result.remote_combine_bytes = 7'000'000'000;
  result.dispatch_seconds = result.combine_seconds = 2 * 7e9 / 3.2e12;  // twice the bound
  EXPECT_DOUBLE_EQ(*minimal_fraction(result, copy), 0.5);
  EXPECT_EQ(minimal_bound_violation(result, copy), "");
}

TEST(BenchMinimalBound, ATimeBelowTheBoundIsABenchBugThatNamesThePhaseAndTheRow) {
  CopyBandwidth copy;
  copy.bytes_per_second = 4e12;
  EngineResult result;
  result.timed = true;
  result.minimal_dispatch_bytes = result.minimal_combine_bytes = 4'000'000'000;  // 1 ms each
  result.dispatch_seconds = 1e-3;                                                // exactly the bound: allowed
  result.combine_seconds = 2e-3;
  EXPECT_EQ(minimal_bound_violation(result, copy), "");
  result.combine_seconds = 0.8e-3;
  EXPECT_NE(minimal_bound_violation(result, copy)
                .find("combine took 800.00 us, below its minimal bound of "
                      "1000.00 us (fraction 1.250 > 1)"),
            std::string::npos)
      << minimal_bound_violation(result, copy);
  result.combine_seconds = 2e-3;
  result.graph_dispatch = PhaseTiming{0.5e-3, 0.6e-3};
  result.graph_combine = PhaseTiming{2e-3, 2e-3};
  EXPECT_NE(minimal_bound_violation(result, copy).find("dispatch (graph) took 500.00 us"), std::string::npos)
      << minimal_bound_violation(result, copy);
  result.timed = false;  // nothing timed, nothing to check
  EXPECT_EQ(minimal_bound_violation(result, copy), "");
}

TEST(BenchThroughput, GigabytesPerSecondPerRankIsEachRanksReceivedBytesOverItsOwnTimeAveraged) {
  // Rank 0: 60 rows x 1000 bytes in 1 ms = 0.06 GB/s; rank 1: 40 rows in 0.5 ms = 0.08 GB/s.
  const Traffic traffic = example_traffic();
  EXPECT_DOUBLE_EQ(*gigabytes_per_second_per_rank(traffic.received_rows_by_rank, 1000, {1e-3, 0.5e-3}), 0.07);
  EXPECT_FALSE(gigabytes_per_second_per_rank(traffic.received_rows_by_rank, 1000, {}).has_value());
  EXPECT_FALSE(gigabytes_per_second_per_rank(traffic.received_rows_by_rank, 1000, {1e-3, 0.0}).has_value());
  // Time per token of one rank: 1 ms over 4096 tokens; none at 0 tokens.
  EXPECT_DOUBLE_EQ(*nanoseconds_per_token(1e-3, 4096), 1e6 / 4096);
  EXPECT_FALSE(nanoseconds_per_token(1e-3, 0).has_value());
}

TEST(BenchDesignRoofline, StagedEnginesMoveEveryRowFourTimesInDispatchAndThreeTimesPlusTheOutputInCombine) {
  for (BenchEngine engine : {BenchEngine::normal, BenchEngine::low_latency}) {
    const DesignTraffic design =
        design_traffic(engine, example_traffic(), /*single_node=*/true, std::nullopt);
    ASSERT_TRUE(design.dispatch_bytes && design.combine_bytes) << bench_engine_name(engine);
    // The sender reads x (1600) and writes the staging row (1000); the receiver reads it and writes recv_x.
    EXPECT_EQ(*design.dispatch_bytes, 100 * (1600 + 3 * 1000)) << bench_engine_name(engine);
    // The sender reads y and writes the staging row, the receiver reads it; one output row per token.
    EXPECT_EQ(*design.combine_bytes, 3 * 100 * 800 + 40 * 800) << bench_engine_name(engine);
    EXPECT_TRUE(design.why_not.empty());
    EXPECT_NE(design.passes.find("4 per row"), std::string::npos) << design.passes;
  }
}

TEST(BenchDesignRoofline, SymmetricPublishesEachSourceTokenOnceAndPullsEachRow) {
  const DesignTraffic design =
      design_traffic(BenchEngine::symmetric, example_traffic(), true, SymmetricCombine::push);
  ASSERT_TRUE(design.dispatch_bytes && design.combine_bytes);
  // Publish: read x, write the input buffer, per source token; pull: read it, write recv_x, per row.
  EXPECT_EQ(*design.dispatch_bytes, 40 * (1600 + 1000) + 2 * 100 * 1000);
  // Push (2 per row), reduce (1 per row), output (1 per token).
  EXPECT_EQ(*design.combine_bytes, 3 * 100 * 800 + 40 * 800);
  EXPECT_NE(design.passes.find("push"), std::string::npos) << design.passes;
}

TEST(BenchDesignRoofline, SymmetricPullCombineReadsEachRowOnceInPlace) {
  const DesignTraffic design =
      design_traffic(BenchEngine::symmetric, example_traffic(), true, SymmetricCombine::pull);
  ASSERT_TRUE(design.dispatch_bytes && design.combine_bytes);
  EXPECT_EQ(*design.dispatch_bytes, 40 * (1600 + 1000) + 2 * 100 * 1000);  // the dispatch does not change
  // The home reads each row once from the expert's y (1 per row), and writes the output (1 per token).
  EXPECT_EQ(*design.combine_bytes, 100 * 800 + 40 * 800);
  EXPECT_NE(design.passes.find("pull"), std::string::npos) << design.passes;
  // No Buffer reported a path (none connected): the combine is not counted rather than guessed.
  const DesignTraffic unknown = design_traffic(BenchEngine::symmetric, example_traffic(), true, std::nullopt);
  EXPECT_TRUE(unknown.dispatch_bytes.has_value());
  EXPECT_FALSE(unknown.combine_bytes.has_value());
}

TEST(BenchDesignRoofline, SymmetricZeroCopyDispatchReadsBf16RowsInPlaceAndFp8StillPublishes) {
  Traffic bf16 = example_traffic();
  bf16.dispatch_row_bytes = bf16.input_row_bytes;  // bf16: the dispatch row is the x row
  const DesignTraffic design = design_traffic(BenchEngine::symmetric, bf16, true, SymmetricCombine::pull,
                                              SymmetricDispatch::zero_copy);
  ASSERT_TRUE(design.dispatch_bytes && design.combine_bytes);
  // Read x in place and write recv_x, per row, no publish.
  EXPECT_EQ(*design.dispatch_bytes, 100 * (1600 + 1600));
  EXPECT_NE(design.passes.find("zero_copy"), std::string::npos) << design.passes;
  // publish (and an unset source) count the copy into the input buffer.
  for (std::optional<SymmetricDispatch> source :
       {std::optional<SymmetricDispatch>(SymmetricDispatch::publish), std::optional<SymmetricDispatch>()}) {
    const DesignTraffic published =
        design_traffic(BenchEngine::symmetric, bf16, true, SymmetricCombine::pull, source);
    EXPECT_EQ(*published.dispatch_bytes, 40 * (1600 + 1600) + 2 * 100 * 1600);
  }
  // fp8 rows (smaller than x) are always published, whatever the source.
  const DesignTraffic fp8 = design_traffic(BenchEngine::symmetric, example_traffic(), true,
                                           SymmetricCombine::pull, SymmetricDispatch::zero_copy);
  EXPECT_EQ(*fp8.dispatch_bytes, 40 * (1600 + 1000) + 2 * 100 * 1000);
  EXPECT_NE(fp8.passes.find("publish"), std::string::npos) << fp8.passes;
}

TEST(BenchDesignRoofline, NcclIsNotCountedAndSaysWhy) {
  const DesignTraffic nccl = design_traffic(BenchEngine::nccl, example_traffic(), true, std::nullopt);
  EXPECT_FALSE(nccl.dispatch_bytes.has_value());
  EXPECT_FALSE(nccl.combine_bytes.has_value());
  EXPECT_NE(nccl.why_not.find("NCCL"), std::string::npos) << nccl.why_not;
  // Across nodes the engines' bytes need the rows by link (bench_node_traffic_test.cpp); without
  // them the bench says so instead of counting one node's passes.
  for (BenchEngine engine : {BenchEngine::normal, BenchEngine::low_latency}) {
    const DesignTraffic internode =
        design_traffic(engine, example_traffic(), /*single_node=*/false, std::nullopt);
    EXPECT_FALSE(internode.dispatch_bytes.has_value()) << bench_engine_name(engine);
    EXPECT_NE(internode.why_not.find("across nodes"), std::string::npos) << internode.why_not;
  }
}

TEST(BenchDesignRoofline, OneDeviceDividesTheDesignBytesByTheCopyBandwidth) {
  CopyBandwidth copy;
  copy.bytes_per_second = 4e12;
  EXPECT_DOUBLE_EQ(*design_roofline_seconds(8'000'000'000, 0, copy), 8e9 / 4e12);
  EXPECT_FALSE(design_roofline_seconds(std::nullopt, 0, copy).has_value());
  EXPECT_FALSE(design_roofline_seconds(1, 1, copy).has_value());  // remote bytes without a peer copy

  EngineResult result;
  result.timed = true;
  result.dispatch_bytes = result.combine_bytes = 1'000'000'000;
  result.minimal_dispatch_bytes = result.minimal_combine_bytes = 2'000'000'000;
  result.design_dispatch_bytes = 4'000'000'000;  // 4 passes
  result.design_combine_bytes = 3'000'000'000;   // 3 passes
  result.dispatch_seconds = 2e-3;
  result.combine_seconds = 1.5e-3;
  // Minimal: 0.5 ms + 0.5 ms of 3.5 ms; design: 1 ms + 0.75 ms of 3.5 ms.
  EXPECT_DOUBLE_EQ(*minimal_fraction(result, copy), 1e-3 / 3.5e-3);
  EXPECT_DOUBLE_EQ(*design_fraction(result, copy), 1.75e-3 / 3.5e-3);
  const PhaseBounds design = design_bounds(result, copy);
  EXPECT_DOUBLE_EQ(*phase_fraction(design.dispatch, result.dispatch_seconds), 0.5);
  EXPECT_DOUBLE_EQ(*phase_fraction(design.combine, result.combine_seconds), 0.5);
  // Not counted: no design fraction, the minimal one stays.
  result.design_dispatch_bytes.reset();
  EXPECT_FALSE(design_fraction(result, copy).has_value());
  EXPECT_TRUE(minimal_fraction(result, copy).has_value());
}

TEST(BenchDesignRoofline, RowsBetweenGpusAreStillBoundByThePeerCopy) {
  CopyBandwidth copy;
  copy.bytes_per_second = 8 * 4e12;
  copy.devices = 8;
  copy.peer = PeerCopyBandwidth{};
  copy.peer->all_pairs_bytes_per_second = 8 * 400e9;
  // Every pass in some GPU's memory: 32 GB over 32 TB/s = 1 ms; 7 GB across links: 2.19 ms.
  EXPECT_DOUBLE_EQ(*design_roofline_seconds(32'000'000'000, 7'000'000'000, copy), 7e9 / 3.2e12);
  EXPECT_DOUBLE_EQ(*design_roofline_seconds(32'000'000'000, 1, copy), 32e9 / 3.2e13);
}

TEST(BenchGraphReplay, LaunchIsThePlainMedianMinusTheGraphReplayMedian) {
  EngineResult result;
  result.timed = true;
  result.dispatch_seconds = 144e-6;
  result.combine_seconds = 145e-6;
  EXPECT_FALSE(launch_seconds(result.dispatch_seconds, result.graph_dispatch).has_value());
  result.graph_dispatch = PhaseTiming{120e-6, 130e-6};
  result.graph_combine = PhaseTiming{125e-6, 128e-6};
  EXPECT_DOUBLE_EQ(*launch_seconds(result.dispatch_seconds, result.graph_dispatch), 24e-6);
  EXPECT_DOUBLE_EQ(*launch_seconds(result.combine_seconds, result.graph_combine), 20e-6);
  // The graph rows against the same bounds as the plain calls.
  const PhaseBounds bounds{50e-6, 50e-6};
  EXPECT_DOUBLE_EQ(*graph_replay_fraction(result, bounds), 100e-6 / 245e-6);
}

// print_engine's text, through a memory stream.
std::string printed(const EngineResult& result, const CopyBandwidth& copy) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  print_engine(out, result, copy);
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

TEST(BenchReport, GraphReplayRowsLaunchAndHookSplitRowsAppearWhenMeasured) {
  CopyBandwidth copy;
  copy.bytes_per_second = 4e12;
  EngineResult result;
  result.engine = BenchEngine::low_latency;
  result.status = CheckStatus::passed;
  result.timed = true;
  result.dispatch_bytes = result.combine_bytes = 100'000'000;
  result.minimal_dispatch_bytes = result.minimal_combine_bytes = 200'000'000;  // 50 us minimal bound each
  result.tokens_per_rank = 100;
  result.design_dispatch_bytes = 400'000'000;  // 100 us
  result.design_combine_bytes = 300'000'000;   // 75 us
  result.dispatch_seconds = 200e-6;
  result.combine_seconds = 150e-6;
  result.graph_replay = kMeasured;
  result.graph_dispatch = PhaseTiming{125e-6, 130e-6};
  result.graph_combine = PhaseTiming{100e-6, 110e-6};
  result.hook_split = kMeasured;
  result.dispatch_send = PhaseTiming{40e-6, 41e-6};
  result.dispatch_recv = PhaseTiming{90e-6, 95e-6};
  result.combine_send = PhaseTiming{30e-6, 31e-6};
  result.combine_recv = PhaseTiming{80e-6, 85e-6};
  const std::string text = printed(result, copy);
  // Per phase: bound / median under both rooflines.
  EXPECT_NE(text.find("dispatch (graph)        125.0       130.0     1250.0          -    0.400    0.800"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("combine (graph)         100.0       110.0"), std::string::npos) << text;
  EXPECT_NE(text.find("dispatch recv            90.0        95.0          -"), std::string::npos) << text;
  EXPECT_NE(text.find("launch (plain call - graph replay, medians): dispatch 75.0 us, combine 50.0 us"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("both phases: minimal 0.286, design 0.500; graph replays: minimal 0.444, design 0.778"),
            std::string::npos)
      << text;

  // A capture that failed: the reason instead of the rows; on cpu nothing at all.
  result.graph_dispatch.reset();
  result.graph_combine.reset();
  result.graph_replay = "capture failed on 8 of 8 ranks; rank 0: why";
  result.hook_split = "not supported by the symmetric engine (one stage each way, no hook)";
  result.dispatch_send = result.dispatch_recv = result.combine_send = result.combine_recv = std::nullopt;
  std::string skipped = printed(result, copy);
  EXPECT_NE(skipped.find("graph replay: skipped: capture failed on 8 of 8 ranks; rank 0: why"),
            std::string::npos)
      << skipped;
  EXPECT_NE(skipped.find("hook split: not supported"), std::string::npos) << skipped;
  EXPECT_EQ(skipped.find("(graph)"), std::string::npos) << skipped;
  EXPECT_EQ(skipped.find("dispatch send"), std::string::npos) << skipped;
  result.graph_replay = kNoGraphOnCpu;
  EXPECT_EQ(printed(result, copy).find("graph replay"), std::string::npos);
}

// A passed, timed normal-engine result of `seconds` a phase, and a copy bandwidth of 4 TB/s.
EngineResult timed_normal_result(double seconds) {
  EngineResult result;
  result.engine = BenchEngine::normal;
  result.status = CheckStatus::passed;
  result.timed = true;
  result.dispatch_seconds = result.combine_seconds = seconds;
  return result;
}
CopyBandwidth copy_of_4_terabytes() {
  CopyBandwidth copy;
  copy.bytes_per_second = 4e12;
  return copy;
}

TEST(BenchReport, DispatchHostTimeBehindTheStartHoldIsNotReported) {
  // Only the rank-major engines' dispatch waits on the host for the device, and only the timer holds it.
  EXPECT_TRUE(dispatch_host_waits_behind_hold(BenchEngine::normal, StartMode::timer));
  EXPECT_TRUE(dispatch_host_waits_behind_hold(BenchEngine::nccl, StartMode::timer));
  EXPECT_FALSE(dispatch_host_waits_behind_hold(BenchEngine::normal, StartMode::barrier));
  EXPECT_FALSE(dispatch_host_waits_behind_hold(BenchEngine::symmetric, StartMode::timer));
  EXPECT_FALSE(dispatch_host_waits_behind_hold(BenchEngine::low_latency, StartMode::timer));
  const CopyBandwidth copy = copy_of_4_terabytes();
  EngineResult result = timed_normal_result(170e-6);
  result.dispatch_host_seconds = 1040e-6;
  result.combine_host_seconds = 42e-6;
  const std::string timed = printed(result, copy);
  EXPECT_NE(timed.find("host: dispatch call 1040.0 us, combine call 42.0 us"), std::string::npos) << timed;
  result.dispatch_host_behind_hold = true;
  const std::string held = printed(result, copy);
  EXPECT_NE(held.find("host: dispatch call n/a (it waits for the device's counts"), std::string::npos)
      << held;
  EXPECT_NE(held.find("combine call 42.0 us"), std::string::npos) << held;
  EXPECT_EQ(held.find("1040.0"), std::string::npos) << held;
}

TEST(BenchReport, WarnsOnlyWhenTheHostsEnqueueOutranTheStartHold) {
  const CopyBandwidth copy = copy_of_4_terabytes();
  EngineResult result = timed_normal_result(100e-6);
  result.start_holds = 160;
  EXPECT_EQ(printed(result, copy).find("warning:"), std::string::npos);
  result.start_holds_missed = 3;
  const std::string text = printed(result, copy);
  EXPECT_NE(
      text.find(
          "  warning: the start hold had passed before the call began in 3 of 160 timed phases, all ranks "
          "(raise --start-ahead-us"),
      std::string::npos)
      << text;
}

TEST(BenchReport, ComparesEnginesWithNcclOnlyAtTheSameTokensPerRank) {
  EngineResult nccl, normal, low_latency;
  nccl.engine = BenchEngine::nccl;
  normal.engine = BenchEngine::normal;
  low_latency.engine = BenchEngine::low_latency;
  for (EngineResult* result : {&nccl, &normal, &low_latency}) result->timed = true;
  nccl.tokens_per_rank = normal.tokens_per_rank = 4096;
  low_latency.tokens_per_rank = 128;
  nccl.dispatch_seconds = 6e-3;
  nccl.combine_seconds = 4e-3;
  normal.dispatch_seconds = 2e-3;
  normal.combine_seconds = 3e-3;
  low_latency.dispatch_seconds = low_latency.combine_seconds = 1e-4;
  const std::vector<EngineResult> results = {normal, low_latency, nccl};
  std::optional<NcclComparison> versus = compare_with_nccl(normal, results);
  ASSERT_TRUE(versus.has_value());
  EXPECT_DOUBLE_EQ(versus->dispatch, 3.0);
  EXPECT_DOUBLE_EQ(versus->combine, 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(versus->total, 2.0);
  EXPECT_FALSE(compare_with_nccl(low_latency, results).has_value());
  EXPECT_FALSE(compare_with_nccl(nccl, results).has_value());
  // Without a timed nccl, nothing to compare with.
  EXPECT_FALSE(compare_with_nccl(normal, {normal}).has_value());
}

TEST(BenchSummary, TheVerdictNamesEveryFailedEngineOrSaysEveryIterationMatched) {
  EngineResult normal, symmetric, nccl;
  normal.engine = BenchEngine::normal;
  normal.status = CheckStatus::passed;
  symmetric.engine = BenchEngine::symmetric;
  symmetric.status = CheckStatus::passed;
  nccl = skipped_result(BenchEngine::nccl, "not available on the cpu backend");
  EXPECT_EQ(verdict_line({normal, symmetric, nccl}),
            "verdict: pass: every iteration of normal, symmetric matched the reference bit for bit; nccl "
            "skipped: not available on the cpu backend");
  symmetric.status = CheckStatus::failed;
  symmetric.detail = "rank 1 timed iteration 3/10: combined_x: row 0";
  EXPECT_EQ(verdict_line({normal, symmetric, nccl}),
            "verdict: FAIL: symmetric fail: rank 1 timed iteration 3/10: combined_x: row 0");
  EXPECT_EQ(verdict_line({nccl}), "verdict: nothing ran: nccl skipped: not available on the cpu backend");
}

}  // namespace
}  // namespace switchyard::bench
