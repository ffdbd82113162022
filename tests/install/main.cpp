// One rank on the CPU backend, through the installed headers and library only: dispatch a few
// tokens, run the identity expert, combine. With one rank each token comes back from exactly one
// place, so combined_x must equal x bit for bit, and the combined weights must equal the weights.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <switchyard/switchyard.hpp>
#include <vector>

namespace {

constexpr int64_t kNumTokens = 5;
constexpr int64_t kHidden = 256;
constexpr int64_t kTopk = 2;
constexpr int kNumExperts = 4;

// bf16 bits of a float that bf16 represents exactly (its low 16 bits are zero).
uint16_t bf16_bits(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

int run() {
  using namespace switchyard;

  BufferOptions options;
  options.topology = Topology::single_node(1);
  options.rank = 0;
  options.backend = Backend::cpu;
  options.sizing.max_tokens_per_rank = kNumTokens;
  options.sizing.hidden = kHidden;
  options.sizing.topk = kTopk;
  options.sizing.num_experts = kNumExperts;
  Buffer buffer(options);
  buffer.connect({buffer.local_handle()});

  Tensor x = Tensor::empty(DType::bf16, {kNumTokens, kHidden});
  Tensor topk_idx = Tensor::empty(DType::i64, {kNumTokens, kTopk});
  Tensor topk_weights = Tensor::empty(DType::f32, {kNumTokens, kTopk});
  for (int64_t t = 0; t < kNumTokens; ++t) {
    for (int64_t h = 0; h < kHidden; ++h) {
      // Non-zero values with few significant bits: exact in bf16, and no signed zeros.
      x.as<uint16_t>()[t * kHidden + h] = bf16_bits(static_cast<float>((t * kHidden + h) % 97) - 48.5f);
    }
    for (int64_t j = 0; j < kTopk; ++j) {
      topk_idx.as<int64_t>()[t * kTopk + j] = (t + j) % kNumExperts;
      topk_weights.as<float>()[t * kTopk + j] = 0.25f * static_cast<float>(j + 1);
    }
  }

  DispatchLayout layout = buffer.get_dispatch_layout(topk_idx, kNumExperts);
  DispatchArgs dispatch_args;
  dispatch_args.x = x;
  dispatch_args.topk_idx = topk_idx;
  dispatch_args.topk_weights = topk_weights;
  dispatch_args.num_experts = kNumExperts;
  dispatch_args.layout = &layout;
  DispatchResult received = buffer.dispatch(dispatch_args);
  if (received.num_recv_tokens != kNumTokens) {
    std::fprintf(stderr, "FAIL: received %lld tokens, expected %lld\n",
                 static_cast<long long>(received.num_recv_tokens), static_cast<long long>(kNumTokens));
    return 1;
  }

  // The identity expert: y = recv_x.
  CombineArgs combine_args;
  combine_args.x = received.recv_x;
  combine_args.topk_weights = received.recv_topk_weights;
  combine_args.handle = &received.handle;
  CombineResult combined = buffer.combine(combine_args);

  if (std::memcmp(combined.combined_x.data(), x.data(), x.nbytes()) != 0) {
    std::fprintf(stderr, "FAIL: combined_x differs from x\n");
    return 1;
  }
  if (std::memcmp(combined.combined_topk_weights.data(), topk_weights.data(), topk_weights.nbytes()) != 0) {
    std::fprintf(stderr, "FAIL: combined_topk_weights differ from topk_weights\n");
    return 1;
  }
  std::printf("switchyard %s installed: find_package, 1-rank CPU dispatch + combine round trip OK\n",
              SWITCHYARD_VERSION_STRING);
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "FAIL: %s\n", error.what());
    return 1;
  }
}
