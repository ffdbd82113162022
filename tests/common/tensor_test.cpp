// Tensor::part_of: parts of one allocation share it, and a part outside it is refused by name.
#include "switchyard/tensor.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard {
namespace {

TEST(TensorPartOf, PartsShareTheOwnersStorageAndKeepItAlive) {
  Tensor part;
  {
    const Tensor owner = Tensor::empty(DType::i32, {64});
    int32_t* words = owner.as<int32_t>();
    for (int i = 0; i < 64; ++i) words[i] = i;
    part = Tensor::part_of(owner, 32 * sizeof(int32_t), DType::i32, {4, 8});
    EXPECT_EQ(part.as<int32_t>(), words + 32);
    EXPECT_EQ(part.size(0), 4);
    EXPECT_EQ(part.size(1), 8);
    EXPECT_EQ(part.nbytes(), 32 * sizeof(int32_t));
    EXPECT_EQ(part.view().device, Device::cpu);
  }
  // The owner is gone; its storage is not.
  for (int i = 0; i < 32; ++i) EXPECT_EQ(part.as<int32_t>()[i], 32 + i);
}

TEST(TensorPartOf, APartEndingAtTheOwnersEndFits) {
  const Tensor owner = Tensor::empty(DType::i32, {10});
  const Tensor tail = Tensor::part_of(owner, 8 * sizeof(int32_t), DType::i32, {2});
  EXPECT_EQ(tail.as<int32_t>(), owner.as<int32_t>() + 8);
  const Tensor empty = Tensor::part_of(owner, owner.nbytes(), DType::i32, {0});
  EXPECT_EQ(empty.numel(), 0);
}

void expect_refused(const std::function<void()>& call, const std::string& fragment) {
  try {
    call();
    FAIL() << "expected InvalidArgument mentioning '" << fragment << "'";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

TEST(TensorPartOf, APartOutsideTheOwnerOrMisalignedIsRefused) {
  const Tensor owner = Tensor::empty(DType::i32, {10});
  expect_refused([&] { Tensor::part_of(owner, 8 * sizeof(int32_t), DType::i32, {3}); },
                 "within the owner's 40 bytes");
  expect_refused([&] { Tensor::part_of(owner, 44, DType::i32, {0}); }, "got offset 44");
  expect_refused([&] { Tensor::part_of(owner, 2, DType::i32, {1}); }, "at a multiple of 4");
  expect_refused([&] { Tensor::part_of(owner, 0, DType::i32, {-1}); }, "dims: expected non-negative");
  expect_refused([&] { Tensor::part_of(Tensor(), 0, DType::i32, {1}); }, "owner: expected a defined tensor");
}

}  // namespace
}  // namespace switchyard
