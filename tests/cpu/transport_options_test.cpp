// BufferOptions::transport: the loopback transport's delays set per Buffer instead of through the
// environment (honoured across nodes by low_latency and the hierarchical normal engine, bitwise the
// reference), and every misuse refused by name before anything is allocated: an unknown kind, a delay
// out of range, knobs of one transport given to the other, nccl_gin without a communicator or on the
// CPU backend.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "support/expert_major_gtest.hpp"
#include "support/expert_major_nodes.hpp"
#include "support/refusal.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "workload/workload.hpp"

namespace switchyard::testing::expert_major {
namespace {

// NOTES: each put and signal lands after up to this long; a round trip waits for the last of dozens of
// them, whose delay (from a fixed seed) is close to the maximum: the call cannot take less than
// kSlowestCall, however fast the machine, while with no delay it takes milliseconds.
constexpr uint32_t kDelayMicroseconds = 200000;
constexpr double kSlowestCall = 0.1;

BufferOptions options_on(const Case& c, const Topology& topology, int rank) {
  BufferOptions options = buffer_options(c, rank, Regions::low_latency, 20.0);
  options.topology = topology;
  return options;
}

// The environment's delays are off: what slows the calls can only be the Buffer's own options.
class NoEnvironmentDelays {
 public:
  NoEnvironmentDelays() {
    unsetenv("SWITCHYARD_LOOPBACK_DELAY_US");
    unsetenv("SWITCHYARD_LOOPBACK_SEED");
  }
};

TEST(TransportOptions, LoopbackDelaysFromBufferOptionsDelayTheCallsAcrossNodesAndKeepTheBits) {
  const NoEnvironmentDelays no_environment;
  const NodesCase n{make("n2x1_options_delays", 2, {6, 4}, 6, 2, 4), 1};
  const uint64_t seed = testing::seed_for("transport_options/delays");
  const Expected expected = expected_on(n.c, n.topology(), seed);
  Failures failures;
  run_ranks(n.c.ranks, [&](Group& group) {
    const int rank = group.rank();
    BufferOptions options = options_on(n.c, n.topology(), rank);
    options.transport.loopback_max_delay_us = kDelayMicroseconds;
    options.transport.loopback_seed = 7;
    Buffer buffer(options);
    buffer.connect(group.allgather(buffer.local_handle()));
    const workload::RankData& data = expected.data[rank];
    const auto start = std::chrono::steady_clock::now();
    const LowLatencyDispatchResult dispatched = buffer.low_latency_dispatch(dispatch_args(n.c, data));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds < kSlowestCall) {
      failures.add(rank, "the dispatch took " + std::to_string(seconds) + " s: the Buffer's delays (up to " +
                             std::to_string(kDelayMicroseconds) + " us) were not applied");
    }
    check_dispatch(dispatched, expected.dispatched[rank], "the reference", rank, failures);
    const Tensor y = expert_outputs(dispatched.recv_x, dispatched.recv_x_scales, rank);
    const LowLatencyCombineResult combined =
        buffer.low_latency_combine(combine_args(data, dispatched.handle, y));
    compare(combined.combined_x, expected.combined[rank], "combined_x", rank, failures);
    group.barrier();
  });
  expect_none(failures, seed);
}

// ---- refusals -------------------------------------------------------------------------------------

Case one_rank() {
  return make("transport_refusal", 1, {2}, 2, 1, 2);
}

BufferOptions refusal_options() {
  return options_on(one_rank(), Topology::single_node(1), 0);
}

TEST(TransportOptionsRefused, ALoopbackDelayOutOfRange) {
  BufferOptions options = refusal_options();
  options.transport.loopback_max_delay_us = TransportOptions::kMaxLoopbackDelayMicroseconds + 1;
  const std::string message = invalid_argument_message([&] { Buffer buffer(options); });
  EXPECT_EQ(message.rfind("transport.loopback_max_delay_us: expected 0..1000000, got 1000001", 0), 0u)
      << message;
}

TEST(TransportOptionsRefused, ACommunicatorWithLoopback) {
  int communicator = 0;
  BufferOptions options = refusal_options();
  options.transport.nccl_comm = &communicator;
  const std::string message = invalid_argument_message([&] { Buffer buffer(options); });
  EXPECT_EQ(message.rfind("transport.nccl_comm: expected none with transport.kind loopback", 0), 0u)
      << message;
}

TEST(TransportOptionsRefused, NcclGinWithoutACommunicatorOrWithLoopbackKnobs) {
  BufferOptions options = refusal_options();
  options.transport.kind = TransportKind::nccl_gin;
  std::string message = invalid_argument_message([&] { Buffer buffer(options); });
  EXPECT_EQ(message.rfind("transport.nccl_comm: expected the caller's ncclComm_t", 0), 0u) << message;
  EXPECT_TRUE(contains(message, "got null")) << message;

  int communicator = 0;
  options.transport.nccl_comm = &communicator;
  options.transport.loopback_seed = 3;
  message = invalid_argument_message([&] { Buffer buffer(options); });
  EXPECT_EQ(message.rfind("transport.loopback_max_delay_us / loopback_seed: expected them unset", 0), 0u)
      << message;
}

TEST(TransportOptionsRefused, AnUnknownKind) {
  BufferOptions options = refusal_options();
  options.transport.kind = static_cast<TransportKind>(7);
  const std::string message = invalid_argument_message([&] { Buffer buffer(options); });
  EXPECT_EQ(message, "transport.kind: expected loopback or nccl_gin, got 7");
}

TEST(TransportOptionsRefused, NcclGinOnTheCpuBackendIsUnsupportedNamingTheBackend) {
  int communicator = 0;  // never dereferenced: the backend refuses first
  BufferOptions options = refusal_options();
  options.transport.kind = TransportKind::nccl_gin;
  options.transport.nccl_comm = &communicator;
  try {
    Buffer buffer(options);
    ADD_FAILURE() << "expected Unsupported";
  } catch (const Unsupported& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("transport.kind: nccl_gin needs the CUDA backend", 0), 0u) << message;
    EXPECT_TRUE(contains(message, "got backend cpu")) << message;
  }
}

TEST(TransportOptions, KindsHaveNames) {
  EXPECT_STREQ(transport_kind_name(TransportKind::loopback), "loopback");
  EXPECT_STREQ(transport_kind_name(TransportKind::nccl_gin), "nccl_gin");
}

}  // namespace
}  // namespace switchyard::testing::expert_major
