#include "core/symmetric_sizing.hpp"

#include <algorithm>
#include <string>

#include "common/fp8_cast.hpp"
#include "core/plan_context.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::detail {

common::SymmetricToken symmetric_token(int hidden, bool use_fp8, int topk) {
  common::SymmetricToken token{};
  token.row_bytes = static_cast<uint32_t>(hidden) * (use_fp8 ? 1u : 2u);
  token.num_scales = use_fp8 ? static_cast<uint32_t>(hidden / common::kFp8CastBlock) : 0u;
  token.topk = static_cast<uint32_t>(topk);
  return token;
}

common::SymmetricLayout symmetric_layout(const Topology& topology, const BufferSizing& sizing,
                                         size_t region_offset) {
  common::SymmetricLayout layout{};
  layout.region_offset = region_offset;
  layout.num_ranks = topology.num_ranks;
  layout.local_experts = sizing.num_experts / std::max(1, topology.num_ranks);
  layout.topk = sizing.topk;
  layout.max_tokens_per_rank = sizing.symmetric_max_tokens_per_rank;
  layout.hidden = sizing.hidden;
  // fp8 rows are smaller but carry scales: the token stride holds either. NOTES (session 15): every
  // token starts on a 128-byte line, so that the receivers' TMA loads of a row start on one.
  const size_t token = std::max(symmetric_token(sizing.hidden, false, sizing.topk).bytes(),
                                symmetric_token(sizing.hidden, true, sizing.topk).bytes());
  layout.token_bytes = static_cast<uint32_t>(common::align_up(token, common::kSymmetricAreaAlignment));
  layout.combine_row_bytes = static_cast<uint32_t>(
      common::align_up(static_cast<size_t>(sizing.hidden) * 2, common::kSymmetricAlignment));
  layout.heap_input_tokens = sizing.symmetric_heap_input ? sizing.symmetric_max_tokens_per_rank : 0;
  layout.heap_output_rows = sizing.symmetric_heap_output_rows_per_expert;
  layout.heap_receive_rows = sizing.symmetric_heap_receive_rows_per_expert;
  layout.heap_receive_element_bytes = sizing.symmetric_heap_receive_dtype == DType::bf16 ? 2u : 1u;
  return layout;
}

void check_symmetric_heap_tensors(const Topology& topology, const BufferSizing& sizing) {
  const int64_t max_tokens = sizing.symmetric_max_tokens_per_rank;
  if ((sizing.symmetric_heap_input || sizing.symmetric_heap_output_rows_per_expert != 0 ||
       sizing.symmetric_heap_receive_rows_per_expert != 0) &&
      max_tokens <= 0) {
    throw InvalidArgument(
        std::string("sizing: symmetric_heap_input / symmetric_heap_output_rows_per_expert / "
                    "symmetric_heap_receive_rows_per_expert reserve tensors in the "
                    "symmetric region: expected symmetric_max_tokens_per_rank > 0 with them, got ") +
        std::to_string(max_tokens) + " with symmetric_heap_input=" +
        (sizing.symmetric_heap_input ? "true" : "false") + ", symmetric_heap_output_rows_per_expert=" +
        std::to_string(sizing.symmetric_heap_output_rows_per_expert) +
        " and symmetric_heap_receive_rows_per_expert=" +
        std::to_string(sizing.symmetric_heap_receive_rows_per_expert));
  }
  // An expert receives at most every rank's max_tokens_per_rank rows: more rows would never be read.
  const int64_t most_rows =
      static_cast<int64_t>(std::max(1, topology.num_ranks)) * std::max<int64_t>(max_tokens, 0);
  if (sizing.symmetric_heap_output_rows_per_expert < 0 ||
      sizing.symmetric_heap_output_rows_per_expert > most_rows) {
    throw InvalidArgument("sizing.symmetric_heap_output_rows_per_expert: expected 0.." +
                          std::to_string(most_rows) + " (ranks x symmetric_max_tokens_per_rank), got " +
                          std::to_string(sizing.symmetric_heap_output_rows_per_expert));
  }
  if (sizing.symmetric_heap_receive_dtype != DType::fp8_e4m3 &&
      sizing.symmetric_heap_receive_dtype != DType::bf16) {
    throw InvalidArgument(
        std::string("sizing.symmetric_heap_receive_dtype: expected fp8_e4m3 (fp8 dispatches, "
                    "with f32 scales) or bf16 (bf16 dispatches), got ") +
        dtype_name(sizing.symmetric_heap_receive_dtype));
  }
  if (sizing.symmetric_heap_receive_rows_per_expert < 0 ||
      sizing.symmetric_heap_receive_rows_per_expert > most_rows) {
    throw InvalidArgument("sizing.symmetric_heap_receive_rows_per_expert: expected 0.." +
                          std::to_string(most_rows) + " (ranks x symmetric_max_tokens_per_rank), got " +
                          std::to_string(sizing.symmetric_heap_receive_rows_per_expert));
  }
}

}  // namespace switchyard::detail

namespace switchyard {

size_t symmetric_heap_bytes(const Topology& topology, const BufferSizing& sizing) {
  topology.validate();
  detail::check_symmetric_heap_tensors(topology, sizing);
  if (sizing.symmetric_max_tokens_per_rank <= 0) return 0;
  detail::check_sizing(sizing);
  return detail::symmetric_layout(topology, sizing, 0).region_bytes();
}

}  // namespace switchyard
