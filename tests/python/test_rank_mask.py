"""Rank masks through Python (switchyard.Buffer.update_mask / query_mask / clean_mask, and deep_ep's
low_latency_*_mask_buffer with enable_shrink), CPU backend, ranks as processes: with rank 2 masked and
silent, the survivors' outputs equal those of an unmasked run on the survivors' routing (rank 2 sends
nothing, slots routed to its experts are -1), bit for bit."""
import numpy as np
import pytest

import reference
import switchyard
from switchyard import deep_ep
from test_low_latency import HIDDEN, MAX_TOKENS, TOPK, outputs, rank_inputs

NUM_RANKS, NUM_EXPERTS, MASKED = 3, 12, 2


def survivors_routing(rank, topk_idx):
    local = NUM_EXPERTS // NUM_RANKS
    if rank == MASKED:
        return np.full_like(topk_idx, -1)
    return np.where((topk_idx >= 0) & (topk_idx // local == MASKED), -1, topk_idx)


def make_buffer(allgather):
    config = switchyard.Config(timeout_seconds=20)
    return switchyard.Buffer(allgather, backend="cpu", sharing="processes", config=config, max_tokens_per_rank=32,
                             hidden=HIDDEN, topk=TOPK, num_experts=NUM_EXPERTS,
                             low_latency_max_tokens_per_rank=MAX_TOKENS, symmetric_max_tokens_per_rank=MAX_TOKENS)


def round_trip(buffer, engine, x, topk_idx, topk_weights):
    recv = getattr(buffer, f"{engine}_dispatch")(x, topk_idx, MAX_TOKENS, NUM_EXPERTS)
    y = reference.expert_major_experts(recv.recv_x, recv.recv_count)
    out = getattr(buffer, f"{engine}_combine")(y, topk_idx, topk_weights, recv.handle)
    return dict(outputs(recv), combined=out.combined_x.copy())


def mask_job(rank, num_ranks, allgather, engine):
    x, topk_idx, topk_weights = rank_inputs(rank, NUM_EXPERTS)
    buffer = make_buffer(allgather)
    # Every rank takes part, on the survivors' routing.
    expected = round_trip(buffer, engine, x, survivors_routing(rank, topk_idx), topk_weights)
    got = None
    if rank != MASKED:  # rank 2 is silent from here on; the survivors mask it and keep its routing
        buffer.update_mask(MASKED, True)
        assert list(buffer.query_mask()) == [0, 0, 1]
        got = round_trip(buffer, engine, x, topk_idx, topk_weights)
        with pytest.raises(switchyard.Unsupported, match="update_mask has masked rank 2"):
            buffer.dispatch(x, topk_idx, topk_weights, num_experts=NUM_EXPERTS)
    with pytest.raises(switchyard.InvalidArgument, match=r"update_mask: rank: expected 0..2, got 3"):
        buffer.update_mask(3, True)
    buffer.destroy()
    return expected, got


@pytest.mark.parametrize("engine", ["low_latency", "symmetric"])
def test_survivors_match_an_unmasked_run_on_their_routing(ranks, engine):
    results = ranks(NUM_RANKS).run(mask_job, [(engine,)] * NUM_RANKS)
    for rank, (expected, got) in enumerate(results):
        if rank == MASKED:
            continue
        for name in ("recv_count", "layout_range", "src_info", "combined"):
            np.testing.assert_array_equal(got[name], expected[name], err_msg=f"rank {rank} {name}")
        for l, count in enumerate(expected["recv_count"]):
            np.testing.assert_array_equal(got["recv_x"][l, :count], expected["recv_x"][l, :count])


def deep_ep_job(rank, num_ranks, allgather):
    buffer = deep_ep.Buffer(allgather, low_latency_mode=True, enable_shrink=True, backend="cpu")
    assert buffer.switchyard_buffer.config.mask_ranks_on_timeout
    status = np.zeros(num_ranks, dtype=np.int32)
    buffer.low_latency_update_mask_buffer(1, True)
    buffer.low_latency_query_mask_buffer(status)
    seen = status.copy()
    buffer.low_latency_clean_mask_buffer()
    buffer.low_latency_query_mask_buffer(status)
    with pytest.raises(switchyard.InvalidArgument, match="rank_to_mask"):
        buffer.low_latency_update_mask_buffer(num_ranks, True)
    buffer.destroy()
    return seen, status.copy()


def test_deep_ep_mask_buffer_calls(ranks):
    for seen, cleaned in ranks(2).run(deep_ep_job):
        assert list(seen) == [0, 1] and list(cleaned) == [0, 0]


def test_deep_ep_mask_calls_need_enable_shrink():
    buffer = deep_ep.Buffer(lambda mine: [mine], low_latency_mode=True, backend="cpu")
    with pytest.raises(switchyard.InvalidArgument, match="enable_shrink"):
        buffer.low_latency_update_mask_buffer(0, True)
