#include "cuda/backend/device_heap.hpp"

#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "common/host_device.hpp"
#include "core/heap_identity.hpp"
#include "core/heap_registry.hpp"
#include "device/cuda_check.hpp"

namespace switchyard::cuda {

namespace {

struct DeviceHeapPayload {
  uint64_t pid;
  uint64_t address;  // of the engines' heap; valid in the owner's process
  uint64_t nonce;    // the heap's identity page holds the same
  int32_t device;
  char device_uuid[16];
  cudaIpcMemHandle_t ipc;  // of the allocation (identity page first); valid for HeapSharing::processes
};

void device_uuid(int device, char (&uuid)[16]) {
  cudaDeviceProp properties{};
  SY_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  std::memcpy(uuid, properties.uuid.bytes, sizeof(uuid));
}

// Copies `bytes` between host and device (either way) on a stream of its own that does not
// synchronise with the legacy default stream: a peer of this process that has connected already may
// be spinning in a kernel, waiting for this rank. Returns the first error.
cudaError_t copy_aside(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind) {
  cudaStream_t stream = nullptr;
  cudaError_t status = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (status != cudaSuccess) return status;
  status = cudaMemcpyAsync(destination, source, bytes, kind, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  return status;
}

// The identity page of a heap at `allocation` (a peer's, in this process or mapped from another).
detail::HeapIdentity read_identity(const void* allocation) {
  detail::HeapIdentity identity{};
  SY_CUDA_CHECK(copy_aside(&identity, allocation, sizeof(identity), cudaMemcpyDeviceToHost));
  return identity;
}

// `source`'s slot in the identity page at `allocation` (core/heap_identity.hpp, connected_by).
uint64_t* connection_slot(uint8_t* allocation, int source) {
  return reinterpret_cast<uint64_t*>(allocation + offsetof(detail::HeapIdentity, connected_by)) + source;
}

}  // namespace

size_t heap_allocation_bytes(size_t heap_bytes) {
  return common::align_up(detail::kHeapIdentityBytes + heap_bytes, kHeapAllocationGranule);
}

DeviceHeap::DeviceHeap(size_t bytes, int rank, int num_ranks, int device, HeapSharing sharing)
    : bytes_(bytes),
      rank_(rank),
      num_ranks_(num_ranks),
      device_(device),
      sharing_(sharing),
      nonce_(detail::new_heap_nonce()),
      opened_(num_ranks, nullptr),
      peer_host_identity_(num_ranks, nullptr) {
  SY_CUDA_CHECK(cudaSetDevice(device_));
  const size_t allocation = heap_allocation_bytes(bytes_);
  void* pointer = nullptr;
  SY_CUDA_CHECK(cudaMalloc(&pointer, allocation));
  allocation_ = static_cast<uint8_t*>(pointer);
  identity_ = detail::make_heap_identity(nonce_, rank, num_ranks, bytes_);
  if (sharing_ == HeapSharing::threads) {
    // Peers of this process read and claim a host copy of the identity (core/heap_registry.hpp), which
    // lives exactly as long as the device memory.
    struct Owner {
      void* device = nullptr;
      detail::HeapIdentity identity{};
      ~Owner() { cudaFree(device); }
    };
    auto owner = std::make_shared<Owner>();
    owner->device = pointer;
    owner->identity = identity_;
    storage_ = std::shared_ptr<void>(owner, pointer);
    host_identity_ = std::shared_ptr<detail::HeapIdentity>(owner, &owner->identity);
  } else {
    storage_ = std::shared_ptr<void>(pointer, [](void* p) { cudaFree(p); });
  }
  base_ = allocation_ + detail::kHeapIdentityBytes;
  // Barrier words must start at 0; the rest is reset by each call before use.
  SY_CUDA_CHECK(cudaMemset(allocation_, 0, allocation));
  SY_CUDA_CHECK(cudaMemcpy(allocation_, &identity_, sizeof(identity_), cudaMemcpyHostToDevice));
  SY_CUDA_CHECK(cudaDeviceSynchronize());
  if (sharing_ == HeapSharing::threads)
    detail::register_thread_heap(base_, storage_, host_identity_, num_ranks - 1);
  view_.base = base_;
  view_.bytes = bytes_;
  view_.rank = rank;
  view_.num_ranks = num_ranks;
}

DeviceHeap::~DeviceHeap() {
  cudaSetDevice(device_);
  // Every peer heap is still mapped (held, with threads): give the slots back for a later Buffer.
  if (host_claimed_) detail::release_connections(peer_host_identity_, rank_, nonce_);
  for (int peer : device_claimed_) {
    uint64_t* slot = connection_slot(view_.peer_base(peer) - detail::kHeapIdentityBytes, rank_);
    uint64_t holder = 0;
    if (copy_aside(&holder, slot, sizeof(holder), cudaMemcpyDeviceToHost) == cudaSuccess &&
        holder == nonce_) {
      const uint64_t none = 0;
      copy_aside(slot, &none, sizeof(none), cudaMemcpyHostToDevice);
    }
  }
  cudaGetLastError();
  for (void* mapping : opened_) {
    if (mapping) cudaIpcCloseMemHandle(mapping);
  }
  // storage_ frees the heap once no connected peer of this process maps it.
}

Bytes DeviceHeap::local_handle() const {
  DeviceHeapPayload payload{};
  payload.pid = static_cast<uint64_t>(getpid());
  payload.address = reinterpret_cast<uint64_t>(base_);
  payload.nonce = nonce_;
  payload.device = device_;
  device_uuid(device_, payload.device_uuid);
  if (sharing_ == HeapSharing::processes) SY_CUDA_CHECK(cudaIpcGetMemHandle(&payload.ipc, allocation_));
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
      throw InvalidArgument(which + ": expected a cuda heap handle of " +
                            std::to_string(sizeof(DeviceHeapPayload)) + " payload bytes, got " +
                            std::to_string(payloads[peer].size()));
    }
    DeviceHeapPayload payload{};
    std::memcpy(&payload, payloads[peer].data(), sizeof(payload));
    const bool same_device = std::memcmp(payload.device_uuid, my_uuid, sizeof(my_uuid)) == 0;
    const detail::ExpectedHeap expected{payload.nonce, peer, num_ranks_, bytes_};
    ranks_on_this_device_ += same_device ? 1 : 0;
    uint8_t* peer_base = nullptr;
    if (peer == rank_) {
      detail::check_heap_identity(identity_, expected, which);
      peer_base = base_;
    } else if (sharing_ == HeapSharing::threads) {
      if (payload.pid != my_pid) {
        throw InvalidArgument(
            which + ": expected a handle from this process (HeapSharing::threads), got one from pid " +
            std::to_string(payload.pid) + "; use HeapSharing::processes for one process per rank");
      }
      if (!same_device) {
        int can_access = 0;
        SY_CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, device_, payload.device));
        if (!can_access) {
          throw Unsupported(which + ": expected GPU " + std::to_string(payload.device) +
                            " to be reachable by "
                            "load/store from GPU " +
                            std::to_string(device_) + " (peer access), got no peer access");
        }
        cudaError_t status = cudaDeviceEnablePeerAccess(payload.device, 0);
        if (status == cudaErrorPeerAccessAlreadyEnabled) {
          cudaGetLastError();  // clear the sticky-free error
        } else {
          SY_CUDA_CHECK(status);
        }
      }
      peer_base = reinterpret_cast<uint8_t*>(payload.address);
      detail::ThreadHeap heap = detail::connect_thread_heap(peer_base);
      if (!heap.storage) {
        throw InvalidArgument(which +
                              ": expected the handle of a live buffer of this process, got one whose heap "
                              "is unknown (not made by Buffer::local_handle in this process)");
      }
      detail::check_heap_identity(*heap.identity, expected, which);
      peer_host_identity_[peer] = heap.identity.get();
      peer_storage_.push_back(std::move(heap.storage));
    } else {
      // A connect that was refused earlier may have opened this peer already (a process may open an IPC
      // handle once): that mapping goes first.
      if (opened_[peer]) {
        cudaIpcCloseMemHandle(opened_[peer]);
        opened_[peer] = nullptr;
      }
      void* mapping = nullptr;
      const cudaError_t opened = cudaIpcOpenMemHandle(&mapping, payload.ipc, cudaIpcMemLazyEnablePeerAccess);
      if (opened != cudaSuccess) {
        cudaGetLastError();  // not sticky; clear it so later calls do not report it
        throw InvalidArgument(which +
                              ": expected a CUDA IPC handle of a live heap, got one that "
                              "cudaIpcOpenMemHandle refused: " +
                              cudaGetErrorName(opened) + " (" + cudaGetErrorString(opened) + ")");
      }
      opened_[peer] = mapping;  // closed by the destructor, also when the check below throws
      // The identity page is the first bytes of the allocation, so this read stays within it
      // whatever the mapping's size.
      detail::check_heap_identity(read_identity(mapping), expected, which);
      peer_base = static_cast<uint8_t*>(mapping) + detail::kHeapIdentityBytes;
    }
    view_.peer_offset[peer] =
        static_cast<int64_t>(reinterpret_cast<uintptr_t>(peer_base) - reinterpret_cast<uintptr_t>(base_));
  }
  claim_peer_heaps();
}

void DeviceHeap::claim_peer_heaps() {
  // Peers of this process: a host CAS on the identity's host copy. Peers in other processes: a read,
  // then a write of their device page, not atomic; two Buffers of one rank connecting at the same
  // instant may both pass, but a second Buffer made while the first is alive is caught.
  const auto slot_of = [&](int peer) {
    return connection_slot(view_.peer_base(peer) - detail::kHeapIdentityBytes, rank_);
  };
  for (int peer = 0; peer < num_ranks_; ++peer) {
    if (peer == rank_ || peer_host_identity_[peer]) continue;
    uint64_t holder = 0;
    SY_CUDA_CHECK(copy_aside(&holder, slot_of(peer), sizeof(holder), cudaMemcpyDeviceToHost));
    if (holder != 0 && holder != nonce_) {
      detail::throw_heap_taken(rank_, peer, "all_handles[" + std::to_string(peer) + "]");
    }
  }
  detail::claim_connections(peer_host_identity_, rank_, nonce_);
  host_claimed_ = true;
  for (int peer = 0; peer < num_ranks_; ++peer) {
    if (peer == rank_ || peer_host_identity_[peer]) continue;
    SY_CUDA_CHECK(copy_aside(slot_of(peer), &nonce_, sizeof(nonce_), cudaMemcpyHostToDevice));
    device_claimed_.push_back(peer);
  }
}

}  // namespace switchyard::cuda
