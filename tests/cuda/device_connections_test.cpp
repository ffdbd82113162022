// The rule that ranks as threads need a hardware queue each (src/cuda/device_connections.hpp): how the
// variable's text becomes a queue count, and the refusal that names it. Needs no GPU.
#include "cuda/backend/device_connections.hpp"

#include <gtest/gtest.h>

#include <string>

namespace switchyard::cuda {
namespace {

TEST(DeviceConnections, UnsetOrUnusableTextMeansTheDefaultEight) {
  EXPECT_EQ(device_connections(nullptr), 8);
  EXPECT_EQ(device_connections(""), 8);
  EXPECT_EQ(device_connections("0"), 8);
  EXPECT_EQ(device_connections("-3"), 8);
  EXPECT_EQ(device_connections("16x"), 8);
}

TEST(DeviceConnections, ValuesAreTakenAndClampedAt32) {
  EXPECT_EQ(device_connections("1"), 1);
  EXPECT_EQ(device_connections("12"), 12);
  EXPECT_EQ(device_connections("32"), 32);
  EXPECT_EQ(device_connections("64"), 32);
}

TEST(DeviceConnections, RanksUpToTheQueueCountFit) {
  EXPECT_NO_THROW(check_rank_threads_fit_connections(8, 0, nullptr));
  EXPECT_NO_THROW(check_rank_threads_fit_connections(16, 0, "32"));
  EXPECT_NO_THROW(check_rank_threads_fit_connections(4, 0, "4"));
}

TEST(DeviceConnections, MoreRanksThanQueuesAreRefusedNamingTheVariable) {
  try {
    check_rank_threads_fit_connections(9, 1, nullptr);
    FAIL() << "9 ranks with 8 queues were accepted";
  } catch (const Unsupported& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("9 ranks as threads of this process share GPU 1"), std::string::npos) << message;
    EXPECT_NE(message.find("has 8 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS=unset"), std::string::npos)
        << message;
    EXPECT_NE(message.find("set CUDA_DEVICE_MAX_CONNECTIONS=32"), std::string::npos) << message;
  }
  EXPECT_THROW(check_rank_threads_fit_connections(5, 0, "4"), Unsupported);
}

}  // namespace
}  // namespace switchyard::cuda
