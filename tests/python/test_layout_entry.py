"""The C entry behind switchyard._torch_ops (python/src/layout_entry.h), called here through ctypes on the
CPU backend: its fields, its outputs bitwise against get_dispatch_layout, the cached dispatch and the
combine, its refusals (a Python exception, nothing written), and the Buffer it keeps alive. _torch_ops
itself needs torch and a GPU (test_cuda_tensors.py); this checks the half of the contract that _C keeps,
in CI."""
import ctypes
import sys

import numpy as np
import pytest

import reference
import switchyard

HIDDEN, TOPK, SEED = 256, 3, 11
ENTRY_NAME = b"switchyard._C.layout_entry"
ENTRY_VERSION = 3
DTYPE_BF16, DTYPE_FP8_E4M3 = 0, 1


class LayoutCall(ctypes.Structure):
    _fields_ = [("topk_idx", ctypes.c_void_p), ("num_tokens", ctypes.c_int64), ("topk", ctypes.c_int64),
                ("num_experts", ctypes.c_int64), ("stream", ctypes.c_void_p), ("counts", ctypes.c_void_p),
                ("is_token_in_rank", ctypes.c_void_p)]


class CallTuning(ctypes.Structure):
    _fields_ = [("num_channels", ctypes.c_int32), ("ring_slots", ctypes.c_int32), ("chunk_tokens", ctypes.c_int32)]


class HandleShape(ctypes.Structure):
    _fields_ = [("num_tokens", ctypes.c_int64), ("num_recv_tokens", ctypes.c_int64),
                ("num_worst_tokens", ctypes.c_int64)]


class CachedDispatchCall(ctypes.Structure):
    _fields_ = [("handle", ctypes.py_object), ("x", ctypes.c_void_p), ("x_dtype", ctypes.c_int32),
                ("x_scales_column_major", ctypes.c_int32), ("x_scales", ctypes.c_void_p),
                ("num_tokens", ctypes.c_int64), ("hidden", ctypes.c_int64), ("num_worst_tokens", ctypes.c_int64),
                ("tuning", CallTuning), ("stream", ctypes.c_void_p), ("recv_x", ctypes.c_void_p),
                ("recv_x_scales", ctypes.c_void_p), ("num_recv_rows", ctypes.c_int64)]


class CombineCall(ctypes.Structure):
    _fields_ = [("handle", ctypes.py_object), ("x", ctypes.c_void_p), ("num_rows", ctypes.c_int64),
                ("hidden", ctypes.c_int64), ("topk_weights", ctypes.c_void_p), ("topk", ctypes.c_int64),
                ("bias0", ctypes.c_void_p), ("bias1", ctypes.c_void_p), ("has_bias0", ctypes.c_int32),
                ("has_bias1", ctypes.c_int32), ("num_tokens", ctypes.c_int64), ("tuning", CallTuning),
                ("stream", ctypes.c_void_p), ("combined_x", ctypes.c_void_p),
                ("combined_topk_weights", ctypes.c_void_p)]


class DispatchOutputs(ctypes.Structure):
    _fields_ = [("recv_x", ctypes.c_void_p), ("recv_x_scales", ctypes.c_void_p), ("recv_topk_idx", ctypes.c_void_p),
                ("recv_topk_weights", ctypes.c_void_p)]


# CFUNCTYPE: the entry calls the allocator without the GIL; ctypes takes it for the Python function.
ALLOCATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(DispatchOutputs))


class DispatchCall(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("x_dtype", ctypes.c_int32), ("x_scales_column_major", ctypes.c_int32),
                ("x_scales", ctypes.c_void_p), ("num_tokens", ctypes.c_int64), ("hidden", ctypes.c_int64),
                ("topk_idx", ctypes.c_void_p), ("topk_weights", ctypes.c_void_p), ("topk", ctypes.c_int64),
                ("num_experts", ctypes.c_int64), ("expert_alignment", ctypes.c_int64),
                ("num_worst_tokens", ctypes.c_int64), ("num_tokens_per_rank", ctypes.c_void_p),
                ("num_tokens_per_node", ctypes.c_void_p), ("num_tokens_per_expert", ctypes.c_void_p),
                ("is_token_in_rank", ctypes.c_void_p), ("tuning", CallTuning), ("stream", ctypes.c_void_p),
                ("allocate", ALLOCATE), ("allocate_context", ctypes.c_void_p), ("handle", ctypes.c_void_p),
                ("num_recv_tokens_per_expert", ctypes.c_void_p)]


def steal(pointer):
    """The object a new reference at `pointer` (a PyObject*) names, that reference taken over (or None)."""
    if not pointer:
        return None
    value = ctypes.cast(pointer, ctypes.py_object).value
    decref = ctypes.pythonapi.Py_DecRef
    decref.argtypes, decref.restype = [ctypes.c_void_p], None
    decref(pointer)
    return value


# PYFUNCTYPE: called with the GIL held, and a set Python exception is raised when the call returns.
LAYOUT_INTO = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(LayoutCall))
HANDLE_SHAPE = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(HandleShape))
CACHED_DISPATCH_INTO = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(CachedDispatchCall))
COMBINE_INTO = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(CombineCall))
DISPATCH_INTO = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(DispatchCall))


class LayoutEntry(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("cuda", ctypes.c_int32), ("device", ctypes.c_int32),
                ("num_ranks", ctypes.c_int32), ("num_nodes", ctypes.c_int32), ("max_num_experts", ctypes.c_int32),
                ("buffer", ctypes.c_void_p), ("layout_into", LAYOUT_INTO), ("handle_shape", HANDLE_SHAPE),
                ("cached_dispatch_into", CACHED_DISPATCH_INTO), ("combine_into", COMBINE_INTO),
                ("dispatch_into", DISPATCH_INTO)]


def entry_of(capsule):
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return LayoutEntry.from_address(get_pointer(capsule, ENTRY_NAME))


def call_entry(entry, topk_idx, num_experts, counts, in_rank):
    call = LayoutCall(topk_idx.ctypes.data, topk_idx.shape[0], topk_idx.shape[1], num_experts, None,
                      counts.ctypes.data, in_rank.ctypes.data)
    return entry.layout_into(entry.buffer, ctypes.byref(call))


def layout_entry_job(rank, num_ranks, allgather, seed, num_experts):
    rng = np.random.default_rng([seed, rank])
    num_tokens = 23 + 5 * rank
    topk_idx = rng.integers(-1, num_experts, size=(num_tokens, TOPK), dtype=np.int64)
    topk_idx[0] = -1  # a token routed nowhere
    buffer = switchyard.Buffer(allgather, backend="cpu", sharing="processes", hidden=HIDDEN, topk=TOPK,
                               num_experts=num_experts, config=switchyard.Config(timeout_seconds=20))
    want = tuple(np.asarray(part) for part in buffer.get_dispatch_layout(topk_idx, num_experts))
    capsule = buffer.native.layout_entry()
    entry = entry_of(capsule)
    fields = (entry.version, entry.cuda, entry.num_ranks, entry.num_nodes, entry.max_num_experts)
    size = num_ranks + 1 + num_experts  # one node
    counts, in_rank = np.full(size, -7, np.int32), np.zeros((num_tokens, num_ranks), np.bool_)
    status = call_entry(entry, topk_idx, num_experts, counts, in_rank)
    # Refused: a num_experts that is no multiple of the ranks, and expert ids past it. Nothing is written.
    refusals = []
    for bad_experts, bad_topk in ((num_experts + 1, topk_idx), (num_experts, topk_idx + num_experts)):
        untouched_counts, untouched_in_rank = np.full(size + 1, -7, np.int32), np.zeros_like(in_rank)
        try:
            call_entry(entry, bad_topk, bad_experts, untouched_counts, untouched_in_rank)
            refusals.append(("no error", None))
        except switchyard.InvalidArgument as error:
            refusals.append((str(error), bool((untouched_counts == -7).all() and not untouched_in_rank.any())))
    # The capsule keeps the native Buffer alive: dropping every other reference leaves its calls working.
    native = buffer._native
    references = sys.getrefcount(native)
    second = native.layout_entry()
    holds = sys.getrefcount(native) == references + 1
    del second
    buffer._native = buffer._layout_entry = None
    del native, buffer
    again_counts, again_in_rank = np.full(size, -7, np.int32), np.zeros_like(in_rank)
    again = call_entry(entry, topk_idx, num_experts, again_counts, again_in_rank)
    allgather(b"done")  # every rank is done with its peers before any capsule (and so its heap) goes
    del entry, capsule
    return want, fields, status, counts, in_rank, refusals, (holds, again, again_counts, again_in_rank)


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_the_layout_entry_fills_the_callers_memory_as_get_dispatch_layout_and_refuses_by_name(ranks, num_ranks):
    num_experts = 8
    results = ranks(num_ranks).run(layout_entry_job, [(SEED, num_experts)] * num_ranks)
    for rank, (want, fields, status, counts, in_rank, refusals, again) in enumerate(results):
        per_rank, per_node, per_expert, want_in_rank = want
        assert fields == (ENTRY_VERSION, 0, num_ranks, 1, 1 << 16), f"rank {rank}: entry fields {fields}"
        assert status == 0
        np.testing.assert_array_equal(counts, np.concatenate([per_rank, per_node, per_expert]), err_msg=f"rank {rank}")
        np.testing.assert_array_equal(in_rank, want_in_rank, err_msg=f"rank {rank}")
        (experts_message, experts_untouched), (ids_message, ids_untouched) = refusals
        if num_ranks > 1:  # with one rank every positive count is a multiple
            assert experts_message.startswith("num_experts:"), experts_message
            assert experts_untouched, f"a refused call wrote its outputs: {experts_message}"
        assert ids_message.startswith("topk_idx:"), ids_message
        assert ids_untouched, f"a refused call wrote its outputs: {ids_message}"
        holds, again_status, again_counts, again_in_rank = again
        assert holds, f"rank {rank}: a capsule does not hold a reference to its Buffer"
        assert again_status == 0
        np.testing.assert_array_equal(again_counts, counts, err_msg=f"rank {rank}: after the Buffer's last reference")
        np.testing.assert_array_equal(again_in_rank, in_rank, err_msg=f"rank {rank}: after the Buffer's last reference")


# ---- the cached dispatch and the combine (entry version 2) ------------------------------------------
FILL = 123  # what the caller's outputs hold before a call: still there after a refused one


def filled(shape, dtype):
    return np.full(shape, FILL, dtype)


def address(array):
    return None if array is None else array.ctypes.data


def untouched(*arrays):
    return all(array is None or bool((array == FILL).all()) for array in arrays)


def shape_of(entry, handle):
    shape = HandleShape()
    entry.handle_shape(handle, ctypes.byref(shape))
    return shape


def cached_dispatch_outputs(x, scales, rows):
    recv_scales = None if scales is None else filled((rows, x.shape[1] // 128), np.float32)
    return filled((rows, x.shape[1]), x.dtype), recv_scales


def call_cached_dispatch(entry, handle, x, scales, outputs, num_worst_tokens=0, tuning=(0, 0, 0),
                         x_scales_column_major=0):
    recv_x, recv_scales = outputs
    call = CachedDispatchCall(handle, address(x), DTYPE_BF16 if scales is None else DTYPE_FP8_E4M3,
                              x_scales_column_major, address(scales), x.shape[0], x.shape[1], num_worst_tokens,
                              CallTuning(*tuning), None, address(recv_x), address(recv_scales), recv_x.shape[0])
    return entry.cached_dispatch_into(entry.buffer, ctypes.byref(call))


def combine_outputs(num_tokens, weights):
    return filled((num_tokens, HIDDEN), np.uint16), None if weights is None else filled((num_tokens, TOPK), np.float32)


def call_combine(entry, handle, y, weights, biases, outputs, tuning=(0, 0, 0)):
    combined_x, combined_weights = outputs
    bias0, bias1 = biases
    call = CombineCall(handle, address(y), y.shape[0], y.shape[1], address(weights),
                       0 if weights is None else weights.shape[1], address(bias0), address(bias1), bias0 is not None,
                       bias1 is not None, combined_x.shape[0], CallTuning(*tuning), None, address(combined_x),
                       address(combined_weights))
    return entry.combine_into(entry.buffer, ctypes.byref(call))


def refusal(call, *outputs):
    """(the message of the switchyard.InvalidArgument that `call` raised, whether `outputs` kept their fill)."""
    try:
        call()
    except switchyard.InvalidArgument as error:
        return str(error), untouched(*outputs)
    return "no error", untouched(*outputs)


def normal_entry_job(rank, num_ranks, allgather, seed, num_experts):
    rng = np.random.default_rng([seed, rank])
    num_tokens = 19 + 4 * rank
    x, _, topk_idx, topk_weights = reference.draw_inputs(rng, num_tokens, HIDDEN, TOPK, num_experts)
    x_fp8, scales, _, _ = reference.draw_inputs(rng, num_tokens, HIDDEN, TOPK, num_experts, fp8=True)
    biases = tuple(reference.f32_to_bf16(rng.standard_normal((num_tokens, HIDDEN)).astype(np.float32)) for _ in "01")
    buffer = switchyard.Buffer(allgather, backend="cpu", sharing="processes", hidden=HIDDEN, topk=TOPK,
                               num_experts=num_experts, config=switchyard.Config(timeout_seconds=20))
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts)
    handle, rows = recv.handle, recv.num_recv_tokens
    capsule = buffer.native.layout_entry()
    entry = entry_of(capsule)
    shape = shape_of(entry, handle)
    out = {"shape": ((shape.num_tokens, shape.num_recv_tokens, shape.num_worst_tokens), (num_tokens, rows, 0))}

    # Cached dispatches, bf16 and fp8 with row-major scales, against the general path's of the same inputs.
    for name, (rows_x, rows_scales) in (("bf16", (x, None)), ("fp8", (x_fp8, scales))):
        want = buffer.dispatch(rows_x, x_scales=rows_scales, handle=handle)
        outputs = cached_dispatch_outputs(rows_x, rows_scales, rows)
        status = call_cached_dispatch(entry, handle, rows_x, rows_scales, outputs)
        out[f"cached {name}"] = (status, list(zip(outputs, (want.recv_x, want.recv_x_scales))))
        if rows_scales is not None:  # DeepEP's column-major scales: their transpose, read in place
            outputs = cached_dispatch_outputs(rows_x, rows_scales, rows)
            status = call_cached_dispatch(entry, handle, rows_x, np.ascontiguousarray(rows_scales.T), outputs,
                                          x_scales_column_major=1)
            out[f"cached {name}, column-major scales"] = (status, list(zip(outputs, (want.recv_x,
                                                                                   want.recv_x_scales))))
    worst_tokens = rows + 5
    worst = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts, num_worst_tokens=worst_tokens)
    worst_shape = shape_of(entry, worst.handle)
    want = buffer.dispatch(x, handle=worst.handle, num_worst_tokens=worst_tokens)
    outputs = cached_dispatch_outputs(x, None, worst_tokens)
    status = call_cached_dispatch(entry, worst.handle, x, None, outputs, num_worst_tokens=worst_tokens)
    out["cached worst-case"] = (status, [(outputs[0][:rows], want.recv_x[:rows])])
    out["worst-case shape"] = ((worst_shape.num_tokens, worst_shape.num_worst_tokens), (num_tokens, worst_tokens))

    # Combines with and without weights and biases, against the general path's.
    y = reference.expert(recv.recv_x, recv.recv_topk_idx)
    for name, weights, (bias0, bias1) in (("plain", None, (None, None)),
                                          ("weights", recv.recv_topk_weights, (None, None)),
                                          ("weights and biases", recv.recv_topk_weights, biases),
                                          ("bias1 alone", None, (None, biases[1]))):
        want = buffer.combine(y, handle, weights, bias0=bias0, bias1=bias1)
        outputs = combine_outputs(num_tokens, weights)
        status = call_combine(entry, handle, y, weights, (bias0, bias1), outputs)
        out[f"combine {name}"] = (status, list(zip(outputs, want)))

    # Refused alike on every rank, before any peer is waited for: a Python exception naming the argument,
    # and the outputs as they were.
    cached = cached_dispatch_outputs(x_fp8, scales, rows)
    combined = combine_outputs(num_tokens, recv.recv_topk_weights)
    channels = handle.num_channels
    refusals = {
        "shape of no handle": refusal(lambda: shape_of(entry, buffer.native)),
        "cached dispatch of no handle": refusal(lambda: call_cached_dispatch(entry, object(), x_fp8, scales, cached),
                                                *cached),
        "cached dispatch of a token more": refusal(
            lambda: call_cached_dispatch(entry, handle, np.vstack([x_fp8, x_fp8[:1]]), np.vstack([scales, scales[:1]]),
                                         cached), *cached),
        "scales in no layout": refusal(
            lambda: call_cached_dispatch(entry, handle, x_fp8, scales, cached, x_scales_column_major=2), *cached),
        "cached dispatch of other channels": refusal(
            lambda: call_cached_dispatch(entry, handle, x_fp8, scales, cached, tuning=(channels + 1, 0, 0)), *cached),
        "combine of no handle": refusal(
            lambda: call_combine(entry, recv, y, recv.recv_topk_weights, biases, combined), *combined),
        "combine of a row short": refusal(
            lambda: call_combine(entry, handle, y[1:], recv.recv_topk_weights[1:], biases, combined), *combined),
    }
    allgather(b"done")  # every rank is done with its peers before any capsule (and so its heap) goes
    del entry, capsule
    return out, refusals


EXPECTED_REFUSALS = {
    "shape of no handle": "handle:",
    "cached dispatch of no handle": "handle:",
    "cached dispatch of a token more": "x:",
    "scales in no layout": "x_scales_column_major:",
    "cached dispatch of other channels": "tuning.num_channels:",
    "combine of no handle": "handle:",
    "combine of a row short": "x:",
}


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_the_entry_dispatches_cached_and_combines_as_the_general_path_bitwise_and_refuses_by_name(ranks, num_ranks):
    results = ranks(num_ranks).run(normal_entry_job, [(SEED, 8)] * num_ranks)
    for rank, (out, refusals) in enumerate(results):
        context = f"rank {rank}, seed {SEED}"
        for name in ("shape", "worst-case shape"):
            got, want = out.pop(name)
            assert got == want, f"{context}: {name}"
        for name, (status, pairs) in out.items():
            assert status == 0, f"{context}: {name}"
            for got, want in pairs:
                assert (got is None) == (want is None), f"{context}: {name}"
                if got is not None:
                    assert got.dtype == want.dtype and got.shape == want.shape, f"{context}: {name}"
                    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8),
                                                  err_msg=f"{context}: {name}")
        for name, prefix in EXPECTED_REFUSALS.items():
            message, kept = refusals[name]
            assert message.startswith(prefix), f"{context}: {name}: {message}"
            assert kept, f"{context}: {name}: a refused call wrote its outputs"


# ---- the fresh dispatch, its outputs from the caller's allocator (entry version 3) ------------------------
class Allocator:
    """The caller's side of SwitchyardDispatchCall::allocate: filled NumPy outputs of the rows it is asked for,
    kept here (the entry writes into them), and every rows it was asked for. `fail`: answers -1 instead."""

    def __init__(self, hidden, x_dtype, fp8, topk, weights, fail=False):
        self.asked, self.outputs = [], None
        self.hidden, self.x_dtype, self.fp8, self.topk, self.weights, self.fail = hidden, x_dtype, fp8, topk, weights, fail
        self.callback = ALLOCATE(self._allocate)

    def _allocate(self, _context, rows, outputs):
        self.asked.append(rows)
        if self.fail:
            return -1
        self.outputs = (filled((rows, self.hidden), self.x_dtype),
                        filled((rows, self.hidden // 128), np.float32) if self.fp8 else None,
                        filled((rows, self.topk), np.int64),
                        filled((rows, self.topk), np.float32) if self.weights else None)
        outputs.contents.recv_x, outputs.contents.recv_x_scales, outputs.contents.recv_topk_idx, \
            outputs.contents.recv_topk_weights = (address(array) for array in self.outputs)
        return 0


def call_dispatch(entry, x, scales, topk_idx, weights, num_experts, allocator, layout=None, num_worst_tokens=0,
                  x_scales_column_major=0, expert_alignment=1):
    counts = [None] * 4 if layout is None else [address(np.ascontiguousarray(part)) for part in layout]
    call = DispatchCall(address(x), DTYPE_BF16 if scales is None else DTYPE_FP8_E4M3, x_scales_column_major,
                        address(scales), x.shape[0], x.shape[1], address(topk_idx), address(weights),
                        topk_idx.shape[1], num_experts, expert_alignment, num_worst_tokens, *counts,
                        CallTuning(0, 0, 0), None, allocator.callback if allocator else ALLOCATE(), None)
    status = entry.dispatch_into(entry.buffer, ctypes.byref(call))
    return status, steal(call.handle), steal(call.num_recv_tokens_per_expert)


def fresh_dispatch_job(rank, num_ranks, allgather, seed, num_experts):
    rng = np.random.default_rng([seed, rank])
    num_tokens = 17 + 6 * rank
    x, _, topk_idx, topk_weights = reference.draw_inputs(rng, num_tokens, HIDDEN, TOPK, num_experts)
    x_fp8, scales, _, _ = reference.draw_inputs(rng, num_tokens, HIDDEN, TOPK, num_experts, fp8=True)
    buffer = switchyard.Buffer(allgather, backend="cpu", sharing="processes", hidden=HIDDEN, topk=TOPK,
                               num_experts=num_experts, config=switchyard.Config(timeout_seconds=20))
    layout = tuple(np.asarray(part) for part in buffer.get_dispatch_layout(topk_idx, num_experts))
    capsule = buffer.native.layout_entry()
    entry = entry_of(capsule)
    out = {}
    cases = (("bf16, weights, layout", x, None, topk_weights, layout, 0, 0, 1),
             ("bf16, no weights, own layout", x, None, None, None, 0, 0, 1),
             ("fp8, row-major scales, aligned", x_fp8, scales, topk_weights, layout, 0, 0, 4),
             ("fp8, column-major scales", x_fp8, np.ascontiguousarray(scales.T), topk_weights, layout, 0, 1, 1),
             ("bf16, worst case", x, None, topk_weights, layout, 3 * num_tokens * num_ranks, 0, 1))
    for name, rows_x, rows_scales, weights, given_layout, worst, column_major, alignment in cases:
        general_scales = rows_scales.T if column_major else rows_scales  # the general path reads the layout
        want = buffer.dispatch(rows_x, topk_idx, weights, num_experts=num_experts, x_scales=general_scales,
                               num_worst_tokens=worst, expert_alignment=alignment)
        allocator = Allocator(HIDDEN, rows_x.dtype, rows_scales is not None, TOPK, weights is not None)
        status, handle, counts = call_dispatch(entry, rows_x, rows_scales, topk_idx, weights, num_experts, allocator,
                                               given_layout, worst, column_major, alignment)
        rows = want.recv_x.shape[0]
        received = rows if not worst else received  # the first case has no padding rows
        # Past the received rows recv_x (and its scales) is unspecified in worst-case mode; the routing is not.
        pairs = list(zip(allocator.outputs or (), (want.recv_x, want.recv_x_scales, want.recv_topk_idx,
                                                   want.recv_topk_weights), (received, received, rows, rows)))
        pairs = [(got if got is None else got[:keep], want if want is None else want[:keep])
                 for got, want, keep in pairs]
        # The handle the entry returned routes a combine as the general path's does.
        y = reference.expert(want.recv_x, want.recv_topk_idx) if rows_scales is None else None
        combined = None if y is None else (buffer.combine(y, handle).combined_x,
                                           buffer.combine(y, want.handle).combined_x)
        out[name] = (status, allocator.asked, rows, pairs, list(counts) if counts is not None else None,
                     list(want.num_recv_tokens_per_expert), combined)
    # Refused by name before any peer is waited for: no allocator. With one rank, an allocator that fails
    # (after the count exchange, where peers would wait for this rank): switchyard.Error, nothing left behind.
    refusals = {"no allocator": refusal(lambda: call_dispatch(entry, x, None, topk_idx, topk_weights, num_experts,
                                                              None))}
    if num_ranks == 1:
        failing = Allocator(HIDDEN, x.dtype, False, TOPK, True, fail=True)
        try:
            call_dispatch(entry, x, None, topk_idx, topk_weights, num_experts, failing)
            refusals["allocator fails"] = ("no error", failing.asked)
        except switchyard.Error as error:
            refusals["allocator fails"] = (str(error), failing.asked)
    allgather(b"done")  # every rank is done with its peers before any capsule (and so its heap) goes
    del entry, capsule
    return out, refusals


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_the_entrys_fresh_dispatch_fills_the_callers_allocations_as_the_general_path_bitwise(ranks, num_ranks):
    results = ranks(num_ranks).run(fresh_dispatch_job, [(SEED, 8)] * num_ranks)
    for rank, (out, refusals) in enumerate(results):
        for name, (status, asked, rows, pairs, counts, want_counts, combined) in out.items():
            context = f"rank {rank}, seed {SEED}: {name}"
            assert status == 0, context
            assert asked == [rows], f"{context}: the allocator was asked for {asked}, expected [{rows}]"
            assert counts == want_counts, context
            for got, want in pairs:
                assert (got is None) == (want is None), context
                if got is not None:
                    assert got.dtype == np.asarray(want).dtype and got.shape == want.shape, context
                    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8),
                                                  err_msg=context)
            if combined is not None:
                np.testing.assert_array_equal(np.asarray(combined[0]), np.asarray(combined[1]), err_msg=context)
        message, _ = refusals["no allocator"]
        assert message.startswith("allocate:"), message
        if "allocator fails" in refusals:
            message, asked = refusals["allocator fails"]
            assert "allocate: the caller's allocator could not make the outputs" in message, message
            assert len(asked) == 1, asked


def last_stream_job(rank, num_ranks, allgather):
    """The stream a call ran on, as synchronize() without a stream reads it: the package's calls and the
    entry's (switchyard._torch_ops's) both set it."""
    num_experts = 4 * num_ranks
    topk_idx = np.random.default_rng([SEED, rank]).integers(-1, num_experts, size=(9, TOPK), dtype=np.int64)
    buffer = switchyard.Buffer(allgather, backend="cpu", sharing="processes", hidden=HIDDEN, topk=TOPK,
                               num_experts=num_experts, config=switchyard.Config(timeout_seconds=20))
    seen = []
    buffer.get_dispatch_layout(topk_idx, num_experts, stream=0x5150)  # the package's call
    seen.append(buffer._last_stream)
    capsule = buffer.native.layout_entry()
    entry = entry_of(capsule)
    counts = np.zeros(num_ranks + 1 + num_experts, np.int32)
    in_rank = np.zeros((topk_idx.shape[0], num_ranks), np.bool_)
    call = LayoutCall(topk_idx.ctypes.data, topk_idx.shape[0], TOPK, num_experts, 0x7e57, counts.ctypes.data,
                      in_rank.ctypes.data)
    status = entry.layout_into(entry.buffer, ctypes.byref(call))  # the entry's call, on another stream
    seen.append(buffer._last_stream)
    buffer.synchronize()  # the CPU backend's calls are complete; this only must not fail
    allgather(b"done")
    del entry, capsule
    buffer.destroy()
    return status, seen


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_the_entrys_calls_set_the_stream_synchronize_waits_for(ranks, num_ranks):
    for rank, (status, seen) in enumerate(ranks(num_ranks).run(last_stream_job)):
        assert status == 0
        assert seen == [0x5150, 0x7e57], f"rank {rank}: last streams {seen}"


def test_the_c_module_names_the_entry_version_it_makes():
    assert switchyard._C.LAYOUT_ENTRY_VERSION == ENTRY_VERSION


def test_deep_ep_leaves_a_torch_ops_module_of_another_entry_version_alone(monkeypatch):
    """A switchyard._torch_ops left from an older build (another entry version) is not used: deep_ep's calls
    take the general path instead of failing in the module."""
    from switchyard import deep_ep

    fake_torch = type(sys)("torch")
    fake_torch.__version__ = "9.9.9"
    monkeypatch.setattr(deep_ep, "_torch", lambda: fake_torch)
    for entry_version, usable in ((ENTRY_VERSION - 1, False), (None, False), (ENTRY_VERSION, True)):
        ops = type(sys)("switchyard._torch_ops")
        ops.TORCH_VERSION = "9.9.9"
        if entry_version is not None:
            ops.ENTRY_VERSION = entry_version
        monkeypatch.setitem(sys.modules, "switchyard._torch_ops", ops)
        monkeypatch.setattr(switchyard, "_torch_ops", ops, raising=False)
        monkeypatch.setattr(deep_ep, "_torch_ops_module", deep_ep._TORCH_OPS_UNSET)
        assert (deep_ep._torch_ops() is ops) == usable, f"entry version {entry_version}"
