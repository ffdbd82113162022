"""switchyard.Buffer's transport options on the CPU backend: the loopback transport's delays set per Buffer
(ranks as processes on two 'nodes': the outputs are the bits of the undelayed run, and the calls are slower),
and the misuses refused by name."""
import time

import numpy as np
import pytest

import reference
import switchyard

HIDDEN, TOPK, MAX_TOKENS, EXPERTS = 128, 2, 8, 4
DELAY_US = 100000  # a call waits for the last of its puts, each delayed by up to this


def transport_job(rank, num_ranks, allgather, delay_us):
    rng = np.random.default_rng([3, rank])
    x, _, topk_idx, _ = reference.draw_inputs(rng, 6, HIDDEN, TOPK, EXPERTS)
    topk_weights = np.full(topk_idx.shape, 0.5, np.float32)
    buffer = switchyard.Buffer(allgather, backend="cpu", sharing="processes", ranks_per_node=1,
                               config=switchyard.Config(timeout_seconds=20), max_tokens_per_rank=1, hidden=HIDDEN,
                               topk=TOPK, num_experts=EXPERTS, low_latency_max_tokens_per_rank=MAX_TOKENS,
                               loopback_max_delay_us=delay_us, loopback_seed=5)
    start = time.perf_counter()
    recv = buffer.low_latency_dispatch(x, topk_idx, MAX_TOKENS, EXPERTS)
    seconds = time.perf_counter() - start
    counts = recv.recv_count.copy()
    rows = [recv.recv_x[l, :int(counts[l])].copy() for l in range(recv.recv_x.shape[0])]
    out = buffer.low_latency_combine(recv.recv_x, topk_idx, topk_weights, recv.handle).combined_x.copy()
    buffer.destroy()
    return dict(seconds=seconds, rows=rows, combined=out)


def test_loopback_delays_from_the_buffer_keep_the_bits(ranks):
    prompt = ranks(2).run(transport_job, [(0,)] * 2)
    delayed = ranks(2).run(transport_job, [(DELAY_US,)] * 2)
    for fast, slow in zip(prompt, delayed):
        assert slow["seconds"] >= 0.05, "the Buffer's loopback delays were not applied"
        for a, b in zip(fast["rows"], slow["rows"]):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(fast["combined"], slow["combined"])


def one_rank_buffer(**transport):
    return switchyard.Buffer(lambda mine: [mine], backend="cpu", sharing="threads", max_tokens_per_rank=1,
                             hidden=HIDDEN, topk=TOPK, num_experts=EXPERTS, **transport)


def test_misuses_are_refused_by_name():
    with pytest.raises(switchyard.InvalidArgument, match="^transport: expected 'loopback' or 'nccl_gin'"):
        one_rank_buffer(transport="rdma")
    with pytest.raises(switchyard.InvalidArgument, match="^transport.loopback_max_delay_us: expected 0..1000000"):
        one_rank_buffer(loopback_max_delay_us=1000001)
    with pytest.raises(switchyard.InvalidArgument, match="^transport.nccl_comm: expected the caller's ncclComm_t"):
        one_rank_buffer(transport="nccl_gin")
    with pytest.raises(switchyard.Unsupported, match="^transport.kind: nccl_gin needs the CUDA backend"):
        one_rank_buffer(transport="nccl_gin", nccl_comm=0x1000)
    # Wrong Python types and ranges name the argument (never a bare TypeError from the binding).
    with pytest.raises(switchyard.InvalidArgument, match="^loopback_max_delay_us: expected 0..4294967295, got -1"):
        one_rank_buffer(loopback_max_delay_us=-1)
    with pytest.raises(switchyard.InvalidArgument, match="^loopback_seed: expected None or a non-negative integer"):
        one_rank_buffer(loopback_seed=1.5)
    with pytest.raises(switchyard.InvalidArgument, match="^nccl_comm: expected 0..18446744073709551615"):
        one_rank_buffer(transport="nccl_gin", nccl_comm=1 << 64)
    with pytest.raises(switchyard.InvalidArgument, match="^transport: expected 'loopback' or 'nccl_gin', got int"):
        one_rank_buffer(transport=3)
