// The loopback transport keeps RDMA's one promise the engines rely on: a signal lands after every
// earlier put and signal to the same peer; and flush() waits for everything. With delays on, puts
// do land out of order.
#include "transport/loopback.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/atomics.hpp"
#include "common/sym_heap.hpp"

namespace switchyard::transport {
namespace {

constexpr size_t kHeapBytes = 1 << 16;
constexpr size_t kSignalOffset = 0;
constexpr size_t kDataOffset = 128;
constexpr int kValues = 2000;

struct TwoHeaps {
  std::vector<uint64_t> storage[2];
  common::SymHeap views[2];
  TwoHeaps() {
    for (int rank = 0; rank < 2; ++rank) storage[rank].assign(kHeapBytes / sizeof(uint64_t), 0);
    for (int rank = 0; rank < 2; ++rank) {
      views[rank].base = reinterpret_cast<uint8_t*>(storage[rank].data());
      views[rank].bytes = kHeapBytes;
      views[rank].rank = rank;
      views[rank].num_ranks = 2;
      for (int peer = 0; peer < 2; ++peer) {
        views[rank].peer_offset[peer] =
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(storage[peer].data()) -
                                 reinterpret_cast<uintptr_t>(storage[rank].data()));
      }
    }
  }
  uint64_t* word(int rank, size_t offset) { return reinterpret_cast<uint64_t*>(views[rank].base + offset); }
};

void check_signal_follows_puts(uint32_t max_delay_us) {
  TwoHeaps heaps;
  LoopbackTransport sender(heaps.views[0], LoopbackOptions{max_delay_us, 7});
  LoopbackTransport receiver(heaps.views[1], LoopbackOptions{max_delay_us, 8});
  std::thread reader([&] {
    // Each add of 1 follows the put of one value: whatever count is seen, that many values are there.
    uint64_t seen = 0;
    while (seen < kValues) {
      uint64_t count = receiver.read_signal(kSignalOffset);
      for (uint64_t i = seen; i < count; ++i) {
        uint64_t value;
        std::memcpy(&value, heaps.views[1].base + kDataOffset + i * sizeof(uint64_t), sizeof(value));
        ASSERT_EQ(value, i + 1) << "signal " << count << " landed before put " << i;
      }
      seen = count;
      std::this_thread::yield();
    }
  });
  for (uint64_t i = 0; i < kValues; ++i) {
    uint64_t value = i + 1;
    sender.put_signal(1, kDataOffset + i * sizeof(uint64_t), &value, sizeof(value), kSignalOffset, 1);
  }
  EXPECT_TRUE(sender.flush(20.0));
  reader.join();
  EXPECT_EQ(common::ld_acquire_sys(heaps.word(1, kSignalOffset)), static_cast<uint64_t>(kValues));
  EXPECT_EQ(sender.bytes_put(), kValues * sizeof(uint64_t));
}

TEST(Loopback, SignalLandsAfterEarlierPutsWithoutDelay) {
  check_signal_follows_puts(0);
}
TEST(Loopback, SignalLandsAfterEarlierPutsWithDelays) {
  check_signal_follows_puts(20);
}

TEST(Loopback, DelayedPutsLandOutOfOrderAndFlushWaitsForAll) {
  TwoHeaps heaps;
  LoopbackTransport sender(heaps.views[0], LoopbackOptions{200, 11});
  // Each round's puts write their issue index into one word: if the word ends below the last index,
  // an earlier put landed after a later one. NOTES: with uniform delays one round keeps issue order
  // by chance 1 time in 64; three rounds make a false failure about one in 260000.
  constexpr int kPuts = 64;
  constexpr int kRounds = 3;
  int reordered_rounds = 0;
  for (int round = 0; round < kRounds; ++round) {
    const size_t offset = kDataOffset + round * 128;
    for (uint64_t i = 1; i <= kPuts; ++i) sender.put(1, offset, &i, sizeof(i));
    ASSERT_TRUE(sender.flush(20.0));
    uint64_t last = common::ld_acquire_sys(heaps.word(1, offset));
    EXPECT_GE(last, 1u);
    EXPECT_LE(last, static_cast<uint64_t>(kPuts));
    reordered_rounds += last != kPuts ? 1 : 0;
  }
  EXPECT_GT(reordered_rounds, 0) << "every round's puts landed in issue order";
}

}  // namespace
}  // namespace switchyard::transport
