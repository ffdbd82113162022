// The nccl baseline's kernels (tools/bench/nccl_kernels.*) against the reference, bit for bit, on
// one GPU: NCCL cannot put several ranks on one GPU, so the test moves the rows between the ranks'
// buffers itself, exactly where the session's grouped ncclSend/ncclRecv put them (source rank order
// on the receiver, destination order on the sender). What only NCCL does, the bench checks on
// several GPUs. Skipped (reported as skipped) where no GPU is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/device_tensors.hpp"
#include "nccl_kernels.hpp"
#include "support/test_seed.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/reference.hpp"
#include "workload/workload.hpp"

namespace switchyard::bench {
namespace {

constexpr int kDevice = 0;

struct KernelCase {
  std::string name;
  workload::Shape shape;
};

// What GoogleTest prints for a case (a failure's "where GetParam() = ..."), instead of its raw bytes.
void PrintTo(const KernelCase& c, std::ostream* out) {
  *out << c.name << " (" << c.shape.describe() << ")";
}

workload::Shape make_shape(int ranks, int ranks_per_node, int64_t tokens, int hidden, int topk, int experts,
                           DType dtype, workload::Routing routing = workload::Routing::random) {
  workload::Shape shape;
  shape.topology = Topology{ranks, ranks_per_node};
  shape.tokens_per_rank = tokens;
  shape.hidden = hidden;
  shape.topk = topk;
  shape.num_experts = experts;
  shape.dtype = dtype;
  shape.routing = routing;
  shape.with_weights = true;  // the bench's workload always has weights
  return shape;
}

std::vector<KernelCase> cases() {
  using workload::Routing;
  std::vector<KernelCase> list = {
      {"R1", make_shape(1, 1, 64, 256, 4, 8, DType::bf16)},
      {"R2_k1", make_shape(2, 2, 100, 128, 1, 8, DType::bf16)},
      {"R4_fp8", make_shape(4, 4, 96, 512, 8, 32, DType::fp8_e4m3)},
      {"R4_h7168", make_shape(4, 4, 64, 7168, 8, 32, DType::bf16)},
      // More tokens than one routing chunk (512), so the running row index crosses chunks.
      {"R8_tokens_over_two_chunks", make_shape(8, 8, 1100, 128, 8, 64, DType::bf16)},
      // Two nodes: the reduction sums each node's ranks, rounds, then sums the nodes.
      {"R4_two_nodes", make_shape(4, 2, 80, 256, 6, 16, DType::bf16)},
      {"R8_four_nodes_fp8", make_shape(8, 2, 70, 256, 8, 64, DType::fp8_e4m3)},
      // hidden not a multiple of 8 bf16 values: the scalar paths of packing and reduction.
      {"R3_k9_hidden_100", make_shape(3, 3, 50, 100, 9, 27, DType::bf16)},
      {"R4_zero_tokens", make_shape(4, 4, 0, 256, 4, 16, DType::bf16)},
      {"R4_all_invalid", make_shape(4, 4, 64, 256, 4, 16, DType::bf16, Routing::all_invalid)},
      {"R4_one_expert", make_shape(4, 4, 100, 256, 4, 16, DType::bf16, Routing::one_expert)},
      {"R4_skewed", make_shape(4, 4, 200, 256, 4, 16, DType::bf16, Routing::skewed)},
  };
  KernelCase uneven{"R2_zero_tokens_on_rank1", make_shape(2, 2, 0, 256, 4, 8, DType::bf16)};
  uneven.shape.tokens_per_rank_list = {40, 0};
  list.push_back(uneven);
  return list;
}

void check(cudaError_t status, const std::string& what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

TensorView first_rows(const Tensor& tensor, int64_t rows) {
  TensorView view = tensor.view();
  view.shape[0] = rows;
  return view;
}

uint8_t* row_address(const Tensor& tensor, int64_t row, int64_t row_bytes) {
  return static_cast<uint8_t*>(tensor.data()) + row * row_bytes;
}

// One rank's buffers, as the session has them.
struct Rank {
  Tensor x, x_scales, topk_idx, topk_weights;
  Tensor route, send_counts;
  Tensor send_x, send_scales, send_topk_idx, send_topk_weights;
  Tensor recv_x, recv_scales, recv_topk_idx, recv_topk_weights;
  Tensor returned_x, returned_weights, combined_x, combined_weights;
  std::vector<int32_t> counts;  // send_counts on the host
  std::vector<int64_t> send_offsets, recv_offsets, recv_rows;
  int64_t num_tokens = 0, num_recv = 0;
  std::vector<int> num_recv_tokens_per_expert;
};

class NcclKernelsCudaTest : public ::testing::TestWithParam<KernelCase> {};

TEST_P(NcclKernelsCudaTest, RoutedPackedExchangedAndReducedRowsMatchTheReferenceBitwise) {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no CUDA device: GPU tests are skipped, not passed";
  }
  const workload::Shape& shape = GetParam().shape;
  const uint64_t seed = testing::seed_for("nccl_kernels_" + GetParam().name);
  SCOPED_TRACE("case " + GetParam().name + " seed=" + std::to_string(seed) + " " + shape.describe());
  const int num_ranks = shape.topology.num_ranks;
  const int topk = shape.topk;
  const bool fp8 = shape.dtype == DType::fp8_e4m3;
  const int num_scales = fp8 ? shape.hidden / 128 : 0;
  const int64_t x_row_bytes = int64_t{shape.hidden} * static_cast<int64_t>(dtype_size(shape.dtype));
  const int64_t y_row_bytes = int64_t{shape.hidden} * 2;
  const NcclCounts layout{num_ranks, shape.num_experts / num_ranks};

  // The reference: layouts, dispatch, the synthetic expert's outputs, combine.
  std::vector<workload::RankData> data = workload::generate(shape, seed);
  std::vector<reference::RankInputs> inputs;
  std::vector<int64_t> tokens_per_source;
  for (int rank = 0; rank < num_ranks; ++rank) {
    inputs.push_back(data[rank].inputs());
    tokens_per_source.push_back(data[rank].x.size(0));
  }
  const std::vector<reference::NormalDispatchOutput> dispatched =
      reference::normal_dispatch(inputs, shape.num_experts, shape.topology);
  std::vector<Tensor> ys;
  std::vector<TensorView> y_views, weight_views;
  for (int rank = 0; rank < num_ranks; ++rank) {
    ys.push_back(workload::synthetic_expert(dispatched[rank].recv_x, dispatched[rank].recv_x_scales, rank));
    y_views.push_back(ys.back());
    weight_views.push_back(dispatched[rank].recv_topk_weights);
  }
  const std::vector<reference::NormalCombineOutput> combined =
      reference::normal_combine(y_views, weight_views, dispatched, tokens_per_source, shape.topology);

  check(cudaSetDevice(kDevice), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  int64_t recv_capacity = 0;
  for (int64_t tokens : tokens_per_source) recv_capacity += tokens;
  std::vector<Rank> ranks(num_ranks);
  {
    for (int rank = 0; rank < num_ranks; ++rank) {
      Rank& r = ranks[rank];
      r.num_tokens = tokens_per_source[rank];
      const int64_t send_capacity = r.num_tokens * std::min(num_ranks, topk);
      r.x = testing::to_device(data[rank].x, kDevice, stream);
      r.x_scales = testing::to_device(data[rank].x_scales, kDevice, stream);
      r.topk_idx = testing::to_device(data[rank].topk_idx, kDevice, stream);
      r.topk_weights = testing::to_device(data[rank].topk_weights, kDevice, stream);
      // Poisoned: a row or count a kernel forgets shows up as 0xA5 bytes.
      r.route = testing::poisoned_device(DType::i32, {r.num_tokens, num_ranks}, kDevice, stream);
      r.send_counts = testing::poisoned_device(DType::i32, {layout.size()}, kDevice, stream);
      r.send_x = testing::poisoned_device(shape.dtype, {send_capacity, shape.hidden}, kDevice, stream);
      r.recv_x = testing::poisoned_device(shape.dtype, {recv_capacity, shape.hidden}, kDevice, stream);
      if (fp8) {
        r.send_scales = testing::poisoned_device(DType::f32, {send_capacity, num_scales}, kDevice, stream);
        r.recv_scales = testing::poisoned_device(DType::f32, {recv_capacity, num_scales}, kDevice, stream);
      }
      r.send_topk_idx = testing::poisoned_device(DType::i64, {send_capacity, topk}, kDevice, stream);
      r.recv_topk_idx = testing::poisoned_device(DType::i64, {recv_capacity, topk}, kDevice, stream);
      r.send_topk_weights = testing::poisoned_device(DType::f32, {send_capacity, topk}, kDevice, stream);
      r.recv_topk_weights = testing::poisoned_device(DType::f32, {recv_capacity, topk}, kDevice, stream);
      r.returned_x = testing::poisoned_device(DType::bf16, {send_capacity, shape.hidden}, kDevice, stream);
      r.returned_weights = testing::poisoned_device(DType::f32, {send_capacity, topk}, kDevice, stream);
      r.combined_x = testing::poisoned_device(DType::bf16, {r.num_tokens, shape.hidden}, kDevice, stream);
      r.combined_weights = testing::poisoned_device(DType::f32, {r.num_tokens, topk}, kDevice, stream);
    }

    // Every rank: routing, then packing.
    for (int rank = 0; rank < num_ranks; ++rank) {
      Rank& r = ranks[rank];
      const NcclRouteTable route{r.route.as<int32_t>(), r.num_tokens, num_ranks};
      NcclRouteArgs route_args;
      route_args.topk_idx = r.topk_idx.as<const int64_t>();
      route_args.topk = topk;
      route_args.counts = layout;
      route_args.route = route;
      route_args.send_counts = r.send_counts.as<int32_t>();
      launch_nccl_route(route_args, stream);
      NcclPackArgs pack;
      pack.x = r.x.as<const uint8_t>();
      pack.x_row_bytes = x_row_bytes;
      pack.x_scales = fp8 ? r.x_scales.as<const float>() : nullptr;
      pack.num_scales = num_scales;
      pack.topk_idx = r.topk_idx.as<const int64_t>();
      pack.topk_weights = r.topk_weights.as<const float>();
      pack.topk = topk;
      pack.counts = layout;
      pack.route = route;
      pack.send_counts = r.send_counts.as<const int32_t>();
      pack.send_x = r.send_x.as<uint8_t>();
      pack.send_scales = fp8 ? r.send_scales.as<float>() : nullptr;
      pack.send_topk_idx = r.send_topk_idx.as<int64_t>();
      pack.send_topk_weights = r.send_topk_weights.as<float>();
      launch_nccl_pack(pack, stream);
      Tensor counts = testing::to_host(r.send_counts, stream);
      r.counts.assign(counts.as<int32_t>(), counts.as<int32_t>() + layout.size());
      int64_t offset = 0;
      for (int destination = 0; destination < num_ranks; ++destination) {
        r.send_offsets.push_back(offset);
        offset += r.counts[layout.rows_index(destination)];
      }
      // The layout step's num_tokens_per_rank is what routing sends each rank.
      const reference::Layout expected =
          reference::layout(data[rank].topk_idx, shape.num_experts, shape.topology);
      for (int destination = 0; destination < num_ranks; ++destination) {
        EXPECT_EQ(r.counts[layout.rows_index(destination)], expected.num_tokens_per_rank[destination])
            << "rank " << rank << " rows to rank " << destination;
      }
    }

    // The dispatch's exchange: each destination receives source 0's segment for it, then source 1's.
    auto copy = [&](uint8_t* to, const uint8_t* from, int64_t bytes) {
      if (bytes > 0)
        check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream), "exchange copy");
    };
    for (int destination = 0; destination < num_ranks; ++destination) {
      Rank& d = ranks[destination];
      d.num_recv_tokens_per_expert.assign(layout.experts_per_rank, 0);
      for (int source = 0; source < num_ranks; ++source) {
        const Rank& s = ranks[source];
        const int64_t rows = s.counts[layout.rows_index(destination)];
        const int64_t from = s.send_offsets[destination];
        d.recv_offsets.push_back(d.num_recv);
        d.recv_rows.push_back(rows);
        copy(row_address(d.recv_x, d.num_recv, x_row_bytes), row_address(s.send_x, from, x_row_bytes),
             rows * x_row_bytes);
        if (fp8) {
          copy(row_address(d.recv_scales, d.num_recv, num_scales * 4),
               row_address(s.send_scales, from, num_scales * 4), rows * num_scales * 4);
        }
        copy(row_address(d.recv_topk_idx, d.num_recv, topk * 8), row_address(s.send_topk_idx, from, topk * 8),
             rows * topk * 8);
        copy(row_address(d.recv_topk_weights, d.num_recv, topk * 4),
             row_address(s.send_topk_weights, from, topk * 4), rows * topk * 4);
        d.num_recv += rows;
        for (int local = 0; local < layout.experts_per_rank; ++local) {
          d.num_recv_tokens_per_expert[local] += s.counts[layout.expert_index(destination, local)];
        }
      }
      NcclLocalizeArgs localize;
      localize.topk_idx = d.recv_topk_idx.as<int64_t>();
      localize.topk_weights = d.recv_topk_weights.as<float>();
      localize.num_rows = d.num_recv;
      localize.topk = topk;
      localize.rank = destination;
      localize.experts_per_rank = layout.experts_per_rank;
      launch_nccl_localize(localize, stream);
    }
    check(cudaStreamSynchronize(stream), "dispatch");

    for (int rank = 0; rank < num_ranks; ++rank) {
      const Rank& r = ranks[rank];
      const reference::NormalDispatchOutput& want = dispatched[rank];
      ASSERT_EQ(r.num_recv, want.recv_x.size(0)) << "rank " << rank << " num_recv_tokens";
      std::string why;
      EXPECT_TRUE(workload::bitwise_equal(testing::to_host(first_rows(r.recv_x, r.num_recv), stream),
                                          want.recv_x, &why))
          << "rank " << rank << " recv_x: " << why;
      if (fp8) {
        EXPECT_TRUE(workload::bitwise_equal(testing::to_host(first_rows(r.recv_scales, r.num_recv), stream),
                                            want.recv_x_scales, &why))
            << "rank " << rank << " recv_x_scales: " << why;
      }
      EXPECT_TRUE(workload::bitwise_equal(testing::to_host(first_rows(r.recv_topk_idx, r.num_recv), stream),
                                          want.recv_topk_idx, &why))
          << "rank " << rank << " recv_topk_idx: " << why;
      EXPECT_TRUE(
          workload::bitwise_equal(testing::to_host(first_rows(r.recv_topk_weights, r.num_recv), stream),
                                  want.recv_topk_weights, &why))
          << "rank " << rank << " recv_topk_weights: " << why;
      EXPECT_EQ(r.num_recv_tokens_per_expert, want.num_recv_tokens_per_expert) << "rank " << rank;
    }

    // The combine's exchange: each destination returns its y rows (and the weights) to their sources,
    // into the places the sources' send buffers had them; then every source reduces.
    std::vector<Tensor> device_ys;
    for (int destination = 0; destination < num_ranks; ++destination) {
      device_ys.push_back(testing::to_device(ys[destination], kDevice, stream));
      const Rank& d = ranks[destination];
      for (int source = 0; source < num_ranks; ++source) {
        Rank& s = ranks[source];
        const int64_t rows = d.recv_rows[source];
        copy(row_address(s.returned_x, s.send_offsets[destination], y_row_bytes),
             row_address(device_ys.back(), d.recv_offsets[source], y_row_bytes), rows * y_row_bytes);
        copy(row_address(s.returned_weights, s.send_offsets[destination], topk * 4),
             row_address(d.recv_topk_weights, d.recv_offsets[source], topk * 4), rows * topk * 4);
      }
    }
    for (int rank = 0; rank < num_ranks; ++rank) {
      Rank& r = ranks[rank];
      NcclReduceArgs reduce;
      reduce.returned_x = r.returned_x.as<const uint16_t>();
      reduce.returned_weights = r.returned_weights.as<const float>();
      reduce.hidden = shape.hidden;
      reduce.topk = topk;
      reduce.ranks_per_node = shape.topology.ranks_per_node;
      reduce.counts = layout;
      reduce.route = NcclRouteTable{r.route.as<int32_t>(), r.num_tokens, num_ranks};
      reduce.send_counts = r.send_counts.as<const int32_t>();
      reduce.combined_x = r.combined_x.as<uint16_t>();
      reduce.combined_weights = r.combined_weights.as<float>();
      launch_nccl_reduce(reduce, stream);
    }
    check(cudaStreamSynchronize(stream), "combine");
    for (int rank = 0; rank < num_ranks; ++rank) {
      std::string why;
      EXPECT_TRUE(workload::bitwise_equal(testing::to_host(ranks[rank].combined_x, stream),
                                          combined[rank].combined_x, &why))
          << "rank " << rank << " combined_x: " << why;
      EXPECT_TRUE(workload::bitwise_equal(testing::to_host(ranks[rank].combined_weights, stream),
                                          combined[rank].combined_topk_weights, &why))
          << "rank " << rank << " combined_topk_weights: " << why;
    }
  }
  ranks.clear();  // stream-ordered frees, before the stream goes
  check(cudaStreamSynchronize(stream), "frees");
  cudaStreamDestroy(stream);
}

std::string case_name(const ::testing::TestParamInfo<KernelCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(EdgeCases, NcclKernelsCudaTest, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace switchyard::bench
