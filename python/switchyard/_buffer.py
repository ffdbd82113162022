"""switchyard.Buffer: one rank's buffer, connected to its peers through a group."""
import numbers
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

from . import _C
from ._errors import Error, InvalidArgument
from ._groups import as_group
from ._tensors import exported, framework_of, stream_of, transposed_if_column_major

__all__ = ["Buffer", "DispatchLayout", "DispatchResult", "CombineResult", "LowLatencyDispatchResult",
           "LowLatencyCombineResult"]


@dataclass
class DispatchLayout:
    """What get_dispatch_layout computes from topk_idx (int32 counts, bool [N, R])."""

    num_tokens_per_rank: Any  # [R]: tokens with at least one expert on each rank
    num_tokens_per_node: Any  # [R / ranks_per_node]
    num_tokens_per_expert: Any  # [E]: per (token, slot) pair, as DeepEP counts
    is_token_in_rank: Any  # [N, R]

    def __iter__(self):
        return iter((self.num_tokens_per_rank, self.num_tokens_per_node, self.num_tokens_per_expert,
                     self.is_token_in_rank))


@dataclass
class DispatchResult:
    recv_x: Any  # [M, H], x's dtype, by source rank ascending, then source token ascending
    recv_x_scales: Any  # f32 [M, H / 128] for fp8 input, else None
    recv_topk_idx: Any  # i64 [M, K]: local expert ids; slots of other ranks' experts are -1
    recv_topk_weights: Any  # f32 [M, K]: 0 where recv_topk_idx is -1; None without topk_weights
    num_recv_tokens: int  # M (-1 in worst-case mode)
    num_recv_tokens_per_expert: List[int]  # per local expert, rounded up to expert_alignment
    recv_expert_counts: Any  # the same counts as a tensor (device memory on CUDA), valid in every mode
    recv_token_count: Any  # i32 [1]: M as a tensor (both None with device_counts=False)
    handle: "_C.DispatchHandle"  # for combine and cached dispatch


@dataclass
class CombineResult:
    combined_x: Any  # bf16 [N, H]
    combined_topk_weights: Any  # f32 [N, K] when topk_weights was given, else None

    def __iter__(self):
        return iter((self.combined_x, self.combined_topk_weights))


@dataclass
class LowLatencyDispatchResult:
    """What low_latency_dispatch / symmetric_dispatch return (L local experts, R ranks, max =
    max_tokens_per_rank). With a hook, the tensors are filled only once hook() has run."""

    recv_x: Any  # [L, R * max, H]: bf16 (uint16 bits with numpy), fp8 e4m3 (uint8 bits) with use_fp8
    recv_x_scales: Any  # f32 [L, R * max, H / 128]; i32 [L, R * max, ceil(H / 512)] with use_ue8m0; else None
    recv_count: Any  # i32 [L]: rows received per local expert
    layout_range: Any  # i32 [L, R, 2]: (begin, count) of each source rank's rows
    src_info: Any  # i32 [L, R * max]: the source token of each row; -1 past recv_count
    handle: "_C.LowLatencyHandle"  # for the combine of the same engine
    hook: Optional[Callable[[], None]]  # with return_recv_hook: runs the receive half, once


@dataclass
class LowLatencyCombineResult:
    combined_x: Any  # bf16 [N, H]; filled once hook() has run when there is a hook
    hook: Optional[Callable[[], None]]

    def __iter__(self):
        return iter((self.combined_x, self.hook))


class _Call:
    """One call's framework (outputs go back in it), its stream, and its tensors as the library
    takes them (switchyard._tensors.exported)."""

    def __init__(self, buffer: "Buffer", like, stream):
        self.framework = framework_of(like)
        self.stream = stream_of(like, stream)
        # torch's current stream: its CUDA tensors need no ordering, and go without DLPack (exported)
        self.on_current_stream = stream is None and self.framework == "torch"
        buffer._last_stream = self.stream

    def __call__(self, tensor, name: str):
        return exported(tensor, name, self.stream, self.on_current_stream)


def _default_backend(backend):
    if backend == "auto":
        return "cuda" if _C.cuda_available() else "cpu"
    return backend


def _optional_unsigned(value, name: str, bits: int):
    """None, or `value` as an int in [0, 2^bits); InvalidArgument naming `name` otherwise (nanobind would
    raise a TypeError that names no argument)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgument(f"{name}: expected None or a non-negative integer, got {type(value).__name__}")
    if not 0 <= int(value) < 1 << bits:
        raise InvalidArgument(f"{name}: expected 0..{(1 << bits) - 1}, got {int(value)}")
    return int(value)


def _nccl_comm_of(group):
    """The ncclComm_t address of a torch NCCL process group (0 when `group` is not one, or when this
    torch does not expose it: the Buffer then refuses nccl_gin naming transport.nccl_comm)."""
    if type(group).__module__.split(".", 1)[0] != "torch":
        return 0
    import torch
    try:
        backend = group._get_backend(torch.device("cuda"))
        return int(backend._comm_ptr())
    except (AttributeError, RuntimeError, TypeError):
        return 0


class Buffer:
    """One rank's switchyard buffer: its symmetric heap and the engines over it.

    Creating it is collective: every rank of `group` creates its Buffer with the same options, and
    the handles are exchanged through `group` (a torch.distributed ProcessGroup, an mpi4py
    communicator, or a callable allgather(bytes) -> list[bytes]; see switchyard.as_group).

    Tensors are any objects with __dlpack__ (numpy, torch, cupy, jax), contiguous, passed without
    copies (torch CUDA tensors of a call on torch's current stream are read by their attributes, not
    by DLPack: the same memory, less host time); outputs come back in the framework of `x` on the
    Buffer's device, sharing switchyard's memory. numpy and cupy have no bf16 or fp8: pass and receive them as their bits (uint16 for bf16,
    uint8 for fp8 e4m3); torch's bfloat16 and float8_e4m3fn are taken and returned as they are.
    CUDA tensors must be on the Buffer's device.

    Streams: on CUDA, calls run on the framework's current stream on the tensors' device
    (torch.cuda.current_stream(), cupy's current stream; their default stream is the legacy default
    stream), unless `stream=` is given (a torch or cupy stream, or a cudaStream_t as an int; 0 is the
    Buffer's own stream, which nothing else waits for). The inputs are made ready on that stream
    through DLPack, and the outputs are ready on it when the call returns: use them on that stream,
    or make another stream wait for it first. Outputs that switchyard allocates are freed in order
    on that stream once the framework drops them (torch's record_stream does not apply to them).
    A call leaves the caller's current CUDA device as it was. With ranks as threads of one process
    (sharing='threads'), give each rank its own stream: ranks queued on one stream wait on each other
    until the timeout.

    Results are bit-identical on every engine and backend, run after run (see DESIGN.md).
    """

    def __init__(self, group, *, backend: str = "auto", device: Optional[int] = None, sharing: str = "processes",
                 ranks_per_node: Optional[int] = None, config: Optional[_C.Config] = None,
                 max_tokens_per_rank: int = 4096, hidden: int = 7168, topk: int = 8, num_experts: int = 256,
                 heap_bytes: int = 0, rank: Optional[int] = None, low_latency_max_tokens_per_rank: int = 0,
                 symmetric_max_tokens_per_rank: int = 0, symmetric_heap_input: bool = False,
                 symmetric_heap_output_rows_per_expert: int = 0, symmetric_heap_receive_rows_per_expert: int = 0,
                 symmetric_heap_receive_dtype: str = "fp8_e4m3", normal_heap_input_tokens: int = 0, normal_heap_combine_rows: int = 0,
                 transport: str = "loopback",
                 loopback_max_delay_us: Optional[int] = None, loopback_seed: Optional[int] = None,
                 nccl_comm=None):
        """backend: 'cpu', 'cuda' or 'auto' (cuda when available). sharing: 'processes' (one process
        per rank: POSIX shared memory / CUDA IPC) or 'threads' (ranks are threads of one process).
        hidden/topk/num_experts size the heap for the largest call (or give heap_bytes).
        low_latency_max_tokens_per_rank / symmetric_max_tokens_per_rank > 0 add the region of the
        low_latency / symmetric engine, for calls with max_tokens_per_rank up to that (and up to
        hidden, topk, num_experts); 0 (default): that engine is not available on this Buffer.
        symmetric_heap_input / symmetric_heap_output_rows_per_expert reserve the symmetric engine's
        heap-resident tensors (symmetric_input(), symmetric_expert_output()); symmetric_heap_receive_rows_per_expert
        the dispatch outputs that sources of any process write into (symmetric_receive(); the CUDA push), of
        symmetric_heap_receive_dtype: 'fp8_e4m3' (with f32 scales, for fp8 dispatches; switchyard.MoE keeps its
        fp8 recv_x there when it fits its capacity) or 'bf16' (for bf16 dispatches).
        normal_heap_input_tokens / normal_heap_combine_rows reserve the normal engine's heap-resident inputs
        (normal_input(), normal_combine_input(); docs/normal-in-place.md): then every dispatch / combine of this
        Buffer takes its x from them, and the peers read the rows in place, with the routing each dispatch
        leaves beside them (topk_idx of at most `topk` columns). One node only.
        transport: how ranks on other nodes are reached: 'loopback' (emulated in one machine;
        loopback_max_delay_us / loopback_seed delay and reorder its operations, else the environment's
        SWITCHYARD_LOOPBACK_DELAY_US / _SEED) or 'nccl_gin' (NCCL's device API over nccl_comm: an
        ncclComm_t address, or None to take the communicator of `group` when it is a torch NCCL process
        group). Unused within one node.
        device: the CUDA device (default: torch's current device when torch is imported, else 0)."""
        self._expert_major_framework = "numpy"  # low_latency_combine_buffer's default
        self.group = as_group(group, rank)
        backend = _default_backend(backend)
        if device is None:
            device = 0
            if backend == "cuda":
                import sys
                torch = sys.modules.get("torch")
                if torch is not None and torch.cuda.is_available():
                    device = torch.cuda.current_device()
        sizing = _C.BufferSizing(max_tokens_per_rank=max_tokens_per_rank, hidden=hidden, topk=topk,
                                 num_experts=num_experts,
                                 low_latency_max_tokens_per_rank=low_latency_max_tokens_per_rank,
                                 symmetric_max_tokens_per_rank=symmetric_max_tokens_per_rank,
                                 symmetric_heap_input=symmetric_heap_input,
                                 symmetric_heap_output_rows_per_expert=symmetric_heap_output_rows_per_expert,
                                 symmetric_heap_receive_rows_per_expert=symmetric_heap_receive_rows_per_expert,
                                 symmetric_heap_receive_dtype=symmetric_heap_receive_dtype,
                                 normal_heap_input_tokens=normal_heap_input_tokens,
                                 normal_heap_combine_rows=normal_heap_combine_rows)
        if not isinstance(transport, str):
            raise InvalidArgument(f"transport: expected 'loopback' or 'nccl_gin', got {type(transport).__name__}")
        loopback_max_delay_us = _optional_unsigned(loopback_max_delay_us, "loopback_max_delay_us", 32)
        loopback_seed = _optional_unsigned(loopback_seed, "loopback_seed", 64)
        nccl_comm = _optional_unsigned(nccl_comm, "nccl_comm", 64)
        if transport == "nccl_gin" and nccl_comm is None:
            nccl_comm = _nccl_comm_of(group)
        self._native = _C.Buffer(self.group.size, ranks_per_node or self.group.size, self.group.rank, backend,
                                 device, sharing, config if config is not None else _C.Config(), sizing, heap_bytes,
                                 transport, loopback_max_delay_us, loopback_seed, int(nccl_comm or 0))
        self._native.connect(self.group.allgather(self._native.local_handle()))
        # switchyard._torch_ops's way into get_dispatch_layout, the cached dispatch and the combine
        # (python/src/layout_entry.h): a capsule that keeps the native Buffer alive, so destroy() drops it.
        self._layout_entry = self._native.layout_entry() if self._native.backend == "cuda" else None

    # ---- properties -----------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._native.rank

    @property
    def num_ranks(self) -> int:
        return self._native.num_ranks

    @property
    def ranks_per_node(self) -> int:
        return self._native.ranks_per_node

    @property
    def backend(self) -> str:
        return self._native.backend

    @property
    def device(self) -> int:
        """The CUDA device its tensors must be on (a CUDA Buffer)."""
        return self._native.device

    @property
    def config(self) -> _C.Config:
        return self._native.config

    @property
    def heap_bytes(self) -> int:
        return self._native.heap_bytes

    @property
    def num_channels(self) -> int:
        """The normal engine's channels by default (Config.num_channels, resolved)."""
        return self._native.num_channels

    @property
    def max_num_channels(self) -> int:
        """The most channels a call's CallTuning may ask for (on CUDA: what stays co-resident with the ranks
        sharing the GPU)."""
        return self._native.max_num_channels

    @property
    def symmetric_combine_path(self) -> str:
        """'push' or 'pull': the path symmetric_combine takes (Config.symmetric_combine, resolved at connect)."""
        return self._native.symmetric_combine_path

    @property
    def symmetric_dispatch_path(self) -> str:
        """'publish', 'zero_copy' or 'push': how symmetric_dispatch moves rows (Config.symmetric_dispatch,
        resolved at connect). zero_copy reads the callers' x in place; the dispatch returns (on CUDA: its kernel
        ends) only once no peer reads x, so x may be overwritten right after it. push (CUDA, 'auto' with every
        rank a thread of this process on one device): each source reads its tokens once and writes them into
        their receivers' outputs. With a process per rank, a call whose outputs are every rank's
        symmetric_receive() views is pushed whatever this says."""
        return self._native.symmetric_dispatch_path

    @property
    def native(self) -> "_C.Buffer":
        self._check_alive()
        return self._native

    def _check_alive(self):
        if self._native is None:
            raise Error("Buffer: used after destroy()")

    # ---- the normal engine ----------------------------------------------------------------------
    def get_dispatch_layout(self, topk_idx, num_experts: int, *, stream=None) -> DispatchLayout:
        """Per-rank, per-node and per-expert token counts and is_token_in_rank, from topk_idx
        (int64 [N, K], -1 = no expert). Local: no communication."""
        self._check_alive()
        call = _Call(self, topk_idx, stream)
        parts = self._native.get_dispatch_layout(call(topk_idx, "topk_idx"), int(num_experts), call.stream,
                                                 call.framework)
        return DispatchLayout(*parts)

    def dispatch(self, x, topk_idx=None, topk_weights=None, *, num_experts: int = 0, x_scales=None,
                 expert_alignment: int = 1, layout: Optional[DispatchLayout] = None,
                 handle: Optional[_C.DispatchHandle] = None, num_worst_tokens: int = 0, out_recv_x=None,
                 out_recv_x_scales=None, out_recv_topk_idx=None, out_recv_topk_weights=None,
                 stream=None, tuning: Optional[_C.CallTuning] = None, device_counts: bool = True) -> DispatchResult:
        """Sends each token to the ranks holding its experts (the `normal` engine, rank-major).

        x: bf16 [N, H] (uint16 bits with numpy), or fp8 e4m3 [N, H] (uint8 bits with numpy) with
        x_scales f32 [N, H / 128], row-major or column-major (DeepEP's layout, read in place without a
        copy); x may also be the tuple (x_fp8, x_scales). recv_x_scales is row-major [M, H / 128].
        topk_idx: int64 [N, K], -1 = no expert; topk_weights: f32 [N, K], optional.
        layout: from get_dispatch_layout on the same topk_idx (computed here when None). Without
        topk_idx the layout alone routes (DeepEP's topk_idx=None): token t goes to every rank with
        is_token_in_rank[t, rank], no recv_topk_idx or recv_topk_weights come back, and the per-expert
        counts are what the sources' num_tokens_per_expert say.
        handle: an earlier dispatch's handle replays its routing (cached dispatch): topk_idx,
        topk_weights, num_experts and layout may then be omitted.
        num_worst_tokens > 0: outputs have exactly that many rows and the host never waits for the
        counts; rows past the received ones have topk_idx -1 and weight 0.
        out_recv_*: preallocated outputs (returned as given).
        tuning: this call's CallTuning (channels, ring slots, chunk; 0 keeps the Buffer's); a cached
        dispatch runs with its dispatch's channels. Results never depend on it.
        device_counts=False: recv_expert_counts and recv_token_count are not handed out (None), which
        spares their conversion to the framework's tensors.

        Rank d receives each token with at least one expert on d exactly once, ordered by source
        rank ascending, then by source token ascending (deterministic, unlike DeepEP).
        """
        self._check_alive()
        if isinstance(x, tuple):
            if x_scales is not None:
                raise InvalidArgument("x_scales: given twice (x is already a tuple (x, x_scales))")
            x, x_scales = x
        x_scales, x_scales_column_major = transposed_if_column_major(x_scales)
        call = _Call(self, x, stream)
        layout_tensors = None
        if layout is not None:
            names = ("num_tokens_per_rank", "num_tokens_per_node", "num_tokens_per_expert", "is_token_in_rank")
            layout_tensors = tuple(call(tensor, "layout." + name) for tensor, name in zip(layout, names))
        raw = self._native.dispatch(
            call(x, "x"), call(x_scales, "x_scales"), call(topk_idx, "topk_idx"), call(topk_weights, "topk_weights"),
            int(num_experts), int(expert_alignment), layout_tensors, handle, int(num_worst_tokens),
            call(out_recv_x, "out_recv_x"), call(out_recv_x_scales, "out_recv_x_scales"),
            call(out_recv_topk_idx, "out_recv_topk_idx"), call(out_recv_topk_weights, "out_recv_topk_weights"),
            call.stream, call.framework, tuning, device_counts, x_scales_column_major)
        for name, given in (("recv_x", out_recv_x), ("recv_x_scales", out_recv_x_scales),
                            ("recv_topk_idx", out_recv_topk_idx), ("recv_topk_weights", out_recv_topk_weights)):
            if given is not None:
                raw[name] = given
        return DispatchResult(**raw)

    def combine(self, x, handle: _C.DispatchHandle, topk_weights=None, *, bias0=None, bias1=None,
                out_combined_x=None, out_combined_topk_weights=None, stream=None,
                tuning: Optional[_C.CallTuning] = None) -> CombineResult:
        """Brings rows back to their source ranks and reduces them.

        x: bf16 [M, H], one row per received token in dispatch's order; topk_weights: f32 [M, K],
        optional, reduced like x. out[t] is the sum over the ranks that received t, in ascending rank
        order, in fp32 from +0, rounded to bf16 once (with several nodes: per node first, then over
        nodes; see DESIGN.md). The order is part of the contract: results are bit-identical.

        bias0, bias1: optional bf16 [N, H] (N: this rank's tokens of the dispatch); the fp32 sum starts
        at bias0 + bias1 (an absent one counts as +0.0) instead of +0 (docs/deep_ep.md, "Combine bias").
        tuning: ring slots and chunk for this call (CallTuning); it runs with its dispatch's channels.
        """
        self._check_alive()
        call = _Call(self, x, stream)
        combined_x, combined_topk_weights = self._native.combine(
            call(x, "x"), call(topk_weights, "topk_weights"), handle, call(out_combined_x, "out_combined_x"),
            call(out_combined_topk_weights, "out_combined_topk_weights"), call.stream, call.framework,
            call(bias0, "bias0"), call(bias1, "bias1"), tuning)
        if out_combined_x is not None:
            combined_x = out_combined_x
        if out_combined_topk_weights is not None:
            combined_topk_weights = out_combined_topk_weights
        return CombineResult(combined_x, combined_topk_weights)

    # ---- the expert-major engines: low_latency and symmetric ----------------------------------------
    def low_latency_dispatch(self, x, topk_idx, max_tokens_per_rank: int, num_experts: int, *,
                             use_fp8: bool = False, round_scale: bool = False, use_ue8m0: bool = False,
                             return_recv_hook: bool = False, wait_recv_cost_stats=None,
                             stream=None) -> LowLatencyDispatchResult:
        """Sends each (token, slot) to its expert (the `low_latency` engine, expert-major).

        x: bf16 [N, H] (uint16 bits with numpy), N <= max_tokens_per_rank; topk_idx: int64 [N, K],
        -1 = no expert. Every rank calls with the same max_tokens_per_rank, num_experts, H and options;
        the Buffer needs low_latency_max_tokens_per_rank >= max_tokens_per_rank.
        use_fp8 casts to fp8 e4m3 per 128 channels (scale = max(amax, 1e-4) / 448; round_scale rounds
        scales up to powers of two; use_ue8m0 stores them as exponent bytes, 4 per int32).

        For local expert l, recv_x[l] holds the rows of source rank 0, then rank 1, ...; within a
        source, in (token, slot) order (deterministic, unlike DeepEP). Rows at and past recv_count[l]
        are not written.

        return_recv_hook: only the send half runs; result.hook() runs the receive half and fills the
        outputs. Call it at most once, before this Buffer's next low-latency call.

        wait_recv_cost_stats: optional int64 [R] (DeepEP's dispatch_wait_recv_cost_stats); the receive half
        adds to entry r the nanoseconds it waited for rank r's rows (DeepEP counts SM cycles): a slow peer
        shows as a large entry on every other rank.
        """
        return self._expert_major_dispatch("low_latency_dispatch", x, topk_idx, max_tokens_per_rank, num_experts,
                                           use_fp8, round_scale, use_ue8m0, return_recv_hook, 0, stream,
                                           wait_recv_cost_stats)

    def low_latency_combine(self, x, topk_idx, topk_weights, handle: "_C.LowLatencyHandle", *,
                            zero_copy: bool = False, return_recv_hook: bool = False, out=None,
                            bias0=None, bias1=None, use_logfmt: bool = False, wait_recv_cost_stats=None,
                            stream=None) -> LowLatencyCombineResult:
        """Brings expert outputs back and reduces them (the `low_latency` engine).

        x: bf16 [L, R * max, H'], rows as dispatch gave them (only rows < recv_count are read); with
        zero_copy, x may be None: the outputs are already in low_latency_combine_buffer(handle).
        topk_idx: the dispatch's int64 [N, K] (a slot may be set to -1 to leave it out); topk_weights:
        f32 [N, K]. out[t] = the sum over valid slots j ascending of w[t, j] * y[row(t, j)],
        accumulated in fp32 with fused multiply-add from +0.0, rounded to bf16 once: bit-identical
        run after run. out: a preallocated bf16 [N, H'] (returned as given).
        bias0, bias1: optional bf16 [N, H']; the accumulator starts at bias0 + bias1 (an absent one counts
        as +0.0) instead of +0.0 (docs/deep_ep.md, "Combine bias").
        use_logfmt: DeepEP's LogFMT-10 combine (lossy): each y row is taken per 128 channels as the format
        decodes it, 10 bits per value (src/common/logfmt.hpp); H' a multiple of 128, not with zero_copy.
        Both backends give the same bits; the rows travel packed (src/common/logfmt_wire.hpp).
        wait_recv_cost_stats: optional int64 [R], as low_latency_dispatch's, for the expert outputs each
        rank sends back.
        """
        return self._expert_major_combine("low_latency_combine", x, topk_idx, topk_weights, handle, zero_copy,
                                          return_recv_hook, out, stream, bias0, bias1, use_logfmt,
                                          wait_recv_cost_stats)

    def low_latency_combine_buffer(self, handle: "_C.LowLatencyHandle", *, framework: Optional[str] = None):
        """bf16 [L, R * max, H] in this rank's heap, for `handle`'s dispatch: write the expert outputs
        here, then low_latency_combine(None, ..., zero_copy=True). Valid until the next low-latency
        combine; the array keeps the Buffer's memory alive (not its peers'). framework: 'torch',
        'numpy', 'cupy', 'jax' or 'dlpack' (default: that of the last low_latency_dispatch's x)."""
        self._check_alive()
        return self._native.low_latency_combine_buffer(handle, framework or self._expert_major_framework)

    def symmetric_dispatch(self, x, topk_idx, max_tokens_per_rank: int, num_experts: int, *, use_fp8: bool = False,
                           round_scale: bool = False, use_ue8m0: bool = False, return_recv_hook: bool = False,
                           expert_capacity: int = 0, x_scales=None, out_recv_x=None, out_recv_x_scales=None,
                           stream=None) -> LowLatencyDispatchResult:
        """low_latency_dispatch on the `symmetric` engine (one pull stage after a barrier): the same
        arguments and outputs, bit for bit. Needs symmetric_max_tokens_per_rank >= max_tokens_per_rank.
        Its handles are for symmetric_combine only. return_recv_hook=True raises Unsupported.

        x may also be rows the caller cast: fp8 e4m3 [N, H] (uint8 bits with numpy, torch.float8_e4m3fn)
        with x_scales f32 [N, H / 128], or the tuple (x_fp8, x_scales) as dispatch takes it. They travel
        as given (no cast): recv_x and recv_x_scales carry the caller's bits. Needs use_fp8=True;
        round_scale and use_ue8m0 are refused with it (the scales are the caller's).

        expert_capacity: rows per local expert C of recv_x, recv_x_scales and src_info ([L, C, ...]);
        0 means R * max_tokens_per_rank. recv_count and layout_range keep the true counts. An expert
        that receives more than C rows keeps its first C, and every rank raises CapacityError (on cuda
        at the next call or synchronize()); the combine of such a dispatch is refused. Same on every rank.

        out_recv_x, out_recv_x_scales: preallocated outputs ([L, C, H] and its scales; returned as given).
        With use_fp8 (f32 scales), symmetric_receive()'s views passed here on every rank let every source
        write its rows straight into them, also with ranks in separate processes."""
        if isinstance(x, tuple):
            if x_scales is not None:
                raise InvalidArgument("x_scales: given twice (x is already a tuple (x, x_scales))")
            x, x_scales = x
        return self._expert_major_dispatch("symmetric_dispatch", x, topk_idx, max_tokens_per_rank, num_experts,
                                           use_fp8, round_scale, use_ue8m0, return_recv_hook, expert_capacity, stream,
                                           x_scales=x_scales, out_recv_x=out_recv_x,
                                           out_recv_x_scales=out_recv_x_scales)

    def symmetric_combine(self, x, topk_idx, topk_weights, handle: "_C.LowLatencyHandle", *, zero_copy: bool = False,
                          return_recv_hook: bool = False, out=None, bias0=None, bias1=None,
                          stream=None) -> LowLatencyCombineResult:
        """low_latency_combine on the `symmetric` engine: the same outputs, bit for bit.
        zero_copy=True and return_recv_hook=True raise Unsupported."""
        return self._expert_major_combine("symmetric_combine", x, topk_idx, topk_weights, handle, zero_copy,
                                          return_recv_hook, out, stream, bias0, bias1)

    def normal_input(self, num_tokens: int, hidden: int, *, fp8: bool = False, framework: Optional[str] = None):
        """(x, x_scales) in this rank's heap (needs normal_heap_input_tokens >= num_tokens): bf16 [num_tokens,
        hidden] and None, or with fp8 e4m3 [num_tokens, hidden] (uint8 bits with numpy) and f32 [num_tokens,
        hidden / 128]. On such a Buffer every dispatch takes these views as its x and x_scales: write the tokens
        here first; the receivers read them in place (docs/normal-in-place.md). The dispatch returns once no
        peer reads them, so they may be rewritten right after it. The arrays keep the Buffer's memory alive.
        framework: as low_latency_combine_buffer's."""
        self._check_alive()
        return self._native.normal_input(int(num_tokens), int(hidden), bool(fp8),
                                         framework or self._expert_major_framework)

    def normal_combine_input(self, handle: "_C.DispatchHandle", hidden: int = 0, *,
                             framework: Optional[str] = None):
        """(x, topk_weights) in this rank's heap for `handle`'s dispatch (needs normal_heap_combine_rows >= its
        rows): bf16 [rows, hidden] (hidden 0: the sizing's) and f32 [rows, K] (None for a dispatch without
        top-k). On such a Buffer every combine takes these views as its x (and topk_weights, when given): write
        the expert outputs here; each home rank reads its tokens' rows in place. The combine returns once no
        peer reads them."""
        self._check_alive()
        return self._native.normal_combine_input(handle, int(hidden), framework or self._expert_major_framework)

    def symmetric_input(self, num_tokens: int, hidden: int, *, framework: Optional[str] = None):
        """bf16 [num_tokens, hidden] in this rank's heap (needs symmetric_heap_input=True). Write the
        tokens here and pass this array as symmetric_dispatch's x: every peer then reads them in place,
        with no publish copy, also with ranks in separate processes and on several GPUs. The dispatch
        returns once no peer reads them, so they may be rewritten right after it. One per Buffer; the
        array keeps the Buffer's memory alive. framework: as low_latency_combine_buffer's."""
        self._check_alive()
        return self._native.symmetric_input(int(num_tokens), int(hidden), framework or self._expert_major_framework)

    def symmetric_expert_output(self, handle: "_C.LowLatencyHandle", hidden: int = 0, *,
                                framework: Optional[str] = None):
        """bf16 [L, C, hidden] in this rank's heap for `handle`'s symmetric dispatch (needs
        symmetric_heap_output_rows_per_expert >= its C; hidden 0: the dispatch's). Write the expert
        outputs here and pass this array as symmetric_combine's x: the pull combine reads them in place.
        With ranks in separate processes or on several GPUs, Config(symmetric_combine='pull') needs them
        there on every combine. One per Buffer."""
        self._check_alive()
        return self._native.symmetric_expert_output(handle, int(hidden), framework or self._expert_major_framework)

    def symmetric_receive(self, expert_capacity: int, hidden: int = 0, *, framework: Optional[str] = None):
        """(recv_x, recv_x_scales) in this rank's heap (needs symmetric_heap_receive_rows_per_expert >= C):
        fp8 e4m3 [L, C, hidden] (uint8 bits with numpy) and f32 [L, C, hidden / 128], or with
        symmetric_heap_receive_dtype='bf16' bf16 [L, C, hidden] and None; L = num_experts / R of the Buffer's
        sizing, C = expert_capacity (0: R * symmetric_max_tokens_per_rank), hidden a multiple of 128 for fp8
        and of 8 for bf16 (0: the sizing's). Pass them as symmetric_dispatch's out_recv_x (and
        out_recv_x_scales) of a call of that dtype (fp8: use_fp8, not use_ue8m0) with that C and hidden on
        every rank: every source then writes its rows straight into them (the push), also with ranks in
        separate processes and on several GPUs. A dispatch of fewer experts takes the first L of each. One per
        Buffer: the next such dispatch rewrites them."""
        self._check_alive()
        return self._native.symmetric_receive(int(expert_capacity), int(hidden),
                                              framework or self._expert_major_framework)

    def _expert_major_dispatch(self, method, x, topk_idx, max_tokens_per_rank, num_experts, use_fp8, round_scale,
                               use_ue8m0, return_recv_hook, expert_capacity, stream, wait_recv_cost_stats=None,
                               x_scales=None, out_recv_x=None, out_recv_x_scales=None):
        self._check_alive()
        call = _Call(self, x, stream)
        raw = getattr(self._native, method)(call(x, "x"), call(topk_idx, "topk_idx"), int(max_tokens_per_rank),
                                            int(num_experts), bool(use_fp8), bool(round_scale), bool(use_ue8m0),
                                            bool(return_recv_hook), int(expert_capacity), call.stream,
                                            call.framework, call(wait_recv_cost_stats, "wait_recv_cost_stats"),
                                            call(x_scales, "x_scales"), call(out_recv_x, "out_recv_x"),
                                            call(out_recv_x_scales, "out_recv_x_scales"))
        for name, given in (("recv_x", out_recv_x), ("recv_x_scales", out_recv_x_scales)):
            if given is not None:
                raw[name] = given
        self._expert_major_framework = call.framework
        return LowLatencyDispatchResult(**raw)

    def _expert_major_combine(self, method, x, topk_idx, topk_weights, handle, zero_copy, return_recv_hook, out,
                              stream, bias0=None, bias1=None, use_logfmt=False, wait_recv_cost_stats=None):
        self._check_alive()
        call = _Call(self, x if x is not None else topk_weights, stream)
        combined_x, hook = getattr(self._native, method)(call(x, "x"), call(topk_idx, "topk_idx"),
                                                         call(topk_weights, "topk_weights"), handle, bool(zero_copy),
                                                         bool(return_recv_hook), call(out, "out"), call.stream,
                                                         call.framework, call(bias0, "bias0"), call(bias1, "bias1"),
                                                         bool(use_logfmt),
                                                         call(wait_recv_cost_stats, "wait_recv_cost_stats"))
        return LowLatencyCombineResult(out if out is not None else combined_x, hook)

    # ---- rank masks -----------------------------------------------------------------------------
    def update_mask(self, rank: int, masked: bool = True, stream=None):
        """Masks (or unmasks) `rank` in this rank's view (DeepEP's enable_shrink): it takes no part in
        the low_latency and symmetric calls, its experts receive nothing, slots routed to them are
        dropped, and nothing is awaited from it, so the survivors go on without a new Buffer. Mask
        alike on every survivor; Config.mask_ranks_on_timeout also masks a peer whose wait timed out.
        The normal engine refuses calls while a rank is masked. On CUDA, ordered on `stream`."""
        self._check_alive()
        self._native.update_mask(int(rank), bool(masked), self._mask_stream(stream))

    def query_mask(self, stream=None, framework: str = "numpy"):
        """i32 [R], 1 where a rank is masked, on the Buffer's device (ready on `stream`), as a numpy
        array or, with framework='torch', a torch tensor."""
        self._check_alive()
        return self._native.query_mask(self._mask_stream(stream), framework)

    def clean_mask(self, stream=None):
        """Unmasks every rank. Only for ranks that made every call since they were masked."""
        self._check_alive()
        self._native.clean_mask(self._mask_stream(stream))

    def _mask_stream(self, stream):
        return stream_of(None, stream) if stream is not None else self._last_stream

    # The stream of the last call, which synchronize() and the masks wait for by default. Kept by the native
    # Buffer, which switchyard._torch_ops's calls (deep_ep's fast paths) also update.
    @property
    def _last_stream(self) -> int:
        return self._native.last_stream

    @_last_stream.setter
    def _last_stream(self, stream: int):
        self._native.last_stream = stream

    # ---- lifetime -------------------------------------------------------------------------------
    def synchronize(self, stream=None):
        """Waits for this buffer's work on `stream` (default: the stream of its last call) and raises
        any error a kernel recorded (CPU calls complete before they return)."""
        self._check_alive()
        self._native.synchronize(stream_of(None, stream) if stream is not None else self._last_stream)

    def destroy(self):
        """Collective: waits until every rank is done with its peers' heaps, then frees this rank's.
        Dropping a Buffer without it is safe only once no peer can still be reading this heap."""
        if self._native is None:
            return
        self.group.barrier()
        self._native = None
        self._layout_entry = None
