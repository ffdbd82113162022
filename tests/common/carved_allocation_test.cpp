// detail::CarvedAllocation: parts reserved one after another, each aligned as a tensor of its own, carved
// from one allocation that every part keeps alive; sizes that would overflow are refused by name.
#include "core/carved_allocation.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "switchyard/errors.hpp"

namespace switchyard {
namespace {

using detail::CarvedAllocation;

TEST(CarvedAllocation, PartsAreAlignedDisjointAndInsideTheAllocation) {
  CarvedAllocation carving;
  struct Part {
    DType dtype;
    int64_t elements;
    size_t offset;
  };
  // Odd sizes, a zero-element part between two others, every dtype width.
  std::vector<Part> parts = {{DType::i32, 1025, 0}, {DType::i64, 1, 0},    {DType::boolean, 0, 0},
                             {DType::bf16, 7, 0},   {DType::f32, 4096, 0}, {DType::boolean, 33, 0}};
  for (Part& part : parts) part.offset = carving.reserve(part.dtype, part.elements);
  const Tensor storage = carving.allocate(Device::cpu, 0, nullptr);
  ASSERT_GE(storage.nbytes(), carving.bytes());
  size_t end_of_previous = 0;
  for (const Part& part : parts) {
    EXPECT_EQ(part.offset % CarvedAllocation::kPartAlignment, 0u) << part.offset;
    EXPECT_GE(part.offset, end_of_previous);
    const size_t bytes = static_cast<size_t>(part.elements) * dtype_size(part.dtype);
    EXPECT_LE(part.offset + bytes, storage.nbytes());
    end_of_previous = part.offset + bytes;
  }
  EXPECT_EQ(carving.bytes(), end_of_previous);
  // The parts are tensors of the storage: writing each one's bytes leaves the others' alone.
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < parts.size(); ++i) {
    tensors.push_back(Tensor::part_of(storage, parts[i].offset, parts[i].dtype, {parts[i].elements}));
    std::memset(tensors.back().data(), static_cast<int>(i + 1), tensors.back().nbytes());
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto* bytes = static_cast<const uint8_t*>(tensors[i].data());
    for (size_t b = 0; b < tensors[i].nbytes(); ++b)
      ASSERT_EQ(bytes[b], i + 1) << "part " << i << " byte " << b;
  }
}

TEST(CarvedAllocation, APartOutlivesTheStorageTensor) {
  CarvedAllocation carving;
  const size_t at = carving.reserve(DType::i32, 16);
  Tensor part;
  {
    const Tensor storage = carving.allocate(Device::cpu, 0, nullptr);
    part = Tensor::part_of(storage, at, DType::i32, {16});
    for (int i = 0; i < 16; ++i) part.as<int32_t>()[i] = i;
  }
  for (int i = 0; i < 16; ++i) EXPECT_EQ(part.as<int32_t>()[i], i);
}

TEST(CarvedAllocation, NothingReservedStillAllocatesAValidTensor) {
  const CarvedAllocation carving;
  EXPECT_EQ(carving.bytes(), 0u);
  const Tensor storage = carving.allocate(Device::cpu, 0, nullptr);
  EXPECT_GT(storage.nbytes(), 0u);
  EXPECT_NE(storage.data(), nullptr);
}

TEST(CarvedAllocation, NegativeOrOverflowingSizesAreRefusedByName) {
  CarvedAllocation carving;
  try {
    carving.reserve(DType::i32, -1);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("elements: expected >= 0, got -1"), std::string::npos)
        << error.what();
  }
  carving.reserve(DType::i64, int64_t{1} << 60);
  try {
    carving.reserve(DType::i64, int64_t{1} << 60);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("fewer than 2^64 bytes"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace switchyard
