#include "cuda/device_heap.hpp"

#include <unistd.h>

#include <cstring>

#include "core/heap_registry.hpp"
#include "cuda/cuda_check.hpp"

namespace switchyard::cuda {

namespace {

struct DeviceHeapPayload {
  uint64_t pid;
  uint64_t address;  // valid in the owner's process
  int32_t device;
  char device_uuid[16];
  cudaIpcMemHandle_t ipc;  // valid for HeapSharing::processes
};

void device_uuid(int device, char (&uuid)[16]) {
  cudaDeviceProp properties{};
  SY_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  std::memcpy(uuid, properties.uuid.bytes, sizeof(uuid));
}

}  // namespace

DeviceHeap::DeviceHeap(size_t bytes, int rank, int num_ranks, int device, HeapSharing sharing)
    : bytes_(bytes), rank_(rank), device_(device), sharing_(sharing), opened_(num_ranks, nullptr) {
  SY_CUDA_CHECK(cudaSetDevice(device_));
  void* pointer = nullptr;
  SY_CUDA_CHECK(cudaMalloc(&pointer, bytes_));
  base_ = static_cast<uint8_t*>(pointer);
  storage_ = std::shared_ptr<void>(pointer, [](void* p) { cudaFree(p); });
  if (sharing_ == HeapSharing::threads) detail::register_thread_heap(base_, storage_, num_ranks - 1);
  // Barrier words must start at 0; the rest is reset by each call before use.
  SY_CUDA_CHECK(cudaMemset(base_, 0, bytes_));
  SY_CUDA_CHECK(cudaDeviceSynchronize());
  view_.base = base_;
  view_.bytes = bytes_;
  view_.rank = rank;
  view_.num_ranks = num_ranks;
}

DeviceHeap::~DeviceHeap() {
  cudaSetDevice(device_);
  for (void* mapping : opened_) {
    if (mapping) cudaIpcCloseMemHandle(mapping);
  }
  // storage_ frees the heap once no connected peer of this process maps it.
}

Bytes DeviceHeap::local_handle() const {
  DeviceHeapPayload payload{};
  payload.pid = static_cast<uint64_t>(getpid());
  payload.address = reinterpret_cast<uint64_t>(base_);
  payload.device = device_;
  device_uuid(device_, payload.device_uuid);
  if (sharing_ == HeapSharing::processes) SY_CUDA_CHECK(cudaIpcGetMemHandle(&payload.ipc, base_));
  Bytes bytes(sizeof(payload));
  std::memcpy(bytes.data(), &payload, sizeof(payload));
  return bytes;
}

void DeviceHeap::connect(const std::vector<Bytes>& payloads) {
  SY_CUDA_CHECK(cudaSetDevice(device_));
  char my_uuid[16];
  device_uuid(device_, my_uuid);
  const uint64_t my_pid = static_cast<uint64_t>(getpid());
  ranks_on_this_device_ = 0;
  for (int peer = 0; peer < static_cast<int>(payloads.size()); ++peer) {
    const std::string which = "all_handles[" + std::to_string(peer) + "]";
    if (payloads[peer].size() != sizeof(DeviceHeapPayload)) {
      throw InvalidArgument(which + ": expected a cuda heap handle of " + std::to_string(sizeof(DeviceHeapPayload)) +
                            " payload bytes, got " + std::to_string(payloads[peer].size()));
    }
    DeviceHeapPayload payload{};
    std::memcpy(&payload, payloads[peer].data(), sizeof(payload));
    const bool same_device = std::memcmp(payload.device_uuid, my_uuid, sizeof(my_uuid)) == 0;
    ranks_on_this_device_ += same_device ? 1 : 0;
    uint8_t* peer_base = nullptr;
    if (peer == rank_) {
      peer_base = base_;
    } else if (sharing_ == HeapSharing::threads) {
      if (payload.pid != my_pid) {
        throw InvalidArgument(which + ": expected a handle from this process (HeapSharing::threads), got one from pid " +
                              std::to_string(payload.pid) + "; use HeapSharing::processes for one process per rank");
      }
      if (!same_device) {
        int can_access = 0;
        SY_CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, device_, payload.device));
        if (!can_access) {
          throw Unsupported(which + ": expected GPU " + std::to_string(payload.device) + " to be reachable by "
                            "load/store from GPU " + std::to_string(device_) + " (peer access), got no peer access");
        }
        cudaError_t status = cudaDeviceEnablePeerAccess(payload.device, 0);
        if (status == cudaErrorPeerAccessAlreadyEnabled) {
          cudaGetLastError();  // clear the sticky-free error
        } else {
          SY_CUDA_CHECK(status);
        }
      }
      peer_base = reinterpret_cast<uint8_t*>(payload.address);
      std::shared_ptr<void> storage = detail::connect_thread_heap(peer_base);
      if (!storage) {
        throw InvalidArgument(which + ": expected the handle of a live buffer of this process, got one whose heap "
                              "is unknown (not made by Buffer::local_handle in this process)");
      }
      peer_storage_.push_back(std::move(storage));
    } else {
      void* mapping = nullptr;
      SY_CUDA_CHECK(cudaIpcOpenMemHandle(&mapping, payload.ipc, cudaIpcMemLazyEnablePeerAccess));
      opened_[peer] = mapping;
      peer_base = static_cast<uint8_t*>(mapping);
    }
    view_.peer_offset[peer] =
        static_cast<int64_t>(reinterpret_cast<uintptr_t>(peer_base) - reinterpret_cast<uintptr_t>(base_));
  }
}

}  // namespace switchyard::cuda
