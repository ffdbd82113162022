"""switchyard.deep_ep.Buffer used the way frameworks use DeepEP's deep_ep.Buffer, on the CPU
backend with ranks as processes, compared bitwise with the NumPy reference."""
import gc
import os

import numpy as np
import pytest

import reference
import switchyard
from switchyard import deep_ep

HIDDEN, TOPK = 256, 3
SEED = 11


def rank_inputs(rank, num_experts, fp8=False):
    rng = np.random.default_rng([SEED, rank])
    return reference.draw_inputs(rng, 23 + 5 * rank, HIDDEN, TOPK, num_experts, fp8=fp8)


def make_buffer(allgather, num_ranks, num_experts):
    hint = dict(topk=TOPK, num_experts=num_experts)
    num_nvl_bytes = deep_ep.Config().get_nvl_buffer_size_hint(HIDDEN * 2, num_ranks, **hint)
    num_rdma_bytes = deep_ep.Config().get_rdma_buffer_size_hint(HIDDEN * 2, num_ranks, **hint)
    return deep_ep.Buffer(allgather, num_nvl_bytes=num_nvl_bytes, num_rdma_bytes=num_rdma_bytes, backend="cpu",
                          timeout_seconds=20)


def framework_round_trip_job(rank, num_ranks, allgather, num_experts):
    x, _, topk_idx, topk_weights = rank_inputs(rank, num_experts)
    buffer = make_buffer(allgather, num_ranks, num_experts)
    assert (buffer.rank, buffer.group_size) == (rank, num_ranks)
    num_tokens_per_rank, num_tokens_per_rdma_rank, num_tokens_per_expert, is_token_in_rank, event = \
        buffer.get_dispatch_layout(topk_idx, num_experts, previous_event=deep_ep.Buffer.capture(),
                                   async_finish=True)
    if num_ranks <= deep_ep.NUM_MAX_NVL_PEERS:
        assert num_tokens_per_rdma_rank is None  # one node, as in DeepEP
    else:  # nodes of 8 ranks: the tokens bound for each node
        nodes = np.asarray(is_token_in_rank).reshape(len(topk_idx), -1, deep_ep.NUM_MAX_NVL_PEERS).any(axis=2)
        np.testing.assert_array_equal(num_tokens_per_rdma_rank, nodes.sum(axis=0))
    with event:  # EventOverlap as a context manager (no event on the CPU backend)
        pass
    recv_x, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle, event = buffer.dispatch(
        x, num_tokens_per_rank=num_tokens_per_rank, num_tokens_per_rdma_rank=num_tokens_per_rdma_rank,
        is_token_in_rank=is_token_in_rank, num_tokens_per_expert=num_tokens_per_expert, topk_idx=topk_idx,
        topk_weights=topk_weights, config=deep_ep.Buffer.get_dispatch_config(num_ranks), async_finish=True,
        allocate_on_comm_stream=True)
    event.current_stream_wait()

    # The experts: each local expert takes its rows (num_recv_tokens_per_expert_list says how many).
    counts = [int((recv_topk_idx == e).sum()) for e in range(num_experts // num_ranks)]
    assert counts == num_recv_tokens_per_expert_list
    y = reference.expert(recv_x, recv_topk_idx)
    combined_x, combined_topk_weights, _ = buffer.combine(y, handle, topk_weights=recv_topk_weights,
                                                          config=deep_ep.Buffer.get_combine_config(num_ranks))

    # Cached dispatch (same routing, new activations), then a combine through the same handle.
    x2 = reference.f32_to_bf16(reference.bf16_to_f32(x) * np.float32(-2))
    cached = buffer.dispatch(x2, handle=handle)
    cached_combined, cached_weights, _ = buffer.combine(reference.expert(cached[0], recv_topk_idx), handle)
    assert cached[1:5] == (None, None, None, None) and cached_weights is None

    # Layout tensors that did not come from this buffer are recomputed from topk_idx.
    recomputed = buffer.dispatch(x, num_tokens_per_rank=num_tokens_per_rank.copy(),
                                 is_token_in_rank=is_token_in_rank.copy(),
                                 num_tokens_per_expert=num_tokens_per_expert.copy(), topk_idx=topk_idx,
                                 topk_weights=topk_weights)[0]
    buffer.destroy()
    return dict(recv_x=recv_x, recv_topk_idx=recv_topk_idx, recv_topk_weights=recv_topk_weights,
                num_recv_tokens_per_expert_list=num_recv_tokens_per_expert_list, y=y, combined_x=combined_x,
                combined_topk_weights=combined_topk_weights, cached_x=cached[0], cached_combined=cached_combined,
                recomputed=recomputed)


def scales_in_layout(scales, layout):
    """f32 [N, B] scales with the same values in `layout`: row_major; column_major, as DeepEP's users pass
    them (x_scales.T.contiguous().T: strides (1, N)); strided, a slice of a wider array (neither)."""
    if layout == "row_major":
        return scales
    if layout == "column_major":
        return scales.T.copy().T
    wide = np.zeros((scales.shape[0], 2 * scales.shape[1]), np.float32)
    wide[:, ::2] = scales
    return wide[:, ::2]


def fp8_job(rank, num_ranks, allgather, num_experts, layout="row_major"):
    x, scales, topk_idx, topk_weights = rank_inputs(rank, num_experts, fp8=True)
    scales = scales_in_layout(scales, layout)
    assert scales.flags["C_CONTIGUOUS"] == (layout == "row_major")
    # Row- and column-major scales are read in place; only other strides are copied first.
    assert (deep_ep._scales_in_a_read_layout(scales) is scales) == (layout != "strided")
    buffer = make_buffer(allgather, num_ranks, num_experts)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, num_experts)
    (recv_x, recv_scales), recv_idx, _, counts, handle, _ = buffer.dispatch(
        (x, scales), num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        topk_idx=topk_idx, topk_weights=topk_weights, expert_alignment=2)
    (cached_x, cached_scales), *_ = buffer.dispatch((x, scales), handle=handle)
    buffer.destroy()
    return recv_x, recv_scales, recv_idx, counts, cached_x, cached_scales


# 16 ranks: two nodes of 8 (NUM_MAX_NVL_PEERS), the hierarchical engine, combine reduced per node.
@pytest.mark.parametrize("num_ranks", [1, 2, 4, 16])
def test_layout_dispatch_experts_combine_round_trip(ranks, num_ranks):
    num_experts = 4 * num_ranks
    results = ranks(num_ranks).run(framework_round_trip_job, [(num_experts,)] * num_ranks)
    inputs = [rank_inputs(r, num_experts) for r in range(num_ranks)]
    expected = reference.dispatch(inputs, num_experts)
    num_tokens = [inputs[r][0].shape[0] for r in range(num_ranks)]
    ranks_per_node = min(num_ranks, deep_ep.NUM_MAX_NVL_PEERS)
    combined = reference.combine([r["y"] for r in results], [e["recv_topk_weights"] for e in expected], expected,
                                 num_tokens, ranks_per_node)
    cached_inputs = [(reference.f32_to_bf16(reference.bf16_to_f32(x) * np.float32(-2)), s, i, w)
                     for x, s, i, w in inputs]
    cached_expected = reference.dispatch(cached_inputs, num_experts)
    cached_ys = [reference.expert(e["recv_x"], e["recv_topk_idx"]) for e in cached_expected]
    cached_combined = reference.combine(cached_ys, [e["recv_topk_weights"] for e in expected], expected,
                                        num_tokens, ranks_per_node)
    for rank, result in enumerate(results):
        want = expected[rank]
        context = f"seed {SEED}, rank {rank} of {num_ranks}"
        np.testing.assert_array_equal(result["recv_x"], want["recv_x"], err_msg=context)
        np.testing.assert_array_equal(result["recv_topk_idx"], want["recv_topk_idx"], err_msg=context)
        np.testing.assert_array_equal(result["recv_topk_weights"], want["recv_topk_weights"], err_msg=context)
        assert result["num_recv_tokens_per_expert_list"] == want["num_recv_tokens_per_expert"], context
        np.testing.assert_array_equal(result["combined_x"], combined[rank][0], err_msg=context)
        np.testing.assert_array_equal(result["combined_topk_weights"], combined[rank][1], err_msg=context)
        np.testing.assert_array_equal(result["cached_x"], cached_expected[rank]["recv_x"], err_msg=context)
        np.testing.assert_array_equal(result["cached_combined"], cached_combined[rank][0], err_msg=context)
        np.testing.assert_array_equal(result["recomputed"], want["recv_x"], err_msg=context)


def draw_bias(rank, which, num_tokens):
    """A combine bias of bf16 bits [N, HIDDEN], with exact -0.0 and +0.0 among its values."""
    rng = np.random.default_rng([SEED, rank, 100 + which])
    bias = reference.f32_to_bf16(rng.standard_normal((num_tokens, HIDDEN)).astype(np.float32))
    bias[rng.random(bias.shape) < 0.1] = 0x8000
    bias[rng.random(bias.shape) < 0.1] = 0
    return bias


# DeepEP's `bias`: one tensor, a tuple of two, and a tuple with only the second.
BIAS_FORMS = ("tensor", "pair", "second_only")


def bias_argument(rank, form, num_tokens):
    first, second = draw_bias(rank, 0, num_tokens), draw_bias(rank, 1, num_tokens)
    return {"tensor": (first, (first, None)), "pair": ((first, second), (first, second)),
            "second_only": ((None, second), (None, second))}[form]


def bias_job(rank, num_ranks, allgather, num_experts):
    x, _, topk_idx, topk_weights = rank_inputs(rank, num_experts)
    buffer = make_buffer(allgather, num_ranks, num_experts)
    per_rank, per_rdma_rank, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, num_experts)
    recv_x, recv_topk_idx, recv_topk_weights, _, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_rdma_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=topk_idx, topk_weights=topk_weights)
    y = reference.expert(recv_x, recv_topk_idx)
    combined = {}
    for form in BIAS_FORMS:
        bias, _ = bias_argument(rank, form, x.shape[0])
        combined[form] = buffer.combine(y, handle, topk_weights=recv_topk_weights, bias=bias)[:2]
    buffer.destroy()
    return dict(y=y, combined=combined)


@pytest.mark.parametrize("num_ranks", [1, 3, 16])
def test_combine_bias_starts_the_sum_and_matches_reference(ranks, num_ranks):
    num_experts = 4 * num_ranks
    results = ranks(num_ranks).run(bias_job, [(num_experts,)] * num_ranks)
    inputs = [rank_inputs(r, num_experts) for r in range(num_ranks)]
    expected = reference.dispatch(inputs, num_experts)
    num_tokens = [inputs[r][0].shape[0] for r in range(num_ranks)]
    ranks_per_node = min(num_ranks, deep_ep.NUM_MAX_NVL_PEERS)
    for form in BIAS_FORMS:
        biases = [bias_argument(r, form, num_tokens[r])[1] for r in range(num_ranks)]
        want = reference.combine([r["y"] for r in results], [e["recv_topk_weights"] for e in expected], expected,
                                 num_tokens, ranks_per_node, biases)
        for rank, result in enumerate(results):
            context = f"seed {SEED}, rank {rank} of {num_ranks}, bias {form}"
            combined_x, combined_topk_weights = result["combined"][form]
            np.testing.assert_array_equal(combined_x, want[rank][0], err_msg=context)
            np.testing.assert_array_equal(combined_topk_weights, want[rank][1], err_msg=context)


def without_topk_job(rank, num_ranks, allgather, num_experts):
    x, _, topk_idx, _ = rank_inputs(rank, num_experts)
    buffer = make_buffer(allgather, num_ranks, num_experts)
    per_rank, per_rdma_rank, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, num_experts)
    # As DeepEP's test_intranode does it: the layout's tensors, no topk_idx or topk_weights.
    recv_x, recv_topk_idx, recv_topk_weights, counts, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_rdma_rank, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert)
    y = reference.expert(recv_x, np.full((recv_x.shape[0], 1), -1, np.int64))
    combined_x, combined_topk_weights, _ = buffer.combine(y, handle)
    cached_x = buffer.dispatch(x, handle=handle)[0]
    # Copies of the layout (not the tensors get_dispatch_layout returned) route the same way, and the
    # combine still does after the caller dropped them (the handle routes by its own copy).
    copies = [per_rank.copy(), in_rank.copy(), per_expert.copy()]
    copied_x, _, _, _, copied_handle, _ = buffer.dispatch(x, num_tokens_per_rank=copies[0], is_token_in_rank=copies[1],
                                                          num_tokens_per_expert=copies[2])
    del copies
    gc.collect()
    scribbles = [np.full(in_rank.shape, True) for _ in range(8)]  # reuse freed memory, if it was freed
    copied_combined = buffer.combine(y, copied_handle)[0]
    del scribbles
    buffer.destroy()
    return dict(recv_x=recv_x, recv_topk_idx=recv_topk_idx, recv_topk_weights=recv_topk_weights, counts=counts,
                y=y, combined_x=combined_x, combined_topk_weights=combined_topk_weights, cached_x=cached_x,
                copied_x=copied_x, copied_combined=copied_combined)


@pytest.mark.parametrize("num_ranks", [1, 3, 16])
def test_dispatch_without_topk_routes_by_is_token_in_rank_and_combine_sums(ranks, num_ranks):
    num_experts = 4 * num_ranks
    results = ranks(num_ranks).run(without_topk_job, [(num_experts,)] * num_ranks)
    inputs = [rank_inputs(r, num_experts) for r in range(num_ranks)]
    expected = reference.dispatch(inputs, num_experts)  # the same rows as with topk_idx
    num_tokens = [inputs[r][0].shape[0] for r in range(num_ranks)]
    no_weights = [np.zeros((r["y"].shape[0], 1), np.float32) for r in results]
    combined = reference.combine([r["y"] for r in results], no_weights, expected, num_tokens,
                                 min(num_ranks, deep_ep.NUM_MAX_NVL_PEERS))
    for rank, result in enumerate(results):
        context = f"seed {SEED}, rank {rank} of {num_ranks}"
        np.testing.assert_array_equal(result["recv_x"], expected[rank]["recv_x"], err_msg=context)
        assert result["recv_topk_idx"] is None and result["recv_topk_weights"] is None, context
        # As in DeepEP: the counts are what the sources' num_tokens_per_expert claim for this rank.
        assert result["counts"] == expected[rank]["num_recv_tokens_per_expert"], context
        np.testing.assert_array_equal(result["combined_x"], combined[rank][0], err_msg=context)
        assert result["combined_topk_weights"] is None, context
        np.testing.assert_array_equal(result["cached_x"], expected[rank]["recv_x"], err_msg=context)
        np.testing.assert_array_equal(result["copied_x"], expected[rank]["recv_x"], err_msg=context)
        np.testing.assert_array_equal(result["copied_combined"], combined[rank][0], err_msg=context)


@pytest.mark.parametrize("layout", ["row_major", "column_major", "strided"])
def test_fp8_tuple_dispatch_and_cached_dispatch(ranks, layout):
    num_ranks, num_experts = 2, 8
    inputs = [rank_inputs(r, num_experts, fp8=True) for r in range(num_ranks)]
    expected = reference.dispatch(inputs, num_experts, expert_alignment=2)
    for rank, (recv_x, recv_scales, recv_idx, counts, cached_x, cached_scales) in enumerate(
            ranks(num_ranks).run(fp8_job, [(num_experts, layout)] * num_ranks)):
        np.testing.assert_array_equal(recv_x, expected[rank]["recv_x"])
        # Row-major [M, H / 128] whatever the input's layout, as DeepEP returns them.
        assert recv_scales.flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(recv_scales, expected[rank]["recv_x_scales"])
        np.testing.assert_array_equal(recv_idx, expected[rank]["recv_topk_idx"])
        assert counts == expected[rank]["num_recv_tokens_per_expert"]
        np.testing.assert_array_equal(cached_x, recv_x)
        np.testing.assert_array_equal(cached_scales, recv_scales)


@pytest.fixture
def solo():
    buffer = deep_ep.Buffer(lambda mine: [mine], num_nvl_bytes=0, low_latency_mode=True, backend="cpu")
    yield buffer
    buffer.destroy()


def solo_inputs():
    return rank_inputs(0, 4)


def test_low_latency_unsupported_options_and_bad_calls(solo):
    x, _, topk_idx, topk_weights = solo_inputs()
    # DeepEP's wait statistics: int64 [num_ranks], else refused by name before anything runs.
    for bad in (np.zeros(1, np.int32), np.zeros(2, np.int64)):
        with pytest.raises(switchyard.InvalidArgument, match="wait_recv_cost_stats"):
            solo.low_latency_dispatch(x, topk_idx, 32, 4, dispatch_wait_recv_cost_stats=bad)
    for bad in (np.zeros(3, np.int32), np.zeros(4, np.int64)):
        with pytest.raises(switchyard.InvalidArgument, match=r"cumulative_local_expert_recv_stats: expected int32 \[4\]"):
            solo.low_latency_dispatch(x, topk_idx, 32, 4, cumulative_local_expert_recv_stats=bad)
    # Nothing dispatched yet: a handle that did not come from low_latency_dispatch is refused.
    with pytest.raises(switchyard.InvalidArgument, match="handle"):
        solo.low_latency_combine(x, topk_idx, topk_weights, None)
    with pytest.raises(switchyard.InvalidArgument, match="handle"):
        solo.get_next_low_latency_combine_buffer(None)
    _, _, handle, _, _ = solo.low_latency_dispatch(x, topk_idx, 32, 4, use_fp8=False)
    y = np.zeros((1, 32, HIDDEN), np.uint16)
    with pytest.raises(switchyard.InvalidArgument, match="wait_recv_cost_stats"):
        solo.low_latency_combine(y, topk_idx, topk_weights, handle, combine_wait_recv_cost_stats=np.zeros(4))
    # The first call sized the region: a larger one is refused, naming the capacity.
    with pytest.raises(switchyard.InvalidArgument, match="exceeds"):
        solo.low_latency_dispatch(x, topk_idx, 64, 4)
    assert deep_ep.Buffer.get_low_latency_rdma_size_hint(32, HIDDEN, 1, 4) > 0
    normal_only = deep_ep.Buffer(lambda mine: [mine], backend="cpu", num_nvl_bytes=0)
    with pytest.raises(switchyard.InvalidArgument, match="low_latency_mode"):
        normal_only.low_latency_dispatch(x, topk_idx, 32, 4)
    normal_only.destroy()


def test_size_hints_split_one_heap_between_nvlink_and_rdma():
    config, sizing = deep_ep.Config(), switchyard._C.BufferSizing(hidden=HIDDEN, topk=TOPK, num_experts=64)
    for num_ranks in (8, 16, 32):
        nvl = config.get_nvl_buffer_size_hint(HIDDEN * 2, num_ranks, topk=TOPK, num_experts=64)
        rdma = config.get_rdma_buffer_size_hint(HIDDEN * 2, num_ranks, topk=TOPK, num_experts=64)
        total = switchyard._C.normal_heap_bytes(num_ranks, 8, config.to_switchyard("cuda"), sizing)
        assert nvl + rdma == total and nvl > 0, num_ranks
        assert (rdma == 0) == (num_ranks <= deep_ep.NUM_MAX_NVL_PEERS), (num_ranks, rdma)


def test_low_latency_cumulative_recv_stats_add_each_dispatchs_counts(solo):
    x, _, topk_idx, _ = solo_inputs()
    stats = np.full(4, 5, np.int32)
    _, counts, *_ = solo.low_latency_dispatch(x, topk_idx, 32, 4, use_fp8=False, cumulative_local_expert_recv_stats=stats)
    np.testing.assert_array_equal(stats, 5 + counts)
    # With the receive hook the rows (and their counts) arrive when the hook runs.
    _, hooked, _, _, hook = solo.low_latency_dispatch(x, topk_idx, 32, 4, use_fp8=False, return_recv_hook=True,
                                                      cumulative_local_expert_recv_stats=stats)
    np.testing.assert_array_equal(stats, 5 + counts)
    hook()
    np.testing.assert_array_equal(stats, 5 + counts + hooked)
    assert counts.sum() > 0


def test_unsupported_options_raise_naming_the_option(solo):
    x, _, topk_idx, topk_weights = solo_inputs()
    per_rank, _, per_expert, in_rank, _ = solo.get_dispatch_layout(topk_idx, 4)
    kwargs = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                  topk_idx=topk_idx, topk_weights=topk_weights)
    recv_x, _, recv_weights, _, handle, _ = solo.dispatch(x, **kwargs)
    bias = np.zeros((x.shape[0], HIDDEN), np.uint16)
    with pytest.raises(switchyard.InvalidArgument, match=r"bias: expected a tensor or a tuple of up to two"):
        solo.combine(recv_x, handle, recv_weights, bias=(bias, bias, bias))
    with pytest.raises(switchyard.InvalidArgument, match=r"bias0: expected dtype bf16"):
        solo.combine(recv_x, handle, recv_weights, bias=bias.astype(np.float32))
    with pytest.raises(switchyard.InvalidArgument, match=r"bias1: expected size %d in dimension 0" % x.shape[0]):
        solo.combine(recv_x, handle, recv_weights, bias=(None, bias[1:]))
    with pytest.raises(switchyard.InvalidArgument, match=r"is_token_in_rank: expected bool"):
        solo.dispatch(x, num_tokens_per_rank=per_rank, num_tokens_per_expert=per_expert)
    with pytest.raises(switchyard.InvalidArgument, match=r"topk_weights: expected None without topk_idx"):
        solo.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                      topk_weights=topk_weights)
    with pytest.raises(switchyard.InvalidArgument, match="cached handle"):
        solo.dispatch(x, handle=handle, topk_idx=topk_idx)
    with pytest.raises(switchyard.InvalidArgument, match="handle"):
        solo.combine(recv_x, ("a", "tuple"))
    with pytest.raises(switchyard.Unsupported, match="use_fabric"):
        deep_ep.Buffer(lambda mine: [mine], backend="cpu", use_fabric=True)
    # allow_mnnvl only allows NVLink across nodes where the hardware has it: accepted, and the buffer works.
    allowed = deep_ep.Buffer(lambda mine: [mine], backend="cpu", allow_mnnvl=True, low_latency_mode=True)
    allowed.low_latency_dispatch(x, topk_idx, 32, 4, use_fp8=False)
    allowed.destroy()


def heap_inputs_job(rank, num_ranks, allgather, num_experts):
    """The same calls through an ordinary Buffer and through one with switchyard's heap-resident inputs
    (switchyard_heap_inputs): x and the expert outputs written into get_dispatch_input_buffer() /
    get_combine_input_buffer(); a dispatch, a cached dispatch in fp8 and two combines; and with the heap inputs,
    a combine with its weights, a dispatch with its x and a cached fp8 dispatch with column-major scales passed as
    they are (staged into the views by the Buffer, the scales transposed), each giving the views' bits."""
    x, _, topk_idx, topk_weights = rank_inputs(rank, num_experts)
    x_fp8, scales, _, _ = rank_inputs(rank, num_experts, fp8=True)
    results = {}
    for in_heap in (False, True):
        buffer = deep_ep.Buffer(allgather, backend="cpu", timeout_seconds=20,
                                switchyard_heap_inputs=64 if in_heap else 0)
        rows_x, rows_fp8, rows_scales = x, x_fp8, scales
        if in_heap:
            rows_x, no_scales = buffer.get_dispatch_input_buffer(len(x), HIDDEN, framework="numpy")
            assert no_scales is None
            rows_x[:] = x
        layout = buffer.get_dispatch_layout(topk_idx, num_experts)
        recv_x, recv_topk_idx, recv_weights, _, handle, _ = buffer.dispatch(
            rows_x, num_tokens_per_rank=layout[0], is_token_in_rank=layout[3], num_tokens_per_expert=layout[2],
            topk_idx=topk_idx, topk_weights=topk_weights)
        y = reference.expert(recv_x, recv_topk_idx)
        weights = recv_weights
        if in_heap:
            heap_y, heap_weights = buffer.get_combine_input_buffer(handle, HIDDEN, framework="numpy")
            heap_y[:] = y
            heap_weights[:] = recv_weights
            y, weights = heap_y, heap_weights
            # Weights that are not the view: staged into it by the Buffer, the same bits.
            staged, staged_weights, _ = buffer.combine(y, handle, topk_weights=np.array(recv_weights))
        combined, combined_weights, _ = buffer.combine(y, handle, topk_weights=weights)
        if in_heap:
            np.testing.assert_array_equal(np.array(staged), np.array(combined))
            np.testing.assert_array_equal(np.array(staged_weights), np.array(combined_weights))
            # x that is not the view: staged likewise (DeepEP's callers pass their own tensors).
            staged_x, *_ = buffer.dispatch(
                x, num_tokens_per_rank=layout[0], is_token_in_rank=layout[3], num_tokens_per_expert=layout[2],
                topk_idx=topk_idx, topk_weights=topk_weights)
            np.testing.assert_array_equal(np.array(staged_x), np.array(recv_x))
        if in_heap:
            rows_fp8, rows_scales = buffer.get_dispatch_input_buffer(len(x), HIDDEN, fp8=True, framework="numpy")
            rows_fp8[:] = x_fp8
            rows_scales[:] = scales
        (cached_fp8, cached_scales), *_ = buffer.dispatch((rows_fp8, rows_scales), handle=handle)
        if in_heap:
            # DeepEP's fp8 as its callers pass it: x as it is, the scales column-major; staged, transposed.
            (staged_fp8, staged_scales), *_ = buffer.dispatch((x_fp8, np.asfortranarray(scales)), handle=handle)
            np.testing.assert_array_equal(np.array(staged_fp8), np.array(cached_fp8))
            np.testing.assert_array_equal(np.array(staged_scales), np.array(cached_scales))
        results[in_heap] = dict(recv_x=np.array(recv_x), recv_topk_idx=np.array(recv_topk_idx),
                                combined=np.array(combined), combined_weights=np.array(combined_weights),
                                cached_fp8=np.array(cached_fp8), cached_scales=np.array(cached_scales))
        buffer.destroy()
    return results


@pytest.mark.parametrize("num_ranks", [1, 3])
def test_heap_inputs_give_the_bits_of_ordinary_calls(ranks, num_ranks):
    num_experts = 4 * num_ranks
    results = ranks(num_ranks).run(heap_inputs_job, [(num_experts,)] * num_ranks)
    for rank, result in enumerate(results):
        for name, value in result[False].items():
            np.testing.assert_array_equal(result[True][name], value, err_msg=f"rank {rank}: {name}")


def heap_inputs_shape_job(rank, num_ranks, allgather):
    """switchyard_heap_inputs as (tokens, hidden): rows wider than DeepSeek-V3's; bad values refused by name."""
    buffer = deep_ep.Buffer(allgather, backend="cpu", timeout_seconds=20, switchyard_heap_inputs=(4, 8192))
    x, scales = buffer.get_dispatch_input_buffer(4, 8192, fp8=True, framework="numpy")
    shapes = (x.shape, scales.shape)
    with pytest.raises(switchyard.InvalidArgument, match="^hidden: expected 1..8192"):
        buffer.get_dispatch_input_buffer(4, 8320, framework="numpy")
    buffer.destroy()
    refused = []
    for value in (-1, (4,), (4, 0), (4, 128, 1), "4", True, (4, 2.5)):
        with pytest.raises(switchyard.InvalidArgument, match="^switchyard_heap_inputs: expected"):
            deep_ep.Buffer(allgather, backend="cpu", switchyard_heap_inputs=value)
        refused.append(repr(value))
    # Left out: SWITCHYARD_HEAP_INPUTS, as unmodified DeepEP code would run; an explicit 0 overrides it.
    os.environ[deep_ep.HEAP_INPUTS_VARIABLE] = "4,8192"
    try:
        buffer = deep_ep.Buffer(allgather, backend="cpu", timeout_seconds=20)
        from_environment = buffer.get_dispatch_input_buffer(4, 8192, framework="numpy")[0].shape
        buffer.destroy()
        plain = deep_ep.Buffer(allgather, backend="cpu", timeout_seconds=20, switchyard_heap_inputs=0)
        with pytest.raises(switchyard.InvalidArgument, match="^normal_input: expected a buffer sized with"):
            plain.get_dispatch_input_buffer(4, 8192, framework="numpy")
        plain.destroy()
        for text in ("4,", "four", "4,8192,1", "4;8192"):
            os.environ[deep_ep.HEAP_INPUTS_VARIABLE] = text
            with pytest.raises(switchyard.InvalidArgument, match="^SWITCHYARD_HEAP_INPUTS: expected"):
                deep_ep.Buffer(allgather, backend="cpu")
            refused.append(text)
    finally:
        del os.environ[deep_ep.HEAP_INPUTS_VARIABLE]
    return shapes + (from_environment,), refused


def test_heap_inputs_take_a_hidden_and_refuse_bad_values(ranks):
    (shapes, refused), = ranks(1).run(heap_inputs_shape_job)
    assert shapes == ((4, 8192), (4, 64), (4, 8192))
    assert len(refused) == 11
