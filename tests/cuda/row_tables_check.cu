// RowTables::build (cuda/symmetric/tables.cuh) on the device, as the symmetric dispatch and combine run it:
// one block, the counts in shared memory, then the build; the tables come back for the host to compare.
#include <stdexcept>
#include <string>

#include "cuda/row_tables_check.hpp"
#include "cuda/symmetric/kernels.hpp"
#include "cuda/symmetric/tables.cuh"

namespace switchyard::testing {

namespace {

template <bool kSliceExperts>
__global__ void build_tables(const int32_t* count, int num_ranks, int local_experts, int64_t capacity,
                             int32_t* out) {
  extern __shared__ int32_t shared[];
  const cuda::RowTables tables = cuda::RowTables::carve(shared, num_ranks, local_experts);
  const int pairs = num_ranks * local_experts;
  for (int i = static_cast<int>(threadIdx.x); i < pairs; i += static_cast<int>(blockDim.x)) {
    tables.count[i] = count[i];
  }
  __syncthreads();
  tables.build<kSliceExperts>(capacity);
  const int entries = static_cast<int>(cuda::symmetric_table_ints(num_ranks, local_experts));
  for (int i = static_cast<int>(threadIdx.x); i < entries; i += static_cast<int>(blockDim.x))
    out[i] = shared[i];
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace

DeviceRowTables build_row_tables_on_device(const std::vector<int32_t>& count, int num_ranks,
                                           int local_experts, int64_t capacity, int threads,
                                           bool slice_experts) {
  const size_t pairs = static_cast<size_t>(num_ranks) * local_experts;
  if (count.size() != pairs) throw std::runtime_error("count: expected [local_experts][num_ranks] entries");
  const size_t entries = cuda::symmetric_table_ints(num_ranks, local_experts);
  const size_t shared_bytes = entries * sizeof(int32_t);
  int32_t* device_count = nullptr;
  int32_t* device_out = nullptr;
  check(cudaMalloc(&device_count, pairs * sizeof(int32_t)), "cudaMalloc count");
  check(cudaMalloc(&device_out, shared_bytes), "cudaMalloc tables");
  check(cudaMemcpy(device_count, count.data(), pairs * sizeof(int32_t), cudaMemcpyHostToDevice),
        "copy count");
  auto* kernel = slice_experts ? build_tables<true> : build_tables<false>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared_bytes)),
        "cudaFuncSetAttribute");
  kernel<<<1, threads, shared_bytes>>>(device_count, num_ranks, local_experts, capacity, device_out);
  check(cudaGetLastError(), "launch");
  check(cudaDeviceSynchronize(), "build_tables");
  std::vector<int32_t> out(entries);
  check(cudaMemcpy(out.data(), device_out, shared_bytes, cudaMemcpyDeviceToHost), "copy tables");
  cudaFree(device_count);
  cudaFree(device_out);
  // The carve's order (cuda/symmetric/tables.cuh): count and begin [L][R], start [R][L + 1], total [L].
  DeviceRowTables tables;
  const auto at = out.begin();
  tables.begin.assign(at + pairs, at + 2 * pairs);
  const size_t starts = static_cast<size_t>(num_ranks) * (local_experts + 1);
  tables.start.assign(at + 2 * pairs, at + 2 * pairs + starts);
  tables.total.assign(at + 2 * pairs + starts, at + 2 * pairs + starts + local_experts);
  return tables;
}

}  // namespace switchyard::testing
