// device_for_rank, the one rule that places the GPU tests' ranks (SWITCHYARD_TEST_DEVICES). Runs
// with or without a GPU: only "spread" asks the runtime, and without a device it must refuse by name.
#include "cuda/rank_device.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

namespace switchyard::testing {
namespace {

// Sets SWITCHYARD_TEST_DEVICES (nullopt: unsets it) for one test, and puts the old value back.
class DevicesVariable {
 public:
  explicit DevicesVariable(const std::optional<std::string>& value) {
    const char* old = std::getenv(kTestDevicesVariable);
    if (old != nullptr) previous_ = old;
    if (value)
      setenv(kTestDevicesVariable, value->c_str(), 1);
    else
      unsetenv(kTestDevicesVariable);
  }
  ~DevicesVariable() {
    if (previous_)
      setenv(kTestDevicesVariable, previous_->c_str(), 1);
    else
      unsetenv(kTestDevicesVariable);
  }
  DevicesVariable(const DevicesVariable&) = delete;
  DevicesVariable& operator=(const DevicesVariable&) = delete;

 private:
  std::optional<std::string> previous_;
};

// The CUDA devices this process sees; 0 without a GPU (or a driver).
int visible_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

TEST(RankDevice, UnsetPutsEveryRankOnDeviceZero) {
  DevicesVariable variable(std::nullopt);
  for (int rank = 0; rank < 8; ++rank) EXPECT_EQ(device_for_rank(rank, 8), 0) << "rank " << rank;
}

TEST(RankDevice, EmptyAndZeroPutEveryRankOnDeviceZero) {
  for (const char* value : {"", "0"}) {
    DevicesVariable variable{std::string(value)};
    for (int rank = 0; rank < 8; ++rank) {
      EXPECT_EQ(device_for_rank(rank, 8), 0) << "rank " << rank << ", value \"" << value << "\"";
    }
  }
}

TEST(RankDevice, SpreadPutsRankROnDeviceRModuloTheVisibleDevices) {
  DevicesVariable variable{std::string("spread")};
  const int visible = visible_devices();
  if (visible == 0) {
    try {
      device_for_rank(0, 2);
      ADD_FAILURE() << "expected std::runtime_error without a visible CUDA device";
    } catch (const std::runtime_error& error) {
      EXPECT_NE(std::string(error.what()).find("SWITCHYARD_TEST_DEVICES=spread"), std::string::npos)
          << error.what();
    }
    return;
  }
  for (int ranks : {1, 2, 3, 8, 16}) {
    for (int rank = 0; rank < ranks; ++rank) {
      EXPECT_EQ(device_for_rank(rank, ranks), rank % visible) << "rank " << rank << " of " << ranks;
    }
  }
}

TEST(RankDevice, OtherValuesAreRefusedNamingTheVariableAndTheValue) {
  for (const char* value : {"1", "auto", "Spread", "spread "}) {
    DevicesVariable variable{std::string(value)};
    try {
      device_for_rank(0, 1);
      ADD_FAILURE() << "expected std::invalid_argument for \"" << value << "\"";
    } catch (const std::invalid_argument& error) {
      const std::string message = error.what();
      EXPECT_EQ(message.rfind("SWITCHYARD_TEST_DEVICES: expected", 0), 0u) << message;
      EXPECT_NE(message.find("got \"" + std::string(value) + "\""), std::string::npos) << message;
    }
  }
}

TEST(RankDevice, RanksOutsideTheGroupAreRefused) {
  DevicesVariable variable(std::nullopt);
  EXPECT_THROW(device_for_rank(-1, 2), std::invalid_argument);
  EXPECT_THROW(device_for_rank(2, 2), std::invalid_argument);
  EXPECT_THROW(device_for_rank(0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace switchyard::testing
