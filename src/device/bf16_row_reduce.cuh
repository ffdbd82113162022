#pragma once
// A warp's reduction of a few bf16 rows of the symmetric heap into one (the hierarchical combine's
// forwarders and RDMA receivers): per channel fp32 from +0 (or from the biases), the rows in the order
// given, rounded to bf16 once (DESIGN.md, Combine).
#include <cstdint>

#include "device/bf16x8.cuh"
#include "device/warp_group.cuh"

namespace switchyard::cuda {

// NOTES: a lane loads two 16-byte chunks of up to four rows before it adds them, so that up to eight
// loads are in flight per lane; one load at a time left the forwarder latency-bound (0.36 of its
// design roofline). The adds keep the given row order, so the sum is the same bits.
constexpr int kReduceRowBatch = 4;

// Row i is at base + slots[i] x 16 + row_offset (`slots`: shared memory, 16-byte units); `chunks`
// 16-byte words per row; every lane of the warp calls it. bias0_row / bias1_row (the token's bf16 [H]
// bias rows, or null): the sum starts at bias0 + bias1 instead of +0 (the home's final sum only).
__device__ __forceinline__ void reduce_bf16_rows(const uint8_t* base, const uint32_t* slots, int count,
                                                 size_t row_offset, uint32_t chunks, int4* out,
                                                 const uint16_t* bias0_row = nullptr,
                                                 const uint16_t* bias1_row = nullptr) {
  const int lane = lane_id();
  for (uint32_t chunk = lane; chunk < chunks; chunk += 64) {
    const bool second = chunk + 32 < chunks;
    float first_sum[8];
    float second_sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    start_bf16x8(first_sum, bias0_row, bias1_row, chunk);
    if (second) start_bf16x8(second_sum, bias0_row, bias1_row, chunk + 32);
    for (int batch = 0; batch < count; batch += kReduceRowBatch) {
      int4 first_rows[kReduceRowBatch];
      int4 second_rows[kReduceRowBatch];
#pragma unroll
      for (int u = 0; u < kReduceRowBatch; ++u) {
        if (batch + u < count) {
          const int4* row = reinterpret_cast<const int4*>(base + size_t{slots[batch + u]} * 16 + row_offset);
          first_rows[u] = row[chunk];
          second_rows[u] = second ? row[chunk + 32] : make_int4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kReduceRowBatch; ++u) {
        if (batch + u < count) {
          add_bf16x8(first_sum, first_rows[u]);
          if (second) add_bf16x8(second_sum, second_rows[u]);
        }
      }
    }
    out[chunk] = round_bf16x8(first_sum);
    if (second) out[chunk + 32] = round_bf16x8(second_sum);
  }
}

}  // namespace switchyard::cuda
