#pragma once
// A case's rounds: every rank's inputs for each round, drawn from the round's seed, and what the
// reference says every rank must get. Prepared once, before any rank starts (forked rank processes
// inherit them), and read-only afterwards.
#include <vector>

#include "soak_case.hpp"
#include "support/expert_major_cases.hpp"
#include "support/normal_round_trip.hpp"
#include "workload/workload.hpp"

namespace switchyard::soak {

struct Round {
  std::vector<workload::RankData> data;  // [R]
  // Rank-major engines (normal, internode): the reference's layouts, dispatch and combine.
  testing::Expected normal;
  // Expert-major engines (low_latency, symmetric): the call's shape (with this round's capacity) and
  // the reference's outputs; `expert_major.data` is `data`.
  testing::expert_major::Case call;
  testing::expert_major::Expected expert_major;
};

// The workload shape of a rank-major case.
workload::Shape rank_major_shape(const SoakCase& c);
// The expert-major call of a case, with expert_capacity 0.
testing::expert_major::Case expert_major_call(const SoakCase& c);

std::vector<Round> prepare_rounds(const SoakCase& c);

// How many round trips (dispatch and combine on every rank) a case makes.
int64_t round_trips_of(const SoakCase& c);

}  // namespace switchyard::soak
