// interleave_gate_up (switchyard/moe.hpp): W1, or its block scales, from MoeGateUp::halves to
// MoeGateUp::interleaved. Per expert, two strided copies: the gate half's blocks into the even block slots,
// the up half's into the odd ones. W1 moves in 64-row blocks; its scales in single rows (one scale row
// stands for 128 rows of one projection).
#include <cstring>
#include <string>

#include "common/moe_layout.hpp"
#include "core/device_memory.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/moe.hpp"

namespace switchyard {

void interleave_gate_up(const TensorView& halves, const TensorView& out, Stream stream) {
  if (!halves.defined() || halves.data == nullptr) {
    throw InvalidArgument(
        "halves: expected w1 [L, 2I, H] (bf16 or fp8_e4m3) or w1_scales [L, 2I / 128, H / 128] "
        "(f32), got none");
  }
  const bool scales = halves.dtype == DType::f32;
  if (!(scales || halves.dtype == DType::bf16 || halves.dtype == DType::fp8_e4m3) || halves.ndim != 3) {
    throw InvalidArgument(
        "halves: expected w1 [L, 2I, H] (bf16 or fp8_e4m3) or w1_scales [L, 2I / 128, H / 128] "
        "(f32), got " +
        halves.describe());
  }
  // Rows of one block: 64 weight rows, or one scale row. I must be whole 128-row scale blocks either way.
  const int64_t block_rows = scales ? 1 : common::kMoeGateUpBlock;
  const int64_t multiple = scales ? 2 : 2 * common::kMoeScaleBlock;
  if (halves.shape[1] % multiple != 0) {
    throw InvalidArgument(std::string("halves: expected dimension 1 (") + (scales ? "2I / 128" : "2I") +
                          ") a multiple of " + std::to_string(multiple) +
                          " (I in whole 128-row blocks), got " + halves.describe());
  }
  if (!out.defined() || out.data == nullptr || out.dtype != halves.dtype || out.ndim != 3 ||
      out.shape != halves.shape || out.device != halves.device || out.device_index != halves.device_index) {
    throw InvalidArgument("out: expected a tensor like halves (" + halves.describe() + "), got " +
                          (out.defined() ? out.describe() : std::string("none")));
  }
  const auto* source = static_cast<const uint8_t*>(halves.data);
  auto* destination = static_cast<uint8_t*>(out.data);
  const size_t bytes = halves.nbytes();
  if (destination < source + bytes && source < destination + bytes) {
    throw InvalidArgument(
        "out: expected memory apart from halves' (the copy reads every row of halves after "
        "writing some of out), got overlapping tensors: " +
        out.describe());
  }

  const size_t row_bytes = static_cast<size_t>(halves.shape[2]) * dtype_size(halves.dtype);
  const size_t block_bytes = static_cast<size_t>(block_rows) * row_bytes;
  const size_t expert_bytes = static_cast<size_t>(halves.shape[1]) * row_bytes;
  const size_t half_bytes = expert_bytes / 2;
  const size_t blocks = static_cast<size_t>(halves.shape[1] / (2 * block_rows));
  for (int64_t expert = 0; expert < halves.shape[0]; ++expert) {
    for (int up = 0; up < 2; ++up) {
      // Block b of this half goes to block slot 2b + up: rows block_bytes apart in, 2 * block_bytes out.
      const uint8_t* from = source + expert * expert_bytes + up * half_bytes;
      uint8_t* to = destination + expert * expert_bytes + up * block_bytes;
      if (halves.device == Device::cuda) {
        detail::copy_cuda_rows(to, 2 * block_bytes, from, block_bytes, block_bytes, blocks,
                               halves.device_index, stream);
      } else {
        for (size_t b = 0; b < blocks; ++b)
          std::memcpy(to + 2 * b * block_bytes, from + b * block_bytes, block_bytes);
      }
    }
  }
}

}  // namespace switchyard
