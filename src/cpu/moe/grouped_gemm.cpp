#include "cpu/moe/grouped_gemm.hpp"

#include "common/moe_layout.hpp"
#include "common/moe_numerics.hpp"

namespace switchyard::cpu {

void gemm_bf16(const uint16_t* a, int64_t rows, const uint16_t* w, int64_t n, int k, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t col = 0; col < n; ++col) out[row * n + col] = common::dot_bf16(a + row * k, w + col * k, k);
  }
}

void gemm_fp8_blockwise(const uint8_t* a, const float* a_scales, int64_t rows, const uint8_t* w,
                        const float* w_scales, int64_t n, int k, float* out,
                        const common::MoeWeightLayout* w1) {
  const int scales_per_row = k / common::kMoeScaleBlock;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t col = 0; col < n; ++col) {
      const int64_t scale_row = w1 ? w1->w1_scale_row_of_stored(col) : col / common::kMoeScaleBlock;
      const float* w_block_scales = w_scales + scale_row * scales_per_row;
      out[row * n + col] = common::dot_fp8_blockwise(a + row * k, a_scales + row * scales_per_row,
                                                     w + col * k, w_block_scales, k);
    }
  }
}

}  // namespace switchyard::cpu
