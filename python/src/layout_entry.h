/* The C interface between switchyard._C and switchyard._torch_ops: get_dispatch_layout into tensors
   that torch allocated in C++ (at::empty), as DeepEP's binding does, without a torch tensor or a C++
   exception crossing from one module to the other (python/CMakeLists.txt says why _C keeps its C++
   runtime to itself). _C hands out one entry per Buffer in a capsule named kSwitchyardLayoutEntryName;
   _torch_ops checks the tensors, allocates the outputs and calls `layout_into` with their addresses.
   Plain C: both modules include it, and neither links the other. */
#ifndef SWITCHYARD_PYTHON_LAYOUT_ENTRY_H
#define SWITCHYARD_PYTHON_LAYOUT_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SWITCHYARD_LAYOUT_ENTRY_NAME "switchyard._C.layout_entry"
/* Bumped whenever the struct or the function's contract changes; _torch_ops refuses another. */
#define SWITCHYARD_LAYOUT_ENTRY_VERSION 1

/* The outputs, back to back in `counts` (i32 [num_ranks + num_nodes + num_experts]): tokens per rank,
   per node and per expert; is_token_in_rank: bool [num_tokens, num_ranks], row-major. Every pointer is on
   the Buffer's device (`device`, for a CUDA Buffer) and addresses that many elements. */
typedef struct SwitchyardLayoutCall {
  const int64_t* topk_idx; /* i64 [num_tokens, topk], row-major */
  int64_t num_tokens;
  int64_t topk;
  int64_t num_experts;
  void* stream; /* cudaStream_t on CUDA; ignored on the CPU backend */
  int32_t* counts;
  uint8_t* is_token_in_rank;
} SwitchyardLayoutCall;

typedef struct SwitchyardLayoutEntry {
  uint32_t version; /* SWITCHYARD_LAYOUT_ENTRY_VERSION */
  int32_t cuda;     /* 1: a CUDA Buffer on `device`; 0: the CPU backend */
  int32_t device;
  int32_t num_ranks;
  int32_t num_nodes;
  /* num_experts above this is refused by the call; _torch_ops leaves such a call to the general path
     (which names the error) rather than allocate counts for it. */
  int32_t max_num_experts;
  void* buffer; /* opaque: the Buffer the entry belongs to, kept alive by the capsule */
  /* Called with the GIL held. 0: done (on CUDA: enqueued on `stream`). -1: nothing written, and a
     Python exception is set (switchyard.InvalidArgument and the others, naming the argument). */
  int (*layout_into)(void* buffer, const SwitchyardLayoutCall* call);
} SwitchyardLayoutEntry;

#ifdef __cplusplus
}
#endif

#endif
