#include "rounds.hpp"

#include <algorithm>

namespace switchyard::soak {

namespace em = testing::expert_major;

workload::Shape rank_major_shape(const SoakCase& c) {
  workload::Shape shape;
  shape.topology = c.topology;
  shape.tokens_per_rank_list = c.tokens;
  shape.hidden = c.hidden;
  shape.topk = c.topk;
  shape.num_experts = c.num_experts;
  shape.dtype = c.dtype;
  shape.with_weights = c.with_weights;
  shape.routing = c.routing;
  return shape;
}

em::Case expert_major_call(const SoakCase& c) {
  em::Case call = em::make(soak_engine_name(c.engine), c.topology.num_ranks, c.tokens, c.max_tokens, c.topk,
                           c.num_experts, c.hidden);
  call.routing = c.routing;
  call.fp8 = c.fp8;
  call.symmetric_dispatch = c.symmetric_dispatch;
  call.symmetric_combine = c.symmetric_combine;
  return call;
}

std::vector<Round> prepare_rounds(const SoakCase& c) {
  std::vector<Round> rounds(c.round_trips);
  for (int index = 0; index < c.round_trips; ++index) {
    Round& round = rounds[index];
    if (c.is_rank_major()) {
      const workload::Shape shape = rank_major_shape(c);
      round.data = workload::generate(shape, round_seed(c, index));
      round.normal = testing::compute_expected(shape, round.data, c.expert_alignment);
      continue;
    }
    round.call = expert_major_call(c);
    workload::Shape shape = em::shape_of(round.call);
    shape.topology = c.topology;
    round.data = workload::generate(shape, round_seed(c, index));
    if (c.capacity == CapacityChoice::exactly_full) {
      round.call.capacity = std::max<int64_t>(1, em::max_expert_rows(round.data, c.num_experts));
    }
    round.expert_major =
        em::expected_from(round.data, c.num_experts, c.topology, c.max_tokens, c.fp8, round.call.capacity);
  }
  return rounds;
}

int64_t round_trips_of(const SoakCase& c) {
  return c.is_rank_major() && c.cached_replay ? 2 * c.round_trips : c.round_trips;
}

}  // namespace switchyard::soak
