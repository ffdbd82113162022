"""switchyard: expert-parallel MoE communication (dispatch and combine) with bit-identical results.

    import switchyard
    buffer = switchyard.Buffer(group, hidden=7168, topk=8, num_experts=256)
    layout = buffer.get_dispatch_layout(topk_idx, num_experts=256)
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=256, layout=layout)
    y = experts(recv.recv_x, recv.recv_topk_idx, recv.num_recv_tokens_per_expert)
    out = buffer.combine(y, recv.handle, recv.recv_topk_weights)

The expert-major engines (decode-sized batches; Buffer(..., low_latency_max_tokens_per_rank=128) or
symmetric_max_tokens_per_rank=128 sizes their regions):

    recv = buffer.low_latency_dispatch(x, topk_idx, 128, num_experts=256)   # or symmetric_dispatch
    y = experts(recv.recv_x, recv.recv_count)                                # [L, R * 128, H]
    out = buffer.low_latency_combine(y, topk_idx, topk_weights, recv.handle) # or symmetric_combine

The MoE layer over the symmetric region (docs/MOE.md):

    moe = switchyard.MoE(buffer, w1, w2, num_experts=256, max_tokens_per_rank=128)  # w1 [L, 2I, H], w2 [L, H, I]
    y = moe(x, topk_idx, topk_weights)                                               # bf16 [N, H]

switchyard.deep_ep is a drop-in for DeepEP's deep_ep.Buffer.
"""
from ._errors import CapacityError, Error, InvalidArgument, SystemError, TimeoutError, Unsupported  # noqa: A004  (before _C)
from . import _C
from ._buffer import (Buffer, CombineResult, DispatchLayout, DispatchResult, LowLatencyCombineResult,
                      LowLatencyDispatchResult)
from ._groups import Group, as_group
from ._moe import MoE, interleave_gate_up

Config = _C.Config
CallTuning = _C.CallTuning
DispatchHandle = _C.DispatchHandle
LowLatencyHandle = _C.LowLatencyHandle
cuda_available = _C.cuda_available
__version__ = _C.__version__

__all__ = [
    "Buffer", "CallTuning", "CapacityError", "CombineResult", "Config", "DispatchHandle", "DispatchLayout", "DispatchResult", "Error", "Group",
    "InvalidArgument", "LowLatencyCombineResult", "LowLatencyDispatchResult", "LowLatencyHandle", "MoE", "SystemError", "TimeoutError", "Unsupported", "as_group", "cuda_available",
    "interleave_gate_up",
]
