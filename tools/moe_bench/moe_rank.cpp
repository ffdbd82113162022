#include "moe_rank.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/moe_plan.hpp"
#include "cuda/moe/experts.hpp"
#include "cuda/moe/grouped_gemm.hpp"
#include "device/cuda_check.hpp"
#include "device/pageable_copy.hpp"
#include "device_digest.hpp"
#include "hbm_bandwidth.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/moe.hpp"
#include "synthetic_weights.hpp"
#include "transfer.hpp"

namespace switchyard::moe_bench {

namespace {

struct Events {
  std::vector<cudaEvent_t> events;
  explicit Events(int count) : events(static_cast<size_t>(count)) {
    for (cudaEvent_t& event : events) SY_CUDA_CHECK(cudaEventCreate(&event));
  }
  ~Events() {
    for (cudaEvent_t event : events) cudaEventDestroy(event);
  }
  double us(int from, int to) const {
    float ms = 0.0f;
    SY_CUDA_CHECK(
        cudaEventElapsedTime(&ms, events[static_cast<size_t>(from)], events[static_cast<size_t>(to)]));
    return 1e3 * ms;
  }
};

// The layer's two grouped GEMMs again, on workspace of the bench's own, with M_g set on the host: the
// same kernels and shapes with nothing else in the stream. Their A operands hold synthetic activations
// (fill_activations_on_device), not zeros: on zeros the tensor cores draw less power and the GEMMs run
// faster than on the layer's rows, which would flatter "alone" (zero_operands() times that case too).
struct GemmsAlone {
  Tensor a1, a1_scales, d1, a2, a2_scales, d2;
  detail::MoeExpertsPlan plan;
  std::shared_ptr<cuda::GroupedGemm> gemm1, gemm2;

  GemmsAlone(const MoeBenchOptions& o, const MoeWeights& w, int64_t capacity, int rank, int device,
             cudaStream_t stream) {
    const bool fp8 = o.weights == DType::fp8_e4m3;
    const int64_t local = o.local_experts(), hidden = o.hidden, inter = o.intermediate;
    const auto empty = [&](DType dtype, std::initializer_list<int64_t> dims) {
      return Tensor::empty(dtype, dims, Device::cuda, device, stream);
    };
    const auto zeroed = [&](DType dtype, std::initializer_list<int64_t> dims) {
      Tensor t = empty(dtype, dims);
      SY_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.nbytes(), stream));
      return t;
    };
    // The A operands are filled whole below; the outputs start zeroed.
    a1 = empty(o.weights, {local, capacity, hidden});
    d1 = zeroed(DType::bf16, {local, capacity, 2 * inter});
    a2 = empty(o.weights, {local, capacity, inter});
    d2 = zeroed(DType::bf16, {local, capacity, hidden});
    if (fp8) {
      a1_scales = empty(DType::f32, {local, capacity, hidden / 128});
      a2_scales = empty(DType::f32, {local, capacity, inter / 128});
    }
    fill_activations_on_device(a1, a1_scales, WeightTensor::gemm1_a, WeightTensor::gemm1_a_scales, o.seed,
                               rank, stream);
    fill_activations_on_device(a2, a2_scales, WeightTensor::gemm2_a, WeightTensor::gemm2_a_scales, o.seed,
                               rank, stream);
    // The layer's own construction (cuda/moe/experts.hpp) over this workspace.
    plan.weights = o.weight_layout();
    plan.workspace = common::MoeWorkspaceLayout{static_cast<int>(local), capacity, static_cast<int>(hidden),
                                                static_cast<int>(inter)};
    plan.fp8 = fp8;
    plan.w1 = w.w1.data;
    plan.w1_scales = w.w1_scales.as<const float>();
    plan.w2 = w.w2.data;
    plan.w2_scales = w.w2_scales.as<const float>();
    plan.recv_x = a1.data();
    plan.gate_up = d1.as<uint16_t>();
    plan.activations = a2.data();
    plan.out = d2.as<uint16_t>();
    if (fp8) {
      plan.recv_x_scales = a1_scales.as<const float>();
      plan.activation_scales = a2_scales.as<float>();
    }
    // The tiles the layer's calls pick (CudaMoeExperts): the override, else by the rows each expert can
    // expect from a call of o.tokens tokens.
    cuda::MoeGemmTiles tiles;
    if (!cuda::moe_gemm_tiles_from_environment(tiles) && fp8) {
      tiles = cuda::moe_gemm_tiles_for(
          detail::moe_expected_rows_per_expert(o.tokens, o.topk, o.ranks, o.experts));
    }
    cuda::MoeGroupedGemms gemms = cuda::make_moe_grouped_gemms(plan, stream, tiles);
    gemm1 = std::move(gemms.gemm1);
    gemm2 = std::move(gemms.gemm2);
  }

  // The same two GEMMs in other CUTLASS tiles, over the same operands and outputs.
  cuda::MoeGroupedGemms in_tiles(cuda::MoeGemmTiles tiles, cudaStream_t stream) const {
    return cuda::make_moe_grouped_gemms(plan, stream, tiles);
  }

  // The A operands (and their scales) all zeros: the case the bench timed before session 15.
  void zero_operands(cudaStream_t stream) {
    for (const Tensor* t : {&a1, &a1_scales, &a2, &a2_scales}) {
      if (t->numel() > 0) SY_CUDA_CHECK(cudaMemsetAsync(t->data(), 0, t->nbytes(), stream));
    }
  }

  void set_rows(const std::vector<int32_t>& rows, const MoeBenchOptions& o, cudaStream_t stream) {
    set_rows_of(*gemm1, *gemm2, rows, o, stream);
  }

  static void set_rows_of(cuda::GroupedGemm& first, cuda::GroupedGemm& second,
                          const std::vector<int32_t>& rows, const MoeBenchOptions& o, cudaStream_t stream) {
    std::vector<int32_t> s1, s2;
    for (int32_t m : rows) {
      s1.insert(s1.end(), {m, 2 * o.intermediate, o.hidden});
      s2.insert(s2.end(), {m, o.hidden, o.intermediate});
    }
    SY_CUDA_CHECK(cuda::copy_pageable(first.problem_shapes(), s1.data(), s1.size() * 4,
                                      cudaMemcpyHostToDevice, stream));
    SY_CUDA_CHECK(cuda::copy_pageable(second.problem_shapes(), s2.data(), s2.size() * 4,
                                      cudaMemcpyHostToDevice, stream));
  }

  void zero_outputs(cudaStream_t stream) {
    SY_CUDA_CHECK(cudaMemsetAsync(d1.data(), 0, d1.nbytes(), stream));
    SY_CUDA_CHECK(cudaMemsetAsync(d2.data(), 0, d2.nbytes(), stream));
  }
};

}  // namespace

std::vector<int64_t> checked_tokens(const MoeBenchOptions& options, int64_t num_tokens) {
  std::vector<int64_t> tokens;
  const int64_t count = std::min<int64_t>(options.check_tokens, num_tokens);
  for (int64_t i = 0; i < count; ++i) tokens.push_back(count == 1 ? 0 : i * (num_tokens - 1) / (count - 1));
  return tokens;
}

std::string run_moe_rank(const MoeBenchOptions& o, const std::vector<workload::RankData>& data,
                         int64_t capacity, Group& group) {
  const int rank = group.rank();
  int devices = 0;
  SY_CUDA_CHECK(cudaGetDeviceCount(&devices));
  const int device = rank % std::max(1, devices);
  SY_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  SY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const bool fp8 = o.weights == DType::fp8_e4m3;
  const int64_t local = o.local_experts(), hidden = o.hidden, inter = o.intermediate;
  const auto progress = [&](const char* what) {
    std::fprintf(stderr, "moe-bench: rank %d: %s\n", rank, what);
  };
  nlohmann::json out;
  out["rank"] = rank;
  out["device"] = device;
  {
    BufferOptions options;
    options.topology = Topology::single_node(o.ranks);
    options.rank = rank;
    options.backend = Backend::cuda;
    options.device = device;
    options.sharing = o.ranks_as == RanksAs::processes ? HeapSharing::processes : HeapSharing::threads;
    options.config.timeout_seconds = o.timeout_seconds;
    options.sizing.max_tokens_per_rank = std::max<int64_t>(1, o.tokens);
    options.sizing.symmetric_max_tokens_per_rank = std::max<int64_t>(1, o.tokens);
    options.sizing.hidden = o.hidden;
    options.sizing.topk = o.topk;
    options.sizing.num_experts = o.experts;
    if (o.heap_tensors) {
      options.sizing.symmetric_heap_input = true;
      options.sizing.symmetric_heap_output_rows_per_expert = capacity;
      // fp8: the dispatch pushes every row into the receivers' heap (cuda/symmetric/push.cuh).
      if (fp8) options.sizing.symmetric_heap_receive_rows_per_expert = capacity;
      options.config.symmetric_combine = SymmetricCombine::pull;
    }
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));
    progress("connected");

    const DType scale_dtype = DType::f32;
    MoeWeights w;
    Tensor w1 = Tensor::empty(o.weights, {local, 2 * inter, hidden}, Device::cuda, device, stream);
    Tensor w2 = Tensor::empty(o.weights, {local, hidden, inter}, Device::cuda, device, stream);
    Tensor w1_scales, w2_scales;
    if (fp8) {
      w1_scales =
          Tensor::empty(scale_dtype, {local, 2 * inter / 128, hidden / 128}, Device::cuda, device, stream);
      w2_scales =
          Tensor::empty(scale_dtype, {local, hidden / 128, inter / 128}, Device::cuda, device, stream);
    }
    w = {w1, w1_scales, w2, w2_scales, o.gate_up};
    fill_weights_on_device(w, o.weight_layout(), static_cast<int>(local), fp8, o.seed, rank, stream);

    MoeLayerOptions layer_options;
    layer_options.num_experts = o.experts;
    layer_options.max_tokens_per_rank = std::max<int64_t>(1, o.tokens);
    layer_options.expert_capacity = capacity;
    layer_options.expert_output = o.expert_output;
    MoeLayer layer(buffer, w, layer_options);
    progress("layer made");

    const workload::RankData& mine = data[static_cast<size_t>(rank)];
    MoeArgs args;
    // bench::to_backend: the device copies switchyard-bench makes, on this rank's stream (its device).
    const Tensor x = o.heap_tensors ? Tensor::borrow(buffer.symmetric_input(mine.x.size(0), o.hidden))
                                    : bench::to_backend(mine.x, Backend::cuda, stream),
                 topk_idx = bench::to_backend(mine.topk_idx, Backend::cuda, stream),
                 topk_weights = bench::to_backend(mine.topk_weights, Backend::cuda, stream);
    if (o.heap_tensors) bench::copy_into(x, mine.x, stream);  // the tokens, where every peer reads them
    out["combine_path"] = symmetric_combine_name(buffer.symmetric_combine_path());
    args.x = x;
    args.topk_idx = topk_idx;
    args.topk_weights = topk_weights;
    const Tensor y = Tensor::empty(DType::bf16, {mine.x.size(0), hidden}, Device::cuda, device, stream);
    args.out_y = y;
    args.stream = stream;
    SY_CUDA_CHECK(cudaStreamSynchronize(stream));

    for (int i = 0; i < o.warmup; ++i) {
      group.barrier();
      layer.forward(args);
      SY_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    progress("warm");
    // The checked rows: y of the tokens the parent computes the reference for.
    group.barrier();
    layer.forward(args);
    std::vector<uint16_t> rows;
    for (int64_t token : checked_tokens(o, mine.x.size(0))) {
      std::vector<uint16_t> row(static_cast<size_t>(hidden));
      SY_CUDA_CHECK(cuda::copy_pageable(row.data(), y.as<uint16_t>() + token * hidden, hidden * 2,
                                        cudaMemcpyDeviceToHost, stream));
      rows.insert(rows.end(), row.begin(), row.end());
    }
    out["checked_rows"] = rows;

    // Timed calls: start, the four marks inside the expert phase, end.
    Events events(6);
    void* marks[4] = {events.events[1], events.events[2], events.events[3], events.events[4]};
    detail::MoeLayerAccess::set_phase_marks(layer, marks);
    std::vector<double> layer_us, dispatch_us, gemm1_us, swiglu_us, gemm2_us, combine_us;
    // --timeline: one origin event per timed call, recorded by rank 0 and complete before the barrier that
    // starts the call, so every rank on rank 0's GPU reads its marks of that call against it
    // (cudaEventElapsedTime across streams of one device). Shared by the rank threads through the
    // barriers: written by rank 0 before the first and after the last.
    static std::vector<cudaEvent_t> origins;
    const bool timeline = o.timeline && device == 0;
    nlohmann::json timeline_us = nlohmann::json::array();
    if (o.timeline) {
      if (rank == 0) {
        origins.assign(static_cast<size_t>(o.iters), nullptr);
        for (cudaEvent_t& origin : origins) SY_CUDA_CHECK(cudaEventCreate(&origin));
      }
      group.barrier();
    }
    for (int i = 0; i < o.iters; ++i) {
      if (o.timeline && rank == 0) {
        SY_CUDA_CHECK(cudaEventRecord(origins[static_cast<size_t>(i)], stream));
        SY_CUDA_CHECK(cudaEventSynchronize(origins[static_cast<size_t>(i)]));
      }
      group.barrier();
      SY_CUDA_CHECK(cudaEventRecord(events.events[0], stream));
      layer.forward(args);
      SY_CUDA_CHECK(cudaEventRecord(events.events[5], stream));
      SY_CUDA_CHECK(cudaStreamSynchronize(stream));
      layer_us.push_back(events.us(0, 5));
      dispatch_us.push_back(events.us(0, 1));
      gemm1_us.push_back(events.us(1, 2));
      swiglu_us.push_back(events.us(2, 3));
      gemm2_us.push_back(events.us(3, 4));
      combine_us.push_back(events.us(4, 5));
      if (timeline) {
        std::vector<double> marks;
        for (cudaEvent_t mark : events.events) {
          float ms = 0.0f;
          SY_CUDA_CHECK(cudaEventElapsedTime(&ms, origins[static_cast<size_t>(i)], mark));
          marks.push_back(1e3 * ms);
        }
        timeline_us.push_back(marks);
      }
    }
    if (o.timeline) {
      group.barrier();  // every rank has read the origins
      if (rank == 0) {
        for (cudaEvent_t origin : origins) cudaEventDestroy(origin);
        origins.clear();
      }
      if (timeline) out["timeline_us"] = timeline_us;
    }
    detail::MoeLayerAccess::set_phase_marks(layer, nullptr);
    progress("timed");
    out["layer_us"] = layer_us;
    out["dispatch_us"] = dispatch_us;
    out["gemm1_us"] = gemm1_us;
    out["swiglu_us"] = swiglu_us;
    out["gemm2_us"] = gemm2_us;
    out["combine_us"] = combine_us;

    // The same GEMMs alone, every rank at once as in the layer: first this call's rows per local
    // expert, then every expert at full capacity (the plain grouped GEMM's throughput).
    GemmsAlone alone(o, w, capacity, rank, device, stream);
    const std::vector<int64_t> rows_all = rows_per_expert(data, o.experts);
    std::vector<int32_t> rows_mine, rows_full(static_cast<size_t>(local), static_cast<int32_t>(capacity));
    for (int64_t g = 0; g < local; ++g) {
      rows_mine.push_back(
          static_cast<int32_t>(std::min(capacity, rows_all[static_cast<size_t>(rank * local + g)])));
    }
    // One call of both GEMMs, every rank at once: their microseconds.
    const auto time_pair = [&](cuda::GroupedGemm& gemm1, cuda::GroupedGemm& gemm2) {
      group.barrier();
      SY_CUDA_CHECK(cudaEventRecord(events.events[0], stream));
      gemm1.run(stream);
      SY_CUDA_CHECK(cudaEventRecord(events.events[1], stream));
      gemm2.run(stream);
      SY_CUDA_CHECK(cudaEventRecord(events.events[2], stream));
      SY_CUDA_CHECK(cudaStreamSynchronize(stream));
      return std::make_pair(events.us(0, 1), events.us(1, 2));
    };
    // Warm-up calls first, then the timed calls' microseconds into out[<name>_gemm1_us] and
    // out[<name>_gemm2_us].
    const auto time_alone = [&](GemmsAlone& gemms, const std::vector<int32_t>& rows_of,
                                const std::string& name) {
      gemms.set_rows(rows_of, o, stream);
      std::vector<double> first, second;
      for (int i = 0; i < o.warmup + o.iters; ++i) {
        const auto [us1, us2] = time_pair(*gemms.gemm1, *gemms.gemm2);
        if (i < o.warmup) continue;
        first.push_back(us1);
        second.push_back(us2);
      }
      out[name + "_gemm1_us"] = first;
      out[name + "_gemm2_us"] = second;
    };
    time_alone(alone, rows_mine, "alone");
    time_alone(alone, rows_full, "full");
    if (o.gemm_tiles && fp8) {
      // Every CUTLASS tile on this call's rows, over alone's operands and outputs. Bits first: each tile
      // from zeroed outputs, the digest of h and o (equal to m128's: the tile changes no bit). Then the
      // times, the tiles interleaved in every round, so that the GPU's clocks, which fall as it heats
      // under back-to-back GEMMs, weigh on every tile alike.
      std::vector<std::pair<cuda::GroupedGemmTile, cuda::MoeGroupedGemms>> tiled;
      nlohmann::json digests;
      for (cuda::GroupedGemmTile tile : cuda::kGroupedGemmTiles) {
        tiled.emplace_back(tile, alone.in_tiles(cuda::MoeGemmTiles{tile, tile}, stream));
        cuda::MoeGroupedGemms& gemms = tiled.back().second;
        GemmsAlone::set_rows_of(*gemms.gemm1, *gemms.gemm2, rows_mine, o, stream);
        alone.zero_outputs(stream);
        gemms.gemm1->run(stream);
        gemms.gemm2->run(stream);
        digests[cuda::grouped_gemm_tile_name(tile)] = {
            device_digest(alone.d1.data(), alone.d1.nbytes(), stream),
            device_digest(alone.d2.data(), alone.d2.nbytes(), stream)};
      }
      out["tile_digests"] = digests;
      std::map<std::string, std::vector<double>> first, second;
      for (int i = 0; i < o.warmup + o.iters; ++i) {
        for (auto& [tile, gemms] : tiled) {
          const auto [us1, us2] = time_pair(*gemms.gemm1, *gemms.gemm2);
          if (i < o.warmup) continue;
          const std::string name = cuda::grouped_gemm_tile_name(tile);
          first[name].push_back(us1);
          second[name].push_back(us2);
        }
      }
      for (const auto& [name, times] : first) {
        out["tile_" + name + "_gemm1_us"] = times;
        out["tile_" + name + "_gemm2_us"] = second[name];
      }
      progress("tiles");
    }
    // Last, this call's rows again on zeroed operands: what "alone" measured before session 15.
    alone.zero_operands(stream);
    time_alone(alone, rows_mine, "alone_zeros");
    progress("alone");
    group.barrier();
  }
  // The read bandwidth of HBM, with the GPU otherwise idle (the other ranks wait at the barrier).
  if (rank == 0) out["hbm_read_gbps"] = measure_hbm_read_gbps();
  group.barrier();
  SY_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaStreamDestroy(stream);
  return out.dump();
}

}  // namespace switchyard::moe_bench
