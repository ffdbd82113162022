"""The normal engine's heap-resident inputs from Python (Buffer.normal_input, Buffer.normal_combine_input;
docs/normal-in-place.md), CPU backend, ranks as processes: a dispatch whose x (bf16, and fp8 with its scales)
is written into the heap input, a cached dispatch of it without topk_idx, and a combine whose expert outputs and
weights are written into the heap combine input give the bits of the same calls on an ordinary Buffer, and so do
the same calls with the arrays passed as they are, which the Buffer copies into its heap inputs first (staged); the
arrays are views of the heap (writes land there); an x overlapping its view without being it is refused by name, as
are views the sizing cannot hold."""
import numpy as np
import pytest

import reference
import switchyard

HIDDEN, TOPK, MAX_TOKENS, EXPERTS_PER_RANK = 256, 3, 12, 4
SEED = 29


def rank_inputs(rank, num_experts):
    rng = np.random.default_rng([SEED, rank])
    num_tokens = 7 + 4 * (rank % 2)
    x, _, topk_idx, topk_weights = reference.draw_inputs(rng, num_tokens, HIDDEN, TOPK, num_experts)
    x_fp8, scales, _, _ = reference.draw_inputs(rng, num_tokens, HIDDEN, TOPK, num_experts, fp8=True)
    return x, x_fp8, scales, topk_idx, topk_weights


def make_buffer(allgather, num_ranks, in_heap):
    heap = dict(normal_heap_input_tokens=MAX_TOKENS, normal_heap_combine_rows=num_ranks * MAX_TOKENS) if in_heap else {}
    return switchyard.Buffer(allgather, backend="cpu", sharing="processes",
                             config=switchyard.Config(timeout_seconds=20), max_tokens_per_rank=MAX_TOKENS,
                             hidden=HIDDEN, topk=TOPK, num_experts=EXPERTS_PER_RANK * num_ranks, **heap)


def expert_output(recv):
    """bf16 expert outputs for the received rows: the reference's stand-in expert, on the rows' bits (fp8 rows'
    bytes widened to bf16 bit patterns)."""
    rows = np.asarray(recv.recv_x)
    bits = rows if rows.dtype == np.uint16 else rows.view(np.uint8).astype(np.uint16)
    return reference.expert(bits, np.asarray(recv.recv_topk_idx))


def round_trip(buffer, x, scales, topk_idx, topk_weights, num_experts, in_heap, staged=False):
    """dispatch -> the reference's synthetic expert -> combine; the outputs, copied. in_heap: the inputs written
    into the heap views, or with `staged` passed as they are for the Buffer to copy there."""
    if in_heap and not staged:
        heap_x, heap_scales = buffer.normal_input(x.shape[0], HIDDEN, fp8=scales is not None)
        assert heap_x.shape == x.shape and heap_x.dtype == x.dtype
        heap_x[:] = x
        if scales is not None:
            heap_scales[:] = scales
        x, scales = heap_x, heap_scales
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts, x_scales=scales)
    y = expert_output(recv)
    weights = recv.recv_topk_weights
    if in_heap and not staged:
        heap_y, heap_weights = buffer.normal_combine_input(recv.handle, HIDDEN)
        assert heap_y.shape == y.shape and heap_weights.shape == weights.shape
        heap_y[:] = y
        heap_weights[:] = weights
        y, weights = heap_y, heap_weights
    combined = buffer.combine(y, recv.handle, weights)
    # DeepEP's cached dispatch (the handle, no topk_idx): in the heap, pulled without rings.
    cached = buffer.dispatch(x, handle=recv.handle, x_scales=scales)
    return {"recv_x": np.array(recv.recv_x), "recv_x_scales": None if scales is None else np.array(recv.recv_x_scales),
            "cached_recv_x": np.array(cached.recv_x),
            "cached_recv_x_scales": None if scales is None else np.array(cached.recv_x_scales),
            "recv_topk_idx": np.array(recv.recv_topk_idx), "recv_topk_weights": np.array(recv.recv_topk_weights),
            "combined_x": np.array(combined.combined_x),
            "combined_topk_weights": np.array(combined.combined_topk_weights)}


def heap_job(rank, num_ranks, allgather):
    num_experts = EXPERTS_PER_RANK * num_ranks
    x, x_fp8, scales, topk_idx, topk_weights = rank_inputs(rank, num_experts)
    results = {}
    for in_heap in (False, True):
        buffer = make_buffer(allgather, num_ranks, in_heap)
        for name, (rows, row_scales) in (("bf16", (x, None)), ("fp8", (x_fp8, scales))):
            results[(name, in_heap)] = round_trip(buffer, rows, row_scales, topk_idx, topk_weights, num_experts,
                                                  in_heap)
        if in_heap:
            # The arrays as they are: staged into the heap inputs by the Buffer.
            for name, (rows, row_scales) in (("bf16", (x, None)), ("fp8", (x_fp8, scales))):
                results[(name, "staged")] = round_trip(buffer, rows, row_scales, topk_idx, topk_weights,
                                                       num_experts, True, staged=True)
            # Overlapping a view without being it (the view's rows from the second on): refused by name before
            # anything is written or waited for.
            with pytest.raises(switchyard.InvalidArgument, match="^num_tokens: expected 0..12"):
                buffer.normal_input(MAX_TOKENS + 1, HIDDEN)
            heap_x, _ = buffer.normal_input(x.shape[0] + 1, HIDDEN)
            heap_x[1:] = x
            with pytest.raises(switchyard.InvalidArgument,
                               match="^x: expected Buffer::normal_input's view or a tensor apart from it"):
                buffer.dispatch(heap_x[1:], topk_idx, topk_weights, num_experts=num_experts)
            # Every rank refused the same call, so the Buffer is still in step: one more round trip.
            results["after refusals"] = round_trip(buffer, x, None, topk_idx, topk_weights, num_experts, True)
        buffer.destroy()
    return results


@pytest.mark.parametrize("num_ranks", [1, 3])
def test_heap_inputs_give_the_ordinary_calls_bits(ranks, num_ranks):
    results = ranks(num_ranks).run(heap_job)
    for rank, result in enumerate(results):
        for name in ("bf16", "fp8"):
            plain, heap = result[(name, False)], result[(name, True)]
            for output, value in plain.items():
                if value is None:
                    assert heap[output] is None, f"rank {rank} {name} {output}"
                    continue
                np.testing.assert_array_equal(heap[output], value, err_msg=f"rank {rank} {name} {output}")
                np.testing.assert_array_equal(result[(name, "staged")][output], value,
                                              err_msg=f"rank {rank} {name} staged {output}")
        for output, value in result[("bf16", False)].items():
            if value is not None:
                np.testing.assert_array_equal(result["after refusals"][output], value,
                                              err_msg=f"rank {rank} after refusals {output}")
