"""switchyard.deep_ep speaks DeepEP V1's formats (issue 19): topk_idx_t, per-call Configs that fit
the Buffer, the normal handle as DeepEP's 6-tuple with DeepEP's contents and dtypes, and fp8 scales
in any layout. CPU backend, ranks as processes; expectations are plain loops over all ranks' inputs."""
import gc
import sys

import numpy as np
import pytest

import reference
import switchyard
from switchyard import deep_ep

HIDDEN, TOPK, NUM_EXPERTS = 256, 3, 12
SEED = 19


def rank_inputs(rank, fp8=False):
    rng = np.random.default_rng([SEED, rank])
    return reference.draw_inputs(rng, 17 + 6 * rank, HIDDEN, TOPK, NUM_EXPERTS, fp8=fp8)


def make_buffer(allgather, num_ranks, **kwargs):
    num_nvl_bytes = deep_ep.Config().get_nvl_buffer_size_hint(HIDDEN * 2, num_ranks, topk=TOPK,
                                                               num_experts=NUM_EXPERTS)
    return deep_ep.Buffer(allgather, num_nvl_bytes=num_nvl_bytes, backend="cpu", timeout_seconds=20, **kwargs)


def test_topk_idx_t_is_the_int64_of_the_framework():
    if "torch" in sys.modules or _torch_installed():
        import torch
        assert deep_ep.topk_idx_t is torch.int64
    else:
        assert deep_ep.topk_idx_t is np.int64
    with pytest.raises(AttributeError, match="no_such_name"):
        deep_ep.no_such_name


def _torch_installed():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


# ---- the normal handle ----------------------------------------------------------------------------
def handle_job(rank, num_ranks, allgather):
    x, _, topk_idx, topk_weights = rank_inputs(rank)
    # Rows of x hold their source rank, as DeepEP's test_intranode checks them with rank_prefix_matrix.
    x = np.full_like(x, reference.f32_to_bf16(np.float32(rank)))
    buffer = make_buffer(allgather, num_ranks)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
    kwargs = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    recv_x, _, recv_weights, _, handle, _ = buffer.dispatch(x, topk_idx=topk_idx, topk_weights=topk_weights,
                                                            **kwargs)
    # Six entries and truthy before they are made; made once, on first read: every read gives the same
    # arrays (indexing, unpacking, slicing); equal only to itself.
    sized = len(handle) == 6 and bool(handle)
    first, *rest = handle
    made_once = (sized and handle[0] is first and handle[1:][0] is rest[0] and len(tuple(handle)) == 6 and
                 handle == handle and handle != buffer.dispatch(x, topk_idx=topk_idx, **kwargs)[4])
    # The tuple goes back into combine and into a cached dispatch; a plain tuple is refused.
    combined, _, _ = buffer.combine(recv_x, handle, topk_weights=recv_weights)
    cached_x = buffer.dispatch(x, handle=handle)[0]
    with pytest.raises(switchyard.InvalidArgument, match=r"combine: handle: expected the handle a dispatch"):
        buffer.combine(recv_x, tuple(handle))
    with pytest.raises(switchyard.InvalidArgument, match=r"dispatch: handle: expected the handle a dispatch"):
        buffer.dispatch(x, handle=list(handle))
    worst = buffer.dispatch(x, topk_idx=topk_idx, topk_weights=topk_weights, num_worst_tokens=64, **kwargs)[4]
    buffer.destroy()
    entries = [np.array(entry) for entry in handle]
    return dict(entries=entries, dtypes=[entry.dtype for entry in entries], num_channels=handle.native.num_channels,
                recv_x=recv_x, cached_x=cached_x, combined=combined, is_tuple=isinstance(handle, tuple),
                made_once=made_once,
                worst_recv_src_idx_rows=worst[3].shape[0])


def channel_of(token, num_tokens, num_channels):
    """switchyard's split: channel c owns source tokens [N * c // C, N * (c + 1) // C)."""
    return max(c for c in range(num_channels) if num_tokens * c // num_channels <= token)


@pytest.mark.parametrize("num_ranks", [1, 3])
def test_normal_handle_is_deepeps_tuple_with_deepeps_contents(ranks, num_ranks):
    results = ranks(num_ranks).run(handle_job)
    in_rank = [reference.layout(rank_inputs(r)[2], NUM_EXPERTS, num_ranks)[2] for r in range(num_ranks)]
    for rank, result in enumerate(results):
        context = f"seed {SEED}, rank {rank} of {num_ranks}"
        (rank_prefix_matrix, channel_prefix_matrix, recv_channel_prefix_matrix, recv_src_idx, is_token_in_rank,
         send_head) = result["entries"]
        assert result["is_tuple"] and len(result["entries"]) == 6 and result["made_once"], context
        assert [str(d) for d in result["dtypes"]] == ["int32"] * 4 + ["bool", "int32"], context
        num_channels, num_tokens = result["num_channels"], in_rank[rank].shape[0]

        # rank_prefix_matrix[i, rank]: tokens that ranks 0..i sent here; other columns are unknown here.
        received = np.cumsum([in_rank[s][:, rank].sum() for s in range(num_ranks)])
        want = np.full((num_ranks, num_ranks), deep_ep.RANK_PREFIX_UNKNOWN, np.int32)
        want[:, rank] = received
        np.testing.assert_array_equal(rank_prefix_matrix, want, err_msg=context)
        # As DeepEP's test_intranode checks it: the rows of source i all hold i.
        values = reference.bf16_to_f32(result["recv_x"])[:, 0]
        begin = 0
        for source in range(num_ranks):
            end = rank_prefix_matrix[source, rank]
            assert (values[begin:end] == source).all(), (context, source)
            begin = end
        np.testing.assert_array_equal(result["cached_x"], result["recv_x"], err_msg=context)

        want_src = np.concatenate([np.nonzero(in_rank[s][:, rank])[0] for s in range(num_ranks)]).astype(np.int32)
        np.testing.assert_array_equal(recv_src_idx, want_src, err_msg=context)
        np.testing.assert_array_equal(is_token_in_rank, in_rank[rank], err_msg=context)
        assert result["worst_recv_src_idx_rows"] == 64, context

        # The channel entries, by loops over switchyard's split.
        want_prefix = np.zeros((num_ranks, num_channels), np.int32)
        want_head = np.full((num_tokens, num_ranks), -1, np.int32)
        for dest in range(num_ranks):
            seen = [0] * num_channels
            for token in range(num_tokens):
                if in_rank[rank][token, dest]:
                    channel = channel_of(token, num_tokens, num_channels)
                    want_head[token, dest] = seen[channel]
                    seen[channel] += 1
            want_prefix[dest] = np.cumsum(seen)
        np.testing.assert_array_equal(channel_prefix_matrix, want_prefix, err_msg=context)
        np.testing.assert_array_equal(send_head, want_head, err_msg=context)
        want_recv_prefix = np.zeros((num_ranks, num_channels), np.int32)
        for source in range(num_ranks):
            tokens = np.nonzero(in_rank[source][:, rank])[0]
            source_tokens = in_rank[source].shape[0]
            for channel in range(num_channels):
                want_recv_prefix[source, channel] = sum(
                    1 for t in tokens if channel_of(t, source_tokens, num_channels) < channel)
        np.testing.assert_array_equal(recv_channel_prefix_matrix, want_recv_prefix, err_msg=context)


# ---- per-call Config ------------------------------------------------------------------------------
def config_job(rank, num_ranks, allgather):
    x, _, topk_idx, topk_weights = rank_inputs(rank)
    buffer = make_buffer(allgather, num_ranks)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
    kwargs = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                  topk_idx=topk_idx, topk_weights=topk_weights)
    outputs = {}
    # DeepEP's test_intranode tunes with configs like these: none is refused, none changes a bit.
    for config in (None, deep_ep.Config(24, 8, 256), deep_ep.Config(24, 32, 256), deep_ep.Config(2, 1, 2),
                   deep_ep.Buffer.get_dispatch_config(num_ranks)):
        recv_x, _, recv_weights, _, handle, _ = buffer.dispatch(x, config=config, **kwargs)
        combined, _, _ = buffer.combine(recv_x, handle, recv_weights, config=config)
        cached = buffer.dispatch(x, handle=handle, config=config)[0]
        outputs[repr(config)] = (recv_x, combined, cached)
    refusals = {}
    # A ring of a million slots per (channel, source) does not fit num_nvl_bytes.
    for name, call in (("dispatch", lambda c: buffer.dispatch(x, config=c, **kwargs)),
                       ("combine", lambda c: buffer.combine(recv_x, handle, config=c)),
                       ("cached", lambda c: buffer.dispatch(x, handle=handle, config=c))):
        for config in (deep_ep.Config(24, 8, 1 << 20), deep_ep.Config(23, 8, 256), "24,8,256"):
            with pytest.raises(switchyard.InvalidArgument, match=r"^config: expected") as refused:
                call(config)
            refusals[(name, repr(config))] = str(refused.value)
    buffer.destroy()
    return outputs, refusals


def test_any_config_that_fits_is_accepted_and_changes_no_bit(ranks):
    for rank, (outputs, refusals) in enumerate(ranks(2).run(config_job)):
        first = outputs["None"]
        for config, got in outputs.items():
            for name, a, b in zip(("recv_x", "combined", "cached"), first, got):
                np.testing.assert_array_equal(a, b, err_msg=f"rank {rank}, {config}, {name}")
        message = refusals[("dispatch", "deep_ep.Config(24, 8, 1048576, 6, 132)")]
        assert "fits this Buffer's" in message and "needs" in message, message
        assert "even num_sms" in refusals[("combine", "deep_ep.Config(23, 8, 256, 6, 132)")]
        assert "got str" in refusals[("cached", "'24,8,256'")]


@pytest.mark.parametrize("fields, name", [((20, 8, 8), "num_max_nvl_chunked_send_tokens"),
                                          ((20, 0, 8), "num_max_nvl_chunked_send_tokens"),
                                          ((-2, 6, 256), "num_sms"),
                                          ((20, 6, 256, 64, 64), "num_max_rdma_chunked_send_tokens")])
def test_config_refuses_what_deepep_refuses_naming_the_field(fields, name):
    with pytest.raises(switchyard.InvalidArgument, match=f"deep_ep.Config: {name}: expected"):
        deep_ep.Config(*fields)
    # DeepEP rounds the RDMA receive buffer up to whole send chunks.
    assert deep_ep.Config(20, 6, 256, 6, 128).num_max_rdma_chunked_recv_tokens == 132


# ---- fp8 scales in any layout ---------------------------------------------------------------------
def scales_job(rank, num_ranks, allgather):
    x, scales, topk_idx, topk_weights = rank_inputs(rank, fp8=True)
    buffer = make_buffer(allgather, num_ranks)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
    kwargs = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                  topk_idx=topk_idx, topk_weights=topk_weights)
    results = []
    # Row-major, then as DeepEP's tests make them: scales.T.contiguous().T (column-major storage).
    for layout in (scales, np.asfortranarray(scales), scales.T.copy().T):
        (recv_x, recv_scales), _, _, _, handle, _ = buffer.dispatch((x, layout), **kwargs)
        (cached_x, cached_scales), *_ = buffer.dispatch((x, layout), handle=handle)
        results.append((recv_x, recv_scales, cached_x, cached_scales, layout.flags["C_CONTIGUOUS"]))
    buffer.destroy()
    return results


def test_column_major_fp8_scales_dispatch_like_row_major_ones(ranks):
    num_ranks = 2
    inputs = [rank_inputs(r, fp8=True) for r in range(num_ranks)]
    expected = reference.dispatch(inputs, NUM_EXPERTS)
    for rank, results in enumerate(ranks(num_ranks).run(scales_job)):
        assert [r[4] for r in results] == [True, False, False]  # the layouts did differ
        for recv_x, recv_scales, cached_x, cached_scales, _ in results:
            np.testing.assert_array_equal(recv_x, expected[rank]["recv_x"])
            np.testing.assert_array_equal(recv_scales, expected[rank]["recv_x_scales"])
            np.testing.assert_array_equal(cached_x, expected[rank]["recv_x"])
            np.testing.assert_array_equal(cached_scales, expected[rank]["recv_x_scales"])


def test_dispatch_without_topk_idx_returns_deep_eps_formats():
    buffer = deep_ep.Buffer(lambda mine: [mine], backend="cpu")
    x, _, topk_idx, topk_weights = rank_inputs(0)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
    with_topk = buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                num_tokens_per_expert=per_expert, topk_idx=topk_idx, topk_weights=topk_weights)
    recv_x, recv_topk_idx, recv_topk_weights, counts, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    # The same rows and counts as with topk_idx, no ids or weights, and DeepEP's handle tuple.
    np.testing.assert_array_equal(recv_x, with_topk[0])
    assert recv_topk_idx is None and recv_topk_weights is None
    assert counts == with_topk[3]
    np.testing.assert_array_equal(handle[0], with_topk[4][0])
    # One rank, the identity expert: a routed token comes back as +0 + x (so -0.0 as +0.0), the rest as +0.
    combined_x, combined_topk_weights, _ = buffer.combine(recv_x, handle)
    routed = np.asarray(in_rank)[:, :1]
    summed = reference.f32_to_bf16(np.float32(0) + reference.bf16_to_f32(x))
    np.testing.assert_array_equal(combined_x, np.where(routed, summed, np.uint16(0)).astype(np.uint16))
    assert combined_topk_weights is None
    with pytest.raises(switchyard.InvalidArgument, match=r"is_token_in_rank: expected bool"):
        buffer.dispatch(x, num_tokens_per_rank=per_rank, num_tokens_per_expert=per_expert)
    buffer.destroy()


def test_a_handle_routes_as_its_dispatch_did_after_the_layout_was_dropped():
    # The layout is read during dispatch only (switchyard's handle owns a copy of is_token_in_rank): a
    # combine routes as the dispatch did after a later get_dispatch_layout replaced the remembered
    # layout and the caller dropped its references, and the memory was reused.
    buffer = deep_ep.Buffer(lambda mine: [mine], backend="cpu", timeout_seconds=10)
    x, _, topk_idx, topk_weights = rank_inputs(0)
    layout = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
    per_rank, _, per_expert, in_rank, _ = layout
    recv_x, _, _, _, handle, _ = buffer.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                                 num_tokens_per_expert=per_expert, topk_idx=topk_idx,
                                                 topk_weights=topk_weights)
    expected = buffer.combine(recv_x, handle)[0].copy()
    buffer.get_dispatch_layout(np.full_like(topk_idx, -1), NUM_EXPERTS)  # replaces the remembered layout
    del layout, per_rank, per_expert, in_rank
    gc.collect()
    scribbles = [np.full((x.shape[0], 1), True) for _ in range(8)]  # reuse freed memory, if it was freed
    np.testing.assert_array_equal(buffer.combine(recv_x, handle)[0], expected)
    del scribbles
    buffer.destroy()
