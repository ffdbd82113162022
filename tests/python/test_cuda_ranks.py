"""Ranks as processes on the GPU, grouped by a torch.distributed gloo group as frameworks group
them (scripts/gpu-python-check.sh runs them under MPS, so that the ranks' kernels run at once).

switchyard.deep_ep.Buffer is used the way a framework uses DeepEP: layout -> dispatch -> a
per-expert computation in torch -> combine, cached dispatch, fp8, async events; and the low-latency
round trip with its receive hooks and zero-copy combine. Each rank makes the same calls twice: on
the CUDA backend with torch CUDA tensors and on the CPU backend with torch CPU tensors (which CI
checks against the NumPy reference); the results must be equal bit for bit.
"""
import datetime
import os
import shutil
import tempfile

import pytest

import switchyard
import torch_support
from ranks import Ranks
from switchyard import deep_ep
from torch_support import draw_inputs, expert, expert_major_expert, mismatch

torch = torch_support.require_torch_cuda()

TOPK = 4
SEED = 31
LL_HIDDEN, LL_MAX_TOKENS = 512, 32
BACKENDS = ("cuda", "cpu")  # the first is checked against the second
GLOO_TIMEOUT = datetime.timedelta(seconds=60)


def tokens_of(rank):
    return 40 + 9 * rank  # ranks send different token counts


def ll_tokens_of(rank):
    return LL_MAX_TOKENS - 3 * rank % LL_MAX_TOKENS


# ---- in the rank processes -----------------------------------------------------------------------
def join_gloo_job(rank, num_ranks, allgather, store_path):
    """Once per process: this rank's GPU, and the gloo group (a file rendezvous: no ports to pick)."""
    import torch.distributed as dist

    # NOTES: gloo binds to the interface of the host name unless told otherwise; loopback always exists.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.cuda.set_device(rank % torch.cuda.device_count())
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=num_ranks,
                                timeout=GLOO_TIMEOUT)
    seen = [None] * num_ranks
    dist.all_gather_object(seen, rank)
    assert seen == list(range(num_ranks)), f"gloo all_gather_object gave {seen}"
    return torch.cuda.current_device()


def world():
    import torch.distributed as dist

    return dist.group.WORLD


def on(backend, tensors):
    device = "cuda" if backend == "cuda" else "cpu"
    return tuple(t.to(device) if t is not None else None for t in tensors)


def finish(backend):
    if backend == "cuda":
        torch.cuda.synchronize()


def compare(results, meta):
    """Bitwise: each backend's tensors (and plain values) against the last backend's."""
    (gpu_tensors, gpu_meta), (cpu_tensors, cpu_meta) = results[BACKENDS[0]], results[BACKENDS[1]]
    problems = [problem for name in cpu_tensors if (problem := mismatch(name, gpu_tensors[name], cpu_tensors[name]))]
    if gpu_meta != cpu_meta:
        problems.append(f"{meta}: {gpu_meta} != {cpu_meta}")
    return problems


def deep_ep_round_trip(backend, rank, num_ranks, num_experts, hidden):
    x, _, topk_idx, topk_weights = on(backend, draw_inputs(SEED, rank, tokens_of(rank), hidden, TOPK, num_experts))
    fp8_x, fp8_scales, _, _ = on(backend, draw_inputs(SEED + 1, rank, tokens_of(rank), hidden, TOPK, num_experts,
                                                      fp8=True))
    num_nvl_bytes = deep_ep.Config().get_nvl_buffer_size_hint(hidden * 2, num_ranks, topk=TOPK,
                                                              num_experts=num_experts)
    buffer = deep_ep.Buffer(world(), num_nvl_bytes=num_nvl_bytes, num_rdma_bytes=0, backend=backend,
                            timeout_seconds=torch_support.TIMEOUT_SECONDS)
    try:
        assert (buffer.rank, buffer.group_size) == (rank, num_ranks)
        per_rank, per_rdma_rank, per_expert, in_rank, event = buffer.get_dispatch_layout(
            topk_idx, num_experts, previous_event=deep_ep.Buffer.capture(), async_finish=True)
        event.current_stream_wait()
        recv_x, recv_topk_idx, recv_topk_weights, counts, handle, event = buffer.dispatch(
            x, num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_rdma_rank, is_token_in_rank=in_rank,
            num_tokens_per_expert=per_expert, topk_idx=topk_idx, topk_weights=topk_weights,
            config=deep_ep.Buffer.get_dispatch_config(num_ranks), async_finish=True)
        event.current_stream_wait()
        y = expert(recv_x, recv_topk_idx)  # the experts, on the framework's stream
        combined_x, combined_topk_weights, event = buffer.combine(
            y, handle, topk_weights=recv_topk_weights, config=deep_ep.Buffer.get_combine_config(num_ranks),
            async_finish=True)
        event.current_stream_wait()

        # Cached dispatch (same routing, new activations) and its combine.
        x2 = (x.to(torch.float32) * -2).to(torch.bfloat16)
        cached_x, *_ = buffer.dispatch(x2, handle=handle)
        cached_combined, _, _ = buffer.combine(expert(cached_x, recv_topk_idx), handle)

        # fp8 with scales, aligned expert counts.
        (recv_fp8, recv_scales), fp8_topk_idx, _, fp8_counts, _, _ = buffer.dispatch(
            (fp8_x, fp8_scales), num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
            num_tokens_per_expert=per_expert, topk_idx=topk_idx, topk_weights=topk_weights, expert_alignment=4)
        finish(backend)
        tensors = dict(num_tokens_per_rank=per_rank, num_tokens_per_expert=per_expert, is_token_in_rank=in_rank,
                       recv_x=recv_x, recv_topk_idx=recv_topk_idx, recv_topk_weights=recv_topk_weights, y=y,
                       combined_x=combined_x, combined_topk_weights=combined_topk_weights, cached_x=cached_x,
                       cached_combined=cached_combined, recv_fp8=recv_fp8, recv_scales=recv_scales,
                       fp8_topk_idx=fp8_topk_idx)
        meta = dict(counts=counts, fp8_counts=fp8_counts, per_rdma_rank=per_rdma_rank)
        devices = {tensor.device.type for tensor in tensors.values()}
        assert devices == {"cuda" if backend == "cuda" else "cpu"}, f"{backend} backend: outputs on {devices}"
        return {name: tensor.cpu() for name, tensor in tensors.items()}, meta
    finally:
        buffer.destroy()


def deep_ep_job(rank, num_ranks, allgather, num_experts, hidden):
    results = {backend: deep_ep_round_trip(backend, rank, num_ranks, num_experts, hidden) for backend in BACKENDS}
    return compare(results, "counts"), int(results["cpu"][0]["recv_x"].shape[0])


def low_latency_round_trip(backend, rank, num_ranks, num_experts):
    x, _, topk_idx, _ = on(backend, draw_inputs(SEED + 2, rank, ll_tokens_of(rank), LL_HIDDEN, TOPK, num_experts))
    generator = torch.Generator().manual_seed(SEED + rank)
    topk_weights = torch.rand(topk_idx.shape, generator=generator).to(topk_idx.device)
    num_nvl_bytes = deep_ep.Config().get_nvl_buffer_size_hint(LL_HIDDEN * 2, num_ranks, topk=TOPK,
                                                              num_experts=num_experts)
    buffer = deep_ep.Buffer(world(), num_nvl_bytes=num_nvl_bytes, low_latency_mode=True, backend=backend,
                            timeout_seconds=torch_support.TIMEOUT_SECONDS)
    try:
        recv_x, recv_count, handle, event, hook = buffer.low_latency_dispatch(
            x, topk_idx, LL_MAX_TOKENS, num_experts, use_fp8=False, return_recv_hook=True)
        assert callable(hook) and event.event is None
        hook()  # the receive half: only now are the outputs filled
        src_info, layout_range, *_ = handle
        y = expert_major_expert(recv_x, recv_count)
        combined_x, _, hook = buffer.low_latency_combine(y, topk_idx, topk_weights, handle, return_recv_hook=True)
        hook()

        # fp8 with an event; the experts write straight into the combine buffer (zero copy).
        (fp8_x, scales), fp8_count, fp8_handle, event, _ = buffer.low_latency_dispatch(
            x, topk_idx, LL_MAX_TOKENS, num_experts, use_fp8=True, async_finish=True)
        event.current_stream_wait()
        staging = buffer.get_next_low_latency_combine_buffer(fp8_handle)
        assert staging.device == x.device
        staging.copy_(y)
        zero_copy_x, _, _ = buffer.low_latency_combine(y, topk_idx, topk_weights, fp8_handle, zero_copy=True)
        finish(backend)
        counts = recv_count.cpu().tolist()
        tensors = dict(recv_count=recv_count, fp8_count=fp8_count, src_info=src_info, layout_range=layout_range,
                       combined_x=combined_x, zero_copy_x=zero_copy_x)
        for local, count in enumerate(counts):  # rows past recv_count are not written
            tensors[f"recv_x[{local}]"] = recv_x[local, :count]
            tensors[f"fp8_x[{local}]"] = fp8_x[local, :count]
            tensors[f"scales[{local}]"] = scales[local, :count]
        return {name: tensor.cpu() for name, tensor in tensors.items()}, dict(counts=counts)
    finally:
        buffer.destroy()


def symmetric_round_trip(backend, rank, num_ranks, num_experts):
    x, _, topk_idx, topk_weights = on(backend, draw_inputs(SEED + 3, rank, ll_tokens_of(rank), LL_HIDDEN, TOPK,
                                                           num_experts))
    config = switchyard.Config(timeout_seconds=torch_support.TIMEOUT_SECONDS)
    buffer = switchyard.Buffer(world(), backend=backend, config=config, max_tokens_per_rank=1, hidden=LL_HIDDEN,
                               topk=TOPK, num_experts=num_experts, symmetric_max_tokens_per_rank=LL_MAX_TOKENS)
    try:
        recv = buffer.symmetric_dispatch(x, topk_idx, LL_MAX_TOKENS, num_experts)
        combined = buffer.symmetric_combine(expert_major_expert(recv.recv_x, recv.recv_count), topk_idx,
                                            topk_weights, recv.handle)
        finish(backend)
        counts = recv.recv_count.cpu().tolist()
        tensors = dict(recv_count=recv.recv_count, src_info=recv.src_info, layout_range=recv.layout_range,
                       combined_x=combined.combined_x)
        for local, count in enumerate(counts):
            tensors[f"recv_x[{local}]"] = recv.recv_x[local, :count]
        return {name: tensor.cpu() for name, tensor in tensors.items()}, dict(counts=counts)
    finally:
        buffer.destroy()


def expert_major_job(rank, num_ranks, allgather, engine, num_experts):
    """('unsupported', message) when the CUDA engine raises Unsupported, else ('compared', problems)."""
    round_trip = {"low_latency": low_latency_round_trip, "symmetric": symmetric_round_trip}[engine]
    results = {}
    for backend in BACKENDS:
        try:
            results[backend] = round_trip(backend, rank, num_ranks, num_experts)
        except switchyard.Unsupported as error:
            if backend == "cpu":
                raise
            return "unsupported", str(error)
    return "compared", compare(results, "counts")


def callable_group_job(rank, num_ranks, allgather, num_experts, hidden):
    """switchyard.Buffer with the pipe allgather (a callable group) instead of torch.distributed."""
    torch.cuda.set_device(rank % torch.cuda.device_count())
    results = {}
    for backend in BACKENDS:
        x, _, topk_idx, topk_weights = on(backend, draw_inputs(SEED + 4, rank, tokens_of(rank), hidden, TOPK,
                                                               num_experts))
        config = switchyard.Config(timeout_seconds=torch_support.TIMEOUT_SECONDS)
        buffer = switchyard.Buffer(allgather, backend=backend, config=config, max_tokens_per_rank=128, hidden=hidden,
                                   topk=TOPK, num_experts=num_experts)
        recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts)
        out = buffer.combine(expert(recv.recv_x, recv.recv_topk_idx), recv.handle, recv.recv_topk_weights)
        worst = buffer.dispatch(x, topk_idx, topk_weights, num_experts=num_experts, num_worst_tokens=512)
        buffer.synchronize()
        tensors = dict(recv_x=recv.recv_x, recv_topk_idx=recv.recv_topk_idx, combined_x=out.combined_x,
                       combined_topk_weights=out.combined_topk_weights,
                       worst_x=worst.recv_x[:recv.num_recv_tokens], worst_topk_idx=worst.recv_topk_idx)
        results[backend] = ({name: t.cpu() for name, t in tensors.items()},
                            dict(per_expert=list(recv.num_recv_tokens_per_expert)))
        buffer.destroy()
    return compare(results, "num_recv_tokens_per_expert")


# ---- in pytest -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gloo_ranks():
    """gloo_ranks(R): R rank processes joined in a gloo group, each on GPU rank % device_count."""
    pools, scratch = {}, tempfile.mkdtemp(prefix="switchyard-gloo-")

    def get(num_ranks):
        if num_ranks not in pools:
            pool = Ranks(num_ranks)
            try:
                pool.run(join_gloo_job, [(os.path.join(scratch, f"store-{num_ranks}"),)] * num_ranks)
            except BaseException:
                pool.close()
                raise
            pools[num_ranks] = pool
        return pools[num_ranks]

    yield get
    for pool in pools.values():
        pool.close()
    shutil.rmtree(scratch, ignore_errors=True)


def report(problems_by_rank, what):
    lines = [f"rank {rank}: {problem}" for rank, problems in enumerate(problems_by_rank) for problem in problems]
    assert not lines, f"{what}, seed {SEED}: CUDA differs from the CPU backend\n  " + "\n  ".join(lines)


@pytest.mark.parametrize("num_ranks,hidden", [(2, 2048), (4, 512), (8, 1024)])
def test_deep_ep_framework_round_trip_matches_the_cpu_backend(gloo_ranks, num_ranks, hidden):
    num_experts = 4 * num_ranks
    results = gloo_ranks(num_ranks).run(deep_ep_job, [(num_experts, hidden)] * num_ranks)
    report([problems for problems, _ in results], f"deep_ep round trip, R={num_ranks}, hidden={hidden}")
    assert sum(received for _, received in results) > 0, "nothing was dispatched: the test would prove nothing"


@pytest.mark.parametrize("engine", ["low_latency", "symmetric"])
def test_expert_major_round_trip_matches_the_cpu_backend(gloo_ranks, engine):
    num_ranks = 2
    results = gloo_ranks(num_ranks).run(expert_major_job, [(engine, 4 * num_ranks)] * num_ranks)
    outcomes = {outcome for outcome, _ in results}
    if outcomes == {"unsupported"}:
        torch_support.skip_if_unsupported(results[0][1])
    assert outcomes == {"compared"}, f"ranks disagree on whether {engine} runs on CUDA: {results}"
    report([problems for _, problems in results], f"{engine} round trip, R={num_ranks}")


def test_callable_group_round_trip_matches_the_cpu_backend(ranks):
    num_ranks = 2
    report(ranks(num_ranks).run(callable_group_job, [(4 * num_ranks, 768)] * num_ranks),
           "switchyard.Buffer with a callable group")
