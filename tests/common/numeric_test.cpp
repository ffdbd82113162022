// The bit-exact number formats shared by host and device (src/common/numeric.hpp).
#include "common/numeric.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace switchyard::common {
namespace {

float from_bits(uint32_t bits) {
  return bits_to_float(bits);
}
bool is_bf16_nan(uint16_t bits) {
  return (bits & 0x7f80u) == 0x7f80u && (bits & 0x007fu) != 0;
}

// An independent bf16 rounding: the two neighbours by truncation, the nearer one in double, ties to
// the even one. Finite inputs whose rounding stays finite.
uint16_t bf16_by_definition(float value) {
  const uint32_t bits = float_to_bits(value);
  const uint16_t down = static_cast<uint16_t>(bits >> 16);  // toward zero
  const uint16_t up = static_cast<uint16_t>(down + 1);      // away from zero
  const double exact = std::fabs(static_cast<double>(value));
  const double below = std::fabs(static_cast<double>(bf16_to_float(down)));
  const double above = std::fabs(static_cast<double>(bf16_to_float(up)));
  if (exact - below < above - exact) return down;
  if (exact - below > above - exact) return up;
  return (down & 1u) ? up : down;
}

TEST(Bf16, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  // 1 + 2^-8 lies halfway between 1 (even) and 1 + 2^-7 (odd).
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3F80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3F82);
  // Just above the tie rounds up; just below rounds down.
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001)), 0x3F81);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F807FFF)), 0x3F80);
  // Negative values round the magnitude the same way.
  EXPECT_EQ(float_to_bf16(-(1.0f + 3.0f / 256)), 0xBF82);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
}

TEST(Bf16, KeepsInfinityAndOverflowsPastTheLargestFiniteToInfinity) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7F7FFF)), 0x7F7F);  // largest finite bf16 stays
}

TEST(Bf16, KeepsNaNAsQuietNaN) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  // A NaN whose payload sits only in the low bits must not round into infinity.
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(from_bits(0x7F800001))));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(from_bits(0xFF80FFFF))));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(from_bits(0x7FFFFFFF))));
}

TEST(Bf16, RoundsSubnormalsWithTiesToEven) {
  // The smallest bf16 subnormal is 2^-133 (0x0001).
  EXPECT_EQ(float_to_bf16(std::ldexp(1.0f, -133)), 0x0001);
  EXPECT_EQ(float_to_bf16(std::ldexp(1.0f, -134)), 0x0000);  // tie between 0 and 1: even
  EXPECT_EQ(float_to_bf16(std::ldexp(3.0f, -134)), 0x0002);  // tie between 1 and 2: even
  EXPECT_EQ(float_to_bf16(std::ldexp(5.0f, -135)), 0x0001);  // 1.25 units: down
  EXPECT_EQ(float_to_bf16(from_bits(0x007FFFFF)), 0x0080);   // largest subnormal rounds to 2^-126
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));
}

TEST(Bf16, EveryNonNaNValueRoundTripsExactly) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const uint16_t value = static_cast<uint16_t>(bits);
    if (is_bf16_nan(value)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(value)));
      EXPECT_TRUE(is_bf16_nan(float_to_bf16(bf16_to_float(value))));
      continue;
    }
    ASSERT_EQ(float_to_bf16(bf16_to_float(value)), value) << "bits 0x" << std::hex << bits;
  }
}

TEST(Bf16, MatchesRoundingByDefinitionOnRandomFloats) {
  std::mt19937_64 rng(0xbf16);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if ((bits & 0x7F800000u) == 0x7F800000u) continue;  // inf / NaN: tested above
    if ((bits & 0x7FFFFFFFu) >= 0x7F7F8000u) continue;  // rounds to infinity: tested above
    ASSERT_EQ(float_to_bf16(from_bits(bits)), bf16_by_definition(from_bits(bits)))
        << "bits 0x" << std::hex << bits;
  }
}

TEST(Fp8E4m3, DecodesNormalsSubnormalsZerosAndNaN) {
  EXPECT_EQ(fp8_e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x3A), 1.25f);
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0xFE), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_float(0x07), std::ldexp(7.0f, -9));  // largest subnormal
  EXPECT_EQ(float_to_bits(fp8_e4m3_to_float(0x00)), 0x00000000u);
  EXPECT_EQ(float_to_bits(fp8_e4m3_to_float(0x80)), 0x80000000u);  // -0
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xFF)));
  // 0x78..0x7E are finite in e4m3fn (no infinities).
  EXPECT_EQ(fp8_e4m3_to_float(0x78), 256.0f);
}

TEST(Fp8E4m3, SaturatesAt448) {
  EXPECT_EQ(float_to_fp8_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(449.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(464.0f), 0x7E);  // halfway to the (NaN) next code
  EXPECT_EQ(float_to_fp8_e4m3(1.0e6f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(-1.0e6f), 0xFE);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
}

TEST(Fp8E4m3, MapsNaNToNaN) {
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);
  EXPECT_EQ(float_to_fp8_e4m3(from_bits(0x7F800001)) & 0x7F, 0x7F);
  EXPECT_EQ(float_to_fp8_e4m3(from_bits(0xFFC00000)), 0xFF);
}

TEST(Fp8E4m3, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(float_to_fp8_e4m3(1.0f + 1.0f / 16), 0x38);  // halfway between 1 and 1.125: even
  EXPECT_EQ(float_to_fp8_e4m3(1.0f + 3.0f / 16), 0x3A);  // halfway between 1.125 and 1.25: even
  EXPECT_EQ(float_to_fp8_e4m3(1.0f + 1.0f / 15), 0x39);  // just above the tie
  EXPECT_EQ(float_to_fp8_e4m3(-(1.0f + 3.0f / 16)), 0xBA);
  EXPECT_EQ(float_to_fp8_e4m3(400.0f), 0x7C);  // halfway between 384 (even) and 416
  EXPECT_EQ(float_to_fp8_e4m3(432.0f), 0x7E);  // halfway between 416 and 448 (even)
}

TEST(Fp8E4m3, RoundsSubnormalsWithTiesToEven) {
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);   // half the smallest subnormal: even
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);   // 1.5 units: even
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(5.0f, -10)), 0x02);   // 2.5 units: even
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(15.0f, -10)), 0x08);  // 7.5 units: up into the smallest normal
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -20)), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(-std::ldexp(1.0f, -9)), 0x81);
  EXPECT_EQ(float_to_bits(fp8_e4m3_to_float(float_to_fp8_e4m3(-0.0f))), 0x80000000u);
}

TEST(Fp8E4m3, EveryNonNaNCodeRoundTripsExactly) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    EXPECT_EQ(float_to_fp8_e4m3(fp8_e4m3_to_float(static_cast<uint8_t>(code))), code)
        << "code 0x" << std::hex << code;
  }
}

TEST(Fp8E4m3, PicksTheNearestCodeForRandomFloats) {
  std::mt19937_64 rng(0xf8);
  for (int i = 0; i < 20000; ++i) {
    // Magnitudes from 2^-12 to 2^9 (past the saturation point).
    const float value =
        std::ldexp(static_cast<float>(rng() % (1u << 24)) / (1u << 24), static_cast<int>(rng() % 22) - 11) *
        ((rng() & 1) ? -1.0f : 1.0f);
    const uint8_t code = float_to_fp8_e4m3(value);
    const float decoded = fp8_e4m3_to_float(code);
    ASSERT_FALSE(std::isnan(decoded)) << value;
    if (std::fabs(value) >= 448.0f) {
      ASSERT_EQ(std::fabs(decoded), 448.0f) << value;
      continue;
    }
    // No other finite code is strictly nearer.
    for (int other = 0; other < 256; ++other) {
      if ((other & 0x7F) == 0x7F) continue;
      const float candidate = fp8_e4m3_to_float(static_cast<uint8_t>(other));
      ASSERT_LE(std::fabs(static_cast<double>(decoded) - value),
                std::fabs(static_cast<double>(candidate) - value))
          << "value " << value << " coded 0x" << std::hex << int(code) << " but 0x" << other << " is nearer";
    }
  }
}

}  // namespace
}  // namespace switchyard::common
