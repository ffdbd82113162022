#pragma once
// The CPU `symmetric` engine's pull combine (common/symmetric_protocol.hpp, "pull"), used where every
// rank is a thread of this process (Config::symmetric_combine): no combine buffer and no barrier.
//   announce   this rank writes where its y is (an address, or an offset in its heap) into its own pull
//   record, then releases the call; gather     it acquires every peer's record (bounded), skipping masked
//   ones; the ranks left then
//              are the call's participants (cpu/symmetric/participants.hpp), and slots routed to the
//              others' experts are dropped;
//   reduce     each token's valid slots, read straight from the experts' ranks' y at the row the
//              dispatch left in the handle (position, begin), in increasing slot order with std::fma
//              from +0, rounded to bf16 once: the push path's arithmetic, bit for bit;
//   release    it releases the call into its done word in every peer's heap, and waits (bounded) until
//              every peer has done the same in its own: then no peer reads its y any more (a masked
//              peer is not awaited, and finds y withdrawn should it still read).
#include <cstdint>

#include "common/sym_heap.hpp"
#include "common/symmetric_protocol.hpp"
#include "core/expert_major_handle.hpp"
#include "cpu/expert_major/outputs.hpp"
#include "cpu/symmetric/lease.hpp"

namespace switchyard::cpu {

// Reduces this rank's tokens into combined_x [N, hidden] from every rank's y [L, C, hidden]; `y` is this
// rank's (an address, or an offset in its heap).
void pull_combine(const InPlaceCall& call, const detail::ExpertMajorHandleData& handle,
                  common::SymmetricRows y, int hidden, const int64_t* topk_idx, const float* topk_weights,
                  const CombineBiases& biases, uint16_t* combined_x);

// The dispatch's part, after its barrier (every target's workspace holds this call's counts): where
// this rank's rows start among each expert's rows, begin[e] = the counts of participating sources
// before this rank (0 for the experts of a rank that does not take part).
void pull_row_begins(const common::SymHeap& heap, const common::SymmetricLayout& layout, int half,
                     int local_experts, int64_t max_tokens_per_rank, const Participants& participants,
                     int32_t* begin);

}  // namespace switchyard::cpu
