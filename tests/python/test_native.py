"""switchyard.Buffer on the CPU backend: ranks are processes, results are compared bitwise with
the NumPy reference (reference.py)."""
import gc

import numpy as np
import pytest

import reference
import switchyard

HIDDEN, TOPK = 256, 3
SEED = 7


def make_buffer(allgather, num_experts, topk=TOPK, hidden=HIDDEN):
    config = switchyard.Config(timeout_seconds=20)  # a failing peer is reported, not waited for long
    return switchyard.Buffer(allgather, backend="cpu", sharing="processes", config=config, hidden=hidden,
                             topk=topk, num_experts=num_experts)


def rank_inputs(seed, rank, num_tokens, num_experts, fp8=False, none_fraction=0.25):
    rng = np.random.default_rng([seed, rank])
    return reference.draw_inputs(rng, num_tokens, HIDDEN, TOPK, num_experts, fp8=fp8, none_fraction=none_fraction)


def tokens_of(rank):
    return 19 + 7 * rank  # ranks send different token counts


# ---- jobs (run on every rank) ------------------------------------------------------------------
def round_trip_job(rank, num_ranks, allgather, seed, num_experts, expert_alignment, none_fraction):
    x, _, topk_idx, topk_weights = rank_inputs(seed, rank, tokens_of(rank), num_experts,
                                               none_fraction=none_fraction)
    buffer = make_buffer(allgather, num_experts)
    layout = buffer.get_dispatch_layout(topk_idx, num_experts)
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts, layout=layout,
                           expert_alignment=expert_alignment)
    again = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts, expert_alignment=expert_alignment)
    cached = buffer.dispatch(x, handle=recv.handle)
    worst = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts, num_worst_tokens=200)
    y = reference.expert(recv.recv_x, recv.recv_topk_idx)
    out = buffer.combine(y, recv.handle, recv.recv_topk_weights)
    out_again = buffer.combine(y, recv.handle, recv.recv_topk_weights)
    buffer.destroy()
    return dict(layout=tuple(layout), recv=recv.__dict__ | {"handle": None}, again_x=again.recv_x,
                cached_x=cached.recv_x, worst_x=worst.recv_x, worst_idx=worst.recv_topk_idx,
                worst_w=worst.recv_topk_weights, worst_counts=worst.num_recv_tokens_per_expert, y=y,
                combined=tuple(out), combined_again=out_again.combined_x)


def fp8_job(rank, num_ranks, allgather, seed, num_experts):
    x, scales, topk_idx, topk_weights = rank_inputs(seed, rank, tokens_of(rank), num_experts, fp8=True)
    buffer = make_buffer(allgather, num_experts)
    recv = buffer.dispatch((x, scales), topk_idx, topk_weights, num_experts=num_experts, expert_alignment=4)
    buffer.destroy()
    return recv.recv_x, recv.recv_x_scales, recv.recv_topk_idx, recv.num_recv_tokens_per_expert


def preallocated_job(rank, num_ranks, allgather, seed, num_experts):
    x, _, topk_idx, topk_weights = rank_inputs(seed, rank, tokens_of(rank), num_experts)
    buffer = make_buffer(allgather, num_experts)
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts)
    out_x = np.full((recv.num_recv_tokens, HIDDEN), 0xFFFF, np.uint16)  # poisoned
    recv_into = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts, out_recv_x=out_x)
    combined = buffer.combine(recv.recv_x, recv.handle).combined_x
    out_combined = np.full(x.shape, 0xFFFF, np.uint16)
    combined_into = buffer.combine(recv.recv_x, recv.handle, out_combined_x=out_combined).combined_x
    buffer.destroy()
    return (recv_into.recv_x is out_x, combined_into is out_combined, out_x, recv.recv_x, out_combined,
            combined)


def released_layout_job(rank, num_ranks, allgather, seed, num_experts):
    x, _, topk_idx, topk_weights = rank_inputs(seed, rank, tokens_of(rank), num_experts)
    buffer = make_buffer(allgather, num_experts)
    # The caller's own arrays (as a framework's tensors), borrowed by dispatch for the call only.
    layout = switchyard.DispatchLayout(*(np.copy(part) for part in buffer.get_dispatch_layout(topk_idx, num_experts)))
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts, layout=layout)
    # Then it reuses them for other routing and drops them: the handle must not route by them any more.
    layout.is_token_in_rank[...] = ~layout.is_token_in_rank
    shape = layout.is_token_in_rank.shape
    del layout
    gc.collect()
    scribbles = [np.ones(shape, np.bool_) for _ in range(8)]  # reuse freed memory, if it was freed
    y = reference.expert(recv.recv_x, recv.recv_topk_idx)
    out = buffer.combine(y, recv.handle, recv.recv_topk_weights)
    cached = buffer.dispatch(x, handle=recv.handle)
    out_cached = buffer.combine(reference.expert(cached.recv_x, recv.recv_topk_idx), cached.handle,
                                recv.recv_topk_weights)
    del scribbles
    buffer.destroy()
    return dict(recv_x=recv.recv_x, y=y, combined=tuple(out), cached_x=cached.recv_x,
                combined_cached=tuple(out_cached))


# ---- tests ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_ranks", [1, 2, 4])
@pytest.mark.parametrize("case", ["typical", "all_minus_one", "aligned"])
def test_layout_dispatch_combine_match_reference_bitwise(ranks, num_ranks, case):
    num_experts = 4 * num_ranks
    none_fraction = {"typical": 0.25, "all_minus_one": 1.0, "aligned": 0.1}[case]
    alignment = 8 if case == "aligned" else 1
    results = ranks(num_ranks).run(round_trip_job, [(SEED, num_experts, alignment, none_fraction)] * num_ranks)
    inputs = [rank_inputs(SEED, r, tokens_of(r), num_experts, none_fraction=none_fraction) for r in range(num_ranks)]
    expected = reference.dispatch(inputs, num_experts, alignment)
    ys = [result["y"] for result in results]
    expected_combined = reference.combine(ys, [e["recv_topk_weights"] for e in expected], expected,
                                          [tokens_of(r) for r in range(num_ranks)])
    for rank, result in enumerate(results):
        context = f"seed {SEED}, rank {rank} of {num_ranks}"
        per_rank, per_node, per_expert, in_rank = result["layout"]
        want_per_rank, want_per_expert, want_in_rank = reference.layout(inputs[rank][2], num_experts, num_ranks)
        assert per_rank.dtype == np.int32 and in_rank.dtype == np.bool_, context
        np.testing.assert_array_equal(per_rank, want_per_rank, err_msg=context)
        np.testing.assert_array_equal(per_node, [int(want_in_rank.any(axis=1).sum())], err_msg=context)
        np.testing.assert_array_equal(per_expert, want_per_expert, err_msg=context)
        np.testing.assert_array_equal(in_rank, want_in_rank, err_msg=context)

        recv, want = result["recv"], expected[rank]
        assert recv["recv_x"].dtype == np.uint16, context
        np.testing.assert_array_equal(recv["recv_x"], want["recv_x"], err_msg=context)
        np.testing.assert_array_equal(recv["recv_topk_idx"], want["recv_topk_idx"], err_msg=context)
        np.testing.assert_array_equal(recv["recv_topk_weights"].view(np.uint32),
                                      want["recv_topk_weights"].view(np.uint32), err_msg=context)
        assert recv["num_recv_tokens"] == len(want["sources"]), context
        assert recv["num_recv_tokens_per_expert"] == want["num_recv_tokens_per_expert"], context
        np.testing.assert_array_equal(recv["recv_expert_counts"], want["num_recv_tokens_per_expert"], err_msg=context)
        np.testing.assert_array_equal(result["again_x"], want["recv_x"], err_msg=context)
        np.testing.assert_array_equal(result["cached_x"], want["recv_x"], err_msg=context)

        # Worst case: fixed-size outputs; rows past the received ones have -1 and weight 0.
        received = len(want["sources"])
        assert result["worst_x"].shape == (200, HIDDEN), context
        np.testing.assert_array_equal(result["worst_x"][:received], want["recv_x"], err_msg=context)
        np.testing.assert_array_equal(result["worst_idx"][:received], want["recv_topk_idx"], err_msg=context)
        assert (result["worst_idx"][received:] == -1).all() and (result["worst_w"][received:] == 0).all(), context

        combined_x, combined_w = result["combined"]
        want_x, want_w = expected_combined[rank]
        assert combined_x.dtype == np.uint16 and combined_x.shape == (tokens_of(rank), HIDDEN), context
        np.testing.assert_array_equal(combined_x, want_x, err_msg=context)
        np.testing.assert_array_equal(combined_w.view(np.uint32), want_w.view(np.uint32), err_msg=context)
        np.testing.assert_array_equal(result["combined_again"], want_x, err_msg=context)


@pytest.mark.parametrize("num_ranks", [1, 3])
def test_combine_and_cached_dispatch_route_as_dispatch_did_after_the_layout_was_dropped(ranks, num_ranks):
    num_experts = 4 * num_ranks
    results = ranks(num_ranks).run(released_layout_job, [(SEED + 3, num_experts)] * num_ranks)
    inputs = [rank_inputs(SEED + 3, r, tokens_of(r), num_experts) for r in range(num_ranks)]
    expected = reference.dispatch(inputs, num_experts)
    expected_combined = reference.combine([result["y"] for result in results],
                                          [e["recv_topk_weights"] for e in expected], expected,
                                          [tokens_of(r) for r in range(num_ranks)])
    for rank, result in enumerate(results):
        context = f"seed {SEED + 3}, rank {rank} of {num_ranks}"
        want_x, want_w = expected_combined[rank]
        np.testing.assert_array_equal(result["recv_x"], expected[rank]["recv_x"], err_msg=context)
        np.testing.assert_array_equal(result["cached_x"], expected[rank]["recv_x"], err_msg=context)
        for combined_x, combined_w in (result["combined"], result["combined_cached"]):
            np.testing.assert_array_equal(combined_x, want_x, err_msg=context)
            np.testing.assert_array_equal(combined_w.view(np.uint32), want_w.view(np.uint32), err_msg=context)


@pytest.mark.parametrize("num_ranks", [1, 2, 4])
def test_fp8_dispatch_carries_bits_and_scales(ranks, num_ranks):
    num_experts = 4 * num_ranks
    results = ranks(num_ranks).run(fp8_job, [(SEED + 1, num_experts)] * num_ranks)
    inputs = [rank_inputs(SEED + 1, r, tokens_of(r), num_experts, fp8=True) for r in range(num_ranks)]
    expected = reference.dispatch(inputs, num_experts, expert_alignment=4)
    for rank, (recv_x, recv_scales, recv_idx, counts) in enumerate(results):
        assert recv_x.dtype == np.uint8
        np.testing.assert_array_equal(recv_x, expected[rank]["recv_x"])
        np.testing.assert_array_equal(recv_scales.view(np.uint32), expected[rank]["recv_x_scales"].view(np.uint32))
        np.testing.assert_array_equal(recv_idx, expected[rank]["recv_topk_idx"])
        assert counts == expected[rank]["num_recv_tokens_per_expert"]


def test_preallocated_outputs_are_filled_and_returned(ranks):
    for same_x, same_combined, out_x, recv_x, out_combined, combined in ranks(2).run(preallocated_job,
                                                                                     [(SEED + 2, 8)] * 2):
        assert same_x and same_combined
        np.testing.assert_array_equal(out_x, recv_x)
        np.testing.assert_array_equal(out_combined, combined)


# ---- per-call tuning ------------------------------------------------------------------------------
def tuning_job(rank, num_ranks, allgather, seed, num_experts):
    x, _, topk_idx, topk_weights = rank_inputs(seed, rank, tokens_of(rank), num_experts)
    buffer = make_buffer(allgather, num_experts)
    tuning = switchyard.CallTuning(num_channels=2, ring_slots=3, chunk_tokens=1)
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts, tuning=tuning)
    cached = buffer.dispatch(x, handle=recv.handle, tuning=switchyard.CallTuning(ring_slots=5, chunk_tokens=2))
    y = reference.expert(recv.recv_x, recv.recv_topk_idx)
    out = buffer.combine(y, recv.handle, recv.recv_topk_weights, tuning=switchyard.CallTuning(ring_slots=2))
    refusals = []
    for call in (lambda: buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts,
                                         tuning=switchyard.CallTuning(num_channels=buffer.max_num_channels + 1)),
                 lambda: buffer.combine(y, recv.handle, tuning=switchyard.CallTuning(num_channels=3)),
                 lambda: buffer.dispatch(x, topk_idx, num_experts=num_experts,
                                         tuning=switchyard.CallTuning(ring_slots=2, chunk_tokens=3))):
        with pytest.raises(switchyard.InvalidArgument) as refused:
            call()
        refusals.append(str(refused.value))
    channels = recv.handle.num_channels
    buffer.destroy()
    return dict(recv_x=recv.recv_x, cached_x=cached.recv_x, y=y, combined=tuple(out), channels=channels,
                refusals=refusals)


def test_a_tuned_call_runs_with_its_tuning_and_matches_reference_bitwise(ranks):
    num_ranks, num_experts = 3, 12
    results = ranks(num_ranks).run(tuning_job, [(SEED + 4, num_experts)] * num_ranks)
    inputs = [rank_inputs(SEED + 4, r, tokens_of(r), num_experts) for r in range(num_ranks)]
    expected = reference.dispatch(inputs, num_experts)
    expected_combined = reference.combine([result["y"] for result in results],
                                          [e["recv_topk_weights"] for e in expected], expected,
                                          [tokens_of(r) for r in range(num_ranks)])
    for rank, result in enumerate(results):
        context = f"seed {SEED + 4}, rank {rank} of {num_ranks}"
        assert result["channels"] == 2, context  # the dispatch ran with the call's channels, not the Buffer's
        np.testing.assert_array_equal(result["recv_x"], expected[rank]["recv_x"], err_msg=context)
        np.testing.assert_array_equal(result["cached_x"], expected[rank]["recv_x"], err_msg=context)
        want_x, want_w = expected_combined[rank]
        np.testing.assert_array_equal(result["combined"][0], want_x, err_msg=context)
        np.testing.assert_array_equal(result["combined"][1].view(np.uint32), want_w.view(np.uint32), err_msg=context)
        for message, field in zip(result["refusals"],
                                  ("tuning.num_channels", "tuning.num_channels", "tuning.chunk_tokens")):
            assert message.startswith(field), message


def device_counts_job(rank, num_ranks, allgather, seed, num_experts):
    x, _, topk_idx, topk_weights = rank_inputs(seed, rank, tokens_of(rank), num_experts)
    buffer = make_buffer(allgather, num_experts)
    full = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts)
    bare = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts, device_counts=False)
    buffer.destroy()
    return [{name: value for name, value in result.__dict__.items() if name != "handle"} for result in (full, bare)]


def test_device_counts_can_be_left_out_and_nothing_else_changes(ranks):
    for full, bare in ranks(2).run(device_counts_job, [(SEED + 5, 8)] * 2):
        assert bare["recv_expert_counts"] is None and bare["recv_token_count"] is None
        assert list(full["recv_expert_counts"]) == full["num_recv_tokens_per_expert"] == bare["num_recv_tokens_per_expert"]
        assert int(full["recv_token_count"][0]) == full["num_recv_tokens"] == bare["num_recv_tokens"]
        np.testing.assert_array_equal(full["recv_x"], bare["recv_x"])
        np.testing.assert_array_equal(full["recv_topk_idx"], bare["recv_topk_idx"])


# ---- get_dispatch_layout into the caller's arrays (switchyard.deep_ep's torch path) -------------------
def layout_into_job(rank, num_ranks, allgather, seed, num_experts):
    _, _, topk_idx, _ = rank_inputs(seed, rank, tokens_of(rank), num_experts)
    buffer = make_buffer(allgather, num_experts)
    want = tuple(buffer.get_dispatch_layout(topk_idx, num_experts))
    size = num_ranks + 1 + num_experts  # one node
    counts = np.full(size, -7, np.int32)
    in_rank = np.zeros((topk_idx.shape[0], num_ranks), np.bool_)
    buffer.native.get_dispatch_layout_into(topk_idx, num_experts, 0, counts, in_rank)
    refusals = []
    for wrong_counts, wrong_in_rank in ((np.zeros(size - 1, np.int32), in_rank), (np.zeros(size, np.int64), in_rank),
                                        (np.zeros(size, np.int32), np.zeros((3, num_ranks), np.bool_))):
        untouched = wrong_counts.copy()
        with pytest.raises(switchyard.InvalidArgument) as refused:
            buffer.native.get_dispatch_layout_into(topk_idx, num_experts, 0, wrong_counts, wrong_in_rank)
        refusals.append((str(refused.value), bool((wrong_counts == untouched).all())))
    buffer.destroy()
    return want, counts, in_rank, refusals


def test_layout_into_the_callers_arrays_matches_the_library_allocated_one_and_refuses_wrong_ones(ranks):
    num_ranks, num_experts = 2, 8
    for rank, (want, counts, in_rank, refusals) in enumerate(ranks(num_ranks).run(
            layout_into_job, [(SEED + 6, num_experts)] * num_ranks)):
        per_rank, per_node, per_expert, want_in_rank = want
        np.testing.assert_array_equal(counts, np.concatenate([per_rank, per_node, per_expert]), err_msg=f"rank {rank}")
        np.testing.assert_array_equal(in_rank, want_in_rank, err_msg=f"rank {rank}")
        for (message, untouched), field in zip(refusals, ("counts", "counts", "out.is_token_in_rank")):
            assert message.startswith(field + ":"), message
            assert untouched, f"a refused call wrote its outputs: {message}"
