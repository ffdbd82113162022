#include "cpu/moe/swiglu.hpp"

#include <vector>

#include "common/moe_numerics.hpp"

namespace switchyard::cpu {

void swiglu_to_bf16(const common::MoeWeightLayout& layout, const uint16_t* h, int64_t rows, float clamp,
                    uint16_t* a) {
  const int intermediate = layout.intermediate;
  for (int64_t row = 0; row < rows; ++row) {
    const uint16_t* h_row = h + row * layout.w1_rows();
    for (int channel = 0; channel < intermediate; ++channel) {
      a[row * intermediate + channel] = common::float_to_bf16(
          common::swiglu(common::bf16_to_float(h_row[layout.gate_column(channel)]),
                         common::bf16_to_float(h_row[layout.up_column(channel)]), clamp));
    }
  }
}

void swiglu_to_fp8(const common::MoeWeightLayout& layout, const uint16_t* h, int64_t rows, float clamp,
                   uint8_t* a, float* a_scales) {
  const int intermediate = layout.intermediate;
  const int blocks = intermediate / common::kMoeScaleBlock;
  std::vector<float> activated(intermediate);
  for (int64_t row = 0; row < rows; ++row) {
    const uint16_t* h_row = h + row * layout.w1_rows();
    for (int channel = 0; channel < intermediate; ++channel) {
      activated[channel] = common::swiglu(common::bf16_to_float(h_row[layout.gate_column(channel)]),
                                          common::bf16_to_float(h_row[layout.up_column(channel)]), clamp);
    }
    for (int block = 0; block < blocks; ++block) {
      a_scales[row * blocks + block] =
          common::requantise_block_to_fp8(activated.data() + block * common::kMoeScaleBlock,
                                          a + row * intermediate + block * common::kMoeScaleBlock);
    }
  }
}

}  // namespace switchyard::cpu
