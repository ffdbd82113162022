// A cross-rank barrier of the symmetric engine on its own: one block per rank, the same signal words
// and barrier numbers as the barriers inside the dispatch and combine kernels
// (device/cross_rank_barrier.cuh), so it takes its place in their sequence on every rank.
//
// Why one block: the MoE layer runs it between its expert GEMMs and its combine. The combine's grid
// spins in a barrier with every block resident; with ranks sharing a GPU, a fast rank's spinning grid
// would hold SMs that a slow rank's GEMM (a CUTLASS block takes a whole SM) needs to finish, and the slow
// rank would never arrive. Behind this barrier no rank's combine starts before every rank's GEMMs are
// done, and while it waits a rank holds a single block.
#include "cuda/backend/dependent_launch.hpp"
#include "cuda/backend/kernel_preload.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "device/cross_rank_barrier.cuh"
#include "device/cuda_check.hpp"

namespace switchyard::cuda {

namespace {

constexpr int kBarrierThreads = 128;

__global__ void __launch_bounds__(kBarrierThreads)
    symmetric_barrier_kernel(KernelContext context, CrossRankSignals signals, uint64_t* passed) {
  ptx::wait_for_previous_grid();  // launched by launch_dependent: before any global access
  signal_and_await_peers(signals, passed, context, common::WaitRole::symmetric_barrier);
}

}  // namespace

void launch_symmetric_barrier(const KernelContext& context, const common::SymmetricLayout& layout,
                              SymmetricDeviceState* state, cudaStream_t stream) {
  const CrossRankSignals signals{layout.signal(context.heap.base, 0), context.num_ranks};
  launch_dependent(symmetric_barrier_kernel, 1, kBarrierThreads, 0, stream, context, signals,
                   &state->barriers);
}

void prepare_symmetric_barrier_kernel() {
  preload_kernel(symmetric_barrier_kernel);
}

}  // namespace switchyard::cuda
