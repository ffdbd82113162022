"""torch CUDA tensors through switchyard's CUDA backend, one rank in this process: DLPack without
copies in and out, the caller's device, calls on torch's current stream, deep_ep's events, and
every engine bitwise against the CPU backend (which CI checks against the NumPy reference)."""
import gc
import json
import os
import pathlib
import tempfile

import pytest

import switchyard
import torch_support
from switchyard import _C, deep_ep
from switchyard._tensors import exported, stream_of
from torch_support import assert_same, draw_inputs, expert, expert_major_expert, skip_if_unsupported

torch = torch_support.require_torch_cuda()

HIDDEN, TOPK, NUM_EXPERTS, NUM_TOKENS, MAX_TOKENS = 512, 3, 4, 37, 48
SEED = 21
# torch.cuda._sleep spins this many GPU cycles (about 0.1 s on an H200): work queued behind it on a
# stream is still pending when the host looks, so running on the wrong stream shows.
SLEEP_CYCLES = 200_000_000


def solo(mine):
    return [mine]


def make_buffer(backend, **kwargs):
    config = switchyard.Config(timeout_seconds=torch_support.TIMEOUT_SECONDS)
    return switchyard.Buffer(solo, backend=backend, sharing="threads", config=config, max_tokens_per_rank=64,
                             hidden=HIDDEN, topk=TOPK, num_experts=NUM_EXPERTS, **kwargs)


@pytest.fixture(scope="module")
def device():
    return torch.cuda.current_device()


@pytest.fixture
def cuda_buffer():
    buffer = make_buffer("cuda")
    yield buffer
    buffer.destroy()


@pytest.fixture(scope="module")
def cpu_buffer():
    buffer = make_buffer("cpu", low_latency_max_tokens_per_rank=MAX_TOKENS, symmetric_max_tokens_per_rank=MAX_TOKENS)
    yield buffer
    buffer.destroy()


@pytest.fixture
def cuda_expert_major_buffer():
    try:
        buffer = make_buffer("cuda", low_latency_max_tokens_per_rank=MAX_TOKENS,
                             symmetric_max_tokens_per_rank=MAX_TOKENS)
    except switchyard.Unsupported as error:
        skip_if_unsupported(error)
    yield buffer
    buffer.destroy()


def written_late(tensor, fill):
    """A copy of `tensor` written on the current stream behind a long sleep: a call that reads it off that
    stream (unordered with it) reads `fill`."""
    late = torch.full_like(tensor, fill)
    torch.cuda._sleep(SLEEP_CYCLES)
    late.copy_(tensor)
    return late


def inputs(device=None, seed=SEED, fp8=False, num_tokens=NUM_TOKENS):
    tensors = draw_inputs(seed, 0, num_tokens, HIDDEN, TOPK, NUM_EXPERTS, fp8=fp8)
    return tuple(t.to(device) if t is not None and device is not None else t for t in tensors)


def normal_round_trip(buffer, x, scales, topk_idx, topk_weights):
    """layout -> dispatch -> experts -> combine, then cached and worst-case dispatches; CPU tensors out."""
    layout = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=NUM_EXPERTS, x_scales=scales, layout=layout,
                           expert_alignment=4)
    out = {"layout." + name: tensor for name, tensor in zip(
        ("num_tokens_per_rank", "num_tokens_per_node", "num_tokens_per_expert", "is_token_in_rank"), layout)}
    out.update(recv_x=recv.recv_x, recv_x_scales=recv.recv_x_scales, recv_topk_idx=recv.recv_topk_idx,
               recv_topk_weights=recv.recv_topk_weights, recv_expert_counts=recv.recv_expert_counts)
    if scales is None:
        y = expert(recv.recv_x, recv.recv_topk_idx)
        combined = buffer.combine(y, recv.handle, recv.recv_topk_weights)
        out.update(y=y, combined_x=combined.combined_x, combined_topk_weights=combined.combined_topk_weights)
    out["cached_x"] = buffer.dispatch(x, x_scales=scales, handle=recv.handle).recv_x
    worst = buffer.dispatch(x, topk_idx, topk_weights, num_experts=NUM_EXPERTS, x_scales=scales, num_worst_tokens=50)
    received = recv.num_recv_tokens
    out.update(worst_x=worst.recv_x[:received], worst_topk_idx=worst.recv_topk_idx,
               worst_topk_weights=worst.recv_topk_weights)
    buffer.synchronize()
    meta = dict(num_recv_tokens=recv.num_recv_tokens, per_expert=list(recv.num_recv_tokens_per_expert))
    return {name: tensor.cpu() if tensor is not None else None for name, tensor in out.items()}, meta


# ---- DLPack: no copies, the caller's framework and device ------------------------------------------
def test_cuda_inputs_are_read_where_torch_keeps_them(device):
    x, scales, topk_idx, _ = inputs(device, fp8=True)
    stream = stream_of(x)
    for name, tensor, dtype in (("x", x, "fp8_e4m3"), ("x_scales", scales, "f32"), ("topk_idx", topk_idx, "i64"),
                                ("bf16", x.view(torch.int16).view(torch.bfloat16), "bf16")):
        seen = _C._testing.view_of(exported(tensor, name, stream))
        assert seen["data"] == tensor.data_ptr(), name
        assert (seen["device"], seen["device_index"], seen["dtype"]) == ("cuda", device, dtype), name
        assert seen["shape"] == list(tensor.shape), name


def test_torch_tensors_of_a_call_on_the_current_stream_are_read_without_dlpack(device):
    x, scales, topk_idx, _ = inputs(device, fp8=True)
    stream = stream_of(x)
    grad = torch.ones((3, 8), device=device, requires_grad=True)  # read as it is: switchyard is not in autograd
    for name, tensor, dtype in (("x", x, "fp8_e4m3"), ("x_scales", scales, "f32"), ("topk_idx", topk_idx, "i64"),
                                ("bf16", x.view(torch.int16).view(torch.bfloat16), "bf16"), ("grad", grad, "f32")):
        passed = exported(tensor, name, stream, on_current_stream=True)
        assert passed is tensor, name  # no DLPack capsule: the library reads the tensor's attributes
        seen = _C._testing.view_of(passed)
        assert seen["data"] == tensor.data_ptr(), name
        assert (seen["device"], seen["device_index"], seen["dtype"]) == ("cuda", device, dtype), name
        assert seen["shape"] == list(tensor.shape), name
    for tensor, message in ((topk_idx.t(), "tensor: expected a row-major contiguous tensor"),
                            (topk_idx.to(torch.float16), "tensor: expected dtype bf16")):
        with pytest.raises(switchyard.InvalidArgument, match=message):
            _C._testing.view_of(exported(tensor, "topk_idx", stream, on_current_stream=True))


def test_library_outputs_become_torch_tensors_without_copies(device):
    for dtype, torch_dtype in (("bf16", torch.bfloat16), ("fp8_e4m3", torch.float8_e4m3fn), ("f32", torch.float32),
                               ("i64", torch.int64), ("bool", torch.bool)):
        tensor, data = _C._testing.empty("torch", dtype, [5, 7], cuda=True, device_index=device)
        assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch_dtype, dtype
        assert tensor.device == torch.device("cuda", device), dtype
        assert tensor.data_ptr() == data, dtype
        raw = tensor.view(torch.uint8)  # writable through torch, in the library's memory
        raw.zero_()
        assert int(raw.sum()) == 0, dtype


def test_outputs_are_torch_cuda_tensors_in_switchyard_memory_and_outlive_the_buffer(device):
    x, _, topk_idx, topk_weights = inputs(device)
    buffer = make_buffer("cuda")
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated(device)
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=NUM_EXPERTS)
    combined = buffer.combine(recv.recv_x, recv.handle, recv.recv_topk_weights)
    for name in ("recv_x", "recv_topk_idx", "recv_topk_weights", "recv_expert_counts"):
        tensor = getattr(recv, name)
        assert isinstance(tensor, torch.Tensor) and tensor.device == torch.device("cuda", device), name
    assert combined.combined_x.dtype == torch.bfloat16 and combined.combined_x.shape == x.shape
    # Outputs live in switchyard's allocations: torch's allocator gave nothing for them.
    assert torch.cuda.memory_allocated(device) == allocated
    expected_x, expected_combined = recv.recv_x.cpu(), combined.combined_x.cpu()

    # Preallocated torch outputs are written in place and returned as given.
    out_recv_x = torch.full_like(recv.recv_x, float("nan"))
    out_combined_x = torch.full_like(x, float("nan"))
    again = buffer.dispatch(x, topk_idx, topk_weights, num_experts=NUM_EXPERTS, out_recv_x=out_recv_x)
    again_combined = buffer.combine(again.recv_x, again.handle, out_combined_x=out_combined_x)
    assert again.recv_x is out_recv_x and again_combined.combined_x is out_combined_x

    recv_x, combined_x = recv.recv_x, combined.combined_x
    buffer.destroy()
    del recv, combined, buffer
    gc.collect()
    torch.cuda.synchronize()
    assert_same({"recv_x": (recv_x, expected_x), "combined_x": (combined_x, expected_combined),
                 "out_recv_x": (out_recv_x, expected_x), "out_combined_x": (out_combined_x, expected_combined)},
                "outputs after the Buffer is gone")


def test_tensor_on_another_device_is_refused_naming_the_argument(cuda_buffer, device):
    x, _, topk_idx, topk_weights = inputs(device)
    other = device + 1
    # Every argument goes through one placement check; here it sees real torch CUDA tensors as a
    # Buffer on another GPU would (one GPU suffices). NOTES: a tensor merely relabelled as another
    # device's (as tests/python/test_dlpack.py does with host memory) crashed inside the DLPack
    # import on the GPU machine; bench/NOTES.md.
    with pytest.raises(switchyard.InvalidArgument,
                       match=rf"^x: expected a tensor on cuda:{other} \(the Buffer's device\), got bf16\[{NUM_TOKENS}, "
                             rf"{HIDDEN}\] on cuda:{device}$"):
        _C._testing.view_for_buffer(x, "x", True, other)
    with pytest.raises(switchyard.InvalidArgument, match=rf"^topk_idx: expected a tensor on cuda:{other}"):
        _C._testing.view_for_buffer(topk_idx, "topk_idx", True, other)
    assert _C._testing.view_for_buffer(x, "x", True, device)["device_index"] == device
    with pytest.raises(switchyard.InvalidArgument, match=r"^x: expected a tensor on cuda, got bf16\[.*\] on cpu"):
        cuda_buffer.dispatch(x.cpu(), topk_idx, topk_weights, num_experts=NUM_EXPERTS)
    if torch.cuda.device_count() > 1:  # a real tensor on another GPU, through the call itself
        with pytest.raises(switchyard.InvalidArgument, match=rf"^x: expected a tensor on cuda:{device}"):
            cuda_buffer.dispatch(x.to(other), topk_idx, topk_weights, num_experts=NUM_EXPERTS)


def test_calls_keep_the_callers_current_device():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (a Buffer on another device than the current one)")
    current = torch.cuda.current_device()
    other = (current + 1) % torch.cuda.device_count()
    buffer = make_buffer("cuda", device=other)
    assert torch.cuda.current_device() == current
    x, _, topk_idx, topk_weights = inputs(other)
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=NUM_EXPERTS)
    assert recv.recv_x.device == torch.device("cuda", other)
    buffer.combine(recv.recv_x, recv.handle)
    buffer.synchronize()
    assert torch.cuda.current_device() == current
    buffer.destroy()
    del buffer
    gc.collect()
    assert torch.cuda.current_device() == current


# ---- streams and events --------------------------------------------------------------------------
def test_default_stream_is_the_legacy_stream_not_the_buffers_own(device):
    x = torch.zeros(1, device=device)
    assert torch.cuda.current_stream().cuda_stream == 0
    assert stream_of(x) == 1  # cudaStreamLegacy: 0 would be the Buffer's own stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert stream_of(x) == side.cuda_stream
    assert stream_of(x, stream=torch.cuda.default_stream()) == 1
    assert stream_of(x, stream=side) == side.cuda_stream
    assert stream_of(x, stream=0) == 0


def test_calls_run_on_the_current_torch_stream(cuda_buffer, device):
    x, _, topk_idx, topk_weights = inputs(device)
    recv = cuda_buffer.dispatch(x, topk_idx, topk_weights, num_experts=NUM_EXPERTS)
    y = expert(recv.recv_x, recv.recv_topk_idx)
    expected = cuda_buffer.combine(y, recv.handle, recv.recv_topk_weights)
    expected_recv_x, expected_combined = recv.recv_x.cpu(), expected.combined_x.cpu()

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        # Each input becomes valid only after a long wait on `side`: a call on any other stream would
        # read the poison (NaN) instead.
        late_x = written_late(x, float("nan"))
        late_recv = cuda_buffer.dispatch(late_x, topk_idx, topk_weights, num_experts=NUM_EXPERTS)
        late_y = written_late(y, float("nan"))
        combined = cuda_buffer.combine(late_y, recv.handle, recv.recv_topk_weights)
        # combine never waits on the host: the sleep before it is still running.
        assert not side.query(), "combine returned after its stream's earlier work finished"
    cuda_buffer.synchronize()  # waits for the last call's stream
    assert side.query()
    assert_same({"recv_x": (late_recv.recv_x, expected_recv_x), "combined_x": (combined.combined_x, expected_combined)},
                "calls on a side stream")

    # stream= names the stream explicitly (here the side stream, while the current one is the default).
    with torch.cuda.stream(side):
        explicit = written_late(y, float("nan"))
    out = cuda_buffer.combine(explicit, recv.handle, recv.recv_topk_weights, stream=side)
    side.synchronize()
    assert_same({"combined_x": (out.combined_x, expected_combined)}, "combine(stream=side)")


def test_deep_ep_events_order_work_across_streams(device):
    x, _, topk_idx, topk_weights = inputs(device)
    buffer = deep_ep.Buffer(solo, backend="cuda", sharing="threads", timeout_seconds=torch_support.TIMEOUT_SECONDS,
                            num_nvl_bytes=deep_ep.Config().get_nvl_buffer_size_hint(HIDDEN * 2, 1, topk=TOPK,
                                                                                    num_experts=NUM_EXPERTS))
    per_rank, _, per_expert, in_rank, event = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS, async_finish=True)
    assert isinstance(event.event, torch.cuda.Event)
    event.current_stream_wait()
    recv_x, recv_topk_idx, recv_weights, _, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
        topk_idx=topk_idx, topk_weights=topk_weights)
    y = expert(recv_x, recv_topk_idx)
    expected, _, _ = buffer.combine(y, handle, recv_weights)
    expected = expected.cpu()  # also: y is ready (the default stream has run)

    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    # async_finish: the event follows the combine on the producer stream; the consumer waits for it.
    with torch.cuda.stream(producer):
        torch.cuda._sleep(SLEEP_CYCLES)
        combined, _, event = buffer.combine(y, handle, recv_weights, async_finish=True)
    assert isinstance(event.event, torch.cuda.Event) and not event.event.query()
    with torch.cuda.stream(consumer):
        event.current_stream_wait()
        copied = combined.clone()
    # previous_event: the call waits for work captured on another stream.
    with torch.cuda.stream(producer):
        late_y = written_late(y, float("nan"))
        ready = deep_ep.Buffer.capture()
    with torch.cuda.stream(consumer):
        after_wait, _, event = buffer.combine(late_y, handle, recv_weights, previous_event=ready, async_finish=True)
        with event:  # EventOverlap as a context manager waits on exit
            pass
        after_wait = after_wait.clone()
    consumer.synchronize()
    assert_same({"copied": (copied, expected), "after_wait": (after_wait, expected)}, "deep_ep events")
    buffer.destroy()


# ---- deep_ep's get_dispatch_layout through switchyard._torch_ops (outputs allocated by torch in C++) -------
def layout_parts(layout):
    names = ("num_tokens_per_rank", "num_tokens_per_node", "num_tokens_per_expert", "is_token_in_rank")
    return dict(zip(names, layout))


def torch_ops_or_skip():
    ops = deep_ep._torch_ops()
    if os.environ.get("SWITCHYARD_EXPECT_TORCH_OPS") == "1":  # the GPU scripts build it: it must load
        assert ops is not None, "switchyard._torch_ops was built against this torch but did not load"
    if ops is None:
        pytest.skip("switchyard._torch_ops is not built against this torch")
    return ops


def test_torch_ops_layout_matches_the_general_path_bitwise_and_leaves_other_inputs_to_it(device, monkeypatch):
    ops = torch_ops_or_skip()
    num_experts = 64
    buffer = deep_ep.Buffer(solo, backend="cuda", sharing="threads", timeout_seconds=torch_support.TIMEOUT_SECONDS,
                            num_nvl_bytes=deep_ep.Config().get_nvl_buffer_size_hint(HIDDEN * 2, 1, topk=TOPK,
                                                                                    num_experts=num_experts))
    entry = buffer.switchyard_buffer._layout_entry
    generator = torch.Generator(device=device).manual_seed(SEED)
    for num_tokens in (0, 1, NUM_TOKENS, 4097):
        topk_idx = torch.randint(-1, num_experts, (num_tokens, TOPK), device=device, generator=generator)
        topk_idx[: num_tokens // 3, 0] = -1
        fast = ops.dispatch_layout(entry, topk_idx, num_experts)
        assert fast is not None and fast[0].dtype == torch.int32 and fast[3].dtype == torch.bool
        assert all(part.device == topk_idx.device for part in fast)
        general = buffer.switchyard_buffer.get_dispatch_layout(topk_idx, num_experts)
        per_rank, per_rdma_rank, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, num_experts)
        assert per_rdma_rank is None
        want = layout_parts(general)
        assert_same({name: (got, want[name]) for name, got in layout_parts(fast).items()}, f"_torch_ops, N={num_tokens}")
        assert_same({"per_rank": (per_rank, want["num_tokens_per_rank"]),
                     "per_expert": (per_expert, want["num_tokens_per_expert"]),
                     "in_rank": (in_rank, want["is_token_in_rank"])}, f"deep_ep, N={num_tokens}")

    # Enqueued on torch's current stream: topk_idx written there behind a sleep is what it reads.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = ops.dispatch_layout(entry, written_late(topk_idx, -1), num_experts)
    side.synchronize()
    assert_same({name: (got, want[name]) for name, got in layout_parts(on_side).items()}, "on a side stream")
    # And on torch's default stream, which torch reports as 0 and switchyard would take for its own stream.
    with torch.cuda.stream(torch.cuda.default_stream(device)):
        on_default = ops.dispatch_layout(entry, written_late(topk_idx, -1), num_experts)
    torch.cuda.synchronize(device)
    assert_same({name: (got, want[name]) for name, got in layout_parts(on_default).items()}, "on the default stream")
    # Without _torch_ops, deep_ep's Python path into tensors torch allocates (_torch_layout), on the default
    # stream too; the general path fails the test.
    monkeypatch.setattr(buffer, "_torch_ops", None)
    monkeypatch.setattr(buffer.switchyard_buffer, "get_dispatch_layout",
                        lambda *args, **kwargs: pytest.fail("deep_ep took the general path"))
    with torch.cuda.stream(torch.cuda.default_stream(device)):
        fallback = buffer.get_dispatch_layout(written_late(topk_idx, -1), num_experts)
    torch.cuda.synchronize(device)
    assert_same({"per_rank": (fallback[0], want["num_tokens_per_rank"]),
                 "per_expert": (fallback[2], want["num_tokens_per_expert"]),
                 "in_rank": (fallback[3], want["is_token_in_rank"])}, "deep_ep without _torch_ops, default stream")
    monkeypatch.undo()

    # Inputs this path does not take: None, and deep_ep's Python paths convert or refuse them.
    for other in (topk_idx.int(), topk_idx.cpu(), topk_idx.t().contiguous().t(), topk_idx.float()):
        assert ops.dispatch_layout(entry, other, num_experts) is None, f"{other.dtype} {other.device} {other.stride()}"
    for experts in (0, -3, 1 << 17, 2**70, 64.0):
        assert ops.dispatch_layout(entry, topk_idx, experts) is None, experts
    # The call's own refusals are switchyard's errors, naming the argument; nothing is returned.
    wide = torch.zeros((4, 33), dtype=torch.int64, device=device)
    with pytest.raises(switchyard.InvalidArgument, match="^topk_idx: expected 1..32 columns"):
        ops.dispatch_layout(entry, wide, num_experts)
    with pytest.raises(ValueError):  # not the capsule it expects
        ops.dispatch_layout(object(), topk_idx, num_experts)
    with pytest.raises(TypeError):
        ops.dispatch_layout(entry, topk_idx)

    # destroy() drops the Buffer's entry; one still held keeps the native Buffer (and its heap) alive.
    buffer.destroy()
    with pytest.raises(switchyard.Error, match="after destroy"):
        buffer.get_dispatch_layout(topk_idx, num_experts)
    held = ops.dispatch_layout(entry, topk_idx, num_experts)
    assert_same({name: (got, want[name]) for name, got in layout_parts(held).items()}, "through a held entry")
    del entry, held
    gc.collect()


# ---- deep_ep's cached dispatch and combine through switchyard._torch_ops -----------------------------------
def general_cached_dispatch(buffer, x, scales, native, num_worst_tokens=0):
    result = buffer.switchyard_buffer.dispatch(x, x_scales=scales, handle=native, num_worst_tokens=num_worst_tokens,
                                               device_counts=False)
    return result.recv_x, result.recv_x_scales


def general_combine(buffer, y, native, weights, bias0, bias1):
    result = buffer.switchyard_buffer.combine(y, native, weights, bias0=bias0, bias1=bias1)
    return result.combined_x, result.combined_topk_weights


def refuse_the_general_path(buffer, monkeypatch):
    """deep_ep's calls from here on must take switchyard._torch_ops: the general path fails the test."""

    def general(*args, **kwargs):
        raise AssertionError("deep_ep took the general path")

    monkeypatch.setattr(buffer.switchyard_buffer, "dispatch", general)
    monkeypatch.setattr(buffer.switchyard_buffer, "combine", general)


def named(pairs):
    return {f"{name}[{index}]": (got, want) for name, (gots, wants) in pairs.items()
            for index, (got, want) in enumerate(zip(gots, wants))}


def solo_deep_ep_buffer(device):
    """A one-rank CUDA deep_ep.Buffer, its _torch_ops entry, bf16 inputs (x, topk_idx, topk_weights) and fp8 ones
    (x, row-major scales)."""
    buffer = deep_ep.Buffer(solo, backend="cuda", sharing="threads", timeout_seconds=torch_support.TIMEOUT_SECONDS,
                            num_nvl_bytes=deep_ep.Config().get_nvl_buffer_size_hint(HIDDEN * 2, 1, topk=TOPK,
                                                                                    num_experts=NUM_EXPERTS))
    x, _, topk_idx, topk_weights = inputs(device)
    x_fp8, scales, _, _ = inputs(device, seed=SEED + 1, fp8=True)
    return buffer, buffer.switchyard_buffer._layout_entry, (x, topk_idx, topk_weights), (x_fp8, scales)


def test_torch_ops_cached_dispatch_and_combine_match_the_general_path_bitwise_and_leave_other_inputs_to_it(
        device, monkeypatch):
    ops = torch_ops_or_skip()
    buffer, entry, (x, topk_idx, topk_weights), (x_fp8, scales) = solo_deep_ep_buffer(device)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
    layout = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    recv_x, recv_topk_idx, recv_weights, _, handle, _ = buffer.dispatch(x, topk_idx=topk_idx,
                                                                        topk_weights=topk_weights, **layout)
    native, received = handle.native, recv_x.shape[0]
    worst_tokens = received + 7
    *_, worst_handle, _ = buffer.dispatch(x, topk_idx=topk_idx, topk_weights=topk_weights,
                                          num_worst_tokens=worst_tokens, **layout)
    y = expert(recv_x, recv_topk_idx)
    generator = torch.Generator(device=device).manual_seed(SEED)
    bias0, bias1 = (torch.randn((NUM_TOKENS, HIDDEN), generator=generator, device=device).to(torch.bfloat16)
                    for _ in range(2))
    column_major_scales = scales.T.contiguous().T  # as DeepEP's per_token_cast_to_fp8 makes them
    tuned = deep_ep.Config(deep_ep.Buffer.num_sms, 4, 128, 6, 128)  # not the recommended one: a CallTuning

    want = {"bf16": general_cached_dispatch(buffer, x, None, native),
            "fp8": general_cached_dispatch(buffer, x_fp8, scales, native),
            "worst": general_cached_dispatch(buffer, x, None, worst_handle.native, worst_tokens)}
    combines = {"plain": (None, None, None), "weights": (recv_weights, None, None),
                "weights, bias0": (recv_weights, bias0, None), "weights, both biases": (recv_weights, bias0, bias1),
                "bias1": (None, None, bias1)}
    for name, (weights, b0, b1) in combines.items():
        want[f"combine {name}"] = general_combine(buffer, y, native, weights, b0, b1)

    want["fp8, column-major scales"] = want["fp8"]
    got = {"bf16": (ops.cached_dispatch(entry, x, None, native, 0, None), None),
           "fp8": ops.cached_dispatch(entry, x_fp8, scales, native, 0, None),
           "fp8, column-major scales": ops.cached_dispatch(entry, x_fp8, column_major_scales, native, 0, None),
           "worst": (ops.cached_dispatch(entry, x, None, worst_handle.native, worst_tokens, None), None)}
    for name, (weights, b0, b1) in combines.items():
        got[f"combine {name}"] = ops.combine(entry, y, native, weights, b0, b1, None)
    # Worst-case rows past the received ones are unspecified: only the received ones are compared.
    got["worst"], want["worst"] = (got["worst"][0][:received], None), (want["worst"][0][:received], None)
    assert_same(named({name: (got[name], want[name]) for name in want}),
                f"_torch_ops against the general path, seed {SEED}")

    # deep_ep takes that path for such calls (column-major fp8 scales read in place; a per-call config).
    refuse_the_general_path(buffer, monkeypatch)
    via_deep_ep = {
        "bf16": (buffer.dispatch(x, handle=handle)[0], None),
        "fp8": buffer.dispatch((x_fp8, column_major_scales), handle=handle)[0],
        "worst": (buffer.dispatch(x, handle=worst_handle, num_worst_tokens=worst_tokens)[0][:received], None),
        "bf16 tuned": (buffer.dispatch(x, handle=handle, config=tuned)[0], None),
        "combine plain": buffer.combine(y, handle)[:2],
        "combine weights": buffer.combine(y, handle, recv_weights)[:2],
        "combine weights, bias0": buffer.combine(y, handle, recv_weights, bias=bias0)[:2],
        "combine weights, both biases": buffer.combine(y, handle, recv_weights, bias=(bias0, bias1), config=tuned)[:2],
        "combine bias1": buffer.combine(y, handle, bias=(None, bias1))[:2],
    }
    want["bf16 tuned"] = want["bf16"]
    assert_same(named({name: (via_deep_ep[name], want[name]) for name in via_deep_ep}), f"deep_ep, seed {SEED}")
    monkeypatch.undo()

    # Enqueued on torch's current stream: y written there behind a sleep is what the combine reads.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = ops.combine(entry, written_late(y, float("nan")), native, recv_weights, None, None, None)
    side.synchronize()
    assert_same(named({"on a side stream": (on_side, want["combine weights"])}), "combine on a side stream")
    # And on torch's default stream (0 to torch, the Buffer's own stream to switchyard if passed as is).
    with torch.cuda.stream(torch.cuda.default_stream(device)):
        on_default = {
            "bf16": (ops.cached_dispatch(entry, written_late(x, float("nan")), None, native, 0, None), None),
            "combine weights": ops.combine(entry, written_late(y, float("nan")), native, recv_weights, None, None,
                                           None)}
    torch.cuda.synchronize(device)
    assert_same(named({name: (got, want[name]) for name, got in on_default.items()}), "on the default stream")

    # Inputs this path does not take: None, and deep_ep's general path converts or refuses them.
    strided = x.t().contiguous().t()
    for other_x, other_scales in ((strided, None), (x.cpu(), None), (x.view(torch.int16), None), (x, scales),
                                  (x_fp8, scales.repeat(1, 2)[:, ::2]), (x_fp8, None), (x_fp8, scales.double()),
                                  (x_fp8, scales[:, :1].contiguous()), (x.view(torch.int16).cpu().numpy(), None)):
        assert ops.cached_dispatch(entry, other_x, other_scales, native, 0, None) is None, (
            f"x {getattr(other_x, 'dtype', None)} {getattr(other_x, 'device', None)}, scales "
            f"{None if other_scales is None else (other_scales.dtype, other_scales.stride())}")
    for tuning in (switchyard.CallTuning(), (0, 0), (0, 0, 1 << 40), [0, 0, 0]):
        assert ops.cached_dispatch(entry, x, None, native, 0, tuning) is None, tuning
        assert ops.combine(entry, y, native, None, None, None, tuning) is None, tuning
    assert ops.cached_dispatch(entry, x, None, native, 0.0, None) is None
    # A worst-case handle's cached dispatch without num_worst_tokens: no rows to allocate.
    assert ops.cached_dispatch(entry, x, None, worst_handle.native, 0, None) is None
    for other_y, weights, b0, b1 in ((y.t().contiguous().t(), None, None, None), (y.cpu(), None, None, None),
                                     (y.float(), None, None, None), (y, recv_weights.double(), None, None),
                                     (y, recv_weights[1:], None, None), (y, recv_weights.cpu(), None, None),
                                     (y, None, bias0[1:], None), (y, None, None, bias1.float()),
                                     (y, None, bias0[:, : HIDDEN // 2], None)):
        assert ops.combine(entry, other_y, native, weights, b0, b1, None) is None, (
            other_y.dtype, other_y.device, getattr(weights, "shape", None), getattr(b0, "shape", None))

    # The call's own refusals are switchyard's errors, naming the argument.
    with pytest.raises(switchyard.InvalidArgument, match="^handle:"):
        ops.cached_dispatch(entry, x, None, handle, 0, None)  # DeepEP's tuple, not its .native
    with pytest.raises(switchyard.InvalidArgument, match="^handle:"):
        ops.combine(entry, y, object(), None, None, None, None)
    with pytest.raises(switchyard.InvalidArgument, match="^x: expected"):
        ops.cached_dispatch(entry, x[1:], None, native, 0, None)
    with pytest.raises(switchyard.InvalidArgument, match="^x: expected"):
        ops.combine(entry, y[1:], native, None, None, None, None)
    with pytest.raises(switchyard.InvalidArgument, match="^tuning.num_channels:"):
        ops.combine(entry, y, native, None, None, None, (native.num_channels + 1, 0, 0))
    with pytest.raises(ValueError):  # not the capsule it expects
        ops.combine(object(), y, native, None, None, None, None)
    with pytest.raises(TypeError):
        ops.cached_dispatch(entry, x, None, native, 0)
    buffer.destroy()


# ---- deep_ep's fresh dispatch through switchyard._torch_ops ------------------------------------------------
def general_dispatch(buffer, x, scales, topk_idx, weights, layout, num_worst_tokens=0, expert_alignment=1):
    return buffer.switchyard_buffer.dispatch(x, topk_idx, weights, num_experts=NUM_EXPERTS, x_scales=scales,
                                             layout=layout, num_worst_tokens=num_worst_tokens,
                                             expert_alignment=expert_alignment, device_counts=False)


def test_torch_ops_fresh_dispatch_matches_the_general_path_bitwise_and_leaves_other_inputs_to_it(device, monkeypatch):
    ops = torch_ops_or_skip()
    buffer, entry, (x, topk_idx, topk_weights), (x_fp8, scales) = solo_deep_ep_buffer(device)
    layout = buffer.switchyard_buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
    parts = tuple(layout)
    received = general_dispatch(buffer, x, None, topk_idx, topk_weights, layout).recv_x.shape[0]
    worst_tokens = received + 5

    def fields(result, fp8=False, keep=None):
        """(recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights) of a general-path result or of the
        module's tuple; `keep`: the rows of recv_x (and scales) compared (worst case: the received ones)."""
        if isinstance(result, tuple):
            recv_x, recv_topk_idx, recv_weights, counts, native = result
            recv_x, recv_scales = recv_x if fp8 else (recv_x, None)
        else:
            recv_x, recv_scales, recv_topk_idx, recv_weights = (result.recv_x, result.recv_x_scales,
                                                                result.recv_topk_idx, result.recv_topk_weights)
        cut = (lambda t: t if t is None or keep is None else t[:keep])
        return cut(recv_x), cut(recv_scales), recv_topk_idx, recv_weights

    cases = {  # name: (x, scales, weights, layout, num_worst_tokens, expert_alignment, rows of recv_x compared)
        "bf16": (x, None, topk_weights, parts, 0, 1, None),
        "bf16, no weights, own layout": (x, None, None, None, 0, 1, None),
        "fp8, aligned": (x_fp8, scales, topk_weights, parts, 0, 4, None),
        "bf16, worst case": (x, None, topk_weights, parts, worst_tokens, 1, received),
    }
    first = general_dispatch(buffer, x, None, topk_idx, topk_weights, layout)
    y = expert(first.recv_x, first.recv_topk_idx)
    for name, (rows_x, rows_scales, weights, given, worst, alignment, keep) in cases.items():
        want = general_dispatch(buffer, rows_x, rows_scales, topk_idx, weights,
                                None if given is None else layout, worst, alignment)
        got = ops.dispatch(entry, rows_x, rows_scales, topk_idx, weights, given, NUM_EXPERTS, alignment, worst, None)
        assert got is not None, name
        assert list(got[3]) == list(want.num_recv_tokens_per_expert), name
        assert_same(named({name: (fields(got, rows_scales is not None, keep), fields(want, keep=keep))}), name)
        assert all(part is None or part.device == x.device for part in fields(got, rows_scales is not None)), name
        if worst == 0 and rows_scales is None and weights is not None:
            # The handle the module returns routes a combine as the general path's does (the combine's
            # weights are the received rows', as DeepEP's combine takes them: c2 of session 33 passed the
            # source tokens' and was refused by name).
            received_weights = want.recv_topk_weights
            assert_same(named({f"{name}: combine": (
                general_combine(buffer, y, got[4], received_weights, None, None),
                general_combine(buffer, y, want.handle, received_weights, None, None))}),
                f"{name}: combine on the returned handle")

    # deep_ep takes that path for its fresh dispatches (fp8 with column-major scales read in place).
    want = general_dispatch(buffer, x, None, topk_idx, topk_weights, layout)
    want_fp8 = general_dispatch(buffer, x_fp8, scales, topk_idx, topk_weights, layout)
    per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
    refuse_the_general_path(buffer, monkeypatch)
    common = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                  topk_idx=topk_idx, topk_weights=topk_weights)
    recv_x, recv_idx, recv_weights, counts, handle, _ = buffer.dispatch(x, **common)
    (recv_fp8, recv_scales), *_ = buffer.dispatch((x_fp8, scales.T.contiguous().T), **common)
    assert counts == list(want.num_recv_tokens_per_expert)
    assert_same(named({"deep_ep bf16": ((recv_x, recv_idx, recv_weights),
                                        (want.recv_x, want.recv_topk_idx, want.recv_topk_weights)),
                       "deep_ep fp8": ((recv_fp8, recv_scales), (want_fp8.recv_x, want_fp8.recv_x_scales))}),
                "deep_ep's fresh dispatch")
    assert buffer.dispatch(x, handle=handle)[0] is not None  # its handle replays (through the cached path)
    monkeypatch.undo()

    # Enqueued on torch's current stream: x written there behind a sleep is what it reads, on a side stream
    # and on torch's default stream (0 to torch; the Buffer's own stream to switchyard if passed as is).
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = ops.dispatch(entry, written_late(x, float("nan")), None, topk_idx, topk_weights, parts,
                               NUM_EXPERTS, 1, 0, None)
    side.synchronize()
    with torch.cuda.stream(torch.cuda.default_stream(device)):
        on_default = ops.dispatch(entry, written_late(x, float("nan")), None, topk_idx, topk_weights, parts,
                                  NUM_EXPERTS, 1, 0, None)
    torch.cuda.synchronize(device)
    assert_same(named({"on a side stream": (fields(on_side), fields(want)),
                       "on the default stream": (fields(on_default), fields(want))}), "streams")

    # Inputs this path does not take: None, and deep_ep's general path converts or refuses them.
    for name, args in {
        "strided x": (x.t().contiguous().t(), None, topk_idx, topk_weights, parts),
        "host x": (x.cpu(), None, topk_idx, topk_weights, parts),
        "int32 topk_idx": (x, None, topk_idx.int(), topk_weights, parts),
        "topk_idx of other tokens": (x, None, topk_idx[1:].contiguous(), topk_weights, parts),
        "f64 weights": (x, None, topk_idx, topk_weights.double(), parts),
        "weights of other k": (x, None, topk_idx, topk_weights[:, :1].contiguous(), parts),
        "int64 counts": (x, None, topk_idx, topk_weights, (parts[0].long(),) + parts[1:]),
        "a layout of three": (x, None, topk_idx, topk_weights, parts[:3]),
        "fp8 without scales": (x_fp8, None, topk_idx, topk_weights, parts),
    }.items():
        assert ops.dispatch(entry, *args, NUM_EXPERTS, 1, 0, None) is None, name
    for experts, alignment, worst, tuning in ((64.0, 1, 0, None), (0, 1, 0, None), (NUM_EXPERTS, 1, 0.0, None),
                                              (NUM_EXPERTS, 1, 0, (0, 0))):
        assert ops.dispatch(entry, x, None, topk_idx, topk_weights, parts, experts, alignment, worst, tuning) is None
    # The call's own refusals are switchyard's errors, naming the argument.
    with pytest.raises(switchyard.InvalidArgument, match="^num_experts, expert_alignment:"):
        ops.dispatch(entry, x, None, topk_idx, topk_weights, parts, NUM_EXPERTS, 0, 0, None)
    with pytest.raises(TypeError):
        ops.dispatch(entry, x, None, topk_idx, topk_weights, parts, NUM_EXPERTS, 1, 0)
    buffer.destroy()


# ---- every engine against the CPU backend, bit for bit ---------------------------------------------
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_normal_engine_matches_the_cpu_backend_bitwise(cuda_buffer, cpu_buffer, device, fp8):
    cpu_inputs = inputs(fp8=fp8)
    gpu_out, gpu_meta = normal_round_trip(cuda_buffer, *(t.to(device) if t is not None else None for t in cpu_inputs))
    cpu_out, cpu_meta = normal_round_trip(cpu_buffer, *cpu_inputs)
    assert gpu_meta == cpu_meta
    assert_same({name: (gpu_out[name], cpu_out[name]) for name in cpu_out}, f"normal engine, seed {SEED}, fp8={fp8}")


def expert_major_round_trip(buffer, engine, x, topk_idx, topk_weights, fp8):
    dispatch = getattr(buffer, f"{engine}_dispatch")
    combine = getattr(buffer, f"{engine}_combine")
    recv = dispatch(x, topk_idx, MAX_TOKENS, NUM_EXPERTS, use_fp8=fp8)
    counts = recv.recv_count.cpu().tolist()
    out = dict(recv_count=recv.recv_count, layout_range=recv.layout_range, src_info=recv.src_info)
    for local, count in enumerate(counts):  # rows past recv_count are not written
        out[f"recv_x[{local}]"] = recv.recv_x[local, :count]
        if fp8:
            out[f"recv_x_scales[{local}]"] = recv.recv_x_scales[local, :count]
    if not fp8:
        y = expert_major_expert(recv.recv_x, recv.recv_count)
        out["combined_x"] = combine(y, topk_idx, topk_weights, recv.handle).combined_x
        if engine == "low_latency":
            hooked = dispatch(x, topk_idx, MAX_TOKENS, NUM_EXPERTS, return_recv_hook=True)
            hooked.hook()
            staging = buffer.low_latency_combine_buffer(hooked.handle)
            assert isinstance(staging, type(x)) and staging.device == x.device
            staging[:, :, :HIDDEN] = expert_major_expert(hooked.recv_x, hooked.recv_count)
            result = combine(None, topk_idx, topk_weights, hooked.handle, zero_copy=True, return_recv_hook=True)
            result.hook()
            out["hook_zero_copy_combined_x"] = result.combined_x
    buffer.synchronize()
    return {name: tensor.cpu() for name, tensor in out.items()}


def test_a_hooked_combine_holds_its_torch_inputs_until_the_hook_runs(cuda_expert_major_buffer, device):
    buffer = cuda_expert_major_buffer
    x, _, topk_idx, topk_weights = inputs(device, num_tokens=MAX_TOKENS - 5)
    try:
        recv = buffer.low_latency_dispatch(x, topk_idx, MAX_TOKENS, NUM_EXPERTS)
    except switchyard.Unsupported as error:
        skip_if_unsupported(error)
    y = expert_major_expert(recv.recv_x, recv.recv_count)
    want = buffer.low_latency_combine(y, topk_idx, topk_weights, recv.handle).combined_x.clone()
    # The receive half reads topk_idx and topk_weights when the hook runs: hand it copies that the caller
    # drops at once, then let torch's allocator give their memory to tensors filled with -1.
    result = buffer.low_latency_combine(y, topk_idx.clone(), topk_weights.clone(), recv.handle, return_recv_hook=True)
    gc.collect()
    junk = [torch.full_like(tensor, -1) for tensor in (topk_idx, topk_weights) for _ in range(4)]
    result.hook()
    torch.cuda.synchronize()
    del junk
    assert torch.equal(result.combined_x, want), "the hook read inputs the caller had dropped"


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("engine", ["low_latency", "symmetric"])
def test_expert_major_engines_match_the_cpu_backend_bitwise(cuda_expert_major_buffer, cpu_buffer, device, engine,
                                                           fp8):
    x, _, topk_idx, topk_weights = inputs(num_tokens=MAX_TOKENS - 5)
    try:
        gpu = expert_major_round_trip(cuda_expert_major_buffer, engine, x.to(device), topk_idx.to(device),
                                      topk_weights.to(device), fp8)
    except switchyard.Unsupported as error:
        skip_if_unsupported(error)
    cpu = expert_major_round_trip(cpu_buffer, engine, x, topk_idx, topk_weights, fp8)
    assert_same({name: (gpu[name], cpu[name]) for name in cpu}, f"{engine}, seed {SEED}, fp8={fp8}")


def identity_round_trip(buffer, x, topk_idx, topk_weights):
    """low_latency dispatch, then combine of the received rows as they came (rows past recv_count are
    not read): (recv_x, recv_count, combined_x, the dispatch's result)."""
    recv = buffer.low_latency_dispatch(x, topk_idx, MAX_TOKENS, NUM_EXPERTS)
    combined = buffer.low_latency_combine(recv.recv_x, topk_idx, topk_weights, recv.handle).combined_x
    return recv.recv_x, recv.recv_count, combined, recv


def test_graph_replays_outlive_a_handle_dropped_after_capture(cuda_expert_major_buffer, cpu_buffer, device):
    """torch.cuda.graph captures a low-latency dispatch and its combine; the caller keeps the outputs it
    reads and drops the handle, as DeepEP's users do. What the captured calls allocated (the handle's
    tables) belongs to the graph too, so replays with new inputs copied in place stay bitwise equal to
    direct calls on the CPU backend."""
    buffer = cuda_expert_major_buffer
    x0, _, idx0, w0 = inputs(num_tokens=MAX_TOKENS - 5)
    x, topk_idx, topk_weights = x0.to(device), idx0.to(device), w0.to(device)
    identity_round_trip(buffer, x, topk_idx, topk_weights)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        recv_x, recv_count, combined, recv = identity_round_trip(buffer, x, topk_idx, topk_weights)
    del recv  # the handle: only the graph refers to its tables now
    gc.collect()
    # Fresh allocations, filled with 0xFF, take whatever memory a freed table left.
    filler = [torch.full((1 << bits,), 0xFF, dtype=torch.uint8, device=device) for bits in range(8, 23)]
    for round_ in range(3):
        x1, _, idx1, w1 = inputs(seed=SEED + 100 + round_, num_tokens=MAX_TOKENS - 5)
        x.copy_(x1)
        topk_idx.copy_(idx1)
        topk_weights.copy_(w1)
        graph.replay()
        torch.cuda.synchronize()
        want_x, want_count, want_combined, _ = identity_round_trip(cpu_buffer, x1, idx1, w1)
        got = dict(recv_count=(recv_count.cpu(), want_count), combined_x=(combined.cpu(), want_combined))
        for local, count in enumerate(want_count.tolist()):
            got[f"recv_x[{local}]"] = (recv_x[local, :count].cpu(), want_x[local, :count])
        assert_same(got, f"graph replay {round_} after the handle was dropped, seed {SEED + 100 + round_}")
    del filler


@pytest.mark.parametrize("hook", [False, True], ids=["no_hook", "hook"])
def test_each_low_latency_phase_is_one_kernel_in_torch_profiler_table(cuda_expert_major_buffer, device, hook):
    """DeepEP's bench_kineto (its tests' utils.py) finds a phase's kernel in torch's profiler table by
    name and wants exactly one line containing 'dispatch' and one containing 'combine'; with the hook the
    two stages' launches alternate in the trace under the phase's name."""
    from torch.profiler import ProfilerActivity, profile
    buffer = cuda_expert_major_buffer
    x, _, topk_idx, topk_weights = (t.to(device) if t is not None else None for t in inputs(num_tokens=MAX_TOKENS - 5))

    def round_trip():
        recv = buffer.low_latency_dispatch(x, topk_idx, MAX_TOKENS, NUM_EXPERTS, return_recv_hook=hook)
        if hook:
            recv.hook()
        result = buffer.low_latency_combine(recv.recv_x, topk_idx, topk_weights, recv.handle, return_recv_hook=hook)
        if hook:
            result.hook()

    round_trip()  # warm-up
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            round_trip()
        torch.cuda.synchronize()
    lines = prof.key_averages().table(sort_by="cuda_time_total", max_name_column_width=100).split("\n")
    for name in ("dispatch", "combine"):
        matching = [line for line in lines if name in line]
        assert len(matching) == 1, f"{name}: expected one line in the profiler table, got {len(matching)}:\n" + \
            "\n".join(lines)
    # As bench_kineto reads a hooked run: the phase's launches in the trace, a send and a receive per call.
    with tempfile.NamedTemporaryFile(suffix=".json") as trace:
        prof.export_chrome_trace(trace.name)
        events = json.loads(pathlib.Path(trace.name).read_text())["traceEvents"]
    for name in ("dispatch", "combine"):
        launches = [event for event in events if f"::{name}" in event.get("name", "")]
        assert len(launches) == 6, f"{name}: expected a send and a receive launch per call (6), got {len(launches)}"


# ---- cupy, when it is installed --------------------------------------------------------------------
def test_cupy_arrays_cross_both_ways(cpu_buffer, device):
    cupy = pytest.importorskip("cupy")
    x, _, topk_idx, topk_weights = inputs()
    buffer = make_buffer("cuda")
    with cupy.cuda.Device(device):
        x_bits = cupy.asarray(x.view(torch.int16).numpy()).view(cupy.uint16)
        recv = buffer.dispatch(x_bits, cupy.asarray(topk_idx.numpy()), cupy.asarray(topk_weights.numpy()),
                               num_experts=NUM_EXPERTS)
        assert isinstance(recv.recv_x, cupy.ndarray) and recv.recv_x.dtype == cupy.uint16
        assert _C._testing.view_of(x_bits)["data"] == x_bits.data.ptr
        got = torch.from_numpy(cupy.asnumpy(recv.recv_x).view("int16")).view(torch.bfloat16)
    want = cpu_buffer.dispatch(x, topk_idx, topk_weights, num_experts=NUM_EXPERTS).recv_x
    buffer.destroy()
    assert_same({"recv_x": (got, want)}, "cupy")


def test_gpu_timer_wait_holds_the_stream_until_the_moment(device):
    # The side by side's device start (tools/peer/deepep_side_by_side.py, --start timer): every rank's stream
    # held until one moment on the GPU's clock.
    testing = _C._testing
    before = testing.gpu_timer_ns()
    assert testing.gpu_timer_ns() >= before
    stream = torch.cuda.Stream(device=device)
    moment = testing.gpu_timer_ns() + 50_000_000  # 50 ms ahead
    testing.wait_for_gpu_timer(stream.cuda_stream, moment, 5_000_000_000)
    behind = torch.cuda.Event()
    behind.record(stream)
    assert not behind.query(), "work behind the wait ran before the moment"
    behind.synchronize()
    assert testing.gpu_timer_ns() >= moment
    # A moment far ahead is given up after limit_ns: the stream does not hang.
    testing.wait_for_gpu_timer(stream.cuda_stream, testing.gpu_timer_ns() + 3_600_000_000_000, 20_000_000)
    stream.synchronize()
    # With marks (pinned host words the device writes), the wait says when it let the stream go, and an end
    # mark after the work when the stream reached it: the side by side times a call from one to the other.
    marks = torch.zeros(3, dtype=torch.int64).pin_memory()
    stream.synchronize()
    moment = testing.gpu_timer_ns() + 30_000_000  # 30 ms ahead
    testing.wait_for_gpu_timer(stream.cuda_stream, moment, 5_000_000_000, marks.data_ptr())
    assert int(marks[1]) == 0, "the wait released its stream before the moment"
    stream.synchronize()
    first, last = int(marks[0]), int(marks[1])
    assert 0 < first < moment <= last
    assert last - first <= 30_000_000 + 5_000_000  # began after the moment was read, let go soon after it
    # The end mark: 2 ms of work (torch's sleep kernel, calibrated here) behind a fresh wait.
    work = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        work[0].record()
        torch.cuda._sleep(1_000_000)
        work[1].record()
    work[1].synchronize()
    cycles_per_ms = 1_000_000 / max(work[0].elapsed_time(work[1]), 1e-3)
    marks.zero_()
    moment = testing.gpu_timer_ns() + 20_000_000  # 20 ms ahead
    testing.wait_for_gpu_timer(stream.cuda_stream, moment, 5_000_000_000, marks.data_ptr())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(int(2 * cycles_per_ms))
    testing.mark_gpu_timer(stream.cuda_stream, marks.data_ptr() + 16)
    stream.synchronize()
    release, finish = int(marks[1]), int(marks[2])
    assert moment <= release < finish
    assert 1_500_000 <= finish - release <= 4_000_000, finish - release  # the work, not the hold
    with pytest.raises(switchyard.InvalidArgument, match="word"):
        testing.mark_gpu_timer(stream.cuda_stream, 0)
