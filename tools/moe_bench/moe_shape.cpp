#include "moe_shape.hpp"

namespace switchyard::moe_bench {

workload::Shape MoeBenchOptions::shape() const {
  workload::Shape shape;
  shape.topology = Topology::single_node(ranks);
  shape.tokens_per_rank = tokens;
  shape.hidden = hidden;
  shape.topk = topk;
  shape.num_experts = experts;
  shape.dtype = DType::bf16;  // the layer casts x to e4m3 itself in the fp8 recipe
  shape.with_weights = true;
  return shape;
}

std::vector<int64_t> rows_per_expert(const std::vector<workload::RankData>& data, int experts) {
  std::vector<int64_t> rows(static_cast<size_t>(experts), 0);
  for (const workload::RankData& rank : data) {
    const int64_t* ids = rank.topk_idx.as<const int64_t>();
    for (int64_t i = 0; i < rank.topk_idx.numel(); ++i) {
      if (ids[i] >= 0) ++rows[static_cast<size_t>(ids[i])];
    }
  }
  return rows;
}

double flops_per_row(int hidden, int intermediate) {
  return 2.0 * (2.0 * intermediate * hidden + static_cast<double>(hidden) * intermediate);
}

double weight_bytes_per_expert(int hidden, int intermediate, bool fp8) {
  const double elements = 3.0 * hidden * intermediate;
  const double scales = fp8 ? 3.0 * (hidden / 128) * (intermediate / 128) * 4.0 : 0.0;
  return elements * (fp8 ? 1.0 : 2.0) + scales;
}

}  // namespace switchyard::moe_bench
