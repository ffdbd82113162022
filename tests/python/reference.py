"""A small NumPy reference of the `normal` engine's semantics (DESIGN.md), one node.

bf16 values travel as their bits (uint16), fp8 as uint8: the engine copies them bit for bit.
"""
import numpy as np


def bf16_to_f32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values):
    """Round to nearest, ties to even (finite inputs)."""
    bits = np.asarray(values, np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def draw_inputs(rng, num_tokens, hidden, topk, num_experts, fp8=False, none_fraction=0.25):
    """One rank's inputs: x (bf16 bits, or fp8 bits with f32 scales), topk_idx with distinct experts
    per token and some -1 slots, topk_weights."""
    if fp8:
        x = rng.integers(0, 256, size=(num_tokens, hidden), dtype=np.uint8)
        scales = rng.standard_normal((num_tokens, hidden // 128)).astype(np.float32)
    else:
        x = f32_to_bf16(rng.standard_normal((num_tokens, hidden)).astype(np.float32))
        scales = None
    topk_idx = np.argsort(rng.random((num_tokens, num_experts)), axis=1)[:, :topk].astype(np.int64)
    topk_idx[rng.random((num_tokens, topk)) < none_fraction] = -1
    topk_weights = rng.random((num_tokens, topk)).astype(np.float32)
    return x, scales, topk_idx, topk_weights


def layout(topk_idx, num_experts, num_ranks):
    experts_per_rank = num_experts // num_ranks
    num_tokens = topk_idx.shape[0]
    valid = topk_idx >= 0
    num_tokens_per_expert = np.bincount(topk_idx[valid], minlength=num_experts).astype(np.int32)
    is_token_in_rank = np.zeros((num_tokens, num_ranks), bool)
    rows, slots = np.nonzero(valid)
    is_token_in_rank[rows, topk_idx[rows, slots] // experts_per_rank] = True
    num_tokens_per_rank = is_token_in_rank.sum(axis=0).astype(np.int32)
    return num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank


def dispatch(inputs, num_experts, expert_alignment=1):
    """inputs[s] = (x, scales, topk_idx, topk_weights) of source rank s. Per destination d: a dict of
    recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert and the
    (source rank, source token) of each row."""
    num_ranks = len(inputs)
    experts_per_rank = num_experts // num_ranks
    outputs = []
    for dest in range(num_ranks):
        sources = []
        for source, (_, _, topk_idx, _) in enumerate(inputs):
            on_dest = (topk_idx >= 0) & (topk_idx // experts_per_rank == dest)
            sources += [(source, token) for token in np.nonzero(on_dest.any(axis=1))[0]]
        x0, scales0, idx0, _ = inputs[0]
        recv_x = np.array([inputs[s][0][t] for s, t in sources], x0.dtype).reshape(len(sources), x0.shape[1])
        recv_scales = None
        if scales0 is not None:
            recv_scales = np.array([inputs[s][1][t] for s, t in sources], np.float32).reshape(
                len(sources), scales0.shape[1])
        topk = idx0.shape[1]
        recv_idx = np.full((len(sources), topk), -1, np.int64)
        recv_w = np.zeros((len(sources), topk), np.float32)
        for row, (s, t) in enumerate(sources):
            ids = inputs[s][2][t]
            here = (ids >= 0) & (ids // experts_per_rank == dest)
            recv_idx[row, here] = ids[here] % experts_per_rank
            recv_w[row, here] = inputs[s][3][t][here]
        counts = np.bincount(recv_idx[recv_idx >= 0], minlength=experts_per_rank)
        aligned = [int(-(-c // expert_alignment) * expert_alignment) for c in counts]
        outputs.append(dict(recv_x=recv_x, recv_x_scales=recv_scales, recv_topk_idx=recv_idx,
                            recv_topk_weights=recv_w, num_recv_tokens_per_expert=aligned, sources=sources))
    return outputs


def combine(ys, weights, dispatched, num_tokens_per_source, ranks_per_node=None, biases=None):
    """ys[d]: bf16 bits [M_d, H] in d's receive order. out[t] = the fp32 sum from +0 over the ranks d
    that received t in ascending order, rounded to bf16 once; the weights are summed the same way.
    With ranks_per_node (more than one node): each node's ranks are summed so, the node's partial is
    rounded to bf16, and the partials are summed in ascending node order in fp32, rounded once.
    biases[s]: (bias0, bias1) of home rank s, bf16 bits [N_s, H] or None each: the final sum (over the
    ranks on one node, over the node partials across nodes) starts at bias0 + bias1 instead of +0."""
    num_ranks = len(ys)
    ranks_per_node = ranks_per_node or num_ranks
    hidden = ys[0].shape[1]
    topk = dispatched[0]["recv_topk_idx"].shape[1]
    outputs = []
    for source in range(num_ranks):
        shape, shape_w = (num_tokens_per_source[source], hidden), (num_tokens_per_source[source], topk)
        start = np.zeros(shape, np.float32)
        if biases is not None:
            first, second = (np.zeros(shape, np.float32) if b is None else bf16_to_f32(b) for b in biases[source])
            start = first + second
        accumulated, accumulated_w = start, np.zeros(shape_w, np.float32)
        for node_start in range(0, num_ranks, ranks_per_node):  # ascending: the order is part of the contract
            partial, partial_w = np.zeros(shape, np.float32), np.zeros(shape_w, np.float32)
            if ranks_per_node == num_ranks:
                partial = start
            reached = np.zeros(shape[0], bool)  # tokens with a row on this node
            for dest in range(node_start, node_start + ranks_per_node):
                for row, (s, t) in enumerate(dispatched[dest]["sources"]):
                    if s == source:
                        partial[t] = partial[t] + bf16_to_f32(ys[dest][row])
                        partial_w[t] = partial_w[t] + weights[dest][row]
                        reached[t] = True
            if ranks_per_node == num_ranks:  # one node: no intermediate rounding
                accumulated, accumulated_w = partial, partial_w
            else:  # a node without a row for a token adds nothing (not even +0: a -0.0 bias start stays)
                accumulated = np.where(reached[:, None], accumulated + bf16_to_f32(f32_to_bf16(partial)),
                                       accumulated)
                accumulated_w = accumulated_w + partial_w
        outputs.append((f32_to_bf16(accumulated), accumulated_w))
    return outputs


def expert(recv_x_bits, recv_topk_idx):
    """A stand-in for the experts: row * (1 + the first local expert id of the row) + 0.25, in fp32,
    rounded to bf16."""
    first = np.where(recv_topk_idx >= 0, recv_topk_idx, np.iinfo(np.int64).max).min(axis=1, initial=np.iinfo(np.int64).max)
    first = np.where(first == np.iinfo(np.int64).max, 0, first).astype(np.float32)
    return f32_to_bf16(bf16_to_f32(recv_x_bits) * (1.0 + first)[:, None] + np.float32(0.25))


# ---- the expert-major engines (low_latency, symmetric) -------------------------------------------
def expert_major_dispatch(topk_idxs, num_experts, dest):
    """Rows of `dest`'s local experts: per local expert l, the list of (source, token, slot) in the
    engines' order (source rank ascending, then (token, slot) order)."""
    num_ranks = len(topk_idxs)
    local = num_experts // num_ranks
    rows = []
    for l in range(local):
        expert = dest * local + l
        rows.append([(s, int(t), int(j)) for s in range(num_ranks)
                     for t, j in zip(*np.nonzero(topk_idxs[s] == expert))])
    return rows


def expert_major_expert(x_bits, local_expert):
    """A stand-in expert on bf16 bits: x * (1 + local_expert) + 0.25 in fp32, rounded to bf16."""
    with np.errstate(all="ignore"):  # rows past recv_count are not written: anything may be there
        return f32_to_bf16(bf16_to_f32(x_bits) * np.float32(1 + local_expert) + np.float32(0.25))


def expert_major_experts(recv_x, recv_count):
    """expert_major_expert on every local expert's received rows of recv_x [L, C, H] (rows past
    recv_count stay 0: combine never reads them)."""
    y = np.zeros_like(recv_x)
    for l in range(recv_x.shape[0]):
        count = int(recv_count[l])
        y[l, :count] = expert_major_expert(recv_x[l, :count], l)
    return y


def expert_major_combine(x, topk_idx, topk_weights, num_experts, num_ranks, biases=(None, None)):
    """out[t] = sum over valid slots j ascending of w[t, j] * expert(x[t]) in fp32 from +0 (or from
    bias0 + bias1, bf16 bits [N, H] or None each), rounded to bf16 once. Computed as multiply then
    add: equal to the engines' fused multiply-add when every product is exact (weights that are
    powers of two)."""
    local = num_experts // num_ranks
    first, second = (np.zeros(x.shape, np.float32) if b is None else bf16_to_f32(b) for b in biases)
    out = first + second
    for t in range(x.shape[0]):
        for j in range(topk_idx.shape[1]):
            expert = int(topk_idx[t, j])
            if expert >= 0:
                y = bf16_to_f32(expert_major_expert(x[t], expert % local))
                out[t] = out[t] + topk_weights[t, j] * y
    return f32_to_bf16(out)
