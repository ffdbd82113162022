"""switchyard.deep_ep's low-latency handle is DeepEP's tuple, with layout_range int64 [L, R] packed as
DeepEP's kernels pack it ((begin << 32) | count), filled only once the receive half has run: the
regression test for the 0xF8F8F8F8 counts (issue 19). CPU backend, ranks as processes."""
import numpy as np
import pytest

import reference
from switchyard import deep_ep

HIDDEN, TOPK, NUM_EXPERTS, MAX_TOKENS = 256, 3, 8, 16
SEED = 23
LOW_WORD = (1 << 32) - 1
POISON = np.array([0xF8F8F8F8], np.uint32).view(np.int32)[0]  # what the shim once read as every count


def rank_inputs(rank):
    rng = np.random.default_rng([SEED, rank])
    x, _, topk_idx, _ = reference.draw_inputs(rng, 7 + 3 * rank, HIDDEN, TOPK, NUM_EXPERTS)
    return x, topk_idx


def expected_layout(num_ranks, rank):
    """(begin, count) per (local expert, source rank): rows by source rank ascending."""
    local_experts = NUM_EXPERTS // num_ranks
    counts = np.zeros((local_experts, num_ranks), np.int64)
    for source in range(num_ranks):
        topk_idx = rank_inputs(source)[1]
        for local in range(local_experts):
            counts[local, source] = (topk_idx == rank * local_experts + local).sum()
    begins = np.cumsum(counts, axis=1) - counts
    return begins, counts


def poison_before_receive(buffer):
    """Makes the native dispatch's layout_range hold 0xF8F8F8F8 until its receive half runs: whatever
    reads it before the hook reads the poison, as stale allocator memory was read on the GPU."""
    native = buffer._low_latency_buffer
    real = native.low_latency_dispatch

    def dispatch(*args, **kwargs):
        result = real(*args, **kwargs)
        if result.hook is not None:
            result.layout_range[...] = POISON
        return result

    native.low_latency_dispatch = dispatch


def handle_job(rank, num_ranks, allgather):
    x, topk_idx = rank_inputs(rank)
    buffer = deep_ep.Buffer(allgather, low_latency_mode=True, backend="cpu", timeout_seconds=20)
    seen = {}
    # The first call creates the low-latency region (and the native buffer that the poison wraps).
    _, counts, handle, _, hook = buffer.low_latency_dispatch(x, topk_idx, MAX_TOKENS, NUM_EXPERTS, use_fp8=False)
    assert hook is None
    seen["plain"] = (np.array(handle[1]), np.array(counts), handle[2:], np.array(handle[0]))
    poison_before_receive(buffer)
    for round_trip in range(3):  # the same handle entries, call after call, each after its hook
        _, counts, handle, _, hook = buffer.low_latency_dispatch(x, topk_idx, MAX_TOKENS, NUM_EXPERTS,
                                                                 use_fp8=True, round_scale=True,
                                                                 return_recv_hook=True)
        # Every other round the entries are taken before the hook, as a caller that unpacks the tuple at
        # once does: the arrays handed out then are filled when the hook receives.
        early = tuple(handle) if round_trip % 2 else None
        hook()
        entries = early if early is not None else tuple(handle)
        seen[f"hooked {round_trip}"] = (np.array(entries[1]), np.array(counts), entries[2:], np.array(entries[0]))
    # The tuple goes back into combine.
    weights = np.ones(topk_idx.shape, np.float32)
    y = np.zeros((NUM_EXPERTS // num_ranks, num_ranks * MAX_TOKENS, HIDDEN), np.uint16)
    combined, _, _ = buffer.low_latency_combine(y, topk_idx, weights, handle)
    buffer.destroy()
    return seen, combined.shape, isinstance(handle, tuple)


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_low_latency_handle_packs_layout_range_as_deepep_after_the_receive(ranks, num_ranks):
    for rank, (seen, combined_shape, is_tuple) in enumerate(ranks(num_ranks).run(handle_job)):
        begins, counts = expected_layout(num_ranks, rank)
        x, _ = rank_inputs(rank)
        assert is_tuple and combined_shape == x.shape
        for call, (layout_range, recv_count, scalars, src_info) in seen.items():
            context = f"seed {SEED}, rank {rank} of {num_ranks}, {call}"
            assert layout_range.dtype == np.int64, context
            assert layout_range.shape == (NUM_EXPERTS // num_ranks, num_ranks), context
            assert scalars == (MAX_TOKENS, HIDDEN, NUM_EXPERTS), context
            assert src_info.shape == (NUM_EXPERTS // num_ranks, num_ranks * MAX_TOKENS), context
            assert not (layout_range & LOW_WORD == 0xF8F8F8F8).any(), context
            # DeepEP's test_low_latency reads them so: count = low word, begin = high word.
            np.testing.assert_array_equal(layout_range & LOW_WORD, counts, err_msg=context)
            np.testing.assert_array_equal(layout_range >> 32, begins, err_msg=context)
            np.testing.assert_array_equal((layout_range & LOW_WORD).sum(axis=1), recv_count, err_msg=context)


def test_pack_layout_range_is_begin_high_count_low():
    from switchyard._deep_ep_handles import pack_layout_range
    native = np.array([[[0, 5], [5, 0], [5, 2]], [[3, 1], [0x7FFFFFFF, 7], [1, 0x7FFFFFFF]]], np.int32)
    packed = pack_layout_range(native)
    assert packed.dtype == np.int64 and packed.shape == (2, 3)
    assert packed[0, 0] == 5 and packed[0, 2] == (5 << 32) | 2 and packed[1, 1] == (0x7FFFFFFF << 32) | 7
    out = np.zeros((2, 3), np.int64)
    assert pack_layout_range(native, out=out) is out
    np.testing.assert_array_equal(out, packed)
