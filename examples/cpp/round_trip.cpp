// Four ranks as four threads of one process: dispatch 64 tokens per rank to their top-2 of 16
// experts, run an identity "expert", combine, and check the result. Each token comes back as the
// sum of the copies it sent, one per rank that holds one of its experts.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <switchyard/switchyard.hpp>
#include <vector>

using namespace switchyard;

float bf16_to_float(uint16_t bits) {  // bf16 is the top half of an f32
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

int main() {
  const int num_ranks = 4, num_experts = 16, topk = 2;
  const int64_t num_tokens = 64, hidden = 1024;
  std::vector<int64_t> num_received(num_ranks), num_returned_as_expected(num_ranks);

  run_ranks(num_ranks, [&](Group& group) {  // one thread per rank
    BufferOptions options;
    options.topology = Topology::single_node(num_ranks);
    options.rank = group.rank();
    options.backend = Backend::cpu;
    options.sizing.max_tokens_per_rank = num_tokens;  // sizes the symmetric heap
    options.sizing.hidden = hidden;
    options.sizing.topk = topk;
    options.sizing.num_experts = num_experts;
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));  // every rank's handle, by rank

    // This rank's tokens: hidden states, top-k expert ids (-1 = none) and gate weights.
    Tensor x = Tensor::empty(DType::bf16, {num_tokens, hidden});
    Tensor topk_idx = Tensor::empty(DType::i64, {num_tokens, topk});
    Tensor topk_weights = Tensor::empty(DType::f32, {num_tokens, topk});
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t h = 0; h < hidden; ++h) x.as<uint16_t>()[t * hidden + h] = 0x3f80;  // bf16 1.0
      for (int j = 0; j < topk; ++j) {
        topk_idx.as<int64_t>()[t * topk + j] = (t * 7 + j * 5 + group.rank()) % num_experts;
        topk_weights.as<float>()[t * topk + j] = 0.5f;
      }
    }

    DispatchLayout layout = buffer.get_dispatch_layout(topk_idx, num_experts);
    DispatchArgs dispatch;
    dispatch.x = x;
    dispatch.topk_idx = topk_idx;
    dispatch.topk_weights = topk_weights;
    dispatch.num_experts = num_experts;
    dispatch.layout = &layout;  // optional: computed inside dispatch when null
    DispatchResult recv = buffer.dispatch(dispatch);
    // recv.recv_x [M, hidden]: every token with an expert on this rank, by source rank, then token.
    // recv.recv_topk_idx holds local expert ids (-1: another rank's expert, with weight 0);
    // recv.num_recv_tokens_per_expert counts the rows of each local expert.

    Tensor y = recv.recv_x;  // run this rank's experts here: one bf16 row out per row in

    CombineArgs combine;
    combine.x = y;
    combine.topk_weights = recv.recv_topk_weights;
    combine.handle = &recv.handle;
    CombineResult out = buffer.combine(combine);
    // out.combined_x [num_tokens, hidden]: per token, the sum of the rows from the ranks that
    // received it, in ascending rank order (fp32, rounded to bf16 once).

    // With the identity expert and x = 1.0, a token comes back as the number of ranks it visited.
    const int experts_per_rank = num_experts / num_ranks;
    int64_t tokens_as_expected = 0;
    for (int64_t t = 0; t < num_tokens; ++t) {
      const int64_t* experts = topk_idx.as<int64_t>() + t * topk;
      const int ranks_visited = experts[0] / experts_per_rank == experts[1] / experts_per_rank ? 1 : 2;
      bool row_is_expected = true;
      for (int64_t h = 0; h < hidden; ++h) {
        row_is_expected &= bf16_to_float(out.combined_x.as<uint16_t>()[t * hidden + h]) == ranks_visited;
      }
      tokens_as_expected += row_is_expected;
    }
    num_received[group.rank()] = recv.num_recv_tokens;
    num_returned_as_expected[group.rank()] = tokens_as_expected;
  });

  bool all_as_expected = true;
  for (int rank = 0; rank < num_ranks; ++rank) {
    std::printf("rank %d: received %lld tokens; %lld of its %lld came back as expected\n", rank,
                static_cast<long long>(num_received[rank]),
                static_cast<long long>(num_returned_as_expected[rank]), static_cast<long long>(num_tokens));
    all_as_expected &= num_returned_as_expected[rank] == num_tokens;
  }
  return all_as_expected ? 0 : 1;
}
