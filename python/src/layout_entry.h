/* The C interface between switchyard._C and switchyard._torch_ops: get_dispatch_layout, the cached
   dispatch and the combine into tensors that torch allocated in C++ (at::empty), as DeepEP's binding
   does, without a torch tensor or a C++ exception crossing from one module to the other
   (python/CMakeLists.txt says why _C keeps its C++ runtime to itself). _C hands out one entry per
   Buffer in a capsule named SWITCHYARD_LAYOUT_ENTRY_NAME; _torch_ops checks the tensors, allocates the
   outputs and calls the entry's functions with their addresses.
   Plain C: both modules include it, and neither links the other. Python.h comes first (as Python asks
   of its includers): handles cross as the Python objects that dispatch returned. */
#ifndef SWITCHYARD_PYTHON_LAYOUT_ENTRY_H
#define SWITCHYARD_PYTHON_LAYOUT_ENTRY_H

#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SWITCHYARD_LAYOUT_ENTRY_NAME "switchyard._C.layout_entry"
/* Bumped whenever a struct or a function's contract changes; _torch_ops refuses another. */
#define SWITCHYARD_LAYOUT_ENTRY_VERSION 3

/* The element types of a cached dispatch's x (and so of its recv_x). */
#define SWITCHYARD_ENTRY_DTYPE_BF16 0
#define SWITCHYARD_ENTRY_DTYPE_FP8_E4M3 1

/* Every call's pointers are on the Buffer's device (`device` of the entry, for a CUDA Buffer), row-major
   and contiguous, and address the elements their comment gives. Every call's `stream` is a cudaStream_t
   as switchyard::Stream takes it: NULL is the Buffer's own stream, not the legacy default stream (a
   framework's default stream, which it reports as 0, is passed as cudaStreamLegacy). */

/* get_dispatch_layout. The outputs, back to back in `counts` (i32 [num_ranks + num_nodes + num_experts]):
   tokens per rank, per node and per expert; is_token_in_rank: bool [num_tokens, num_ranks]. */
typedef struct SwitchyardLayoutCall {
  const int64_t* topk_idx; /* i64 [num_tokens, topk] */
  int64_t num_tokens;
  int64_t topk;
  int64_t num_experts;
  void* stream; /* cudaStream_t on CUDA; ignored on the CPU backend */
  int32_t* counts;
  uint8_t* is_token_in_rank;
} SwitchyardLayoutCall;

/* One call's tuning (switchyard.CallTuning, DeepEP's per-call Config); all 0: the Buffer's. */
typedef struct SwitchyardCallTuning {
  int32_t num_channels; /* 0, or the channels of the handle's dispatch */
  int32_t ring_slots;
  int32_t chunk_tokens;
} SwitchyardCallTuning;

/* What a dispatch handle says about the rows of its calls. */
typedef struct SwitchyardHandleShape {
  int64_t num_tokens;       /* N: this rank's source tokens of the dispatch */
  int64_t num_recv_tokens;  /* M: rows it received; -1 where the host never learnt it (worst-case mode) */
  int64_t num_worst_tokens; /* > 0: the dispatch's padded row count (worst-case mode); else 0 */
} SwitchyardHandleShape;

/* A cached dispatch (switchyard.Buffer.dispatch with handle=): recv_x, and recv_x_scales for fp8, get
   num_recv_rows rows, which must be num_worst_tokens where that is > 0, else the handle's M. */
typedef struct SwitchyardCachedDispatchCall {
  PyObject* handle; /* borrowed: the switchyard._C.DispatchHandle of the dispatch replayed */
  const void* x;    /* x_dtype [num_tokens, hidden] */
  int32_t x_dtype;  /* SWITCHYARD_ENTRY_DTYPE_BF16 or SWITCHYARD_ENTRY_DTYPE_FP8_E4M3 */
  /* 0: x_scales is f32 [num_tokens, hidden / 128]. 1: their row-major transpose [hidden / 128,
     num_tokens] (DeepEP's column-major scales, DispatchArgs::x_scales_column_major). */
  int32_t x_scales_column_major;
  const float* x_scales; /* fp8: as x_scales_column_major says; bf16: not read (NULL) */
  int64_t num_tokens;
  int64_t hidden;
  int64_t num_worst_tokens; /* as the handle's dispatch: 0, or its padded row count */
  SwitchyardCallTuning tuning;
  void* stream;         /* cudaStream_t on CUDA; ignored on the CPU backend */
  void* recv_x;         /* x_dtype [num_recv_rows, hidden] */
  float* recv_x_scales; /* fp8: f32 [num_recv_rows, hidden / 128]; bf16: NULL */
  int64_t num_recv_rows;
} SwitchyardCachedDispatchCall;

/* A combine (switchyard.Buffer.combine). num_tokens is the handle's N; num_rows its dispatch's rows
   (num_worst_tokens where that is > 0, else M). The optional inputs are given by their flags (topk > 0,
   has_bias0, has_bias1), not by NULL: an empty tensor's address may be NULL. */
typedef struct SwitchyardCombineCall {
  PyObject* handle;  /* borrowed: the switchyard._C.DispatchHandle of the dispatch */
  const uint16_t* x; /* bf16 [num_rows, hidden] */
  int64_t num_rows;
  int64_t hidden;
  const float* topk_weights; /* f32 [num_rows, topk] where topk > 0 */
  int64_t topk;              /* 0: no topk_weights */
  const uint16_t* bias0;     /* bf16 [num_tokens, hidden] where has_bias0 */
  const uint16_t* bias1;     /* bf16 [num_tokens, hidden] where has_bias1 */
  int32_t has_bias0;
  int32_t has_bias1;
  int64_t num_tokens;
  SwitchyardCallTuning tuning;
  void* stream;                 /* cudaStream_t on CUDA; ignored on the CPU backend */
  uint16_t* combined_x;         /* bf16 [num_tokens, hidden] */
  float* combined_topk_weights; /* f32 [num_tokens, topk] where topk > 0 */
} SwitchyardCombineCall;

/* Version 3. A fresh dispatch (switchyard.Buffer.dispatch without a handle), whose outputs the caller
   allocates once the call knows their rows (switchyard::DispatchArgs::allocate_outputs), as DeepEP's binding
   allocates its outputs after the count exchange. */
typedef struct SwitchyardDispatchOutputs {
  void* recv_x;             /* x_dtype [rows, hidden] */
  float* recv_x_scales;     /* fp8: f32 [rows, hidden / 128]; bf16: NULL */
  int64_t* recv_topk_idx;   /* i64 [rows, topk] */
  float* recv_topk_weights; /* f32 [rows, topk] with topk_weights; else NULL */
} SwitchyardDispatchOutputs;

typedef struct SwitchyardDispatchCall {
  const void* x; /* x_dtype [num_tokens, hidden] */
  int32_t x_dtype;
  int32_t x_scales_column_major; /* as SwitchyardCachedDispatchCall's */
  const float* x_scales;         /* fp8: as x_scales_column_major says; bf16: NULL */
  int64_t num_tokens;
  int64_t hidden;
  const int64_t* topk_idx;   /* i64 [num_tokens, topk], topk >= 1 */
  const float* topk_weights; /* f32 [num_tokens, topk], or NULL */
  int64_t topk;
  int64_t num_experts;
  int64_t expert_alignment;
  int64_t num_worst_tokens;
  /* get_dispatch_layout's outputs on the same topk_idx (as layout_into writes them: i32 [num_ranks],
     [num_nodes], [num_experts]; bool [num_tokens, num_ranks]), or all NULL: the call computes the layout. */
  const int32_t* num_tokens_per_rank;
  const int32_t* num_tokens_per_node;
  const int32_t* num_tokens_per_expert;
  const uint8_t* is_token_in_rank;
  SwitchyardCallTuning tuning;
  void* stream; /* cudaStream_t on CUDA; ignored on the CPU backend */
  /* Called once during the call, without the GIL, with the rows this rank receives (num_worst_tokens
     in worst-case mode): fills `outputs` (the fields the call makes) and returns 0; or returns -1 having
     allocated nothing, and the call fails. NOTES: after the count exchange every rank must finish its
     call, so a failure here leaves the peers' calls to time out, as an output of the wrong rows does. */
  int (*allocate)(void* context, int64_t rows, SwitchyardDispatchOutputs* outputs);
  void* allocate_context;
  /* Set by the call where it returns 0 (new references): the dispatch's switchyard._C.DispatchHandle, and
     num_recv_tokens_per_expert as a list of ints (empty in worst-case mode). */
  PyObject* handle;
  PyObject* num_recv_tokens_per_expert;
} SwitchyardDispatchCall;

/* Every function is called with the GIL held. 0: done (on CUDA: enqueued on the call's `stream`).
   -1: nothing written, and a Python exception is set (switchyard.InvalidArgument and the others, naming
   the argument; a handle that is no switchyard._C.DispatchHandle is an InvalidArgument naming `handle`). */
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
  int (*layout_into)(void* buffer, const SwitchyardLayoutCall* call);
  /* Version 2. The shape of `handle` (borrowed), for the outputs of a call that replays it. */
  int (*handle_shape)(PyObject* handle, SwitchyardHandleShape* shape);
  int (*cached_dispatch_into)(void* buffer, const SwitchyardCachedDispatchCall* call);
  int (*combine_into)(void* buffer, const SwitchyardCombineCall* call);
  /* Version 3. */
  int (*dispatch_into)(void* buffer, SwitchyardDispatchCall* call);
} SwitchyardLayoutEntry;

#ifdef __cplusplus
}
#endif

#endif
