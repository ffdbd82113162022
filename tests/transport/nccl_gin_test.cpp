// nccl_gin's host side without a GPU: a build without NCCL's device API says so with Unsupported and
// the configure-time reason; a build with it rejects bad arguments before touching NCCL.
#include "transport/nccl_gin.hpp"

#include <gtest/gtest.h>

#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::transport {
namespace {

TEST(NcclGinTransport, compiled_out_build_throws_unsupported_with_the_reason) {
  if (NcclGinTransport::compiled_in()) GTEST_SKIP() << "this build has NCCL's device API";
  ASSERT_FALSE(NcclGinTransport::compiled_out_reason().empty());
  try {
    NcclGinTransport transport(nullptr, 1 << 20, NcclGinOptions{});
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("nccl_gin"), std::string::npos) << message;
    EXPECT_NE(message.find(NcclGinTransport::compiled_out_reason()), std::string::npos) << message;
  }
}

TEST(NcclGinTransport, rejects_a_null_communicator_naming_the_argument) {
  if (!NcclGinTransport::compiled_in()) GTEST_SKIP() << NcclGinTransport::compiled_out_reason();
  EXPECT_TRUE(NcclGinTransport::compiled_out_reason().empty());
  try {
    NcclGinTransport transport(nullptr, 1 << 20, NcclGinOptions{});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("nccl_comm"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace switchyard::transport
