#pragma once
// The read bandwidth of the GPU's memory, measured in the bench's own run: the denominator of the
// MoE layer's weight-read bound (every touched expert's weights read once).

namespace switchyard::moe_bench {

// GB/s (1e9 bytes) of one kernel reading `bytes` (rounded down to 16-byte words) on the current device,
// the best of a few runs after a warm-up; the buffer is larger than the L2 so nothing is served from it.
double measure_hbm_read_gbps(size_t bytes = size_t{4} << 30);

}  // namespace switchyard::moe_bench
