#include "workload/workload.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>

#include "common/numeric.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::workload {

namespace {

// fp8 rows carry one fp32 scale per this many channels (DESIGN.md, Inputs).
constexpr int64_t kScaleBlock = 128;
// About one slot in this many is -1 in Routing::random.
constexpr uint64_t kInvalidSlotOneIn = 16;
// About one x value in this many is an exact zero.
constexpr uint64_t kZeroValueOneIn = 16;
// In Routing::skewed a slot picks one of rank 0's experts with probability 3/4.
constexpr uint64_t kSkewedHotOneIn = 4;
constexpr uint8_t kPoisonByte = 0xA5;

// A uniform draw in [0, bound), bound >= 1. std::uniform_int_distribution is implementation-defined
// (libstdc++ and libc++ give different streams), so rejection sampling is written out here.
uint64_t draw_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;  // draws >= limit would bias the modulo
  uint64_t value;
  do {
    value = rng();
  } while (value >= limit);
  return value % bound;
}

// Independent, well-mixed streams per (seed, rank, purpose).
uint64_t splitmix64(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

std::mt19937_64 make_rng(uint64_t seed, uint64_t rank, uint64_t purpose) {
  return std::mt19937_64(splitmix64(splitmix64(splitmix64(seed) ^ rank) ^ purpose));
}

enum Purpose : uint64_t { kRouting = 1, kValues = 2, kScales = 3, kWeights = 4, kGlobal = 5, kBias = 6 };

// A random bf16 with |v| in [2^-8, 4): random sign, exponent and all 7 mantissa bits, so that sums of
// them exercise rounding. One value in 16 is an exact +0. One draw per value: the inputs of the
// default benchmark shape are a quarter of a billion values.
uint16_t random_bf16(std::mt19937_64& rng) {
  const uint64_t bits = rng();
  if (bits % kZeroValueOneIn == 0) return 0;
  const uint16_t sign = static_cast<uint16_t>(((bits >> 8) & 1u) << 15);
  const uint16_t mantissa = static_cast<uint16_t>((bits >> 9) & 0x7fu);
  // NOTES: a 48-bit field modulo 10: the bias (under 2^-44) is far below anything a test could see.
  const uint16_t exponent = static_cast<uint16_t>(119 + (bits >> 16) % 10);  // 2^-8 .. 2^1
  return static_cast<uint16_t>(sign | (exponent << 7) | mantissa);
}

// Any e4m3 byte except the two NaNs (0x7f, 0xff).
uint8_t random_fp8(std::mt19937_64& rng) {
  const uint64_t value = draw_below(rng, 254);
  return static_cast<uint8_t>(value < 0x7f ? value : value + 1);
}

// A positive scale in [2^-9, 2^-1): dequantised values stay well inside bf16's range.
float random_scale(std::mt19937_64& rng) {
  const uint32_t exponent = static_cast<uint32_t>(127 - 9 + draw_below(rng, 8));
  const uint32_t mantissa = static_cast<uint32_t>(draw_below(rng, 1u << 23));
  return common::bits_to_float((exponent << 23) | mantissa);
}

// A positive weight in (0, 1].
float random_weight(std::mt19937_64& rng) {
  return static_cast<float>(draw_below(rng, 1u << 24) + 1) / static_cast<float>(1u << 24);
}

void validate_shape(const Shape& shape) {
  const Topology& topology = shape.topology;
  if (topology.num_ranks < 1 || topology.ranks_per_node < 1 ||
      topology.num_ranks % topology.ranks_per_node != 0) {
    throw InvalidArgument("shape.topology: expected ranks_per_node a divisor of num_ranks, got " +
                          std::to_string(topology.num_ranks) + " ranks, " +
                          std::to_string(topology.ranks_per_node) + " per node");
  }
  if (!shape.tokens_per_rank_list.empty() &&
      shape.tokens_per_rank_list.size() != static_cast<size_t>(topology.num_ranks)) {
    throw InvalidArgument("shape.tokens_per_rank_list: expected empty or one count per rank (" +
                          std::to_string(topology.num_ranks) + "), got " +
                          std::to_string(shape.tokens_per_rank_list.size()));
  }
  for (int rank = 0; rank < topology.num_ranks; ++rank) {
    if (shape.tokens_of(rank) < 0) {
      throw InvalidArgument("shape.tokens_per_rank: expected >= 0, got " +
                            std::to_string(shape.tokens_of(rank)) + " for rank " + std::to_string(rank));
    }
  }
  if (shape.num_experts < 1 || shape.num_experts % topology.num_ranks != 0) {
    throw InvalidArgument("shape.num_experts: expected a positive multiple of num_ranks (" +
                          std::to_string(topology.num_ranks) + "), got " + std::to_string(shape.num_experts));
  }
  if (shape.topk < 1 || shape.topk > shape.num_experts) {
    throw InvalidArgument("shape.topk: expected 1..num_experts (" + std::to_string(shape.num_experts) +
                          ") distinct experts per token, got " + std::to_string(shape.topk));
  }
  if (shape.dtype != DType::bf16 && shape.dtype != DType::fp8_e4m3) {
    throw InvalidArgument(std::string("shape.dtype: expected bf16 or fp8_e4m3, got ") +
                          dtype_name(shape.dtype));
  }
  if (shape.hidden < 1 || (shape.dtype == DType::fp8_e4m3 && shape.hidden % kScaleBlock != 0)) {
    throw InvalidArgument("shape.hidden: expected >= 1 (a multiple of 128 for fp8), got " +
                          std::to_string(shape.hidden));
  }
}

// Fills one token's k slots with distinct experts; `pick` proposes candidates.
template <typename Pick>
void fill_distinct(int64_t* slots, int topk, Pick&& pick) {
  for (int slot = 0; slot < topk; ++slot) {
    int64_t expert;
    do {
      expert = pick();
    } while (std::find(slots, slots + slot, expert) != slots + slot);
    slots[slot] = expert;
  }
}

std::string format_value(const TensorView& tensor, int64_t index) {
  char text[96];
  const uint8_t* bytes = tensor.as<const uint8_t>();
  switch (tensor.dtype) {
    case DType::bf16: {
      uint16_t bits;
      std::memcpy(&bits, bytes + index * 2, 2);
      std::snprintf(text, sizeof(text), "bf16 0x%04x (%.9g)", bits,
                    static_cast<double>(common::bf16_to_float(bits)));
      break;
    }
    case DType::fp8_e4m3: {
      uint8_t bits = bytes[index];
      std::snprintf(text, sizeof(text), "fp8 0x%02x (%.9g)", bits,
                    static_cast<double>(common::fp8_e4m3_to_float(bits)));
      break;
    }
    case DType::f32: {
      uint32_t bits;
      std::memcpy(&bits, bytes + index * 4, 4);
      std::snprintf(text, sizeof(text), "f32 0x%08x (%.9g)", bits,
                    static_cast<double>(common::bits_to_float(bits)));
      break;
    }
    case DType::i32: {
      int32_t value;
      std::memcpy(&value, bytes + index * 4, 4);
      std::snprintf(text, sizeof(text), "%" PRId32, value);
      break;
    }
    case DType::i64: {
      int64_t value;
      std::memcpy(&value, bytes + index * 8, 8);
      std::snprintf(text, sizeof(text), "%" PRId64, value);
      break;
    }
    case DType::boolean:
      std::snprintf(text, sizeof(text), "bool 0x%02x", bytes[index]);
      break;
  }
  return text;
}

std::string shape_text(const TensorView& tensor) {
  std::ostringstream out;
  out << "[";
  for (int i = 0; i < tensor.ndim; ++i) out << (i ? ", " : "") << tensor.shape[i];
  out << "]";
  return out.str();
}

}  // namespace

int64_t Shape::tokens_of(int rank) const {
  return tokens_per_rank_list.empty() ? tokens_per_rank : tokens_per_rank_list.at(rank);
}

std::string Shape::describe() const {
  std::ostringstream out;
  out << "ranks=" << topology.num_ranks << " ranks_per_node=" << topology.ranks_per_node << " tokens=";
  if (tokens_per_rank_list.empty()) {
    out << tokens_per_rank;
  } else {
    out << "[";
    for (size_t i = 0; i < tokens_per_rank_list.size(); ++i) out << (i ? "," : "") << tokens_per_rank_list[i];
    out << "]";
  }
  static const char* const kRoutingNames[] = {"random", "all_invalid", "one_expert", "skewed"};
  out << " hidden=" << hidden << " topk=" << topk << " experts=" << num_experts
      << " dtype=" << dtype_name(dtype) << " weights=" << (with_weights ? "yes" : "no")
      << " routing=" << kRoutingNames[static_cast<int>(routing)];
  return out.str();
}

reference::RankInputs RankData::inputs() const {
  reference::RankInputs in;
  in.x = x.view();
  in.x_scales = x_scales.view();
  in.topk_idx = topk_idx.view();
  in.topk_weights = topk_weights.view();
  return in;
}

std::vector<RankData> generate(const Shape& shape, uint64_t seed) {
  validate_shape(shape);
  const int num_ranks = shape.topology.num_ranks;
  const int experts_per_rank = shape.num_experts / num_ranks;
  const int topk = shape.topk;
  const int64_t hidden = shape.hidden;

  // Routing::one_expert sends every token of every rank to this one expert.
  std::mt19937_64 global_rng = make_rng(seed, 0, kGlobal);
  const int64_t the_one_expert = static_cast<int64_t>(draw_below(global_rng, shape.num_experts));

  std::vector<RankData> ranks(num_ranks);
  for (int rank = 0; rank < num_ranks; ++rank) {
    const int64_t num_tokens = shape.tokens_of(rank);
    RankData& data = ranks[rank];

    std::mt19937_64 routing_rng = make_rng(seed, rank, kRouting);
    data.topk_idx = Tensor::empty(DType::i64, {num_tokens, topk});
    int64_t* ids = data.topk_idx.as<int64_t>();
    for (int64_t token = 0; token < num_tokens; ++token) {
      int64_t* slots = ids + token * topk;
      switch (shape.routing) {
        case Routing::random:
          fill_distinct(slots, topk,
                        [&] { return static_cast<int64_t>(draw_below(routing_rng, shape.num_experts)); });
          for (int slot = 0; slot < topk; ++slot) {
            if (draw_below(routing_rng, kInvalidSlotOneIn) == 0) slots[slot] = -1;
          }
          break;
        case Routing::all_invalid:
          std::fill(slots, slots + topk, int64_t{-1});
          break;
        case Routing::one_expert:
          std::fill(slots, slots + topk, int64_t{-1});
          slots[0] = the_one_expert;
          break;
        case Routing::skewed:
          fill_distinct(slots, topk, [&] {
            const bool hot = draw_below(routing_rng, kSkewedHotOneIn) != 0;
            return static_cast<int64_t>(draw_below(routing_rng, hot ? experts_per_rank : shape.num_experts));
          });
          break;
      }
    }

    std::mt19937_64 value_rng = make_rng(seed, rank, kValues);
    data.x = Tensor::empty(shape.dtype, {num_tokens, hidden});
    const int64_t num_values = num_tokens * hidden;
    if (shape.dtype == DType::bf16) {
      uint16_t* values = data.x.as<uint16_t>();
      for (int64_t i = 0; i < num_values; ++i) values[i] = random_bf16(value_rng);
    } else {
      uint8_t* values = data.x.as<uint8_t>();
      for (int64_t i = 0; i < num_values; ++i) values[i] = random_fp8(value_rng);
      std::mt19937_64 scale_rng = make_rng(seed, rank, kScales);
      data.x_scales = Tensor::empty(DType::f32, {num_tokens, hidden / kScaleBlock});
      float* scales = data.x_scales.as<float>();
      for (int64_t i = 0; i < data.x_scales.numel(); ++i) scales[i] = random_scale(scale_rng);
    }

    if (shape.with_weights) {
      // Slots that are -1 get a weight too: the engines must zero what they do not route.
      std::mt19937_64 weight_rng = make_rng(seed, rank, kWeights);
      data.topk_weights = Tensor::empty(DType::f32, {num_tokens, topk});
      float* weights = data.topk_weights.as<float>();
      for (int64_t i = 0; i < num_tokens * topk; ++i) weights[i] = random_weight(weight_rng);
    }
  }
  return ranks;
}

Tensor combine_bias(const Shape& shape, uint64_t seed, int rank, int which) {
  validate_shape(shape);
  const int64_t num_tokens = shape.tokens_of(rank);
  Tensor bias = Tensor::empty(DType::bf16, {num_tokens, shape.hidden});
  std::mt19937_64 rng = make_rng(seed, static_cast<uint64_t>(rank), kBias + static_cast<uint64_t>(which));
  uint16_t* values = bias.as<uint16_t>();
  for (int64_t i = 0; i < bias.numel(); ++i) {
    values[i] = random_bf16(rng);
    if (draw_below(rng, kZeroValueOneIn) == 0) values[i] = 0x8000;  // -0.0
  }
  return bias;
}

Tensor synthetic_expert(const TensorView& recv_x, const TensorView& recv_x_scales, int rank) {
  if (!recv_x.defined() || recv_x.ndim != 2 || recv_x.device != Device::cpu ||
      (recv_x.dtype != DType::bf16 && recv_x.dtype != DType::fp8_e4m3)) {
    throw InvalidArgument("recv_x: expected a host bf16 or fp8_e4m3 tensor [M, H], got " + recv_x.describe());
  }
  const int64_t rows = recv_x.shape[0];
  const int64_t hidden = recv_x.shape[1];
  const bool fp8 = recv_x.dtype == DType::fp8_e4m3;
  if (fp8) {
    if (hidden % kScaleBlock != 0 || !recv_x_scales.defined() || recv_x_scales.dtype != DType::f32 ||
        recv_x_scales.ndim != 2 || recv_x_scales.shape[0] < rows ||
        recv_x_scales.shape[1] != hidden / kScaleBlock || recv_x_scales.device != Device::cpu) {
      throw InvalidArgument("recv_x_scales: expected a host f32 tensor [" + std::to_string(rows) + ", " +
                            std::to_string(hidden / kScaleBlock) + "] for fp8 recv_x " + recv_x.describe() +
                            ", got " + recv_x_scales.describe());
    }
  }
  const float factor = 1.0f + static_cast<float>(rank) / 8.0f;
  Tensor y = Tensor::empty(DType::bf16, {rows, hidden});
  uint16_t* out = y.as<uint16_t>();
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t col = 0; col < hidden; ++col) {
      float value;
      if (fp8) {
        const float scale = recv_x_scales.as<const float>()[row * (hidden / kScaleBlock) + col / kScaleBlock];
        value = common::fp8_e4m3_to_float(recv_x.as<const uint8_t>()[row * hidden + col]) * scale;
      } else {
        value = common::bf16_to_float(recv_x.as<const uint16_t>()[row * hidden + col]);
      }
      out[row * hidden + col] = common::float_to_bf16(value * factor);
    }
  }
  return y;
}

void poison(const TensorView& tensor) {
  if (tensor.data != nullptr && tensor.nbytes() > 0) std::memset(tensor.data, kPoisonByte, tensor.nbytes());
}

bool bitwise_equal(const TensorView& actual, const TensorView& expected, std::string* why, int64_t rows) {
  auto fail = [&](const std::string& text) {
    if (why) *why = text;
    return false;
  };
  if (actual.defined() != expected.defined()) {
    return fail(std::string("defined: actual ") + (actual.defined() ? "is" : "is not") + ", expected " +
                (expected.defined() ? "is" : "is not"));
  }
  if (!expected.defined()) return true;
  if (actual.device != Device::cpu || expected.device != Device::cpu) {
    return fail("device: expected host tensors, got " + actual.describe() + " and " + expected.describe());
  }
  if (actual.dtype != expected.dtype) {
    return fail(std::string("dtype: actual ") + dtype_name(actual.dtype) + ", expected " +
                dtype_name(expected.dtype));
  }
  if (actual.ndim != expected.ndim) {
    return fail("ndim: actual " + shape_text(actual) + ", expected " + shape_text(expected));
  }
  for (int dim = 0; dim < expected.ndim; ++dim) {
    const bool row_dim = dim == 0 && rows >= 0;
    if (row_dim ? (actual.shape[0] < rows || expected.shape[0] < rows)
                : actual.shape[dim] != expected.shape[dim]) {
      return fail("shape: actual " + shape_text(actual) + ", expected " + shape_text(expected) +
                  (rows >= 0 ? " (comparing the first " + std::to_string(rows) + " rows)" : ""));
    }
  }
  int64_t row_elements = 1;
  for (int dim = 1; dim < expected.ndim; ++dim) row_elements *= expected.shape[dim];
  const int64_t count =
      expected.ndim == 0 ? expected.numel() : (rows >= 0 ? rows : expected.shape[0]) * row_elements;
  const size_t element = dtype_size(expected.dtype);
  const uint8_t* a = actual.as<const uint8_t>();
  const uint8_t* b = expected.as<const uint8_t>();
  if (count == 0 || std::memcmp(a, b, static_cast<size_t>(count) * element) == 0) return true;
  for (int64_t i = 0; i < count; ++i) {
    if (std::memcmp(a + i * element, b + i * element, element) != 0) {
      std::string where = expected.ndim <= 1 ? "index " + std::to_string(i)
                                             : "row " + std::to_string(i / row_elements) + ", column " +
                                                   std::to_string(i % row_elements);
      return fail(where + ": actual " + format_value(actual, i) + ", expected " + format_value(expected, i));
    }
  }
  return true;
}

}  // namespace switchyard::workload
