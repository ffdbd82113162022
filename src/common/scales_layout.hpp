#pragma once
// Where a dispatch's fp8 scales lie in the caller's memory (DispatchArgs::x_scales): row-major
// [N, B], or column-major as DeepEP's users pass them (x_scales_column_major: the memory holds the
// transpose [B, N]). B = hidden / 128. The CPU and CUDA engines read the caller's scales through this
// type only; what they write (the ring message, recv_x_scales) is always row-major.
#include "common/host_device.hpp"

namespace switchyard::common {

struct ScalesLayout {
  int64_t num_tokens = 0;   // N
  uint32_t num_scales = 0;  // B
  bool column_major = false;

  // Index of token `token`'s scale block `block`: t * B + b row-major, b * N + t column-major.
  SY_HD int64_t index(int64_t token, uint32_t block) const {
    return column_major ? static_cast<int64_t>(block) * num_tokens + token
                        : token * static_cast<int64_t>(num_scales) + block;
  }
};

// Copies token `token`'s B scales from `scales` (laid out as `layout` says) to `destination`, contiguous.
// Device code spreads a token's blocks over a warp's lanes instead, each reading through index().
SY_HD void copy_token_scales(const float* scales, const ScalesLayout& layout, int64_t token,
                             float* destination) {
  for (uint32_t block = 0; block < layout.num_scales; ++block) {
    destination[block] = scales[layout.index(token, block)];
  }
}

}  // namespace switchyard::common
