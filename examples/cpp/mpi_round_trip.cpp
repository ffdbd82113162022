// One process per rank, started by mpirun: the buffers' handles travel through MPI, and each rank
// dispatches its tokens, runs an identity "expert" and combines.
//
//   mpirun -np 4 ./mpi_round_trip
//
// As root, Open MPI also wants --allow-run-as-root; with more ranks than cores, --oversubscribe.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <switchyard/switchyard.hpp>
#include <vector>

using namespace switchyard;

std::vector<Bytes> mpi_allgather(const Bytes& mine) {  // handles may differ in size
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int my_size = static_cast<int>(mine.size());
  std::vector<int> sizes(size), offsets(size);
  MPI_Allgather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + sizes[r - 1];
  Bytes all(offsets[size - 1] + sizes[size - 1]);
  MPI_Allgatherv(mine.data(), my_size, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE,
                 MPI_COMM_WORLD);
  std::vector<Bytes> handles(size);
  for (int r = 0; r < size; ++r)
    handles[r].assign(all.begin() + offsets[r], all.begin() + offsets[r] + sizes[r]);
  return handles;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, num_ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &num_ranks);
  const int num_experts = 4 * num_ranks, topk = 2;  // num_experts must be a multiple of num_ranks
  const int64_t num_tokens = 64, hidden = 1024;
  bool weights_came_back = false;
  {
    BufferOptions options;
    options.topology = Topology::single_node(num_ranks);
    options.rank = rank;
    options.sharing = HeapSharing::processes;  // POSIX shared memory on the CPU, CUDA IPC on GPUs
    options.backend = Backend::cpu;
    options.sizing.max_tokens_per_rank = num_tokens;
    options.sizing.hidden = hidden;
    options.sizing.topk = topk;
    options.sizing.num_experts = num_experts;
    Buffer buffer(options);
    buffer.connect(mpi_allgather(buffer.local_handle()));

    Tensor x = Tensor::empty(DType::bf16, {num_tokens, hidden});
    Tensor topk_idx = Tensor::empty(DType::i64, {num_tokens, topk});
    Tensor topk_weights = Tensor::empty(DType::f32, {num_tokens, topk});
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t h = 0; h < hidden; ++h) x.as<uint16_t>()[t * hidden + h] = 0x3f80;  // bf16 1.0
      for (int j = 0; j < topk; ++j) {
        topk_idx.as<int64_t>()[t * topk + j] = (t * 7 + j * 5 + rank) % num_experts;
        topk_weights.as<float>()[t * topk + j] = 0.25f * static_cast<float>(j + 1);
      }
    }

    DispatchArgs dispatch;
    dispatch.x = x;
    dispatch.topk_idx = topk_idx;
    dispatch.topk_weights = topk_weights;
    dispatch.num_experts = num_experts;
    DispatchResult recv = buffer.dispatch(dispatch);

    CombineArgs combine;
    combine.x = recv.recv_x;  // the identity expert
    combine.topk_weights = recv.recv_topk_weights;
    combine.handle = &recv.handle;
    CombineResult out = buffer.combine(combine);

    // Each weight is non-zero on the one rank that holds its expert, so the reduced weights are exact.
    weights_came_back =
        std::memcmp(out.combined_topk_weights.data(), topk_weights.data(), topk_weights.nbytes()) == 0;
    std::printf("rank %d of %d: received %lld tokens; the combined weights equal the gate weights: %s\n",
                rank, num_ranks, static_cast<long long>(recv.num_recv_tokens),
                weights_came_back ? "yes" : "NO");
    MPI_Barrier(MPI_COMM_WORLD);  // no rank frees its heap while a peer may still read it
  }
  MPI_Finalize();
  return weights_came_back ? 0 : 1;
}
