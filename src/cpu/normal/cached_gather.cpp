#include "cpu/normal/cached_gather.hpp"

#include <cstring>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::cpu {

void gather_cached_rows(const DispatchContext& context, const int32_t* cached_recv_src_token, int channel) {
  const uint32_t row_bytes = context.row_bytes, num_scales = context.num_scales;
  for (int source = 0; source < context.num_ranks; ++source) {
    const int index = source * context.num_channels + channel;
    const uint8_t* source_heap = context.heap->peer_base(source);
    const uint8_t* x = source_heap + context.input.x_offset();
    const float* scales = reinterpret_cast<const float*>(source_heap + context.input.scales_offset());
    for (int64_t row = context.recv_channel_start[index]; row < context.recv_channel_start[index + 1];
         ++row) {
      const int64_t token = cached_recv_src_token[row];
      // The handle is this Buffer's own, but a read outside the source's input would be a read of
      // whatever the heap holds there: refuse it rather than copy it.
      if (token < 0 || token >= context.input.max_tokens) {
        throw SystemError("dispatch: rank " + std::to_string(context.rank) + "'s cached handle names token " +
                          std::to_string(token) + " of rank " + std::to_string(source) + " at row " +
                          std::to_string(row) + ", outside its heap input of " +
                          std::to_string(context.input.max_tokens) + " rows");
      }
      std::memcpy(context.recv_x + row * row_bytes, x + token * row_bytes, row_bytes);
      if (context.recv_x_scales) {
        std::memcpy(context.recv_x_scales + row * num_scales, scales + token * num_scales,
                    num_scales * sizeof(float));
      }
      context.recv_src_token[row] = static_cast<int32_t>(token);
    }
  }
}

}  // namespace switchyard::cpu
