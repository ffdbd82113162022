"""switchyard.MoE (the MoE layer, docs/MOE.md) on the CPU backend, ranks as processes: every rank's y
bitwise against the library's reference layer (switchyard._C._testing.moe_reference) in the bf16 and fp8
recipes, with N = 0 on a rank and k = 1, near an independent float64 evaluation, and named refusals."""
import numpy as np
import pytest

import reference
import switchyard
from switchyard import _C

HIDDEN, INTERMEDIATE, MAX_TOKENS = 128, 128, 8
SEED = 21


def draw_weights(rng, local_experts, fp8, intermediate=INTERMEDIATE):
    """w1 [L, 2I, H], w2 [L, H, I] as bits (bf16: uint16; fp8: uint8 with f32 [.., /128, /128] scales)."""
    shapes = [(local_experts, 2 * intermediate, HIDDEN), (local_experts, HIDDEN, intermediate)]
    if not fp8:
        return [reference.f32_to_bf16(rng.uniform(-1, 1, shape) / np.sqrt(shape[2])) for shape in shapes] + [None, None]
    weights = []
    for shape in shapes:
        bits = rng.integers(0, 0x7F, size=shape, dtype=np.uint8)  # finite e4m3 magnitudes (0x7f is NaN)
        bits |= (rng.integers(0, 2, size=shape, dtype=np.uint8) << 7)  # and signs
        weights.append(bits)
    scales = [rng.uniform(2.0**-12, 2.0**-9, (s[0], s[1] // 128, s[2] // 128)).astype(np.float32) for s in shapes]
    return weights + scales


def rank_data(num_ranks, num_experts, topk, fp8, tokens, intermediate=INTERMEDIATE):
    """Every rank's inputs and weights, the same on every process."""
    data = []
    for rank in range(num_ranks):
        rng = np.random.default_rng([SEED, rank, topk, int(fp8)])
        x, _, topk_idx, topk_weights = reference.draw_inputs(rng, tokens[rank], HIDDEN, topk, num_experts)
        data.append((x, topk_idx, topk_weights, *draw_weights(rng, num_experts // num_ranks, fp8, intermediate)))
    return data


def make_buffer(allgather, num_experts, topk):
    config = switchyard.Config(timeout_seconds=20)
    return switchyard.Buffer(allgather, backend="cpu", sharing="processes", config=config, max_tokens_per_rank=1,
                             hidden=HIDDEN, topk=topk, num_experts=num_experts,
                             symmetric_max_tokens_per_rank=MAX_TOKENS)


def layer_job(rank, num_ranks, allgather, num_experts, topk, fp8, tokens, heap=False):
    x, topk_idx, topk_weights, w1, w2, w1_scales, w2_scales = rank_data(num_ranks, num_experts, topk, fp8,
                                                                       tokens)[rank]
    if heap:  # every heap-resident tensor the layer uses: its expert outputs and (fp8) its dispatch outputs
        config = switchyard.Config(timeout_seconds=20)
        buffer = switchyard.Buffer(allgather, backend="cpu", sharing="processes", config=config,
                                   max_tokens_per_rank=1, hidden=HIDDEN, topk=topk, num_experts=num_experts,
                                   symmetric_max_tokens_per_rank=MAX_TOKENS,
                                   symmetric_heap_output_rows_per_expert=num_ranks * MAX_TOKENS,
                                   symmetric_heap_receive_rows_per_expert=num_ranks * MAX_TOKENS)
    else:
        buffer = make_buffer(allgather, num_experts, topk)
    moe = switchyard.MoE(buffer, w1, w2, w1_scales=w1_scales, w2_scales=w2_scales, num_experts=num_experts,
                         max_tokens_per_rank=MAX_TOKENS)
    assert (moe.hidden, moe.intermediate, moe.weight_dtype) == (HIDDEN, INTERMEDIATE, "fp8_e4m3" if fp8 else "bf16")
    y = moe(x, topk_idx, topk_weights)
    out = np.full_like(y, 0xA5A5)
    again = moe(x, topk_idx, topk_weights, out=out)
    assert again is out
    buffer.destroy()
    return y.copy(), out.copy()


def float64_layer(data, num_ranks, num_experts, rank):
    """The bf16 recipe in float64, without its roundings: an independent check of what the layer computes."""
    x, topk_idx, topk_weights = data[rank][:3]
    local = num_experts // num_ranks
    y = np.zeros((x.shape[0], HIDDEN))
    for t in range(x.shape[0]):
        for j in range(topk_idx.shape[1]):
            expert = topk_idx[t, j]
            if expert < 0:
                continue
            w1, w2 = data[expert // local][3][expert % local], data[expert // local][4][expert % local]
            h = reference.bf16_to_f32(w1).astype(np.float64) @ reference.bf16_to_f32(x[t]).astype(np.float64)
            gate, up = h[:INTERMEDIATE], h[INTERMEDIATE:]
            a = gate / (1 + np.exp(-gate)) * up
            y[t] += topk_weights[t, j] * (reference.bf16_to_f32(w2).astype(np.float64) @ a)
    return y


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("num_ranks,topk,tokens", [(1, 2, [6]), (2, 1, [5, 0]), (2, 3, [7, 4])],
                         ids=["r1_k2", "r2_k1_one_rank_empty", "r2_k3"])
@pytest.mark.parametrize("heap", [False, True], ids=["workspace", "heap"])
def test_layer_matches_the_reference_bitwise(ranks, num_ranks, topk, tokens, fp8, heap):
    num_experts = 4 * num_ranks
    results = ranks(num_ranks).run(layer_job, [(num_experts, topk, fp8, tokens, heap)] * num_ranks)
    data = rank_data(num_ranks, num_experts, topk, fp8, tokens)
    columns = list(zip(*data))
    expected = _C._testing.moe_reference(*columns[:5], [s for s in columns[5] if s is not None],
                                         [s for s in columns[6] if s is not None], num_experts)
    for rank, (y, again) in enumerate(results):
        assert y.dtype == np.uint16 and y.shape == (tokens[rank], HIDDEN)
        np.testing.assert_array_equal(y, expected[rank])
        np.testing.assert_array_equal(again, y)  # run after run, into a preallocated output
        if not fp8 and tokens[rank]:
            exact = float64_layer(data, num_ranks, num_experts, rank)
            error = np.abs(reference.bf16_to_f32(y) - exact).max()
            assert error <= 0.02 * np.abs(exact).max() + 1e-6, error


def interleaved_job(rank, num_ranks, allgather, num_experts, topk, fp8, tokens, expert_output="local"):
    x, topk_idx, topk_weights, w1, w2, w1_scales, w2_scales = rank_data(num_ranks, num_experts, topk, fp8, tokens,
                                                                       intermediate=256)[rank]
    buffer = make_buffer(allgather, num_experts, topk)
    moe = switchyard.MoE(buffer, switchyard.interleave_gate_up(w1), w2,
                         w1_scales=None if w1_scales is None else switchyard.interleave_gate_up(w1_scales),
                         w2_scales=w2_scales, num_experts=num_experts, max_tokens_per_rank=MAX_TOKENS,
                         gate_up="interleaved", expert_output=expert_output)
    y = moe(x, topk_idx, topk_weights).copy()
    buffer.destroy()
    return y


@pytest.mark.parametrize("expert_output", ["local", "home"])
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_interleaved_gate_up_gives_the_bits_of_the_halves(ranks, fp8, expert_output):
    """W1 (and its scales) through switchyard.interleave_gate_up, the layer told gate_up="interleaved": the
    reference's y of the original halves, bit for bit (I = 256, so the layouts differ); likewise with the
    expert outputs written home (expert_output="home")."""
    num_ranks, num_experts, topk, tokens = 2, 8, 2, [6, 5]
    results = ranks(num_ranks).run(interleaved_job, [(num_experts, topk, fp8, tokens, expert_output)] * num_ranks)
    data = rank_data(num_ranks, num_experts, topk, fp8, tokens, intermediate=256)
    columns = list(zip(*data))
    expected = _C._testing.moe_reference(*columns[:5], [s for s in columns[5] if s is not None],
                                         [s for s in columns[6] if s is not None], num_experts)
    for rank, y in enumerate(results):
        np.testing.assert_array_equal(y, expected[rank])


def test_interleave_gate_up_moves_whole_blocks():
    w1 = np.arange(2 * 512 * 4, dtype=np.uint16).reshape(2, 512, 4)  # L 2, I 256: blocks of 64 rows
    out = switchyard.interleave_gate_up(w1)
    assert out.shape == w1.shape and out.dtype == w1.dtype and not np.shares_memory(out, w1)
    for expert in range(2):
        for block, source in enumerate([0, 4, 1, 5, 2, 6, 3, 7]):  # gate 0, up 0, gate 1, up 1, ...
            np.testing.assert_array_equal(out[expert, 64 * block:64 * (block + 1)],
                                          w1[expert, 64 * source:64 * (source + 1)])
    scales = np.arange(2 * 4 * 2, dtype=np.float32).reshape(2, 4, 2)  # one row per 128 rows of a projection
    np.testing.assert_array_equal(switchyard.interleave_gate_up(scales)[0], scales[0][[0, 2, 1, 3]])
    with pytest.raises(switchyard.InvalidArgument, match="w1: expected dimension 1 a multiple of 256"):
        switchyard.interleave_gate_up(np.zeros((1, 384, 4), dtype=np.uint16))
    with pytest.raises(switchyard.InvalidArgument, match="w1: expected a 3-d array"):
        switchyard.interleave_gate_up(np.zeros((512, 4), dtype=np.uint16))


def precast_job(rank, num_ranks, allgather, num_experts, topk, tokens):
    """fp8 weights fed fp8 x that the caller cast (arbitrary e4m3 bits and f32 scales): x_scales given, and as the
    tuple (x, x_scales); then the layer with bf16 weights refuses fp8 x by name."""
    _, topk_idx, topk_weights, w1, w2, w1_scales, w2_scales = rank_data(num_ranks, num_experts, topk, True,
                                                                       tokens)[rank]
    x, scales = precast_x(rank, tokens)
    buffer = make_buffer(allgather, num_experts, topk)
    moe = switchyard.MoE(buffer, w1, w2, w1_scales=w1_scales, w2_scales=w2_scales, num_experts=num_experts,
                         max_tokens_per_rank=MAX_TOKENS)
    y = moe(x, topk_idx, topk_weights, x_scales=scales).copy()
    as_tuple = moe((x, scales), topk_idx, topk_weights).copy()
    bf16_w1, bf16_w2 = draw_weights(np.random.default_rng(rank), num_experts // num_ranks, False)[:2]
    bf16_moe = switchyard.MoE(buffer, bf16_w1, bf16_w2, num_experts=num_experts, max_tokens_per_rank=MAX_TOKENS)
    with pytest.raises(switchyard.InvalidArgument) as refused:
        bf16_moe((x, scales), topk_idx, topk_weights)
    buffer.destroy()
    return y, as_tuple, str(refused.value)


def precast_x(rank, tokens):
    """Arbitrary finite e4m3 bits and positive f32 scales per 128 channels: no cast gives these scales."""
    rng = np.random.default_rng([SEED, rank, 99])
    bits = rng.integers(0, 0x7F, size=(tokens[rank], HIDDEN), dtype=np.uint8)
    bits |= rng.integers(0, 2, size=bits.shape, dtype=np.uint8) << 7
    return bits, rng.uniform(2.0**-9, 2.0**-4, (tokens[rank], HIDDEN // 128)).astype(np.float32)


@pytest.mark.parametrize("num_ranks,topk,tokens", [(1, 1, [5]), (2, 2, [6, 0])], ids=["r1_k1", "r2_one_rank_empty"])
def test_precast_fp8_x_matches_the_reference_bitwise(ranks, num_ranks, topk, tokens):
    num_experts = 4 * num_ranks
    results = ranks(num_ranks).run(precast_job, [(num_experts, topk, tokens)] * num_ranks)
    data = rank_data(num_ranks, num_experts, topk, True, tokens)
    columns = list(zip(*data))
    xs, scales = zip(*(precast_x(rank, tokens) for rank in range(num_ranks)))
    expected = _C._testing.moe_reference(list(xs), *columns[1:5], list(columns[5]), list(columns[6]), num_experts,
                                         x_scales=list(scales))
    for rank, (y, as_tuple, refused) in enumerate(results):
        assert y.dtype == np.uint16 and y.shape == (tokens[rank], HIDDEN)
        np.testing.assert_array_equal(y, expected[rank])
        np.testing.assert_array_equal(as_tuple, y)
        assert "x: expected bf16 with bf16 weights (fp8 x needs fp8 weights)" in refused, refused


def refusals_job(rank, num_ranks, allgather):
    x, topk_idx, topk_weights, w1, w2, _, _ = rank_data(1, 4, 2, False, [4])[0]
    buffer = make_buffer(allgather, 4, 2)
    messages = []
    for call in (
        lambda: switchyard.MoE(buffer, w1, w2[:, :, :64].copy(), num_experts=4, max_tokens_per_rank=MAX_TOKENS),
        lambda: switchyard.MoE(buffer, w1, w2, num_experts=4, max_tokens_per_rank=MAX_TOKENS + 1),
        lambda: switchyard.MoE(buffer, w1.view(np.int16), w2, num_experts=4, max_tokens_per_rank=MAX_TOKENS),
        lambda: switchyard.MoE(buffer, w1, w2, num_experts=4, max_tokens_per_rank=MAX_TOKENS,
                               expert_output="remote"),
    ):
        with pytest.raises(switchyard.InvalidArgument) as refused:
            call()
        messages.append(str(refused.value))
    moe = switchyard.MoE(buffer, w1, w2, num_experts=4, max_tokens_per_rank=MAX_TOKENS)
    with pytest.raises(switchyard.InvalidArgument) as refused:
        moe(x[:, :64].copy(), topk_idx, topk_weights)
    messages.append(str(refused.value))
    with pytest.raises(switchyard.InvalidArgument) as refused:
        moe(x.view(np.uint8)[:, :HIDDEN].copy(), topk_idx, topk_weights,
            x_scales=np.ones((4, 1), np.float32))
    messages.append(str(refused.value))
    buffer.destroy()
    return messages


def test_bad_weights_and_calls_are_refused_by_name(ranks):
    messages = ranks(1).run(refusals_job)[0]
    assert "weights.w2: expected size 128 in dimension 2" in messages[0]
    assert "max_tokens_per_rank: expected 1..8" in messages[1]
    assert "w1" in messages[2]
    assert "expert_output: expected 'local' or 'home', got 'remote'" in messages[3]
    assert "x: expected size 128 in dimension 1 (H of the weights)" in messages[4]
    assert "x: expected bf16 with bf16 weights" in messages[5]


def torch_job(rank, num_ranks, allgather):
    import torch

    x, topk_idx, topk_weights, w1, w2, _, _ = rank_data(1, 4, 2, False, [6])[0]
    buffer = make_buffer(allgather, 4, 2)

    def bf16(bits):
        return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)

    moe = switchyard.MoE(buffer, bf16(w1), bf16(w2), num_experts=4, max_tokens_per_rank=MAX_TOKENS)
    y = moe(bf16(x), torch.from_numpy(topk_idx), torch.from_numpy(topk_weights))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and tuple(y.shape) == (6, HIDDEN)
    buffer.destroy()
    return y.view(torch.int16).numpy().view(np.uint16).copy()


def test_torch_tensors_in_and_out(ranks):
    """torch's bfloat16 is taken as it is, and y comes back as a torch tensor with the same bits."""
    pytest.importorskip("torch")
    y = ranks(1).run(torch_job)[0]
    data = rank_data(1, 4, 2, False, [6])
    columns = list(zip(*data))
    expected = _C._testing.moe_reference(*columns[:5], [], [], 4)
    np.testing.assert_array_equal(y, expected[0])


def torch_precast_job(rank, num_ranks, allgather):
    import torch

    _, topk_idx, topk_weights, w1, w2, w1_scales, w2_scales = rank_data(1, 4, 2, True, [6])[0]
    x, scales = precast_x(0, [6])
    buffer = make_buffer(allgather, 4, 2)

    def fp8(bits):
        return torch.from_numpy(bits).view(torch.float8_e4m3fn)

    moe = switchyard.MoE(buffer, fp8(w1), fp8(w2), w1_scales=torch.from_numpy(w1_scales),
                         w2_scales=torch.from_numpy(w2_scales), num_experts=4, max_tokens_per_rank=MAX_TOKENS)
    y = moe((fp8(x), torch.from_numpy(scales)), torch.from_numpy(topk_idx), torch.from_numpy(topk_weights))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and tuple(y.shape) == (6, HIDDEN)
    buffer.destroy()
    return y.view(torch.int16).numpy().view(np.uint16).copy()


def test_torch_precast_fp8_x(ranks):
    """torch's float8_e4m3fn x with its f32 scales (the tuple form): the reference's y, bit for bit."""
    pytest.importorskip("torch")
    y = ranks(1).run(torch_precast_job)[0]
    columns = list(zip(*rank_data(1, 4, 2, True, [6])))
    expected = _C._testing.moe_reference([precast_x(0, [6])[0]], *columns[1:5], list(columns[5]), list(columns[6]),
                                         4, x_scales=[precast_x(0, [6])[1]])
    np.testing.assert_array_equal(y, expected[0])
