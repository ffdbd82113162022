// The device transport (src/transport/device_transport.cuh) on the GPU: R ranks as threads of this
// process, each with its own stream and heap on GPU 0, exchange messages through rings using only
// put / put_signal / signal / wait_signal / flush, over loopback with adverse timing off and on,
// and (where a GIN NIC exists) over nccl_gin. Compiled as CUDA (tests/cuda/CMakeLists.txt): it holds
// its own kernels. Skipped, and reported as skipped, without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "common/device_error.hpp"
#include "device/cuda_check.hpp"
#include "device/mapped_host_words.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "transport/loopback_device.cuh"
#include "transport/nccl_gin.cuh"

namespace switchyard::testing {
namespace {

using transport::SignalId;
using transport::WarpSession;

// A macro, since GTEST_SKIP returns from the test it is written in. Loads the kernels (load_kernels).
#define SKIP_WITHOUT_GPU()                                                                    \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed"; \
  load_kernels()

// ---- the exchange's heap layout (as a type, shared by the kernel and the host check) ----------------
// Rank r's sender on channel c sends to its `fan_out` successors r+1, r+2, ... (mod R), interleaving
// them in one session; a receiver warp per predecessor drains that predecessor's ring. Per (channel,
// k-th successor or predecessor): a receive ring of `slots` slots, a staging ring of the same shape
// (the puts' source), and two signals: recv_tail (messages landed here) and send_head (slots the
// peer's receiver has freed, for our sends).
struct ExchangeLayout {
  int num_ranks;
  int num_channels;
  int fan_out;
  uint32_t slots;
  uint32_t slot_bytes;  // a multiple of 16

  __host__ __device__ int pair(int channel, int k) const { return channel * fan_out + k; }
  __host__ __device__ SignalId recv_tail(int channel, int k) const { return 2 * pair(channel, k); }
  __host__ __device__ SignalId send_head(int channel, int k) const { return 2 * pair(channel, k) + 1; }
  __host__ __device__ int num_signals() const { return 2 * num_channels * fan_out; }
  __host__ __device__ size_t signals_bytes() const { return num_signals() * common::kCounterStride; }
  __host__ __device__ size_t ring_bytes() const { return static_cast<size_t>(slots) * slot_bytes; }
  __host__ __device__ size_t staging_offset(int channel, int k, uint64_t sequence) const {
    return signals_bytes() + ring_bytes() * pair(channel, k) + (sequence % slots) * slot_bytes;
  }
  __host__ __device__ size_t recv_offset(int channel, int k, uint64_t sequence) const {
    return signals_bytes() + ring_bytes() * (num_channels * fan_out + pair(channel, k)) +
           (sequence % slots) * slot_bytes;
  }
  __host__ __device__ size_t heap_bytes() const {
    return signals_bytes() + 2 * ring_bytes() * num_channels * fan_out;
  }

  __host__ __device__ int successor(int rank, int k) const { return (rank + 1 + k) % num_ranks; }
  __host__ __device__ int predecessor(int rank, int k) const {
    return ((rank - 1 - k) % num_ranks + num_ranks) % num_ranks;
  }
};

// Message `index` from `source` to `destination` on `channel`: its length (some not a multiple of
// 16, for the unaligned copy path) and its bytes, a hash of everything that names it.
__host__ __device__ uint32_t message_bytes(const ExchangeLayout& layout, int source, int channel,
                                           uint64_t index) {
  const uint32_t shorter = static_cast<uint32_t>((source * 7 + channel * 3 + index) % 5) * 13;
  return layout.slot_bytes - shorter;
}

__host__ __device__ uint8_t message_byte(int source, int destination, int channel, uint64_t index,
                                         uint32_t byte) {
  uint64_t z = (uint64_t(source) << 56) ^ (uint64_t(destination) << 48) ^ (uint64_t(channel) << 40) ^
               (index << 16) ^ (byte / 8) ^ 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint8_t>((z ^ (z >> 31)) >> (8 * (byte % 8)));
}

struct ExchangeLaunch {
  ExchangeLayout layout;
  uint64_t num_messages;  // per (channel, successor)
  uint32_t chunk;         // messages per signal; at most `slots`
  uint8_t* received;      // [channel][k][message][slot_bytes], device memory of this rank
};

// Sender role: message i to successor k goes through staging slot i % slots into the successor's
// receive ring; a chunk's last put carries the add to its recv_tail.
template <typename Transport>
__device__ void exchange_sender(const Transport& transport, const cuda::KernelContext& context,
                                const ExchangeLaunch& launch, int channel) {
  const ExchangeLayout& layout = launch.layout;
  WarpSession<Transport> rdma(transport, context.heap, static_cast<uint32_t>(channel * (layout.fan_out + 1)));
  for (uint64_t i = 0; i < launch.num_messages; ++i) {
    // Staging slot i % slots was the source of put i - slots: rewrite it only after a flush.
    if (i > 0 && i % layout.slots == 0) rdma.flush();
    for (int k = 0; k < layout.fan_out; ++k) {
      const int peer = layout.successor(context.rank, k);
      if (i >= layout.slots) {
        const cuda::WaitSite site{common::WaitRole::dispatch_sender, common::WaitTarget::ring_space, channel,
                                  peer};
        if (!rdma.wait_signal(context, layout.send_head(channel, k), i + 1 - layout.slots, site)) return;
      }
      const size_t staging = layout.staging_offset(channel, k, i);
      const uint32_t bytes = message_bytes(layout, context.rank, channel, i);
      for (uint32_t b = transport::warp_lane(); b < bytes; b += 32) {
        context.heap.base[staging + b] = message_byte(context.rank, peer, channel, i, b);
      }
      __syncwarp();
      const size_t destination = layout.recv_offset(channel, k, i);
      if ((i + 1) % launch.chunk == 0 || i + 1 == launch.num_messages) {
        const uint64_t in_chunk = i % launch.chunk + 1;
        rdma.put_signal(peer, destination, staging, bytes, layout.recv_tail(channel, k), in_chunk);
      } else {
        rdma.put(peer, destination, staging, bytes);
      }
    }
  }
  rdma.flush();
}

// Receiver role for the k-th predecessor: waits for each chunk, copies it out of the local ring and
// returns the slots to the sender with a signal.
template <typename Transport>
__device__ void exchange_receiver(const Transport& transport, const cuda::KernelContext& context,
                                  const ExchangeLaunch& launch, int channel, int k) {
  const ExchangeLayout& layout = launch.layout;
  const int source = layout.predecessor(context.rank, k);
  WarpSession<Transport> rdma(transport, context.heap,
                              static_cast<uint32_t>(channel * (layout.fan_out + 1) + 1 + k));
  const cuda::WaitSite site{common::WaitRole::dispatch_receiver, common::WaitTarget::ring_data, channel,
                            source};
  uint8_t* out = launch.received +
                 static_cast<size_t>(layout.pair(channel, k)) * launch.num_messages * layout.slot_bytes;
  for (uint64_t begin = 0; begin < launch.num_messages; begin += launch.chunk) {
    const uint64_t end = min(launch.num_messages, begin + launch.chunk);
    if (!rdma.wait_signal(context, layout.recv_tail(channel, k), end, site)) return;
    for (uint64_t i = begin; i < end; ++i) {
      const uint8_t* slot = context.heap.base + layout.recv_offset(channel, k, i);
      const uint32_t bytes = message_bytes(layout, source, channel, i);
      for (uint32_t b = transport::warp_lane(); b < bytes; b += 32) out[i * layout.slot_bytes + b] = slot[b];
    }
    __syncwarp();
    rdma.signal(source, layout.send_head(channel, k), end - begin);
  }
  rdma.flush();
}

// One block per channel: warp 0 sends, warp 1 + k receives from the k-th predecessor.
template <typename Transport>
__global__ void exchange_kernel(const __grid_constant__ Transport transport,
                                const __grid_constant__ cuda::KernelContext context,
                                const ExchangeLaunch launch) {
  const int warp = static_cast<int>(threadIdx.x / 32);
  if (warp == 0) {
    exchange_sender(transport, context, launch, blockIdx.x);
  } else {
    exchange_receiver(transport, context, launch, blockIdx.x, warp - 1);
  }
}

// Every warp puts 1, then 2, to its own word of its own heap, then flushes: in issue order the word
// ends as 2; reordered puts may leave 1 (RDMA does not order puts, even to one address).
__global__ void same_address_kernel(const __grid_constant__ transport::LoopbackDevice transport,
                                    const __grid_constant__ cuda::KernelContext context, size_t words_offset,
                                    size_t sources_offset) {
  const uint32_t warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  WarpSession<transport::LoopbackDevice> rdma(transport, context.heap, warp);
  uint64_t* sources = reinterpret_cast<uint64_t*>(context.heap.base + sources_offset) + 2 * warp;
  if (transport::warp_lane() == 0) sources[0] = 1, sources[1] = 2;
  __syncwarp();
  const size_t word = words_offset + warp * sizeof(uint64_t);
  rdma.put(context.rank, word, sources_offset + 2 * warp * sizeof(uint64_t), sizeof(uint64_t));
  rdma.put(context.rank, word, sources_offset + (2 * warp + 1) * sizeof(uint64_t), sizeof(uint64_t));
  rdma.flush();
}

// Signals add up, and reset_signal sets one back to zero.
__global__ void signal_reset_kernel(const __grid_constant__ transport::LoopbackDevice transport,
                                    const __grid_constant__ cuda::KernelContext context, uint64_t* observed) {
  WarpSession<transport::LoopbackDevice> rdma(transport, context.heap, 0);
  const uint64_t adds[] = {5, 7, 11};
  for (uint64_t add : adds) rdma.signal(context.rank, 0, add);
  const uint64_t sum = rdma.read_signal(0);
  rdma.reset_signal(0);
  if (transport::warp_lane() == 0) observed[0] = sum, observed[1] = rdma.read_signal(0);
}

// ---- host side ---------------------------------------------------------------------------------------
template <typename T>
using DevicePointer = std::unique_ptr<T, void (*)(T*)>;

template <typename T>
DevicePointer<T> device_alloc(size_t bytes) {
  void* pointer = nullptr;
  SY_CUDA_CHECK(cudaMalloc(&pointer, bytes));
  return DevicePointer<T>(static_cast<T*>(pointer), [](T* p) { cudaFree(p); });
}

// What one rank's kernels need besides the transport: the bounded-wait policy and its error block.
struct RankState {
  cuda::MappedHostWords<common::DeviceErrorBlock> error_record{1};
  DevicePointer<int32_t> flags = device_alloc<int32_t>(2 * sizeof(int32_t));  // abort flag, error claim
  DevicePointer<uint64_t> barrier_epoch = device_alloc<uint64_t>(sizeof(uint64_t));
  cudaStream_t stream = nullptr;

  RankState() {
    SY_CUDA_CHECK(cudaMemset(flags.get(), 0, 2 * sizeof(int32_t)));
    SY_CUDA_CHECK(cudaMemset(barrier_epoch.get(), 0, sizeof(uint64_t)));
    SY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ~RankState() { cudaStreamDestroy(stream); }

  cuda::KernelContext context(const common::SymHeap& heap, double timeout_seconds) const {
    cuda::KernelContext context{};
    context.heap = heap;
    context.rank = heap.rank;
    context.num_ranks = heap.num_ranks;
    context.num_channels = 1;
    context.timeout_ns = static_cast<uint64_t>(timeout_seconds * 1e9);
    context.error = error_record.device();
    context.abort_flag = flags.get();
    context.error_claim = flags.get() + 1;
    context.barrier_epoch = barrier_epoch.get();
    context.call_index = 1;
    return context;
  }

  // What the backend does after a stream sync: a recorded failure becomes a TimeoutError.
  void throw_recorded_failure() const {
    const common::DeviceErrorBlock* error = error_record.host();
    if (!__atomic_load_n(&error->complete, __ATOMIC_ACQUIRE)) return;
    std::ostringstream message;
    message << "rank " << error->rank << " (" << common::wait_role_name(error->role) << ", channel "
            << error->channel << "): timed out after " << static_cast<double>(error->waited_ns) * 1e-9
            << " s waiting for " << common::wait_target_name(error->target) << " from rank " << error->peer
            << " (expected >= " << error->expected << ", saw " << error->observed << ")";
    throw TimeoutError(message.str());
  }
};

// R heaps on GPU 0, each mapped by every rank (pointer arithmetic: one process).
struct Heaps {
  std::vector<DevicePointer<uint8_t>> storage;
  std::vector<common::SymHeap> views;

  Heaps(int num_ranks, size_t bytes) {
    for (int rank = 0; rank < num_ranks; ++rank) {
      storage.push_back(device_alloc<uint8_t>(bytes));
      SY_CUDA_CHECK(cudaMemset(storage.back().get(), 0, bytes));
    }
    views.resize(num_ranks);
    for (int rank = 0; rank < num_ranks; ++rank) {
      common::SymHeap& view = views[rank];
      view.base = storage[rank].get();
      view.bytes = bytes;
      view.rank = rank;
      view.num_ranks = num_ranks;
      for (int peer = 0; peer < num_ranks; ++peer) {
        view.peer_offset[peer] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(storage[peer].get()) -
                                                      reinterpret_cast<uintptr_t>(storage[rank].get()));
      }
    }
  }
};

// CUDA loads kernels lazily, and a first launch that loads one can wait for running kernels, i.e. for
// peers spinning on this rank (README, ranks that share a GPU): load this file's kernels up front.
void load_kernels() {
  cudaFuncAttributes attributes{};
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attributes, exchange_kernel<transport::LoopbackDevice>));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attributes, same_address_kernel));
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attributes, signal_reset_kernel));
#if SWITCHYARD_WITH_NCCL_GIN
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attributes, exchange_kernel<transport::NcclGinDevice>));
#endif
}

// Runs `launch(rank)` on a thread per rank; each synchronises its own stream only (a device-wide
// sync could wait for peers that wait for it). Rethrows the first rank's failure.
void run_ranks(int num_ranks, const std::function<void(int)>& launch) {
  std::vector<std::exception_ptr> failures(num_ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < num_ranks; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        // NOTES: every rank stays on GPU 0 whatever SWITCHYARD_TEST_DEVICES says: the heaps, streams
        // and buffers of all ranks are made on the main thread, on device 0, and the loopback
        // transport's puts are plain stores into them. This tests the transport, not placement.
        SY_CUDA_CHECK(cudaSetDevice(0));
        launch(rank);
      } catch (...) {
        failures[rank] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

constexpr uint8_t kPoison = 0xa5;

struct ExchangeCase {
  std::string name;
  int num_ranks;
  int num_channels;
  int fan_out;
  uint32_t slots;
  uint32_t slot_bytes;
  uint64_t num_messages;
  uint32_t chunk;
  uint32_t max_delay_us;  // 0: in order, no delays; else delays and reordering
};
void PrintTo(const ExchangeCase& c, std::ostream* out) {
  *out << c.name;
}

ExchangeLayout layout_of(const ExchangeCase& c) {
  return ExchangeLayout{c.num_ranks, c.num_channels, c.fan_out, c.slots, c.slot_bytes};
}

size_t received_bytes(const ExchangeCase& c) {
  return static_cast<size_t>(c.num_channels) * c.fan_out * c.num_messages * c.slot_bytes;
}

// Every byte each rank received, against the message its predecessor sent; the rest of each output
// slot still holds the poison.
void expect_received(const ExchangeCase& c, int rank, const std::vector<uint8_t>& received) {
  const ExchangeLayout layout = layout_of(c);
  for (int channel = 0; channel < c.num_channels; ++channel) {
    for (int k = 0; k < c.fan_out; ++k) {
      const int source = layout.predecessor(rank, k);
      for (uint64_t i = 0; i < c.num_messages; ++i) {
        const uint8_t* slot = received.data() + (layout.pair(channel, k) * c.num_messages + i) * c.slot_bytes;
        const uint32_t bytes = message_bytes(layout, source, channel, i);
        for (uint32_t b = 0; b < c.slot_bytes; ++b) {
          const uint8_t expected = b < bytes ? message_byte(source, rank, channel, i, b) : kPoison;
          if (slot[b] != expected) {
            FAIL() << "rank " << rank << " channel " << channel << " from rank " << source << " message " << i
                   << " byte " << b << ": expected " << int(expected) << ", got " << int(slot[b]);
          }
        }
      }
    }
  }
}

// Runs the exchange over loopback on ranks [0, ranks_launched); the others never arrive.
std::vector<std::vector<uint8_t>> run_loopback_exchange(const ExchangeCase& c, int ranks_launched,
                                                        double timeout_seconds, uint64_t seed) {
  const ExchangeLayout layout = layout_of(c);
  Heaps heaps(c.num_ranks, layout.heap_bytes());
  std::vector<std::unique_ptr<RankState>> ranks;
  std::vector<DevicePointer<uint8_t>> received;
  for (int rank = 0; rank < c.num_ranks; ++rank) {
    ranks.push_back(std::make_unique<RankState>());
    received.push_back(device_alloc<uint8_t>(received_bytes(c)));
    SY_CUDA_CHECK(cudaMemset(received.back().get(), kPoison, received_bytes(c)));
  }
  SY_CUDA_CHECK(
      cudaDeviceSynchronize());  // before any rank's kernel: the memsets above ran on the legacy stream

  std::vector<std::vector<uint8_t>> results(c.num_ranks);
  run_ranks(ranks_launched, [&](int rank) {
    const RankState& state = *ranks[rank];
    const transport::LoopbackOptions options{c.max_delay_us, seed + static_cast<uint64_t>(rank)};
    const auto loopback = transport::LoopbackDevice::make(0, common::kCounterStride, options);
    const ExchangeLaunch launch{layout, c.num_messages, c.chunk, received[rank].get()};
    exchange_kernel<<<c.num_channels, 32 * (1 + c.fan_out), 0, state.stream>>>(
        loopback, state.context(heaps.views[rank], timeout_seconds), launch);
    SY_CUDA_CHECK_LAUNCH();
    SY_CUDA_CHECK(cudaStreamSynchronize(state.stream));
    state.throw_recorded_failure();
    results[rank].resize(received_bytes(c));
    SY_CUDA_CHECK(cudaMemcpyAsync(results[rank].data(), received[rank].get(), received_bytes(c),
                                  cudaMemcpyDeviceToHost, state.stream));
    SY_CUDA_CHECK(cudaStreamSynchronize(state.stream));
  });
  return results;
}

class CudaLoopbackExchange : public ::testing::TestWithParam<ExchangeCase> {};

TEST_P(CudaLoopbackExchange, every_byte_arrives_through_put_signal_wait_flush_only) {
  SKIP_WITHOUT_GPU();
  const ExchangeCase& c = GetParam();
  ASSERT_LE(c.chunk, c.slots) << "a chunk must fit the ring, or sender and receiver wait for each other";
  ASSERT_LE(c.fan_out, std::max(1, c.num_ranks - 1));
  const uint64_t seed = seed_for(c.name);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (SWITCHYARD_TEST_SEED varies it)");
  const auto results = run_loopback_exchange(c, c.num_ranks, 10.0, seed);
  for (int rank = 0; rank < c.num_ranks; ++rank) expect_received(c, rank, results[rank]);
}

std::vector<ExchangeCase> exchange_cases() {
  std::vector<ExchangeCase> list;
  for (uint32_t delay_us : {0u, 2u}) {
    const std::string timing = delay_us ? "_adverse" : "_in_order";
    // Small enough for compute-sanitizer (R = 1: its kernels are serialised).
    list.push_back({"Small_R1" + timing, 1, 1, 1, 4, 80, 40, 2, delay_us});
    list.push_back({"R2" + timing, 2, 2, 1, 8, 1040, 120, 3, delay_us});
    list.push_back({"R3_fan_out_2" + timing, 3, 2, 2, 6, 528, 100, 4, delay_us});
    list.push_back({"R4_fan_out_3" + timing, 4, 2, 3, 8, 1040, 150, 3, delay_us});
    list.push_back({"R8_fan_out_3" + timing, 8, 3, 3, 8, 272, 120, 5, delay_us});
    // One slot: every message waits for the previous one to be freed.
    list.push_back({"R4_one_slot_rings" + timing, 4, 1, 2, 1, 144, 60, 1, delay_us});
  }
  return list;
}

INSTANTIATE_TEST_SUITE_P(DeviceTransport, CudaLoopbackExchange, ::testing::ValuesIn(exchange_cases()),
                         [](const ::testing::TestParamInfo<ExchangeCase>& info) { return info.param.name; });

TEST(CudaDeviceTransportLoopback, a_peer_that_never_arrives_gives_timeout_error_naming_rank_and_role) {
  SKIP_WITHOUT_GPU();
  // Rank 1 never launches. The messages fit the ring, so rank 0's sender never waits; its receiver
  // waits for rank 1's data and must give up, not hang.
  const ExchangeCase c{"absent_peer", 2, 1, 1, 8, 64, 8, 2, 0};
  try {
    run_loopback_exchange(c, 1, 0.3, 1);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("rank 0 (dispatch receiver, channel 0)"), std::string::npos) << message;
    EXPECT_NE(message.find("from rank 1"), std::string::npos) << message;
  }
}

// Counts, over many warps, how often the first of two puts to one address landed last.
int count_first_put_landing_last(uint32_t max_delay_us) {
  constexpr int kBlocks = 8, kWarpsPerBlock = 8, kWarps = kBlocks * kWarpsPerBlock;
  const size_t words_offset = 0, sources_offset = kWarps * sizeof(uint64_t);
  Heaps heaps(1, sources_offset + 2 * kWarps * sizeof(uint64_t));
  RankState state;
  SY_CUDA_CHECK(cudaDeviceSynchronize());
  const auto loopback = transport::LoopbackDevice::make(0, common::kCounterStride, {max_delay_us, 42});
  same_address_kernel<<<kBlocks, 32 * kWarpsPerBlock, 0, state.stream>>>(
      loopback, state.context(heaps.views[0], 10.0), words_offset, sources_offset);
  SY_CUDA_CHECK_LAUNCH();
  SY_CUDA_CHECK(cudaStreamSynchronize(state.stream));
  std::vector<uint64_t> words(kWarps);
  SY_CUDA_CHECK(cudaMemcpy(words.data(), heaps.views[0].base + words_offset, kWarps * sizeof(uint64_t),
                           cudaMemcpyDeviceToHost));
  int first_last = 0;
  for (uint64_t word : words) {
    EXPECT_TRUE(word == 1 || word == 2) << word;
    first_last += word == 1 ? 1 : 0;
  }
  return first_last;
}

TEST(CudaDeviceTransportLoopback, puts_land_in_issue_order_without_reordering) {
  SKIP_WITHOUT_GPU();
  EXPECT_EQ(count_first_put_landing_last(0), 0);
}

TEST(CudaDeviceTransportLoopback, reordering_lets_a_later_put_land_first) {
  SKIP_WITHOUT_GPU();
  const int first_last = count_first_put_landing_last(1);
  EXPECT_GT(first_last, 0) << "no put was ever overtaken: reordering is not happening";
  EXPECT_LT(first_last, 64) << "every put was overtaken: the order is reversed, not random";
}

TEST(CudaDeviceTransportLoopback, Small_R1_signals_add_up_and_reset_to_zero) {
  SKIP_WITHOUT_GPU();
  Heaps heaps(1, common::kCounterStride);
  RankState state;
  auto observed = device_alloc<uint64_t>(2 * sizeof(uint64_t));
  SY_CUDA_CHECK(cudaDeviceSynchronize());
  const auto loopback = transport::LoopbackDevice::make(0, common::kCounterStride, {1, 3});
  signal_reset_kernel<<<1, 32, 0, state.stream>>>(loopback, state.context(heaps.views[0], 10.0),
                                                  observed.get());
  SY_CUDA_CHECK_LAUNCH();
  SY_CUDA_CHECK(cudaStreamSynchronize(state.stream));
  uint64_t values[2];
  SY_CUDA_CHECK(cudaMemcpy(values, observed.get(), sizeof(values), cudaMemcpyDeviceToHost));
  EXPECT_EQ(values[0], 5u + 7u + 11u);
  EXPECT_EQ(values[1], 0u);
}

// ---- nccl_gin ----------------------------------------------------------------------------------------
#if SWITCHYARD_WITH_NCCL_GIN

// One rank, one GPU: the same exchange through GIN puts to ourselves (NCCL allows a loopback peer).
// Without a GIN-capable NIC, which is every machine this project runs on, construction says so.
TEST(CudaDeviceTransportNcclGin, R1_exchange_through_gin_or_unsupported) {
  SKIP_WITHOUT_GPU();
  ncclComm_t comm = nullptr;
  int device = 0;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, &device), ncclSuccess);
  std::unique_ptr<ncclComm, void (*)(ncclComm*)> comm_owner(comm, [](ncclComm* c) { ncclCommDestroy(c); });
  const ExchangeCase c{"gin_R1", 1, 2, 1, 4, 528, 40, 2, 0};
  const ExchangeLayout layout = layout_of(c);
  std::unique_ptr<transport::NcclGinTransport> gin;
  try {
    gin = std::make_unique<transport::NcclGinTransport>(comm, layout.heap_bytes(),
                                                        transport::NcclGinOptions{2, layout.num_signals()});
  } catch (const Unsupported& error) {
    GTEST_SKIP() << "nccl_gin cannot run here: " << error.what();
  }
  common::SymHeap heap{};
  heap.base = gin->heap_base();
  heap.bytes = gin->heap_bytes();
  heap.rank = 0;
  heap.num_ranks = 1;
  RankState state;
  auto received = device_alloc<uint8_t>(received_bytes(c));
  SY_CUDA_CHECK(cudaMemset(received.get(), kPoison, received_bytes(c)));
  SY_CUDA_CHECK(cudaDeviceSynchronize());
  const ExchangeLaunch launch{layout, c.num_messages, c.chunk, received.get()};
  exchange_kernel<<<c.num_channels, 64, 0, state.stream>>>(gin->device(), state.context(heap, 10.0), launch);
  SY_CUDA_CHECK_LAUNCH();
  SY_CUDA_CHECK(cudaStreamSynchronize(state.stream));
  state.throw_recorded_failure();
  std::vector<uint8_t> result(received_bytes(c));
  SY_CUDA_CHECK(cudaMemcpy(result.data(), received.get(), result.size(), cudaMemcpyDeviceToHost));
  expect_received(c, 0, result);
}

#endif

}  // namespace
}  // namespace switchyard::testing
