"""switchyard.Buffer's expert-major engines (low_latency and symmetric) and switchyard.deep_ep's
low-latency methods on the CPU backend, ranks as processes: dispatch bitwise against the NumPy
reference, combine exactly (power-of-two weights: fused multiply-add and multiply-then-add agree),
the two engines bitwise against each other, the hook path and zero-copy combine."""
import numpy as np
import pytest

import reference
import switchyard
from switchyard import deep_ep

HIDDEN, TOPK, MAX_TOKENS = 256, 3, 16
SEED = 5


def tokens_of(rank):
    return 9 + 4 * (rank % 2)  # neighbouring ranks send different token counts, all <= MAX_TOKENS


def rank_inputs(rank, num_experts):
    rng = np.random.default_rng([SEED, rank])
    x, _, topk_idx, _ = reference.draw_inputs(rng, tokens_of(rank), HIDDEN, TOPK, num_experts)
    topk_weights = (2.0 ** rng.integers(-3, 3, size=topk_idx.shape)).astype(np.float32)  # exact products
    return x, topk_idx, topk_weights


def make_buffer(allgather):
    config = switchyard.Config(timeout_seconds=20)
    return switchyard.Buffer(allgather, backend="cpu", sharing="processes", config=config, max_tokens_per_rank=32,
                             hidden=HIDDEN, topk=TOPK, num_experts=8, low_latency_max_tokens_per_rank=MAX_TOKENS,
                             symmetric_max_tokens_per_rank=MAX_TOKENS)


def outputs(recv):
    return dict(recv_x=recv.recv_x.copy(), recv_count=recv.recv_count.copy(),
                layout_range=recv.layout_range.copy(), src_info=recv.src_info.copy(),
                recv_x_scales=None if recv.recv_x_scales is None else recv.recv_x_scales.copy())


def rank_biases(rank):
    """Combine biases of bf16 bits [N, HIDDEN], with exact -0.0 among their values."""
    rng = np.random.default_rng([SEED, rank, 7])
    shape = (tokens_of(rank), HIDDEN)
    biases = [reference.f32_to_bf16(rng.standard_normal(shape).astype(np.float32)) for _ in range(2)]
    for bias in biases:
        bias[rng.random(shape) < 0.1] = 0x8000
    return biases


def engines_job(rank, num_ranks, allgather, num_experts):
    x, topk_idx, topk_weights = rank_inputs(rank, num_experts)
    bias0, bias1 = rank_biases(rank)
    buffer = make_buffer(allgather)
    results = {}
    for engine in ("low_latency", "symmetric"):
        dispatch = getattr(buffer, f"{engine}_dispatch")
        combine = getattr(buffer, f"{engine}_combine")
        recv = dispatch(x, topk_idx, MAX_TOKENS, num_experts)
        y = reference.expert_major_experts(recv.recv_x, recv.recv_count)
        out = combine(y, topk_idx, topk_weights, recv.handle)
        assert recv.hook is None and out.hook is None
        biased = combine(y, topk_idx, topk_weights, recv.handle, bias0=bias0, bias1=bias1).combined_x.copy()
        second_only = combine(y, topk_idx, topk_weights, recv.handle, bias1=bias1).combined_x.copy()
        fp8 = dispatch(x, topk_idx, MAX_TOKENS, num_experts, use_fp8=True)
        results[engine] = dict(outputs(recv), combined=out.combined_x.copy(), biased=biased, second_only=second_only,
                               fp8=outputs(fp8))

    # low_latency's hooks: the send half returns, hook() receives; the same outputs.
    recv = buffer.low_latency_dispatch(x, topk_idx, MAX_TOKENS, num_experts, return_recv_hook=True)
    assert callable(recv.hook)
    recv.hook()
    with pytest.raises(switchyard.InvalidArgument, match="already called"):
        recv.hook()
    y = reference.expert_major_experts(recv.recv_x, recv.recv_count)
    out = buffer.low_latency_combine(y, topk_idx, topk_weights, recv.handle, return_recv_hook=True)
    out.hook()
    results["hook"] = dict(outputs(recv), combined=out.combined_x.copy())

    # Zero copy: the experts write into the combine buffer.
    recv = buffer.low_latency_dispatch(x, topk_idx, MAX_TOKENS, num_experts)
    staging = buffer.low_latency_combine_buffer(recv.handle)
    assert staging.shape[:2] == recv.recv_x.shape[:2]
    staging[:, :, :HIDDEN] = reference.expert_major_experts(recv.recv_x, recv.recv_count)
    preallocated = np.empty_like(x)
    out = buffer.low_latency_combine(None, topk_idx, topk_weights, recv.handle, zero_copy=True, out=preallocated)
    assert out.combined_x is preallocated
    results["zero_copy"] = preallocated.copy()

    # The symmetric engine has no hooks and no zero copy.
    with pytest.raises(switchyard.Unsupported, match="return_recv_hook"):
        buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts, return_recv_hook=True)
    recv = buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts)
    with pytest.raises(switchyard.Unsupported, match="zero_copy"):
        buffer.symmetric_combine(None, topk_idx, topk_weights, recv.handle, zero_copy=True)
    # A handle is for its own engine's combine only.
    with pytest.raises(switchyard.Error):
        buffer.low_latency_combine(reference.expert_major_experts(recv.recv_x, recv.recv_count), topk_idx,
                                   topk_weights, recv.handle)
    buffer.symmetric_combine(reference.expert_major_experts(recv.recv_x, recv.recv_count), topk_idx, topk_weights,
                             recv.handle)
    buffer.destroy()
    return results


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_expert_major_engines(ranks, num_ranks):
    num_experts = 4 * num_ranks
    local = num_experts // num_ranks
    inputs = [rank_inputs(rank, num_experts) for rank in range(num_ranks)]
    results = ranks(num_ranks).run(engines_job, [(num_experts,)] * num_ranks)
    for dest, result in enumerate(results):
        ll, sym = result["low_latency"], result["symmetric"]
        rows = reference.expert_major_dispatch([idx for _, idx, _ in inputs], num_experts, dest)
        assert ll["recv_x"].shape == (local, num_ranks * MAX_TOKENS, HIDDEN) and ll["recv_x"].dtype == np.uint16
        np.testing.assert_array_equal(ll["recv_count"], [len(r) for r in rows])
        for l, expert_rows in enumerate(rows):
            count = len(expert_rows)
            expected = np.array([inputs[s][0][t] for s, t, _ in expert_rows], np.uint16).reshape(count, HIDDEN)
            np.testing.assert_array_equal(ll["recv_x"][l, :count], expected)
            np.testing.assert_array_equal(ll["src_info"][l, :count], [t for _, t, _ in expert_rows])
            assert (ll["src_info"][l, count:] == -1).all()
            begin = 0
            for s in range(num_ranks):
                n = sum(1 for source, _, _ in expert_rows if source == s)
                assert tuple(ll["layout_range"][l, s]) == (begin, n)
                begin += n
        # The engines agree bit for bit (on the rows that are defined), fp8 included.
        for engine in (sym, result["hook"]):
            np.testing.assert_array_equal(engine["recv_count"], ll["recv_count"])
            np.testing.assert_array_equal(engine["layout_range"], ll["layout_range"])
            np.testing.assert_array_equal(engine["src_info"], ll["src_info"])
            for l in range(local):
                np.testing.assert_array_equal(engine["recv_x"][l, :ll["recv_count"][l]],
                                              ll["recv_x"][l, :ll["recv_count"][l]])
        assert ll["fp8"]["recv_x"].dtype == np.uint8 and ll["fp8"]["recv_x_scales"].dtype == np.float32
        for l in range(local):
            count = ll["recv_count"][l]
            np.testing.assert_array_equal(sym["fp8"]["recv_x"][l, :count], ll["fp8"]["recv_x"][l, :count])
            np.testing.assert_array_equal(sym["fp8"]["recv_x_scales"][l, :count],
                                          ll["fp8"]["recv_x_scales"][l, :count])
        # Combine: the exact reference, on both engines, with hooks and with zero copy.
        x, topk_idx, topk_weights = inputs[dest]
        expected = reference.expert_major_combine(x, topk_idx, topk_weights, num_experts, num_ranks)
        for combined in (ll["combined"], sym["combined"], result["hook"]["combined"], result["zero_copy"]):
            np.testing.assert_array_equal(combined, expected)
        # With biases: the accumulator starts at bias0 + bias1 (an absent one +0.0).
        bias0, bias1 = rank_biases(dest)
        biased = reference.expert_major_combine(x, topk_idx, topk_weights, num_experts, num_ranks, (bias0, bias1))
        second_only = reference.expert_major_combine(x, topk_idx, topk_weights, num_experts, num_ranks, (None, bias1))
        for engine in (ll, sym):
            np.testing.assert_array_equal(engine["biased"], biased)
            np.testing.assert_array_equal(engine["second_only"], second_only)


def deep_ep_job(rank, num_ranks, allgather, num_experts):
    x, topk_idx, topk_weights = rank_inputs(rank, num_experts)
    hint = dict(topk=TOPK, num_experts=num_experts)
    buffer = deep_ep.Buffer(allgather, low_latency_mode=True, backend="cpu", timeout_seconds=20,
                            num_nvl_bytes=deep_ep.Config().get_nvl_buffer_size_hint(HIDDEN * 2, num_ranks, **hint),
                            num_rdma_bytes=deep_ep.Config().get_rdma_buffer_size_hint(HIDDEN * 2, num_ranks, **hint))
    recv_x, recv_count, handle, event, hook = buffer.low_latency_dispatch(
        x, topk_idx, MAX_TOKENS, num_experts, use_fp8=False, async_finish=True)
    assert hook is None and event.event is None
    src_info, layout_range, max_tokens, hidden, experts_total = handle
    assert (max_tokens, hidden, experts_total) == (MAX_TOKENS, HIDDEN, num_experts)
    y = reference.expert_major_experts(recv_x, recv_count)
    combined_x, _, hook = buffer.low_latency_combine(y, topk_idx, topk_weights, handle)
    assert hook is None

    # fp8 with a receive hook; combine through the zero-copy buffer with a hook.
    (fp8_x, scales), fp8_count, fp8_handle, _, hook = buffer.low_latency_dispatch(
        x, topk_idx, MAX_TOKENS, num_experts, return_recv_hook=True)
    hook()
    assert fp8_x.dtype == np.uint8 and scales.shape == fp8_x.shape[:2] + (HIDDEN // 128,)
    buffer.get_next_low_latency_combine_buffer(fp8_handle)[:] = y
    zero_copy_x, _, hook = buffer.low_latency_combine(y, topk_idx, topk_weights, fp8_handle, zero_copy=True,
                                                      return_recv_hook=True)
    hook()
    # LogFMT-10 (use_logfmt) on outputs scaled below 1, which the format casts.
    logfmt_x, _, _ = buffer.low_latency_combine(logfmt_scaled(y), topk_idx, topk_weights, handle, use_logfmt=True)
    with pytest.raises(switchyard.InvalidArgument, match="use_logfmt"):
        buffer.low_latency_combine(y, topk_idx, topk_weights, fp8_handle, use_logfmt=True, zero_copy=True)
    buffer.clean_low_latency_buffer(MAX_TOKENS, HIDDEN, num_experts)
    buffer.destroy()
    return (recv_x.copy(), recv_count.copy(), src_info.copy(), layout_range.copy(), combined_x.copy(),
            fp8_x.copy(), scales.copy(), fp8_count.copy(), zero_copy_x.copy(), logfmt_x.copy())


def logfmt_scaled(y):
    """Expert outputs (bf16 bits) times 2^-4: the stand-in expert's values fall below 1, where LogFMT
    casts a block."""
    return reference.f32_to_bf16(reference.bf16_to_f32(y) * np.float32(0.0625))


def logfmt_combine(x, topk_idx, topk_weights, num_experts, num_ranks):
    """expert_major_combine of the logfmt_scaled expert outputs as the LogFMT-10 combine accumulates them
    (the row codec is the library's, switchyard._C._testing.logfmt_round_trip, checked in C++ against the
    format's rules; the accumulation is checked here)."""
    local = num_experts // num_ranks
    out = np.zeros(x.shape, np.float32)
    for t in range(x.shape[0]):
        for j in range(topk_idx.shape[1]):
            expert = int(topk_idx[t, j])
            if expert >= 0:
                row = logfmt_scaled(reference.expert_major_expert(x[t], expert % local))
                out[t] = out[t] + topk_weights[t, j] * switchyard._C._testing.logfmt_round_trip(row)
    return reference.f32_to_bf16(out)


# 16 ranks: two nodes of 8, the rows to the other node through the engine's transport.
@pytest.mark.parametrize("num_ranks", [1, 2, 16])
def test_deep_ep_low_latency(ranks, num_ranks):
    num_experts = 4 * num_ranks
    inputs = [rank_inputs(rank, num_experts) for rank in range(num_ranks)]
    results = ranks(num_ranks).run(deep_ep_job, [(num_experts,)] * num_ranks)
    for dest, (recv_x, recv_count, src_info, layout_range, combined_x, fp8_x, scales, fp8_count,
               zero_copy_x, logfmt_x) in enumerate(results):
        rows = reference.expert_major_dispatch([idx for _, idx, _ in inputs], num_experts, dest)
        np.testing.assert_array_equal(recv_count, [len(r) for r in rows])
        np.testing.assert_array_equal(fp8_count, recv_count)
        for l, expert_rows in enumerate(rows):
            count = len(expert_rows)
            expected = np.array([inputs[s][0][t] for s, t, _ in expert_rows], np.uint16).reshape(count, HIDDEN)
            np.testing.assert_array_equal(recv_x[l, :count], expected)
            np.testing.assert_array_equal(src_info[l, :count], [t for _, t, _ in expert_rows])
            # fp8: dequantised rows are close to the bf16 ones (e4m3 keeps 3 mantissa bits).
            fp8 = fp8_x[l, :count].view(np.uint8)
            sign = np.where(fp8 & 0x80, -1.0, 1.0)
            exponent, mantissa = (fp8 >> 3) & 0xF, fp8 & 0x7
            value = sign * np.where(exponent == 0, mantissa / 8.0 * 2.0 ** -6,
                                    (1 + mantissa / 8.0) * 2.0 ** (exponent.astype(np.float64) - 7))
            dequantised = value * np.repeat(scales[l, :count], 128, axis=1)
            np.testing.assert_allclose(dequantised, reference.bf16_to_f32(expected), rtol=0.07, atol=1e-2)
        x, topk_idx, topk_weights = inputs[dest]
        expected = reference.expert_major_combine(x, topk_idx, topk_weights, num_experts, num_ranks)
        np.testing.assert_array_equal(combined_x, expected)
        np.testing.assert_array_equal(zero_copy_x, expected)
        logfmt_expected = logfmt_combine(x, topk_idx, topk_weights, num_experts, num_ranks)
        np.testing.assert_array_equal(logfmt_x, logfmt_expected)
        # Lossy: not the bf16 combine of the same scaled outputs (the option is not ignored), but close to it.
        bf16_of_scaled = reference.bf16_to_f32(expected) * np.float32(0.0625)
        assert not np.array_equal(reference.bf16_to_f32(logfmt_x), bf16_of_scaled) or x.shape[0] == 0
        np.testing.assert_allclose(reference.bf16_to_f32(logfmt_x), bf16_of_scaled, rtol=0.05, atol=0.2)


def capacity_job(rank, num_ranks, allgather, num_experts, capacity, overflow):
    x, topk_idx, topk_weights = rank_inputs(rank, num_experts)
    buffer = make_buffer(allgather)
    if overflow:
        with pytest.raises(switchyard.CapacityError, match="expert_capacity"):
            buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts, expert_capacity=capacity)
        # The buffer stays usable.
        recv = buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts)
        buffer.destroy()
        return outputs(recv)
    recv = buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts, expert_capacity=capacity)
    y = reference.expert_major_experts(recv.recv_x, recv.recv_count)
    out = buffer.symmetric_combine(y, topk_idx, topk_weights, recv.handle)
    buffer.destroy()
    return dict(outputs(recv), combined=out.combined_x.copy())


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_symmetric_expert_capacity(ranks, num_ranks):
    """recv_x is [L, C, H] with expert_capacity C: the same rows and true counts; an expert past C raises
    CapacityError on every rank."""
    num_experts = 4 * num_ranks
    inputs = [rank_inputs(rank, num_experts) for rank in range(num_ranks)]
    all_rows = [reference.expert_major_dispatch([idx for _, idx, _ in inputs], num_experts, dest)
                for dest in range(num_ranks)]
    most = max(len(rows) for dest_rows in all_rows for rows in dest_rows)
    results = ranks(num_ranks).run(capacity_job, [(num_experts, most, False)] * num_ranks)
    for dest, result in enumerate(results):
        assert result["recv_x"].shape == (num_experts // num_ranks, most, HIDDEN)
        for l, expert_rows in enumerate(all_rows[dest]):
            count = len(expert_rows)
            assert result["recv_count"][l] == count
            expected = np.array([inputs[s][0][t] for s, t, _ in expert_rows], np.uint16).reshape(count, HIDDEN)
            np.testing.assert_array_equal(result["recv_x"][l, :count], expected)
        x, topk_idx, topk_weights = inputs[dest]
        np.testing.assert_array_equal(result["combined"],
                                      reference.expert_major_combine(x, topk_idx, topk_weights, num_experts, num_ranks))
    ranks(num_ranks).run(capacity_job, [(num_experts, most - 1, True)] * num_ranks)


LATE_SECONDS, LATE_NS = 0.5, 350_000_000


def wait_cost_job(rank, num_ranks, allgather, num_experts, late_in_dispatch, late_in_combine):
    import time
    x, topk_idx, topk_weights = rank_inputs(rank, num_experts)
    hint = dict(topk=TOPK, num_experts=num_experts)
    buffer = deep_ep.Buffer(allgather, low_latency_mode=True, backend="cpu", timeout_seconds=20,
                            num_nvl_bytes=deep_ep.Config().get_nvl_buffer_size_hint(HIDDEN * 2, num_ranks, **hint))
    # The first low_latency_dispatch sizes the region collectively, which would absorb the delay below.
    warm_x, warm_count, warm_handle, _, _ = buffer.low_latency_dispatch(x, topk_idx, MAX_TOKENS, num_experts,
                                                                         use_fp8=False)
    buffer.low_latency_combine(reference.expert_major_experts(warm_x, warm_count), topk_idx, topk_weights,
                               warm_handle)
    start = 1000
    dispatch_stats = np.full(num_ranks, start, np.int64)
    combine_stats = np.full(num_ranks, start, np.int64)
    allgather(b"")  # every rank is here before the late one sleeps
    if rank == late_in_dispatch:
        time.sleep(LATE_SECONDS)
    recv_x, recv_count, handle, _, _ = buffer.low_latency_dispatch(
        x, topk_idx, MAX_TOKENS, num_experts, use_fp8=False, dispatch_wait_recv_cost_stats=dispatch_stats)
    y = reference.expert_major_experts(recv_x, recv_count)
    allgather(b"")
    if rank == late_in_combine:
        time.sleep(LATE_SECONDS)
    combined_x, _, _ = buffer.low_latency_combine(y, topk_idx, topk_weights, handle,
                                                  combine_wait_recv_cost_stats=combine_stats)
    buffer.destroy()
    return dispatch_stats - start, combine_stats - start, combined_x.copy()


def test_deep_ep_wait_recv_cost_stats_name_the_late_rank(ranks):
    """DeepEP's dispatch/combine_wait_recv_cost_stats: each rank's entry for a rank that entered the call
    late holds most of the delay (nanoseconds); every other entry stays below it."""
    num_ranks, num_experts, late = 3, 12, (2, 0)
    inputs = [rank_inputs(rank, num_experts) for rank in range(num_ranks)]
    results = ranks(num_ranks).run(wait_cost_job, [(num_experts,) + late] * num_ranks)
    for rank, (dispatch_added, combine_added, combined_x) in enumerate(results):
        for added, late_rank in ((dispatch_added, late[0]), (combine_added, late[1])):
            assert (added >= 0).all(), (rank, added)
            for source in range(num_ranks):
                awaited_late = source == late_rank and rank != late_rank
                assert (added[source] >= LATE_NS) == awaited_late, (rank, source, added)
        x, topk_idx, topk_weights = inputs[rank]
        np.testing.assert_array_equal(
            combined_x, reference.expert_major_combine(x, topk_idx, topk_weights, num_experts, num_ranks))


def precast_fp8_job(rank, num_ranks, allgather, num_experts):
    """symmetric_dispatch of fp8 rows the caller cast (x_scales given, and as the tuple (x, x_scales)), and the
    refusals: use_fp8=False and round_scale by name; the low_latency engine refuses fp8 x (Unsupported)."""
    rng = np.random.default_rng([SEED, rank, 8])
    x, scales, topk_idx, _ = reference.draw_inputs(rng, tokens_of(rank), HIDDEN, TOPK, num_experts, fp8=True)
    buffer = make_buffer(allgather)
    given = outputs(buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts, use_fp8=True, x_scales=scales))
    as_tuple = outputs(buffer.symmetric_dispatch((x, scales), topk_idx, MAX_TOKENS, num_experts, use_fp8=True))
    messages = []
    for call, error in (
        (lambda: buffer.symmetric_dispatch(x, topk_idx, MAX_TOKENS, num_experts, x_scales=scales),
         switchyard.InvalidArgument),
        (lambda: buffer.symmetric_dispatch((x, scales), topk_idx, MAX_TOKENS, num_experts, use_fp8=True,
                                           round_scale=True), switchyard.InvalidArgument),
        (lambda: buffer.low_latency_dispatch(x, topk_idx, MAX_TOKENS, num_experts, use_fp8=True),
         switchyard.Unsupported),
    ):
        with pytest.raises(error) as refused:
            call()
        messages.append(str(refused.value))
    buffer.destroy()
    return given, as_tuple, messages


@pytest.mark.parametrize("num_ranks", [1, 2])
def test_symmetric_dispatch_carries_precast_fp8_rows_bitwise(ranks, num_ranks):
    num_experts = 4 * num_ranks
    inputs = []
    for rank in range(num_ranks):
        rng = np.random.default_rng([SEED, rank, 8])
        x, scales, topk_idx, _ = reference.draw_inputs(rng, tokens_of(rank), HIDDEN, TOPK, num_experts, fp8=True)
        inputs.append((x, scales, topk_idx))
    results = ranks(num_ranks).run(precast_fp8_job, [(num_experts,)] * num_ranks)
    for dest, (given, as_tuple, messages) in enumerate(results):
        rows = reference.expert_major_dispatch([idx for _, _, idx in inputs], num_experts, dest)
        assert given["recv_x"].dtype == np.uint8 and given["recv_x_scales"].dtype == np.float32
        for l, expert_rows in enumerate(rows):
            count = len(expert_rows)
            assert given["recv_count"][l] == count
            want_x = np.array([inputs[s][0][t] for s, t, _ in expert_rows], np.uint8).reshape(count, HIDDEN)
            want_scales = np.array([inputs[s][1][t] for s, t, _ in expert_rows], np.float32).reshape(count, -1)
            for got in (given, as_tuple):
                np.testing.assert_array_equal(got["recv_x"][l, :count], want_x)
                # The caller's scale bits (negative ones included), not a cast's.
                np.testing.assert_array_equal(got["recv_x_scales"][l, :count].view(np.uint32),
                                              want_scales.view(np.uint32))
                np.testing.assert_array_equal(got["src_info"][l, :count], [t for _, t, _ in expert_rows])
        assert messages[0].startswith("use_fp8: expected true with fp8_e4m3 x"), messages[0]
        assert messages[1].startswith("round_scale: expected false with fp8_e4m3 x"), messages[1]
        assert messages[2].startswith("x: fp8_e4m3 input") and "symmetric engine" in messages[2], messages[2]
