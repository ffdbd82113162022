#include "support/fp8_inputs.hpp"

#include <cstring>
#include <string>
#include <utility>

#include "common/fp8_cast.hpp"

namespace switchyard::testing::expert_major {

std::vector<workload::RankData> precast_inputs(const Case& c, uint64_t seed) {
  workload::Shape shape = shape_of(c);
  shape.dtype = DType::fp8_e4m3;
  return workload::generate(shape, seed);
}

std::vector<workload::RankData> cast_inputs(std::vector<workload::RankData> data) {
  for (workload::RankData& rank : data) {
    const int64_t tokens = rank.x.size(0);
    const int hidden = static_cast<int>(rank.x.size(1));
    const int num_scales = hidden / common::kFp8CastBlock;
    Tensor x = Tensor::empty(DType::fp8_e4m3, {tokens, hidden});
    Tensor scales = Tensor::empty(DType::f32, {tokens, num_scales});
    for (int64_t token = 0; token < tokens; ++token) {
      common::cast_row_to_fp8(rank.x.as<const uint16_t>() + token * hidden, hidden, false,
                              x.as<uint8_t>() + token * hidden, scales.as<float>() + token * num_scales);
    }
    rank.x = std::move(x);
    rank.x_scales = std::move(scales);
  }
  return data;
}

Case with_precast_x(Case c) {
  c.fp8 = reference::LowLatencyOptions{true, false, false};
  return c;
}

LowLatencyDispatchArgs precast_dispatch_args(const Case& c, const workload::RankData& data) {
  LowLatencyDispatchArgs args = dispatch_args(c, data.x, data.topk_idx);
  args.x_scales = data.x_scales;
  return args;
}

void check_rows_are_the_callers(const DispatchView& got, const std::vector<workload::RankData>& data,
                                int rank, Failures& failures) {
  const int64_t local_experts = got.recv_x.shape[0], capacity = got.recv_x.shape[1];
  const int64_t hidden = got.recv_x.shape[2], num_scales = hidden / common::kFp8CastBlock;
  const int num_ranks = static_cast<int>(data.size());
  if (got.recv_x.dtype != DType::fp8_e4m3 || got.recv_x_scales.dtype != DType::f32) {
    failures.add(rank, "recv_x / recv_x_scales: expected fp8_e4m3 and f32, got " + got.recv_x.describe() +
                           " and " + got.recv_x_scales.describe());
    return;
  }
  const int32_t* range = got.layout_range.as<const int32_t>();
  const int32_t* src_info = got.src_info.as<const int32_t>();
  for (int64_t local = 0; local < local_experts; ++local) {
    for (int source = 0; source < num_ranks; ++source) {
      const int64_t begin = range[(local * num_ranks + source) * 2];
      const int64_t count = range[(local * num_ranks + source) * 2 + 1];
      for (int64_t row = begin; row < begin + count && row < capacity; ++row) {
        const int64_t at = local * capacity + row;
        const int64_t token = src_info[at];
        const std::string where = "local expert " + std::to_string(local) + ", row " + std::to_string(row) +
                                  " (source " + std::to_string(source) + ", token " + std::to_string(token) +
                                  ")";
        if (token < 0 || token >= data[source].x.size(0)) {
          failures.add(rank, "src_info of " + where + ": not a token of the source");
          continue;
        }
        if (std::memcmp(got.recv_x.as<const uint8_t>() + at * hidden,
                        data[source].x.as<const uint8_t>() + token * hidden, hidden) != 0) {
          failures.add(rank, "recv_x of " + where + ": not the caller's fp8 bytes");
        }
        if (std::memcmp(got.recv_x_scales.as<const float>() + at * num_scales,
                        data[source].x_scales.as<const float>() + token * num_scales,
                        num_scales * sizeof(float)) != 0) {
          failures.add(rank, "recv_x_scales of " + where + ": not the caller's scale bits");
        }
      }
    }
  }
}

}  // namespace switchyard::testing::expert_major
