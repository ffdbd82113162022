// nccl_gin host setup: a symmetric window over an ncclMemAlloc heap and an ncclDevComm with GIN
// contexts, or, in a build without NCCL's device API, an Unsupported error saying why.
#include "transport/nccl_gin.hpp"

#include "switchyard/errors.hpp"

#if SWITCHYARD_WITH_NCCL_GIN
#include "device/cuda_check.hpp"
#endif

namespace switchyard::transport {

#if SWITCHYARD_WITH_NCCL_GIN

namespace {

std::string nccl_failure(const char* call, ncclResult_t result, ncclComm_t comm) {
  std::string message = std::string("nccl_gin: ") + call + " failed: " + ncclGetErrorString(result);
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && *detail != '\0') message += " (" + std::string(detail) + ")";
  return message;
}

void nccl_check(ncclResult_t result, const char* call, ncclComm_t comm) {
  if (result != ncclSuccess) throw SystemError(nccl_failure(call, result, comm));
}

}  // namespace

// Owns what the constructor acquired, so that a failure half-way releases it in reverse order.
struct NcclGinTransport::State {
  ncclComm_t comm = nullptr;
  void* heap = nullptr;
  size_t heap_bytes = 0;
  int rank = 0;
  int num_ranks = 1;
  bool window_registered = false;
  bool device_comm_created = false;
  NcclGinDevice device{};

  ~State() {
    // NOTES: errors cannot be reported from here; NCCL logs them.
    if (device_comm_created) ncclDevCommDestroy(comm, &device.comm);
    if (window_registered) ncclCommWindowDeregister(comm, device.window);
    if (heap != nullptr) ncclMemFree(heap);
  }
};

bool NcclGinTransport::compiled_in() {
  return true;
}
std::string NcclGinTransport::compiled_out_reason() {
  return {};
}

NcclGinTransport::NcclGinTransport(void* nccl_comm, size_t heap_bytes, const NcclGinOptions& options) {
  if (nccl_comm == nullptr)
    throw InvalidArgument("nccl_comm: expected the caller's ncclComm_t, got a null pointer");
  if (heap_bytes == 0) throw InvalidArgument("heap_bytes: expected a positive size, got 0");
  if (options.num_contexts < 1) {
    throw InvalidArgument("options.num_contexts: expected at least 1, got " +
                          std::to_string(options.num_contexts));
  }
  if (options.num_signals < 0) {
    throw InvalidArgument("options.num_signals: expected a non-negative count, got " +
                          std::to_string(options.num_signals));
  }
  auto state = std::make_unique<State>();
  ncclComm_t comm = static_cast<ncclComm_t>(nccl_comm);
  state->comm = comm;
  nccl_check(ncclCommUserRank(comm, &state->rank), "ncclCommUserRank", comm);
  nccl_check(ncclCommCount(comm, &state->num_ranks), "ncclCommCount", comm);

  // A symmetric window: the same size on every rank, from NCCL's allocator (VMM memory that NCCL can
  // map into the node's flat LSA space and register with the NIC).
  const size_t alignment = NCCL_WIN_REQUIRED_ALIGNMENT;
  state->heap_bytes = (heap_bytes + alignment - 1) / alignment * alignment;
  nccl_check(ncclMemAlloc(&state->heap, state->heap_bytes), "ncclMemAlloc", comm);
  SY_CUDA_CHECK(cudaMemset(state->heap, 0, state->heap_bytes));
  SY_CUDA_CHECK(cudaDeviceSynchronize());  // NOTES: one process per GPU here: no peer kernel to wait for
  nccl_check(ncclCommWindowRegister(comm, state->heap, state->heap_bytes, &state->device.window,
                                    NCCL_WIN_COLL_SYMMETRIC),
             "ncclCommWindowRegister", comm);
  state->window_registered = true;

  ncclDevCommRequirements requirements{};
  requirements.ginForceEnable = true;  // fail here, not in the first kernel, when GIN is missing
  requirements.ginContextCount = options.num_contexts;
  requirements.ginSignalCount = options.num_signals;
  const ncclResult_t created = ncclDevCommCreate(comm, &requirements, &state->device.comm);
  if (created != ncclSuccess) {
    throw Unsupported(nccl_failure("ncclDevCommCreate with GIN", created, comm) +
                      "; GIN needs an IB or RoCE NIC with GPU-initiated networking on every rank");
  }
  state->device_comm_created = true;
  if (state->device.comm.ginContextCount == 0) {
    throw Unsupported(
        "nccl_gin: NCCL created the device communicator without GIN contexts (GIN needs an IB or "
        "RoCE NIC with GPU-initiated networking on every rank)");
  }
  state_ = std::move(state);
}

NcclGinTransport::~NcclGinTransport() = default;

uint8_t* NcclGinTransport::heap_base() const {
  return static_cast<uint8_t*>(state_->heap);
}
size_t NcclGinTransport::heap_bytes() const {
  return state_->heap_bytes;
}
int NcclGinTransport::rank() const {
  return state_->rank;
}
int NcclGinTransport::num_ranks() const {
  return state_->num_ranks;
}
int NcclGinTransport::lsa_size() const {
  return state_->device.comm.lsaSize;
}
int NcclGinTransport::num_contexts() const {
  return state_->device.comm.ginContextCount;
}
const NcclGinDevice& NcclGinTransport::device() const {
  return state_->device;
}

#else  // without NCCL's device API

#ifndef SWITCHYARD_NCCL_GIN_MISSING
#define SWITCHYARD_NCCL_GIN_MISSING "NCCL was not looked for"
#endif

struct NcclGinTransport::State {};

bool NcclGinTransport::compiled_in() {
  return false;
}
std::string NcclGinTransport::compiled_out_reason() {
  return SWITCHYARD_NCCL_GIN_MISSING;
}

NcclGinTransport::NcclGinTransport(void*, size_t, const NcclGinOptions&) {
  throw Unsupported("nccl_gin: this build of switchyard has no NCCL device API (" + compiled_out_reason() +
                    "); it needs NCCL >= 2.28 with nccl_device.h, and the CUDA backend, at configure time");
}

NcclGinTransport::~NcclGinTransport() = default;

// Unreachable: construction always throws.
uint8_t* NcclGinTransport::heap_base() const {
  return nullptr;
}
size_t NcclGinTransport::heap_bytes() const {
  return 0;
}
int NcclGinTransport::rank() const {
  return 0;
}
int NcclGinTransport::num_ranks() const {
  return 0;
}
int NcclGinTransport::lsa_size() const {
  return 0;
}
int NcclGinTransport::num_contexts() const {
  return 0;
}

#endif

}  // namespace switchyard::transport
