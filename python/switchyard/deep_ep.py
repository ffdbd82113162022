"""A drop-in for DeepEP's V1 `deep_ep.Buffer`, running on switchyard's engines.

    from switchyard import deep_ep          # instead of: import deep_ep
    buffer = deep_ep.Buffer(group, num_nvl_bytes=...)
    num_tokens_per_rank, num_tokens_per_rdma_rank, num_tokens_per_expert, is_token_in_rank, _ = \\
        buffer.get_dispatch_layout(topk_idx, num_experts)
    recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event = \\
        buffer.dispatch(x, num_tokens_per_rank=num_tokens_per_rank, is_token_in_rank=is_token_in_rank,
                        num_tokens_per_expert=num_tokens_per_expert, topk_idx=topk_idx,
                        topk_weights=topk_weights)
    combined_x, combined_topk_weights, event = buffer.combine(y, handle, topk_weights=recv_topk_weights)

Differences from DeepEP, all of them deliberate:
- Stricter, deterministic semantics. recv_x is ordered by source rank, then source token, and
  combine sums in ascending rank order in fp32 from +0, rounded to bf16 once: results are
  bit-identical run after run and on every engine and backend.
- Calls run on the caller's current stream (torch.cuda.current_stream()); there is no separate
  communication stream, so async_finish and allocate_on_comm_stream only change which event is
  returned (it is recorded on the current stream after the call).
- A per-call `config` is applied to that call (switchyard.CallTuning), checked as DeepEP checks it
  (Config's own rules, an even num_sms) and against the Buffer (the rings switchyard needs with that
  tuning for the call's hidden, top-k and experts must fit in num_nvl_bytes + num_rdma_bytes, else
  switchyard.InvalidArgument names `config`): on CUDA num_sms / 2 channels, capped at what stays
  co-resident with the ranks sharing the GPU (Buffer.max_num_channels); ring slots =
  num_max_nvl_chunked_recv_tokens and chunk = num_max_nvl_chunked_send_tokens (for the RDMA stage
  too: switchyard has one knob for both). A combine and a cached dispatch run with their dispatch's
  channels, whatever their config's num_sms. None, or DeepEP's recommended config of the method
  (get_dispatch_config / get_combine_config), runs with the Buffer's own tuning (switchyard_config=).
  On the CPU backend a channel is a host thread: the Buffer's channel count stays. Results never
  depend on tuning.
- Handles are DeepEP's tuples (switchyard._deep_ep_handles has what each entry holds): dispatch's
  (rank_prefix_matrix, channel_prefix_matrix, recv_channel_prefix_matrix, recv_src_idx,
  is_token_in_rank, send_head), with DeepEP's dtypes and shapes. rank_prefix_matrix is exact in this
  rank's column (the only one DeepEP reads there) and -1 elsewhere; the channel entries and send_head
  describe switchyard's channels. low_latency_dispatch's (src_info, layout_range,
  num_max_dispatch_tokens_per_rank, hidden, num_experts) has layout_range int64 [L, R] packed as
  DeepEP packs it, (begin << 32) | count. Both carry switchyard's handle as `.native`, which is what
  combine and cached dispatch read: editing the tuple's entries does not change the routing. Across
  nodes (more than 8 ranks) the handle is the same 6-tuple, not DeepEP's internode tuple.
- fp8 scales may be in any layout DeepEP takes: row-major and column-major ones (its
  per_token_cast_to_fp8 makes those) are read in place; others are copied to row-major on the call's
  stream first. recv_x_scales is row-major, as DeepEP makes it.
- Dispatch without topk_idx is routed by is_token_in_rank alone, as in DeepEP: recv_topk_idx and
  recv_topk_weights are None, num_recv_tokens_per_expert_list sums what the sources'
  num_tokens_per_expert claim for this rank's experts, and the combine that follows is the plain sum
  of the copies.
- Tensors: anything with __dlpack__. With numpy, bf16 travels as its bits in uint16 arrays and fp8
  e4m3 as uint8; torch.bfloat16 and torch.float8_e4m3fn are taken as they are. The CPU backend runs
  everything without a GPU.
- More than 8 ranks (NUM_MAX_NVL_PEERS): consecutive groups of 8 ranks are nodes, and dispatch and
  combine run switchyard's hierarchical engine (RDMA -> forward -> NVLink) through its transport.
  Combine then sums each node's ranks in fp32, rounds that partial to bf16 once, and sums the
  partials in node order: the result depends on the node size (DESIGN.md), never on timing.
  num_nvl_bytes + num_rdma_bytes (Config.get_nvl_buffer_size_hint / get_rdma_buffer_size_hint) size
  switchyard's one heap.
- Options that switchyard does not implement raise switchyard.Unsupported naming them; none is
  ignored silently.
- Low-latency mode (low_latency_dispatch / low_latency_combine, on switchyard's `low_latency`
  engine) needs Buffer(..., low_latency_mode=True). num_rdma_bytes does not size it: the first
  low_latency_dispatch creates the engine's region (collectively: every rank makes that call) for
  its num_max_dispatch_tokens_per_rank, hidden, topk and num_experts; later calls may not exceed
  them. Within an expert, rows are packed by source rank ascending, then (token, slot) order, every
  time; combine sums the valid slots in ascending slot order in fp32 with fused multiply-add from
  +0, rounded to bf16 once, so results are bit-identical run after run.
"""
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from . import _C
from ._buffer import Buffer as _NativeBuffer
from ._buffer import DispatchLayout
from ._deep_ep_handles import (RANK_PREFIX_UNKNOWN, DispatchHandle, LowLatencyHandle, empty_layout_range, normal_handle,
                               pack_layout_range)
from ._errors import InvalidArgument, Unsupported
from ._tensors import framework_of, is_row_major, torch_current_stream, transposed_if_column_major

__all__ = ["Buffer", "Config", "EventOverlap", "DispatchHandle", "LowLatencyHandle", "topk_idx_t"]

# DeepEP's intranode domain: up to 8 GPUs share NVLink (NUM_MAX_NVL_PEERS).
NUM_MAX_NVL_PEERS = 8


def _torch():
    return sys.modules.get("torch")


_TORCH_OPS_UNSET = object()
_torch_ops_module: Any = _TORCH_OPS_UNSET


def _torch_ops():
    """switchyard._torch_ops (get_dispatch_layout, the cached dispatch and the combine, with their outputs
    allocated by torch in C++), when it was built against the torch now imported and reads the entry this _C
    makes; else None, and the Python paths serve. Looked up once."""
    global _torch_ops_module
    torch = _torch()
    if _torch_ops_module is _TORCH_OPS_UNSET and torch is not None:  # decided once torch is imported
        try:
            from . import _torch_ops as ops
        except ImportError:  # not built (no torch at build time), or built against another torch
            ops = None
        usable = (ops is not None and ops.TORCH_VERSION == torch.__version__
                  and getattr(ops, "ENTRY_VERSION", None) == _C.LAYOUT_ENTRY_VERSION)
        _torch_ops_module = ops if usable else None
    return None if _torch_ops_module is _TORCH_OPS_UNSET else _torch_ops_module


def __getattr__(name):
    # DeepEP's deep_ep.topk_idx_t, the dtype of topk_idx: torch.int64, as in DeepEP's default build
    # (switchyard routes by int64 expert ids); numpy.int64 where torch is not installed. Looked up
    # when asked for, so that importing this module does not import torch.
    if name == "topk_idx_t":
        try:
            import torch
        except ImportError:
            import numpy
            return numpy.int64
        return torch.int64
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _cuda_tensor(tensor) -> bool:
    torch = _torch()
    return torch is not None and isinstance(tensor, torch.Tensor) and tensor.is_cuda


class Config:
    """DeepEP's performance config: (num_sms, nvl send chunk, nvl recv buffer, rdma send chunk,
    rdma recv buffer), checked by DeepEP's rules (InvalidArgument naming the field). switchyard maps
    it to its engine's Config: num_channels = num_sms / 2 (a channel is a sender and a receiver
    block, as in DeepEP) on CUDA, ring_slots = num_max_nvl_chunked_recv_tokens, chunk_tokens =
    num_max_nvl_chunked_send_tokens. Passed per call, it tunes that call (module docstring)."""

    def __init__(self, num_sms: int = 20, num_max_nvl_chunked_send_tokens: int = 6,
                 num_max_nvl_chunked_recv_tokens: int = 256, num_max_rdma_chunked_send_tokens: int = 6,
                 num_max_rdma_chunked_recv_tokens: int = 128):
        fields = dict(num_sms=num_sms, num_max_nvl_chunked_send_tokens=num_max_nvl_chunked_send_tokens,
                      num_max_nvl_chunked_recv_tokens=num_max_nvl_chunked_recv_tokens,
                      num_max_rdma_chunked_send_tokens=num_max_rdma_chunked_send_tokens,
                      num_max_rdma_chunked_recv_tokens=num_max_rdma_chunked_recv_tokens)
        for name, value in fields.items():
            minimum = 0 if name == "num_sms" else 1
            if not isinstance(value, int) or value < minimum:
                raise InvalidArgument(f"deep_ep.Config: {name}: expected an integer >= {minimum}, got {value!r}")
        for kind in ("nvl", "rdma"):
            send, recv = fields[f"num_max_{kind}_chunked_send_tokens"], fields[f"num_max_{kind}_chunked_recv_tokens"]
            if kind == "rdma":  # DeepEP rounds the RDMA receive buffer up to whole send chunks
                recv = -(-recv // send) * send
            # NOTES: DeepEP's rules: a sender always has room to push (RDMA: half the buffer, for its lazy
            # head updates).
            limit = recv // 2 if kind == "rdma" else recv - 1
            if send > limit:
                raise InvalidArgument(
                    f"deep_ep.Config: num_max_{kind}_chunked_send_tokens: expected at most {limit} (DeepEP's "
                    f"bound for num_max_{kind}_chunked_recv_tokens = {recv}), got {send}")
            fields[f"num_max_{kind}_chunked_recv_tokens"] = recv
        self.num_sms = num_sms
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        self.num_max_rdma_chunked_recv_tokens = fields["num_max_rdma_chunked_recv_tokens"]

    def _fields(self):
        return (self.num_sms, self.num_max_nvl_chunked_send_tokens, self.num_max_nvl_chunked_recv_tokens,
                self.num_max_rdma_chunked_send_tokens, self.num_max_rdma_chunked_recv_tokens)

    def __eq__(self, other):
        return isinstance(other, Config) and self._fields() == other._fields()

    def __hash__(self):
        return hash(self._fields())

    def __repr__(self):
        return "deep_ep.Config(%d, %d, %d, %d, %d)" % self._fields()

    def to_switchyard(self, backend: str = "cuda", cpu_channels: int = _C.Config.default_cpu_channels) -> _C.Config:
        """switchyard's Config for this tuning. On the CPU backend a channel is a host thread, not two
        SMs: num_sms does not apply, and the channel count is `cpu_channels` (the Buffer's)."""
        channels = self.num_sms // 2 if backend == "cuda" else cpu_channels
        return _C.Config(num_channels=channels, ring_slots=self.num_max_nvl_chunked_recv_tokens,
                         chunk_tokens=self.num_max_nvl_chunked_send_tokens)

    def _heap_hint(self, hidden_bytes: int, num_ranks: int, topk: int, num_experts: int):
        sizing = _C.BufferSizing(hidden=max(1, hidden_bytes // 2), topk=topk, num_experts=num_experts)
        args = (num_ranks, min(num_ranks, NUM_MAX_NVL_PEERS), self.to_switchyard("cuda"), sizing)
        return _C.normal_heap_bytes(*args), _C.normal_rdma_heap_bytes(*args)

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int, *, topk: int = 8,
                                 num_experts: int = 256) -> int:
        """Bytes of switchyard heap per rank for the NVLink stage (num_nvl_bytes) for bf16 rows of
        hidden_bytes, with this config on CUDA (the heap does not grow with the token count: rings
        wrap). Across nodes (more than 8 ranks) the RDMA region comes on top:
        get_rdma_buffer_size_hint."""
        total, rdma = self._heap_hint(hidden_bytes, num_ranks, topk, num_experts)
        return total - rdma

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int, *, topk: int = 8,
                                  num_experts: int = 256) -> int:
        """Bytes of switchyard heap per rank for the hierarchical engine's RDMA region
        (num_rdma_bytes): 0 within one node (up to 8 ranks). switchyard keeps both regions in one
        heap of num_nvl_bytes + num_rdma_bytes."""
        return self._heap_hint(hidden_bytes, num_ranks, topk, num_experts)[1]


class EventOverlap:
    """A CUDA event (torch.cuda.Event) with the tensors that must live until it completes; None on
    the CPU backend, where every call has completed when it returns."""

    def __init__(self, event: Optional[Any] = None, extra_tensors: Optional[Tuple] = None):
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        """Makes the current stream wait for the event (nothing to wait for without one)."""
        if self.event is not None:
            _torch().cuda.current_stream().wait_event(self.event)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.current_stream_wait()


class _on_stream_of:
    """Makes the CUDA stream that was current for `tensor` when this was made current again (a no-op
    for host tensors), so that work deferred into a hook follows the call it completes."""

    def __init__(self, tensor):
        # The stream's identity only, as torch.cuda.current_stream reads it (stream id, device index, device
        # type): that call also makes a Stream object and checks the device, ~13 us per fresh dispatch in
        # session 33's host profile, for a scope that most calls never enter. __enter__ makes the object.
        self.stream_data = _current_stream_data(tensor) if _cuda_tensor(tensor) else None
        self.context = None

    def __enter__(self):
        if self.stream_data is not None:
            torch = _torch()
            stream_id, device_index, device_type = self.stream_data
            stream = torch.cuda.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
            self.context = torch.cuda.stream(stream)
            self.context.__enter__()
        return self

    def __exit__(self, *exc):
        if self.context is not None:
            self.context.__exit__(*exc)


def _current_stream_data(tensor) -> Tuple[int, int, int]:
    """(stream id, device index, device type) of torch's current stream on `tensor`'s device: what
    torch.cuda.current_stream builds its Stream from (torch._C._cuda_getCurrentStream), without building it."""
    torch = _torch()
    getter = getattr(torch._C, "_cuda_getCurrentStream", None)
    if getter is None:
        stream = torch.cuda.current_stream(tensor.device)
        return stream.stream_id, stream.device_index, stream.device_type
    return tuple(getter(tensor.device.index))


def _current_raw_stream(torch, device_index: int) -> int:
    """The current stream of `device_index` as switchyard takes it (_tensors.torch_current_stream)."""
    return torch_current_stream(torch, device_index)


def _record_event(tensor, wanted: bool) -> EventOverlap:
    if wanted and _cuda_tensor(tensor):
        event = _torch().cuda.Event()
        event.record(_torch().cuda.current_stream(tensor.device))
        return EventOverlap(event)
    return EventOverlap(None)


def _unpack_bias(bias):
    """DeepEP's combine `bias`: None, one tensor, or a tuple of up to two -> (bias0, bias1)."""
    if bias is None:
        return None, None
    if isinstance(bias, (tuple, list)):
        if len(bias) > 2:
            raise InvalidArgument(f"bias: expected a tensor or a tuple of up to two tensors, got a "
                                  f"{type(bias).__name__} of {len(bias)}")
        padded = tuple(bias) + (None,) * (2 - len(bias))
        return padded[0], padded[1]
    return bias, None


def _tuning_fields(tuning: Optional[_C.CallTuning]):
    """A call's tuning as switchyard._torch_ops takes it: None (the Buffer's), or its three ints."""
    if tuning is None:
        return None
    return tuning.num_channels, tuning.ring_slots, tuning.chunk_tokens


def _heap_inputs_shape(value) -> Tuple[int, int]:
    """deep_ep.Buffer's switchyard_heap_inputs as (tokens per rank, hidden): 0 (none), N (hidden 7168, the
    DeepSeek-V3 rows), or (N, hidden)."""
    expected = "0 (none), the tokens per rank the heap inputs hold, or (tokens, hidden)"
    tokens, hidden = (value, 7168) if not isinstance(value, (tuple, list)) else (tuple(value) + (None, None))[:2]
    if isinstance(value, (tuple, list)) and len(value) != 2:
        raise InvalidArgument(f"switchyard_heap_inputs: expected {expected}, got {value!r}")
    for part in (tokens, hidden):
        if isinstance(part, bool) or not isinstance(part, int) or part < 0:
            raise InvalidArgument(f"switchyard_heap_inputs: expected {expected}, got {value!r}")
    if tokens > 0 and hidden < 1:
        raise InvalidArgument(f"switchyard_heap_inputs: expected a hidden of at least 1, got {value!r}")
    return tokens, hidden


HEAP_INPUTS_VARIABLE = "SWITCHYARD_HEAP_INPUTS"


def _heap_inputs_or_environment(value):
    """switchyard_heap_inputs as given; left out (None), SWITCHYARD_HEAP_INPUTS: 'N' or 'N,hidden' (unset or
    empty: 0), so that DeepEP code run unmodified can take the in-place path (its tensors are staged into the
    heap inputs)."""
    if value is not None:
        return value
    text = os.environ.get(HEAP_INPUTS_VARIABLE, "").strip()
    if not text:
        return 0
    parts = text.split(",")
    try:
        numbers = [int(part) for part in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 2) or len(numbers) != len(parts):
        raise InvalidArgument(f"{HEAP_INPUTS_VARIABLE}: expected the tokens per rank the heap inputs hold, or "
                              f"'tokens,hidden', got {text!r}")
    return numbers[0] if len(numbers) == 1 else tuple(numbers)


def _native_dispatch_handle(handle, method: str) -> _C.DispatchHandle:
    """switchyard's handle inside DeepEP's tuple (or switchyard's own handle, as it is)."""
    if isinstance(handle, DispatchHandle):
        return handle.native
    if isinstance(handle, _C.DispatchHandle):
        return handle
    raise InvalidArgument(f"deep_ep.Buffer.{method}: handle: expected the handle a dispatch returned "
                          f"(a deep_ep.DispatchHandle tuple), got {type(handle).__name__}")


def _scales_in_a_read_layout(tensor):
    """`tensor` in a layout switchyard's dispatch reads in place: row-major, or column-major (DeepEP's
    per_token_cast_to_fp8 makes those, `x_scales.T.contiguous().T`), both as they are. DeepEP takes any
    strides: others (a strided slice, say) are copied row-major by the tensor's framework on its current
    stream (the stream the call runs on)."""
    if tensor is None or is_row_major(tensor) or transposed_if_column_major(tensor)[1]:
        return tensor
    torch = _torch()
    if torch is not None and isinstance(tensor, torch.Tensor):
        return tensor.contiguous()
    module = sys.modules[type(tensor).__module__.split(".", 1)[0]]  # numpy or cupy
    return module.ascontiguousarray(tensor)


class Buffer:
    """DeepEP's deep_ep.Buffer on switchyard's `normal` engine, and in low-latency mode on its
    `low_latency` engine (module docstring: the differences).

    Attributes: rank, group_size, group, num_nvl_bytes, num_rdma_bytes, low_latency_mode, and the
    switchyard buffer as `switchyard_buffer`.
    """

    num_sms: int = 20

    def __init__(self, group, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0, low_latency_mode: bool = False,
                 num_qps_per_rank: int = 24, allow_nvlink_for_low_latency_mode: bool = True,
                 allow_mnnvl: bool = False, use_fabric: bool = False, explicitly_destroy: bool = False,
                 enable_shrink: bool = False, comm=None, *, backend: str = "auto", sharing: str = "processes",
                 switchyard_config: Optional[_C.Config] = None, timeout_seconds: Optional[float] = None,
                 switchyard_heap_inputs=None):
        """group: a torch.distributed ProcessGroup, as in DeepEP; also an mpi4py communicator or a
        callable allgather(bytes) -> list[bytes] (switchyard.as_group). `comm` (an mpi4py
        communicator) is used in place of group when group is None.

        num_nvl_bytes: bytes of switchyard's symmetric heap per rank (what DeepEP allocates for
        NVLink); 0 sizes it for DeepSeek-V3 shapes (hidden 7168, top-8 of 256 experts).
        Config.get_nvl_buffer_size_hint(hidden_bytes, num_ranks) gives switchyard's own need.
        num_rdma_bytes: across nodes (more than 8 ranks: the hierarchical engine), the bytes of its
        RDMA region (Config.get_rdma_buffer_size_hint), added to num_nvl_bytes in switchyard's one
        heap; within one node it only adds room. num_qps_per_rank and allow_nvlink_for_low_latency_mode
        configure DeepEP's RDMA, which switchyard's transports do not need; they have no effect, nor has
        allow_mnnvl (switchyard crosses nodes through its transport). use_fabric=True raises Unsupported.
        Switchyard extensions: backend ('auto', 'cpu' or 'cuda'), sharing ('processes' or 'threads'),
        switchyard_config (the engine's tuning; default: switchyard's), timeout_seconds, and
        switchyard_heap_inputs: > 0 gives the Buffer heap-resident dispatch and combine inputs for up to that
        many tokens per rank of hidden 7168, or (tokens, hidden) for other rows (docs/normal-in-place.md): every
        dispatch and combine then reads its x in place, the peers reading the rows from this rank's heap (two
        passes over memory per row instead of four). Write x into get_dispatch_input_buffer() /
        get_combine_input_buffer() to spare a copy; any other tensor is copied there first (staged; column-major
        fp8 scales are transposed as they are copied). Left out, it is read from SWITCHYARD_HEAP_INPUTS ('N' or
        'N,hidden'; unset: none), so that DeepEP code run unmodified can take the in-place path. The heap is then sized by switchyard (num_nvl_bytes and num_rdma_bytes only say that it is
        used); one node only.
        """
        # allow_mnnvl lets DeepEP use NVLink across nodes where the hardware has it (multi-node NVLink);
        # switchyard crosses nodes through its transport, so allowing it changes nothing. use_fabric
        # asks for fabric memory handles, which switchyard's heaps are not.
        if use_fabric:
            raise Unsupported("deep_ep.Buffer(use_fabric=True): not implemented in switchyard (its heaps are "
                              "shared through CUDA IPC or POSIX shared memory, not fabric handles)")
        if group is None:
            if comm is None:
                raise InvalidArgument("group: expected a process group (or comm=), got None")
            group = comm
        config = switchyard_config if switchyard_config is not None else _C.Config()
        if timeout_seconds is not None:
            config.timeout_seconds = float(timeout_seconds)
        # enable_shrink: a low-latency wait that times out masks its peer (Config.mask_ranks_on_timeout),
        # and the low_latency_*_mask_buffer calls below work on the low-latency buffer's rank mask.
        self.enable_shrink = bool(enable_shrink)
        if self.enable_shrink:
            config.mask_ranks_on_timeout = True
        self._masked_before_low_latency: Dict[int, bool] = {}
        # The number of ranks is known only once the group is resolved; NVLink domains are 8 GPUs.
        from ._groups import as_group
        resolved = as_group(group)
        self.rank = resolved.rank
        self.group_size = resolved.size
        self.group = group
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.explicitly_destroy = explicitly_destroy
        self._resolved_group = resolved
        self._backend, self._sharing, self._config = backend, sharing, config
        self._low_latency_buffer: Optional[_NativeBuffer] = None
        self._low_latency_capacity: Optional[Tuple[int, int, int, int]] = None
        # One heap holds both of DeepEP's buffers: the NVLink stage, then (across nodes) the RDMA region.
        # 0 sizes it for DeepSeek-V3 shapes.
        heap_bytes = int(num_nvl_bytes) + int(num_rdma_bytes) if num_nvl_bytes else 0
        heap_inputs, heap_hidden = _heap_inputs_shape(_heap_inputs_or_environment(switchyard_heap_inputs))
        inputs = {}
        if heap_inputs:
            # Sized by switchyard: the rings for rows of that hidden, up to these tokens, then the inputs. The
            # inputs keep each call's routing (topk_idx and weights) for the peers to pull by: room for any k
            # switchyard takes (32), as DeepEP's calls take any k.
            heap_bytes = 0
            inputs = dict(max_tokens_per_rank=heap_inputs, hidden=heap_hidden, topk=32,
                          normal_heap_input_tokens=heap_inputs, normal_heap_combine_rows=self.group_size * heap_inputs)
        self.switchyard_buffer = _NativeBuffer(
            resolved, backend=backend, sharing=sharing, ranks_per_node=min(self.group_size, NUM_MAX_NVL_PEERS),
            config=config, heap_bytes=heap_bytes, **inputs)
        self._last_layout: Optional[Tuple[Any, DispatchLayout]] = None
        # get_dispatch_layout's path for torch tensors (_torch_layout): the Buffer's device; and
        # switchyard._torch_ops, which takes torch CUDA tensors on it (get_dispatch_layout, _torch_cached_dispatch,
        # _torch_combine).
        self._layout_device = self.switchyard_buffer.device if self.switchyard_buffer.backend == "cuda" else None
        self._num_nodes = self.group_size // self.switchyard_buffer.ranks_per_node
        self._torch_ops = _torch_ops() if self._layout_device is not None else None

    # ---- DeepEP's static helpers ----------------------------------------------------------------
    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        assert new_num_sms % 2 == 0, "The SM count must be even"
        Buffer.num_sms = new_num_sms

    @staticmethod
    def is_sm90_compiled() -> bool:
        return _C.cuda_available()

    @staticmethod
    def capture() -> EventOverlap:
        """An event on the current CUDA stream (None without torch CUDA)."""
        torch = _torch()
        if torch is None or not torch.cuda.is_available():
            return EventOverlap(None)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream())
        return EventOverlap(event)

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        """DeepEP's recommended dispatch config; passing it to dispatch selects the Buffer's own tuning."""
        table = {2: (24, 256), 4: (6, 256), 8: (6, 256), 16: (16, 288), 24: (8, 288), 32: (8, 288)}
        send, recv = table.get(num_ranks, (6, 256))
        return Config(Buffer.num_sms, send, recv, 6, 128)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        """DeepEP's recommended combine config; passing it to combine selects the Buffer's own tuning."""
        table = {2: (10, 256), 4: (9, 256), 8: (4, 256), 16: (2, 288), 24: (1, 288), 32: (1, 288)}
        send, recv = table.get(num_ranks, (4, 256))
        return Config(Buffer.num_sms, send, recv, 6, 128)

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int, *, topk: int = 8) -> int:
        """Bytes of switchyard's low-latency region per rank for these calls (informational: the
        region is sized by the first low_latency_dispatch, not by num_rdma_bytes)."""
        sizing = _C.BufferSizing(max_tokens_per_rank=1, hidden=hidden, topk=topk, num_experts=num_experts,
                                 low_latency_max_tokens_per_rank=num_max_dispatch_tokens_per_rank)
        return _C.low_latency_heap_bytes(num_ranks, min(num_ranks, NUM_MAX_NVL_PEERS), sizing)

    # ---- rank masks (DeepEP's enable_shrink) ----------------------------------------------------
    def _check_shrink(self, method: str) -> None:
        if not self.enable_shrink:
            raise InvalidArgument(f"deep_ep.Buffer.{method}: the Buffer was created with enable_shrink=False "
                                  "(as in DeepEP, the mask buffer needs enable_shrink=True)")

    def _mask_stream(self):
        torch = _torch()
        if torch is not None and torch.cuda.is_available() and self._backend != "cpu":
            return torch.cuda.current_stream()
        return None

    def low_latency_update_mask_buffer(self, rank_to_mask: int, mask: bool = False) -> None:
        """Masks (mask=True) or unmasks `rank_to_mask` in this rank's view: its experts receive nothing,
        slots routed to them are dropped and nothing is awaited from it (switchyard.Buffer.update_mask)."""
        self._check_shrink("low_latency_update_mask_buffer")
        if not 0 <= int(rank_to_mask) < self.group_size:
            raise InvalidArgument(f"deep_ep.Buffer.low_latency_update_mask_buffer: rank_to_mask: expected "
                                  f"0..{self.group_size - 1}, got {rank_to_mask}")
        if self._low_latency_buffer is None:
            self._masked_before_low_latency[int(rank_to_mask)] = bool(mask)
        else:
            self._low_latency_buffer.update_mask(int(rank_to_mask), bool(mask), self._mask_stream())

    def low_latency_query_mask_buffer(self, mask_status) -> None:
        """Writes 1 where a rank is masked (by update or by a timeout), else 0, into `mask_status`
        (int32 [R]), on the current stream."""
        self._check_shrink("low_latency_query_mask_buffer")
        if self._low_latency_buffer is None:
            mask_status[:] = 0
            for rank, masked in self._masked_before_low_latency.items():
                mask_status[rank] = int(masked)
            return
        framework = "torch" if _torch() is not None else "numpy"
        current = self._low_latency_buffer.query_mask(self._mask_stream(), framework)
        if hasattr(mask_status, "copy_"):
            mask_status.copy_(current)
        else:  # numpy
            mask_status[:] = current

    def low_latency_clean_mask_buffer(self) -> None:
        """Unmasks every rank."""
        self._check_shrink("low_latency_clean_mask_buffer")
        self._masked_before_low_latency.clear()
        if self._low_latency_buffer is not None:
            self._low_latency_buffer.clean_mask(self._mask_stream())

    def get_local_buffer_tensor(self, *args, **kwargs):
        raise Unsupported("deep_ep.Buffer.get_local_buffer_tensor: switchyard's heap is not exposed as a tensor")

    def destroy(self) -> None:
        """Collective: every rank waits for the others, then frees its heap."""
        self.switchyard_buffer.destroy()
        if self._low_latency_buffer is not None:
            self._low_latency_buffer.destroy()
            self._low_latency_buffer = None

    # ---- helpers --------------------------------------------------------------------------------
    def _tuning(self, config: Optional[Config], method: str, hidden: int, topk: int,
                num_experts: int) -> Optional[_C.CallTuning]:
        """The call's tuning for a per-call `config` (module docstring): None (the Buffer's) for None or
        DeepEP's recommended config of the method, else checked as DeepEP checks it and against the heap."""
        if config is None:
            return None
        if not isinstance(config, Config):
            raise InvalidArgument(f"config: expected a deep_ep.Config or None, got {type(config).__name__}")
        if config.num_sms % 2:
            raise InvalidArgument(f"config: expected an even num_sms (a channel is two SMs, as in DeepEP), "
                                  f"got {config!r}")
        recommended = Buffer.get_combine_config if method == "combine" else Buffer.get_dispatch_config
        if config == recommended(self.group_size):
            return None
        native = self.switchyard_buffer
        if native.backend == "cuda":
            # NOTES: capped at what stays co-resident: ranks sharing one GPU (MPS) have fewer SMs each
            # than DeepEP's configs assume, and a channel whose blocks wait for a later one deadlocks.
            channels = max(1, min(config.num_sms // 2, native.max_num_channels))
        else:
            channels = native.num_channels  # a CPU channel is a host thread, not two SMs
        # NOTES: sized as switchyard sizes its heap for a tuning (normal_heap_bytes): bf16 rows of `hidden`
        # (fp8 rows are smaller), `topk` slots and `num_experts` experts.
        sizing = _C.BufferSizing(hidden=max(1, int(hidden)), topk=max(1, int(topk)),
                                 num_experts=max(self.group_size, int(num_experts)))
        engine_config = _C.Config(num_channels=channels, ring_slots=config.num_max_nvl_chunked_recv_tokens,
                                  chunk_tokens=config.num_max_nvl_chunked_send_tokens)
        needed = _C.normal_heap_bytes(self.group_size, native.ranks_per_node, engine_config, sizing)
        available = native.heap_bytes
        if needed > available:
            raise InvalidArgument(
                f"config: expected a config whose switchyard heap fits this Buffer's {available} bytes "
                f"(num_nvl_bytes + num_rdma_bytes), got {config!r}, which needs {needed} bytes for this "
                f"{method} (hidden {hidden}, top-k {topk}, {num_experts} experts)")
        # A combine or cached dispatch runs with its dispatch's channels (0: the handle's).
        return _C.CallTuning(num_channels=channels if method == "dispatch" else 0,
                             ring_slots=config.num_max_nvl_chunked_recv_tokens,
                             chunk_tokens=config.num_max_nvl_chunked_send_tokens)

    @staticmethod
    def _wait_previous(previous_event: Optional[EventOverlap]) -> None:
        if previous_event is not None:
            previous_event.current_stream_wait()

    # ---- normal mode ----------------------------------------------------------------------------
    def get_dispatch_layout(self, topk_idx, num_experts: int, previous_event: Optional[EventOverlap] = None,
                            async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """-> (num_tokens_per_rank int32 [R], num_tokens_per_rdma_rank (None within one node),
        num_tokens_per_expert int32 [E], is_token_in_rank bool [N, R], event)."""
        self._wait_previous(previous_event)
        layout = None
        entry = self.switchyard_buffer._layout_entry
        if entry is not None and self._torch_ops is not None:
            parts = self._torch_ops.dispatch_layout(entry, topk_idx, num_experts)
            if parts is not None:
                layout = DispatchLayout(*parts)
        if layout is None:
            layout = self._torch_layout(topk_idx, num_experts)
        if layout is None:
            layout = self.switchyard_buffer.get_dispatch_layout(topk_idx, num_experts)
        self._last_layout = (layout.num_tokens_per_rank, layout)
        per_rdma_rank = None if self.switchyard_buffer.ranks_per_node == self.group_size else layout.num_tokens_per_node
        return (layout.num_tokens_per_rank, per_rdma_rank, layout.num_tokens_per_expert, layout.is_token_in_rank,
                _record_event(topk_idx, async_finish))

    def _torch_layout(self, topk_idx, num_experts) -> Optional[DispatchLayout]:
        """Where switchyard._torch_ops is not built (get_dispatch_layout takes it first: it does the same
        in C++, at DeepEP's host cost): get_dispatch_layout into tensors that torch allocates from Python
        (one for the three counts, back to back, and is_token_in_rank); None where this path does not apply: anything
        but a contiguous int64 CUDA tensor [N, K] on the Buffer's device, or a num_experts the general
        path must refuse. The general path converts each tensor by DLPack both ways, which cost several
        times the call's own host time (bench/NOTES.md, session 13)."""
        torch = _torch()
        native = self.switchyard_buffer._native
        if (native is None or self._layout_device is None or torch is None or type(topk_idx) is not torch.Tensor
                or not topk_idx.is_cuda or topk_idx.dtype != torch.int64 or topk_idx.dim() != 2
                or not topk_idx.is_contiguous() or topk_idx.device.index != self._layout_device
                or type(num_experts) is not int or num_experts < 1):
            return None
        num_tokens = topk_idx.shape[0]
        ranks, nodes = self.group_size, self._num_nodes
        device = topk_idx.device
        counts = torch.empty(ranks + nodes + num_experts, dtype=torch.int32, device=device)
        in_rank = torch.empty((num_tokens, ranks), dtype=torch.bool, device=device)
        native.get_dispatch_layout_into(topk_idx, num_experts, _current_raw_stream(torch, device.index), counts,
                                        in_rank)
        return DispatchLayout(counts[:ranks], counts[ranks:ranks + nodes], counts[ranks + nodes:], in_rank)

    def dispatch(self, x, handle: Optional[DispatchHandle] = None, num_tokens_per_rank=None,
                 num_tokens_per_rdma_rank=None, is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None,
                 topk_weights=None, expert_alignment: int = 1, num_worst_tokens: int = 0,
                 config: Optional[Config] = None, previous_event: Optional[EventOverlap] = None,
                 async_finish: bool = False, allocate_on_comm_stream: bool = False):
        """-> (recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event).

        x: bf16 [N, H] (uint16 bits with numpy), or a tuple (fp8 e4m3 [N, H], f32 scales [N, H/128],
        in any layout); recv_x is then the tuple (recv_x, recv_x_scales). With `handle` (cached
        dispatch), topk_idx and topk_weights must be None and only recv_x comes back, as in DeepEP.
        handle: DeepEP's 6-tuple (DispatchHandle; module docstring).

        Stricter than DeepEP: recv_x is ordered by source rank ascending, then source token
        ascending, every time. recv_topk_idx holds local expert ids, -1 (weight 0) for other ranks'
        experts. num_tokens_per_rank, num_tokens_per_rdma_rank, is_token_in_rank and
        num_tokens_per_expert are a function of topk_idx: those that came from this Buffer's last
        get_dispatch_layout are reused, others are recomputed from topk_idx. num_worst_tokens > 0:
        fixed-size outputs and no host synchronisation (num_recv_tokens_per_expert_list is empty).
        """
        x, x_scales = x if isinstance(x, tuple) else (x, None)
        x_scales = _scales_in_a_read_layout(x_scales)
        self._wait_previous(previous_event)
        if handle is not None:
            native = _native_dispatch_handle(handle, "dispatch")
            if topk_idx is not None or topk_weights is not None:
                raise InvalidArgument("topk_idx, topk_weights: expected None with a cached handle (as in DeepEP)")
            tuning = None if config is None else self._tuning(config, "cached dispatch", x.shape[1],
                                                              *getattr(handle, "call_shape", (1, 0)))
            recv_x = self._torch_cached_dispatch(x, x_scales, native, num_worst_tokens, tuning)
            if recv_x is None:
                result = self.switchyard_buffer.dispatch(x, x_scales=x_scales, handle=native,
                                                         expert_alignment=expert_alignment,
                                                         num_worst_tokens=num_worst_tokens, tuning=tuning,
                                                         device_counts=False)
                recv_x = (result.recv_x, result.recv_x_scales) if x_scales is not None else result.recv_x
            return recv_x, None, None, None, None, _record_event(x, async_finish)

        if num_tokens_per_expert is None:
            raise InvalidArgument("num_tokens_per_expert: expected the tensor from get_dispatch_layout "
                                  "(it gives num_experts), got None")
        num_experts = int(num_tokens_per_expert.shape[0])
        layout = None
        if topk_idx is None:
            # Routed by is_token_in_rank alone, as DeepEP does: the receivers' per-expert counts are
            # what num_tokens_per_expert claims; no expert ids or weights travel.
            if topk_weights is not None:
                raise InvalidArgument("topk_weights: expected None without topk_idx, got a tensor")
            if is_token_in_rank is None:
                raise InvalidArgument("is_token_in_rank: expected bool [num_tokens, num_ranks] (the routing of a "
                                      "dispatch without topk_idx), got None")
            layout = DispatchLayout(num_tokens_per_rank, num_tokens_per_rdma_rank, num_tokens_per_expert,
                                    is_token_in_rank)
            topk = 0
        else:
            topk = int(topk_idx.shape[1]) if len(topk_idx.shape) == 2 else 1
            if self._last_layout is not None and self._last_layout[0] is num_tokens_per_rank:
                layout = self._last_layout[1]
        tuning = self._tuning(config, "dispatch", x.shape[1], topk, num_experts)
        fresh = None
        if topk_idx is not None:
            fresh = self._torch_dispatch(x, x_scales, topk_idx, topk_weights, layout, num_experts, expert_alignment,
                                         num_worst_tokens, tuning)
        if fresh is not None:
            recv_x, recv_topk_idx, recv_topk_weights, counts, native = fresh
        else:
            result = self.switchyard_buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts,
                                                     x_scales=x_scales, expert_alignment=expert_alignment,
                                                     layout=layout, num_worst_tokens=num_worst_tokens, tuning=tuning,
                                                     device_counts=False)
            recv_x = (result.recv_x, result.recv_x_scales) if x_scales is not None else result.recv_x
            recv_topk_idx, recv_topk_weights = result.recv_topk_idx, result.recv_topk_weights
            counts, native = list(result.num_recv_tokens_per_expert), result.handle
        handle = normal_handle(native, self.rank, self.group_size, framework_of(x), _on_stream_of(x))
        if _cuda_tensor(x) and _torch().cuda.is_current_stream_capturing():
            handle[0]  # made into the graph, so that every replay remakes them from the replayed routing
        handle.call_shape = (topk, num_experts)
        # NOTES: the layout need not outlive the call: switchyard's handle routes combine and cached
        # dispatches by its own copy of is_token_in_rank (also the tensor in DeepEP's 6-tuple above).
        return recv_x, recv_topk_idx, recv_topk_weights, counts, handle, _record_event(x, async_finish)

    def combine(self, x, handle: DispatchHandle, topk_weights=None, bias=None, config: Optional[Config] = None,
                previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                allocate_on_comm_stream: bool = False):
        """-> (combined_x, combined_topk_weights, event).

        x: bf16 [M, H], one row per received token in dispatch's order. Stricter than DeepEP:
        combined_x[t] is the sum over the ranks that received t in ascending rank order, in fp32
        from +0, rounded to bf16 once, so it is bit-identical run after run. topk_weights are
        reduced the same way (exactly: each slot is non-zero on one rank only).

        bias: a bf16 [N, H] tensor, or a tuple of up to two (each may be None), N this rank's tokens of
        the dispatch. As in DeepEP's kernels, the fp32 sum starts at bias_0 + bias_1 (a missing one
        counts as +0.0), then the rows are added and the sum is rounded once.
        """
        bias0, bias1 = _unpack_bias(bias)
        native = _native_dispatch_handle(handle, "combine")
        tuning = None if config is None else self._tuning(config, "combine", x.shape[1],
                                                          *getattr(handle, "call_shape", (1, 0)))
        self._wait_previous(previous_event)
        combined = self._torch_combine(x, native, topk_weights, bias0, bias1, tuning)
        if combined is None:
            result = self.switchyard_buffer.combine(x, native, topk_weights, bias0=bias0, bias1=bias1, tuning=tuning)
            combined = result.combined_x, result.combined_topk_weights
        return combined[0], combined[1], _record_event(x, async_finish)

    # NOTES: switchyard._torch_ops's dispatch (fresh and cached) and combine allocate their outputs with at::empty
    # and read their inputs as at::Tensors in C++, as DeepEP's binding does; the general path converts by DLPack both
    # ways and looks the stream up from Python, which cost get_dispatch_layout several times DeepEP's host time
    # (bench/NOTES.md, session 14). Both run on torch's current stream and give the same bits. A call the module
    # does not take (another dtype, device or layout, a strided tensor, NumPy) is answered None and goes to the
    # general path, which names any error.
    def _torch_dispatch(self, x, x_scales, topk_idx, topk_weights, layout, num_experts, expert_alignment,
                        num_worst_tokens, tuning):
        """A fresh dispatch through switchyard._torch_ops, its outputs allocated by torch once the call knows
        their rows (switchyard::DispatchArgs::allocate_outputs): (recv_x (the tuple (recv_x, recv_x_scales) for
        fp8), recv_topk_idx, recv_topk_weights or None, num_recv_tokens_per_expert, switchyard._C.DispatchHandle);
        None where it does not apply."""
        ops, entry = self._torch_ops, self.switchyard_buffer._layout_entry
        if ops is None or entry is None:
            return None
        tensors = None if layout is None else (layout.num_tokens_per_rank, layout.num_tokens_per_node,
                                               layout.num_tokens_per_expert, layout.is_token_in_rank)
        return ops.dispatch(entry, x, x_scales, topk_idx, topk_weights, tensors, num_experts, expert_alignment,
                            num_worst_tokens, _tuning_fields(tuning))

    def _torch_cached_dispatch(self, x, x_scales, native, num_worst_tokens, tuning):
        """recv_x (the tuple (recv_x, recv_x_scales) for fp8) through switchyard._torch_ops; None where it
        does not apply."""
        ops, entry = self._torch_ops, self.switchyard_buffer._layout_entry
        if ops is None or entry is None:
            return None
        return ops.cached_dispatch(entry, x, x_scales, native, num_worst_tokens, _tuning_fields(tuning))

    def _torch_combine(self, x, native, topk_weights, bias0, bias1, tuning):
        """(combined_x, combined_topk_weights) through switchyard._torch_ops; None where it does not apply."""
        ops, entry = self._torch_ops, self.switchyard_buffer._layout_entry
        if ops is None or entry is None:
            return None
        return ops.combine(entry, x, native, topk_weights, bias0, bias1, _tuning_fields(tuning))

    # ---- low-latency mode -----------------------------------------------------------------------
    def _low_latency(self, method: str, max_tokens: int, hidden: int, topk: int, num_experts: int) -> _NativeBuffer:
        """The switchyard Buffer of the low_latency engine, created (collectively) by the first
        low_latency_dispatch for its shapes."""
        if not self.low_latency_mode:
            raise InvalidArgument(f"deep_ep.Buffer.{method}: the Buffer was created with low_latency_mode=False "
                                  "(as in DeepEP, low-latency calls need low_latency_mode=True)")
        wanted = (int(max_tokens), int(hidden), int(topk), int(num_experts))
        if self._low_latency_buffer is None:
            self._low_latency_buffer = _NativeBuffer(
                self._resolved_group, backend=self._backend, sharing=self._sharing,
                ranks_per_node=min(self.group_size, NUM_MAX_NVL_PEERS), config=self._config, max_tokens_per_rank=1,
                hidden=wanted[1], topk=wanted[2], num_experts=wanted[3], heap_bytes=0,
                low_latency_max_tokens_per_rank=wanted[0])
            self._low_latency_capacity = wanted
            # Masks set before the low-latency buffer existed.
            for rank, masked in self._masked_before_low_latency.items():
                self._low_latency_buffer.update_mask(rank, masked, self._mask_stream())
            self._masked_before_low_latency.clear()
        capacity = self._low_latency_capacity
        if any(w > c for w, c in zip(wanted, capacity)):
            raise InvalidArgument(
                f"deep_ep.Buffer.{method}: (num_max_dispatch_tokens_per_rank, hidden, topk, num_experts) = {wanted} "
                f"exceeds {capacity}, which the first low_latency_dispatch sized switchyard's low-latency region for; "
                "make the first call with the largest shapes")
        return self._low_latency_buffer

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank: int, num_experts: int,
                             cumulative_local_expert_recv_stats=None, dispatch_wait_recv_cost_stats=None,
                             use_fp8: bool = True, round_scale: bool = False, use_ue8m0: bool = False,
                             async_finish: bool = False, return_recv_hook: bool = False):
        """-> (recv_x, recv_count, handle, event, hook), as in DeepEP.

        x: bf16 [N, H] (uint16 bits with numpy), N <= num_max_dispatch_tokens_per_rank; topk_idx:
        int64 [N, K], -1 = no expert. recv_x: bf16 [L, R * max, H], or with use_fp8 the tuple
        (fp8 e4m3 [L, R * max, H], scales f32 [L, R * max, H / 128]; with use_ue8m0 int32 packed
        exponents). recv_count: int32 [L]. hook: with return_recv_hook, a callable that receives
        (outputs are filled only then), else None.

        Stricter than DeepEP: within each local expert the rows are packed by source rank ascending,
        then in (token, slot) order, every time (DeepEP's order depends on timing). The first call
        sizes switchyard's low-latency region (module docstring). cumulative_local_expert_recv_stats
        (int32 [L], in x's framework and device) gets recv_count added once the rows are received
        (by the hook with return_recv_hook), as in DeepEP. dispatch_wait_recv_cost_stats (int64
        [num_ranks]) gets, per source rank, the time the receive half waited for its rows added, as in
        DeepEP, but in nanoseconds where DeepEP counts SM clock cycles.
        """
        num_local_experts = int(num_experts) // self.group_size
        stats = cumulative_local_expert_recv_stats
        if stats is not None and (tuple(stats.shape) != (num_local_experts,) or "int32" not in str(stats.dtype)):
            raise InvalidArgument(f"cumulative_local_expert_recv_stats: expected int32 [{num_local_experts}] (one "
                                  f"count per local expert), got {stats.dtype} {list(stats.shape)}")
        buffer = self._low_latency("low_latency_dispatch", num_max_dispatch_tokens_per_rank, x.shape[1],
                                   topk_idx.shape[1], num_experts)
        result = buffer.low_latency_dispatch(x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                                             use_fp8=use_fp8, round_scale=round_scale, use_ue8m0=use_ue8m0,
                                             return_recv_hook=return_recv_hook,
                                             wait_recv_cost_stats=dispatch_wait_recv_cost_stats)
        recv_x = (result.recv_x, result.recv_x_scales) if use_fp8 else result.recv_x
        recv_count, native_layout_range = result.recv_count, result.layout_range
        dispatch_stream = _on_stream_of(x)

        def pack_into(out):
            # NOTES: the receive half writes layout_range: read before it, the memory holds what its
            # allocation held last (a shim that repacked right after a hooked call read 0xF8F8F8F8 there,
            # the fp8 bytes of an earlier call's recv_x). On CUDA it runs on the dispatch's stream, after
            # the receive kernel, whatever stream is current when the handle is read.
            with dispatch_stream:
                pack_layout_range(native_layout_range, out=out)

        handle = LowLatencyHandle(
            result.src_info, lambda: empty_layout_range(native_layout_range, tuple(native_layout_range.shape[:2])),
            pack_into, int(num_max_dispatch_tokens_per_rank), int(x.shape[1]), int(num_experts), native=result.handle)

        def after_receive():
            handle.received()
            if _cuda_tensor(x) and _torch().cuda.is_current_stream_capturing():
                handle[1]  # packed into the graph, so that every replay repacks it
            if stats is not None:
                with dispatch_stream:
                    stats[...] += recv_count

        hook = result.hook
        if hook is None:
            after_receive()
        else:
            receive = hook

            def hook():
                receive()
                after_receive()
        return recv_x, result.recv_count, handle, _record_event(x, async_finish), hook

    def low_latency_combine(self, x, topk_idx, topk_weights, handle, use_logfmt: bool = False,
                            zero_copy: bool = False, async_finish: bool = False, return_recv_hook: bool = False,
                            out=None, combine_wait_recv_cost_stats=None):
        """-> (combined_x, event, hook), as in DeepEP.

        x: bf16 [L, R * max, H], the experts' outputs in dispatch's row order (with zero_copy, they
        were written to get_next_low_latency_combine_buffer(handle)). topk_idx, topk_weights: the
        dispatch's int64 [N, K] and f32 [N, K]. out: a preallocated bf16 [N, H].

        Stricter than DeepEP: combined_x[t] = the sum over the valid slots j of t in ascending order
        of topk_weights[t, j] * x[row(t, j)], accumulated in fp32 with fused multiply-add from +0.0
        and rounded to bf16 once: bit-identical run after run. use_logfmt=True: DeepEP's LogFMT-10 (10 bits
        per value, per-128-channel log ranges; lossy), specified in switchyard so that every engine gives the
        same bits (src/common/logfmt.hpp); on both backends, the rows travelling packed
        (src/common/logfmt_wire.hpp), not with zero_copy. combine_wait_recv_cost_stats: as low_latency_dispatch's dispatch_wait_recv_cost_stats,
        in nanoseconds.
        """
        native = self._native_low_latency_handle(handle, "low_latency_combine")
        # With zero_copy the outputs are already in the combine buffer; DeepEP's x only gives shapes.
        result = self._low_latency_buffer.low_latency_combine(None if zero_copy else x, topk_idx, topk_weights, native, zero_copy=zero_copy,
                                                              return_recv_hook=return_recv_hook, out=out,
                                                              use_logfmt=use_logfmt,
                                                              wait_recv_cost_stats=combine_wait_recv_cost_stats)
        return result.combined_x, _record_event(topk_weights, async_finish), result.hook

    def _native_low_latency_handle(self, handle, method: str):
        if isinstance(handle, _C.LowLatencyHandle) and self._low_latency_buffer is not None:
            return handle
        if not isinstance(handle, LowLatencyHandle) or self._low_latency_buffer is None:
            raise InvalidArgument(f"deep_ep.Buffer.{method}: handle: expected the handle low_latency_dispatch "
                                  f"returned, got {type(handle).__name__}")
        return handle.native

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int):
        """Nothing to clean: switchyard's low-latency region is separate from the normal engine's, and its
        signals carry the call's sequence number and are never reset, so stale memory never matches."""
        return None

    # ---- switchyard's heap-resident inputs (switchyard_heap_inputs) -----------------------------------
    def _heap_framework(self, framework: Optional[str]) -> str:
        if framework is not None:
            return framework
        return "torch" if _torch() is not None else "numpy"

    def get_dispatch_input_buffer(self, num_tokens: int, hidden: int, fp8: bool = False,
                                  framework: Optional[str] = None):
        """(x, x_scales) in this rank's heap (a switchyard extension; needs switchyard_heap_inputs >= num_tokens):
        bf16 [num_tokens, hidden] and None, or with fp8 float8_e4m3fn [num_tokens, hidden] and f32 [num_tokens,
        hidden / 128] (row-major; uint8 bits with numpy). Write the tokens here and pass them to dispatch (as x,
        or the tuple (x, x_scales)): the receivers read them in place. They may be rewritten once dispatch has
        returned (on CUDA: on the stream it ran on). framework: 'torch' (default where torch is imported) or
        'numpy'."""
        return self.switchyard_buffer.normal_input(num_tokens, hidden, fp8=fp8,
                                                   framework=self._heap_framework(framework))

    def get_combine_input_buffer(self, handle, hidden: int = 0, framework: Optional[str] = None):
        """(x, topk_weights) in this rank's heap for `handle`'s dispatch (a switchyard extension; needs
        switchyard_heap_inputs): bf16 [rows, hidden] for the expert outputs, in dispatch's receive order, and
        f32 [rows, K] for their weights (None for a dispatch without top-k). Write them here and pass them to
        combine (x, and topk_weights when weights are combined): each home rank reads its rows in place."""
        native = _native_dispatch_handle(handle, "get_combine_input_buffer")
        return self.switchyard_buffer.normal_combine_input(native, hidden, framework=self._heap_framework(framework))

    def get_next_low_latency_combine_buffer(self, handle):
        """bf16 [L, R * max, H] in this rank's heap: write the experts' outputs here, then
        low_latency_combine(..., zero_copy=True)."""
        native = self._native_low_latency_handle(handle, "get_next_low_latency_combine_buffer")
        return self._low_latency_buffer.low_latency_combine_buffer(native)

