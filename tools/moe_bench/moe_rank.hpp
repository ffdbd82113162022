#pragma once
// One rank of switchyard-moe-bench on the GPU: its Buffer, device weights and MoeLayer; the checked
// call whose sampled tokens go back to the parent for the reference; the timed calls with each phase's
// marks; the same grouped GEMMs alone (the layer's rows, then full capacity: the plain GEMM's peak);
// and, on rank 0, the read bandwidth of HBM. Everything comes back as one JSON text, the same whether
// the rank is a thread or a forked process.
#include <string>
#include <vector>

#include "moe_shape.hpp"
#include "switchyard/group.hpp"
#include "workload/workload.hpp"

namespace switchyard::moe_bench {

// `data`: every rank's inputs (the routing of all ranks sizes this rank's GEMMs alone).
std::string run_moe_rank(const MoeBenchOptions& options, const std::vector<workload::RankData>& data,
                         int64_t capacity, Group& group);

// The tokens of `rank` whose y rows the rank returns for the check: check_tokens of them, spread.
std::vector<int64_t> checked_tokens(const MoeBenchOptions& options, int64_t num_tokens);

}  // namespace switchyard::moe_bench
