"""The symmetric engine's heap-resident tensors from Python (Buffer.symmetric_input,
Buffer.symmetric_expert_output, Buffer.symmetric_receive), CPU backend, ranks as processes: a dispatch from
the heap input and a pull combine from the heap output give the bits of the ordinary calls, the arrays are
views of the heap (writes land there), a pull combine across processes with expert outputs elsewhere is
refused by name, and an fp8 dispatch into the heap receive area (a bf16 dispatch into a bf16 area) gives the
bits of the same dispatch into ordinary outputs; bad receive views and areas are refused by name."""
import numpy as np
import pytest

import reference
import switchyard

HIDDEN, TOPK, MAX_TOKENS, EXPERTS_PER_RANK = 128, 2, 8, 4
SEED = 11


def rank_inputs(rank, num_experts):
    rng = np.random.default_rng([SEED, rank])
    x, _, topk_idx, _ = reference.draw_inputs(rng, 5 + 3 * (rank % 2), HIDDEN, TOPK, num_experts)
    topk_weights = (2.0 ** rng.integers(-3, 3, size=topk_idx.shape)).astype(np.float32)
    return x, topk_idx, topk_weights


def received_rows(recv):
    """The rows dispatch defines: those below each expert's recv_count (the rest are unspecified)."""
    return [recv.recv_x[l, :int(recv.recv_count[l])].copy() for l in range(recv.recv_x.shape[0])]


def make_buffer(allgather, num_ranks, combine):
    config = switchyard.Config(timeout_seconds=20)
    config.symmetric_combine = combine
    return switchyard.Buffer(allgather, backend="cpu", sharing="processes", config=config, max_tokens_per_rank=1,
                             hidden=HIDDEN, topk=TOPK, num_experts=EXPERTS_PER_RANK * num_ranks,
                             symmetric_max_tokens_per_rank=MAX_TOKENS, symmetric_heap_input=True,
                             symmetric_heap_output_rows_per_expert=num_ranks * MAX_TOKENS)


def heap_job(rank, num_ranks, allgather):
    num_experts = EXPERTS_PER_RANK * num_ranks
    x, topk_idx, topk_weights = rank_inputs(rank, num_experts)
    results = {}
    # The ordinary calls (publish + push, as auto picks across processes) against the heap ones.
    plain = make_buffer(allgather, num_ranks, "auto")
    assert plain.symmetric_combine_path == "push" and plain.symmetric_dispatch_path == "publish"
    recv = plain.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts)
    y = reference.expert_major_experts(recv.recv_x, recv.recv_count)
    results["plain_recv_x"] = received_rows(recv)
    results["plain"] = plain.symmetric_combine(y, topk_idx, topk_weights, recv.handle).combined_x.copy()
    plain.destroy()

    buffer = make_buffer(allgather, num_ranks, "pull")
    assert buffer.symmetric_combine_path == "pull"
    heap_x = buffer.symmetric_input(x.shape[0], HIDDEN)
    assert heap_x.shape == x.shape and heap_x.dtype == np.uint16
    heap_x[:] = x
    recv = buffer.symmetric_dispatch(heap_x, topk_idx, MAX_TOKENS, num_experts)
    results["heap_recv_x"] = received_rows(recv)
    heap_y = buffer.symmetric_expert_output(recv.handle)
    assert heap_y.shape == recv.recv_x.shape
    heap_y[:] = reference.expert_major_experts(recv.recv_x, recv.recv_count)
    # The pull combine reaches only heap-resident outputs across processes: a copy elsewhere is refused.
    with pytest.raises(switchyard.InvalidArgument, match="^x: .*symmetric_expert_output"):
        buffer.symmetric_combine(heap_y.copy(), topk_idx, topk_weights, recv.handle)
    results["heap"] = buffer.symmetric_combine(heap_y, topk_idx, topk_weights, recv.handle).combined_x.copy()
    with pytest.raises(switchyard.InvalidArgument, match="^num_tokens: expected 0..8"):
        buffer.symmetric_input(MAX_TOKENS + 1, HIDDEN)
    buffer.destroy()
    return results


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_heap_tensors_give_the_ordinary_calls_bits(ranks, num_ranks):
    results = ranks(num_ranks).run(heap_job)
    for result in results:
        assert len(result["heap_recv_x"]) == len(result["plain_recv_x"])
        for heap_rows, plain_rows in zip(result["heap_recv_x"], result["plain_recv_x"]):
            np.testing.assert_array_equal(heap_rows, plain_rows)
        np.testing.assert_array_equal(result["heap"], result["plain"])


def test_sizing_without_a_region_is_refused_by_name():
    with pytest.raises(switchyard.InvalidArgument, match="symmetric_max_tokens_per_rank > 0"):
        switchyard.Buffer(lambda mine: [mine], backend="cpu", sharing="threads", max_tokens_per_rank=1, hidden=HIDDEN,
                          topk=TOPK, num_experts=4, symmetric_heap_input=True)


def received_fp8(recv):
    """recv_x and its scales on the rows dispatch defines (below each expert's recv_count), and the routing."""
    counts = [int(count) for count in recv.recv_count]
    return dict(recv_x=[recv.recv_x[l, :n].copy() for l, n in enumerate(counts)],
                recv_x_scales=[recv.recv_x_scales[l, :n].copy() for l, n in enumerate(counts)],
                recv_count=recv.recv_count.copy(), layout_range=recv.layout_range.copy(),
                src_info=recv.src_info.copy())


def make_receive_buffer(allgather, num_ranks, receive_rows, sharing="processes", dtype="fp8_e4m3"):
    return switchyard.Buffer(allgather, backend="cpu", sharing=sharing, config=switchyard.Config(timeout_seconds=20),
                             max_tokens_per_rank=1, hidden=HIDDEN, topk=TOPK, num_experts=EXPERTS_PER_RANK * num_ranks,
                             symmetric_max_tokens_per_rank=MAX_TOKENS,
                             symmetric_heap_receive_rows_per_expert=receive_rows, symmetric_heap_receive_dtype=dtype)


def receive_job(rank, num_ranks, allgather):
    num_experts = EXPERTS_PER_RANK * num_ranks
    x, topk_idx, _ = rank_inputs(rank, num_experts)
    rows = num_ranks * MAX_TOKENS
    buffer = make_receive_buffer(allgather, num_ranks, rows)
    results = {}
    # The full capacity (0: R * max), and one row less (no expert receives that many here).
    for capacity in (0, rows - 1):
        plain = buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts, use_fp8=True, expert_capacity=capacity)
        recv_x, recv_x_scales = buffer.symmetric_receive(capacity)
        capacity_rows = capacity or rows
        assert recv_x.shape == (EXPERTS_PER_RANK, capacity_rows, HIDDEN) and recv_x.dtype == np.uint8
        assert recv_x_scales.shape == (EXPERTS_PER_RANK, capacity_rows, HIDDEN // 128)
        assert recv_x_scales.dtype == np.float32
        # Views of the heap: writes land there, and another call's arrays share them.
        recv_x[:] = 0xA5
        recv_x_scales.view(np.uint8)[:] = 0xA5
        again_x, again_scales = buffer.symmetric_receive(capacity)
        assert np.shares_memory(recv_x, again_x) and np.shares_memory(recv_x_scales, again_scales)
        assert (again_x == 0xA5).all()
        recv = buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts, use_fp8=True, expert_capacity=capacity,
                                         out_recv_x=recv_x, out_recv_x_scales=recv_x_scales)
        assert recv.recv_x is recv_x and recv.recv_x_scales is recv_x_scales
        results[capacity] = dict(plain=received_fp8(plain), heap=received_fp8(recv))
    buffer.destroy()
    return results


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_fp8_dispatch_into_the_receive_views_gives_the_ordinary_bits(ranks, num_ranks):
    results = ranks(num_ranks).run(receive_job)
    for result in results:
        for capacity, both in result.items():
            plain, heap = both["plain"], both["heap"]
            for name in ("recv_count", "layout_range", "src_info"):
                np.testing.assert_array_equal(heap[name], plain[name], err_msg=f"{name}, capacity {capacity}")
            assert sum(len(rows) for rows in plain["recv_x"]) > 0
            for name in ("recv_x", "recv_x_scales"):
                assert len(heap[name]) == len(plain[name])
                for heap_rows, plain_rows in zip(heap[name], plain[name]):
                    np.testing.assert_array_equal(heap_rows, plain_rows, err_msg=f"{name}, capacity {capacity}")


def bf16_receive_job(rank, num_ranks, allgather):
    num_experts = EXPERTS_PER_RANK * num_ranks
    x, topk_idx, _ = rank_inputs(rank, num_experts)
    rows = num_ranks * MAX_TOKENS
    buffer = make_receive_buffer(allgather, num_ranks, rows, dtype="bf16")
    plain = buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts)
    recv_x, recv_x_scales = buffer.symmetric_receive(0)
    assert recv_x.shape == (EXPERTS_PER_RANK, rows, HIDDEN) and recv_x_scales is None
    assert recv_x.dtype == plain.recv_x.dtype
    recv_x.view(np.uint8)[:] = 0xA5
    recv = buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts, out_recv_x=recv_x)
    assert recv.recv_x is recv_x
    result = dict(plain=received_rows(plain), heap=received_rows(recv),
                  routing=[(a.copy(), b.copy()) for a, b in ((plain.src_info, recv.src_info),
                                                              (plain.recv_count, recv.recv_count))])
    buffer.destroy()
    return result


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_bf16_dispatch_into_a_bf16_receive_area_gives_the_ordinary_bits(ranks, num_ranks):
    for result in ranks(num_ranks).run(bf16_receive_job):
        assert sum(len(rows) for rows in result["plain"]) > 0
        for heap_rows, plain_rows in zip(result["heap"], result["plain"]):
            np.testing.assert_array_equal(heap_rows.view(np.uint16), plain_rows.view(np.uint16))
        for plain, heap in result["routing"]:
            np.testing.assert_array_equal(heap, plain)


def test_a_receive_area_of_another_dtype_is_refused_by_name():
    with pytest.raises(switchyard.InvalidArgument,
                       match="^symmetric_heap_receive_dtype: expected 'fp8_e4m3' or 'bf16', got 'f32'"):
        make_receive_buffer(lambda mine: [mine], 1, 4, sharing="threads", dtype="f32")
    sizing = switchyard._C.BufferSizing(symmetric_heap_receive_dtype="bf16")
    assert sizing.symmetric_heap_receive_dtype == "bf16"


def test_receive_views_are_refused_by_name():
    num_ranks, rows = 1, 6  # R * max = 8 rows per local expert; the area holds 6
    without = make_receive_buffer(lambda mine: [mine], num_ranks, 0, sharing="threads")
    with pytest.raises(switchyard.InvalidArgument, match="^symmetric_receive: expected a buffer sized with "
                                                         "BufferSizing::symmetric_heap_receive_rows_per_expert > 0"):
        without.symmetric_receive(0)
    without.destroy()
    buffer = make_receive_buffer(lambda mine: [mine], num_ranks, rows, sharing="threads")
    with pytest.raises(switchyard.InvalidArgument,
                       match=r"^expert_capacity: expected 0 \(num_ranks \* sizing.symmetric_max_tokens_per_rank = 8 "
                             r"rows per local expert\) or 1..8, got -1"):
        buffer.symmetric_receive(-1)
    for capacity, got in ((7, "7"), (0, r"0 \(8 rows\)")):
        with pytest.raises(switchyard.InvalidArgument,
                           match=r"^expert_capacity: expected at most 6 rows per local expert "
                                 r"\(sizing.symmetric_heap_receive_rows_per_expert\), got " + got):
            buffer.symmetric_receive(capacity)
    for hidden in (64, 2 * HIDDEN, -128):
        with pytest.raises(switchyard.InvalidArgument,
                           match=rf"^hidden: expected a multiple of 128 .* in 1..{HIDDEN} \(sizing.hidden\), "
                                 rf"or 0 for sizing.hidden, got {hidden}"):
            buffer.symmetric_receive(rows, hidden)
    recv_x, recv_x_scales = buffer.symmetric_receive(rows, HIDDEN)
    assert recv_x.shape == (EXPERTS_PER_RANK, rows, HIDDEN) and recv_x_scales.shape == (EXPERTS_PER_RANK, rows, 1)
    buffer.destroy()
