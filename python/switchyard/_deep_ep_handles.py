"""DeepEP's V1 handle tuples, rebuilt from switchyard's handles (switchyard.deep_ep).

A DeepEP user indexes the handle a dispatch returns (DeepEP's own tests read handle[0] as
rank_prefix_matrix, and handle[0] / handle[1] of the low-latency handle as src_info / layout_range),
and passes it back to combine or to a cached dispatch. The tuples here have DeepEP's entries, with
DeepEP's dtypes and shapes, and carry switchyard's handle as `.native`, which is what switchyard.deep_ep
reads back: changing an entry of the tuple changes nothing in switchyard's routing.

The arrays are in the framework of the dispatch's x (torch, else numpy) and on its device. The
arithmetic uses only the framework's own operations on that device, so no host synchronisation is
added. The normal handle's arrays are made when first read (DispatchHandle), except under a CUDA graph
capture, which captures them with the dispatch so that every replay remakes them.
"""
import sys
from typing import Any, Callable, Optional

__all__ = ["DispatchHandle", "LowLatencyHandle", "normal_handle", "pack_layout_range", "RANK_PREFIX_UNKNOWN"]

# rank_prefix_matrix entries of columns other than this rank's: switchyard's dispatch exchanges only
# what each destination receives, so this rank never learns how many tokens reached the others.
RANK_PREFIX_UNKNOWN = -1

# DeepEP packs a low-latency (begin, count) into one int64: count in the low 32 bits, begin in the
# high 32 bits (its kernels store the pair (count, begin) as two int32 words, little-endian).
_LOW_WORD_MASK = (1 << 32) - 1


class _LazyTuple(tuple):
    """A tuple whose entries a subclass makes on first read (`_made()`, `_length` of them): indexing,
    iteration, unpacking and printing read them; len() and truthiness do not. Equal only to itself
    (tuple's comparison would compare the empty storage)."""

    _length = 0

    def _made(self) -> tuple:
        raise NotImplementedError

    def __len__(self):
        return self._length

    def __getitem__(self, index):
        return self._made()[index]

    def __iter__(self):
        return iter(self._made())

    def __contains__(self, value):
        return any(entry is value for entry in self._made())

    def __repr__(self):
        return f"{type(self).__name__}{self._made()!r}"

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    def __reduce__(self):
        raise TypeError("deep_ep handle: not picklable (it refers to a live switchyard Buffer's routing)")


class DispatchHandle(_LazyTuple):
    """DeepEP's intranode handle: (rank_prefix_matrix, channel_prefix_matrix, recv_channel_prefix_matrix,
    recv_src_idx, is_token_in_rank, send_head), with switchyard's handle as `.native`.

    - rank_prefix_matrix int32 [R, R]: entry [i, j] = tokens that ranks 0..i sent to rank j, as in
      DeepEP, for column j = this rank; the other columns hold -1 (RANK_PREFIX_UNKNOWN), since
      switchyard's dispatch tells a rank only what it receives. DeepEP reads only this rank's column.
    - recv_src_idx int32 [M]: each received row's source token index, as in DeepEP.
    - is_token_in_rank bool [N, R]: as in DeepEP (the tensor the dispatch routed by).
    - The channel entries describe switchyard's channels, not DeepEP's: C = switchyard's channel count
      (fixed when the Buffer is created, .native.num_channels), and channel c owns this rank's source
      tokens [N * c // C, N * (c + 1) // C). channel_prefix_matrix int32 [R, C]: per destination,
      this rank's tokens for it in channels 0..c (inclusive prefix, as DeepEP's). recv_channel_prefix_matrix
      int32 [R, C]: per source rank, where channel c's rows start within that source's block (as DeepEP's).
      send_head int32 [N, R]: token t's index among its channel's tokens for destination d, or -1 when t
      does not go to d (what DeepEP's send_head holds before a combine; DeepEP's combine rewrites it in
      place, switchyard's never reads it).

    The six arrays are made when the handle is first read (indexed, iterated, unpacked, printed), on the
    stream of the dispatch that made it: switchyard's combine and cached dispatch take `.native`, and
    making them takes a dozen framework operations, more host time than the dispatch's own kernels at
    decode sizes. len() is 6 and the handle is truthy without making them.
    """

    _length = 6

    def __new__(cls, make_entries: Callable[[], tuple], native):
        self = super().__new__(cls, ())
        self._make_entries = make_entries
        self._entries = None
        self.native = native
        return self

    def _made(self) -> tuple:
        if self._entries is None:
            self._entries = tuple(self._make_entries())
            self._make_entries = None
        return self._entries



class LowLatencyHandle(_LazyTuple):
    """DeepEP's low-latency handle, (src_info, layout_range, num_max_dispatch_tokens_per_rank, hidden,
    num_experts), with switchyard's handle as `.native`.

    src_info int32 [L, R * max]: each row's source token. layout_range int64 [L, R]: for local expert l
    and source rank r, (begin << 32) | count, as DeepEP packs it. With return_recv_hook both are filled
    only once the hook has run, as in DeepEP.

    layout_range is made and packed when the handle is first read (`empty_layout_range()` makes the
    array, `pack_layout_range(out)` packs it on the dispatch's stream): switchyard's combine takes
    `.native`, and the packing's framework operations would cost host time in every dispatch. An array
    handed out before the receive (a hooked call read before its hook) is packed when the receive is
    enqueued, as DeepEP's kernel fills its own then.
    """

    _length = 5

    def __new__(cls, src_info, empty_layout_range: Callable[[], Any], pack_layout_range: Callable[[Any], None],
                num_max_dispatch_tokens_per_rank, hidden, num_experts, *, native):
        self = super().__new__(cls, ())
        self._src_info = src_info
        self._empty_layout_range = empty_layout_range
        self._pack_layout_range = pack_layout_range
        self._layout_range = None
        self._received = False
        self._packed = False
        self._scalars = (num_max_dispatch_tokens_per_rank, hidden, num_experts)
        self.native = native
        return self

    def received(self) -> None:
        """The receive half has been enqueued (at once, or by the hook): layout_range can be packed."""
        self._received = True
        if self._layout_range is not None:
            self._pack()

    def _pack(self) -> None:
        if not self._packed:
            self._pack_layout_range(self._layout_range)
            self._packed = True

    def _made(self) -> tuple:
        if self._layout_range is None:
            self._layout_range = self._empty_layout_range()
        if self._received:
            self._pack()
        return (self._src_info, self._layout_range) + self._scalars



def _torch_of(array) -> Optional[Any]:
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(array, torch.Tensor) else None


def _numpy_like(array):
    """numpy, or cupy for cupy arrays (the same API on the device)."""
    if type(array).__module__.split(".", 1)[0] == "cupy":
        return sys.modules["cupy"]
    import numpy
    return numpy


def pack_layout_range(layout_range, out=None):
    """switchyard's int32 [L, R, 2] (begin, count) as DeepEP's int64 [L, R]: (begin << 32) | count.

    It reads layout_range when called: with a receive hook, call it only once the hook has run (before,
    the memory holds whatever its allocation held last). out: an int64 [L, R] array to write into."""
    torch = _torch_of(layout_range)
    if torch is not None:
        begin, count = layout_range[..., 0].to(torch.int64), layout_range[..., 1].to(torch.int64)
    else:
        xp = _numpy_like(layout_range)
        begin, count = layout_range[..., 0].astype(xp.int64), layout_range[..., 1].astype(xp.int64)
    packed = (begin << 32) | (count & _LOW_WORD_MASK)
    if out is None:
        return packed
    out[...] = packed
    return out


def empty_layout_range(like, shape):
    """An int64 array of `shape` in like's framework and on its device, for pack_layout_range(out=)."""
    torch = _torch_of(like)
    if torch is not None:
        return torch.empty(shape, dtype=torch.int64, device=like.device)
    xp = _numpy_like(like)
    return xp.empty(shape, xp.int64)


def normal_handle(native, rank: int, num_ranks: int, framework: str, on_dispatch_stream) -> DispatchHandle:
    """DeepEP's 6-tuple for switchyard's normal-engine handle `native`; its arrays come back in
    `framework` ('torch', 'numpy' or 'cupy': frameworks whose arrays can be written in place), made
    within `on_dispatch_stream` (a context manager that makes the dispatch's stream current)."""
    if framework not in ("torch", "numpy", "cupy"):
        from ._errors import Unsupported
        raise Unsupported(f"deep_ep.Buffer.dispatch: DeepEP's handle is built for torch, numpy or cupy arrays; "
                          f"x is a {framework} array")

    def make_entries():
        with on_dispatch_stream:
            return _entries(native, rank, num_ranks, framework)

    return DispatchHandle(make_entries, native)


def _entries(native, rank: int, num_ranks: int, framework: str) -> tuple:
    """The six arrays of DispatchHandle, from switchyard's handle `native`."""
    is_token_in_rank, recv_src_idx, recv_channel_start = native.routing(framework)
    num_channels = native.num_channels
    torch = _torch_of(recv_channel_start)
    ops = _TorchOps(torch) if torch is not None else _NumpyOps(_numpy_like(recv_channel_start))
    rank_prefix_matrix = ops.full((num_ranks, num_ranks), RANK_PREFIX_UNKNOWN, like=recv_channel_start)
    # recv_channel_start[(s + 1) * C] is where source s + 1 starts: the rows from sources 0..s.
    rank_prefix_matrix[:, rank] = recv_channel_start[num_channels::num_channels]
    starts = recv_channel_start[:num_ranks * num_channels].reshape(num_ranks, num_channels)
    recv_channel_prefix_matrix = ops.contiguous(starts - starts[:, :1])
    channel_prefix_matrix, send_head = _send_side(ops, is_token_in_rank, num_channels)
    return (rank_prefix_matrix, channel_prefix_matrix, recv_channel_prefix_matrix, recv_src_idx, is_token_in_rank,
            send_head)


def _send_side(ops, is_token_in_rank, num_channels: int):
    """(channel_prefix_matrix [R, C], send_head [N, R]) of switchyard's channel split (DispatchHandle)."""
    num_tokens, num_ranks = int(is_token_in_rank.shape[0]), int(is_token_in_rank.shape[1])
    # before[t, d]: tokens before t that go to d.
    before = ops.exclusive_cumsum(is_token_in_rank)  # int32 [N + 1, R]
    channel_ends = ops.arange(1, num_channels + 1, like=before) * num_tokens // num_channels
    channel_prefix_matrix = ops.contiguous(before[channel_ends].T)
    if num_tokens == 0:
        return channel_prefix_matrix, ops.full((0, num_ranks), -1, like=before)
    # Token t is in the last channel c whose first token N * c // C is at or before t.
    tokens = ops.arange(0, num_tokens, like=before)
    channel_of_token = ((tokens + 1) * num_channels - 1) // num_tokens
    channel_begin = channel_of_token * num_tokens // num_channels
    within_channel = before[:num_tokens] - before[channel_begin]
    send_head = ops.where(is_token_in_rank, within_channel, -1)
    return channel_prefix_matrix, send_head


class _NumpyOps:
    """The few operations the handle needs, in numpy's API (numpy, or cupy on the device)."""

    def __init__(self, xp):
        self.xp = xp

    def full(self, shape, value, like):
        return self.xp.full(shape, value, self.xp.int32)

    def arange(self, start, stop, like):
        return self.xp.arange(start, stop, dtype=self.xp.int64)

    def exclusive_cumsum(self, mask):
        xp = self.xp
        return xp.concatenate([xp.zeros((1, mask.shape[1]), xp.int32), xp.cumsum(mask, axis=0, dtype=xp.int32)])

    def where(self, mask, values, other):
        return self.xp.where(mask, values, other).astype(self.xp.int32)

    def contiguous(self, array):
        return self.xp.ascontiguousarray(array, dtype=self.xp.int32)


class _TorchOps:
    def __init__(self, torch):
        self.torch = torch

    def full(self, shape, value, like):
        return self.torch.full(shape, value, dtype=self.torch.int32, device=like.device)

    def arange(self, start, stop, like):
        return self.torch.arange(start, stop, dtype=self.torch.int64, device=like.device)

    def exclusive_cumsum(self, mask):
        torch = self.torch
        zeros = torch.zeros((1, mask.shape[1]), dtype=torch.int32, device=mask.device)
        return torch.cat([zeros, torch.cumsum(mask, dim=0, dtype=torch.int32)])

    def where(self, mask, values, other):
        return values.to(self.torch.int32).masked_fill(~mask, other)

    def contiguous(self, array):
        return array.to(self.torch.int32).contiguous()
