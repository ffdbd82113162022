// The CUDA heap's allocation size (src/cuda/backend/device_heap.hpp): always a whole number of 2 MiB
// large pages that holds the identity page and the heap. Off that multiple, a process that maps the
// heap through CUDA IPC read it 6.4x slower at 8 ranks (bench/NOTES.md, session 18). Needs no GPU.
#include <gtest/gtest.h>

#include <cstddef>

#include "core/heap_identity.hpp"
#include "cuda/backend/device_heap.hpp"

namespace switchyard::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(DeviceHeapSize, IsAWholeNumberOfLargePagesHoldingThePageAndTheHeap) {
  for (const size_t heap : {size_t{0}, size_t{1}, size_t{4096}, 2 * kMiB - detail::kHeapIdentityBytes,
                            2 * kMiB - detail::kHeapIdentityBytes + 1, 2 * kMiB, 512 * kMiB + 256 * 1024,
                            size_t{3} * 1024 * kMiB + 12345}) {
    const size_t allocation = heap_allocation_bytes(heap);
    EXPECT_EQ(allocation % (2 * kMiB), 0u) << "heap of " << heap << " bytes";
    EXPECT_GE(allocation, detail::kHeapIdentityBytes + heap) << "heap of " << heap << " bytes";
    EXPECT_LT(allocation - (detail::kHeapIdentityBytes + heap), 2 * kMiB) << "heap of " << heap << " bytes";
  }
}

TEST(DeviceHeapSize, AnExactFitGetsNoExtraPage) {
  EXPECT_EQ(heap_allocation_bytes(2 * kMiB - detail::kHeapIdentityBytes), 2 * kMiB);
  EXPECT_EQ(heap_allocation_bytes(512 * kMiB - detail::kHeapIdentityBytes), 512 * kMiB);
  EXPECT_EQ(heap_allocation_bytes(512 * kMiB), 514 * kMiB);
}

}  // namespace
}  // namespace switchyard::cuda
