"""The symmetric engine's heap-resident tensors from Python (Buffer.symmetric_input,
Buffer.symmetric_expert_output), CPU backend, ranks as processes: a dispatch from the heap input and a
pull combine from the heap output give the bits of the ordinary calls, the arrays are views of the heap
(writes land there), and a pull combine across processes with expert outputs elsewhere is refused by name."""
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
