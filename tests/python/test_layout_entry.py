"""The C entry behind switchyard._torch_ops (python/src/layout_entry.h), called here through ctypes on the
CPU backend: its fields, its outputs bitwise against get_dispatch_layout, its refusals (a Python exception,
nothing written), and the Buffer it keeps alive. _torch_ops itself needs torch and a GPU
(test_cuda_tensors.py); this checks the half of the contract that _C keeps, in CI."""
import ctypes
import sys

import numpy as np
import pytest

import switchyard

HIDDEN, TOPK, SEED = 256, 3, 11
ENTRY_NAME = b"switchyard._C.layout_entry"


class LayoutCall(ctypes.Structure):
    _fields_ = [("topk_idx", ctypes.c_void_p), ("num_tokens", ctypes.c_int64), ("topk", ctypes.c_int64),
                ("num_experts", ctypes.c_int64), ("stream", ctypes.c_void_p), ("counts", ctypes.c_void_p),
                ("is_token_in_rank", ctypes.c_void_p)]


# PYFUNCTYPE: called with the GIL held, and a set Python exception is raised when the call returns.
LAYOUT_INTO = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(LayoutCall))


class LayoutEntry(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("cuda", ctypes.c_int32), ("device", ctypes.c_int32),
                ("num_ranks", ctypes.c_int32), ("num_nodes", ctypes.c_int32), ("max_num_experts", ctypes.c_int32),
                ("buffer", ctypes.c_void_p), ("layout_into", LAYOUT_INTO)]


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
        assert fields == (1, 0, num_ranks, 1, 1 << 16), f"rank {rank}: entry fields {fields}"
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
