#pragma once
// The symmetric kernels' row tables (cuda/symmetric/tables.cuh: RowTables::build) built on the device from
// given counts, for the GPU tests to compare with a plain host computation. (Implemented in
// row_tables_check.cu.)
#include <cstdint>
#include <vector>

namespace switchyard::testing {

// What RowTables::build leaves in shared memory, copied out.
struct DeviceRowTables {
  std::vector<int32_t> begin;  // [L][R]
  std::vector<int32_t> start;  // [R][L + 1]
  std::vector<int32_t> total;  // [L]
};

// One block of `threads` threads (a multiple of 32, at most 1024) on the current device fills the tables'
// counts from `count` ([L][R]) and builds them for `capacity`, the walk's experts sliced over several warps a
// rank or not (RowTables::build's kSliceExperts). Synchronises the device; throws std::runtime_error on a
// CUDA failure.
DeviceRowTables build_row_tables_on_device(const std::vector<int32_t>& count, int num_ranks,
                                           int local_experts, int64_t capacity, int threads,
                                           bool slice_experts);

}  // namespace switchyard::testing
