"""The host cost of get_dispatch_layout and of its parts, on one GPU, one rank (a gloo group of one), with the
stream idle before each call: switchyard.deep_ep's call, switchyard.Buffer's, finding the stream, exporting
topk_idx, the native call with torch outputs and with plain DLPack ones, and DeepEP's floor (torch.empty x3
and a kernel); then cProfile's top entries. Issues 19 and 20 hold this against DeepEP's (bench/NOTES.md,
session 12). Run on the GPU machine with switchyard installed:

    python3 tools/peer/layout_host_cost.py

With DeepEP's build on PYTHONPATH (scripts/peer-deepep.sh keeps it in build/peer-deepep/<version>/), DeepEP's
own get_dispatch_layout is timed in the same run, one rank of its intranode Buffer:

    PYTHONPATH=build/peer-deepep/<version> python3 tools/peer/layout_host_cost.py
"""
import importlib.util
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch
import torch.distributed as dist

NUM_EXPERTS, TOPK = 256, 8


def median_host_us(call, repeats=300):
    """The median wall time of `call` on the host, the stream idle before each."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29911")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from switchyard import deep_ep
    from switchyard._tensors import exported, stream_of

    torch.cuda.set_device(0)
    buffer = deep_ep.Buffer(dist.group.WORLD, int(1e9), 0)
    native = buffer.switchyard_buffer
    deepep_buffer = None
    if importlib.util.find_spec("deep_ep_cpp") is not None:  # DeepEP's build, not switchyard.deep_ep
        import deep_ep as deepep
        try:
            deepep_buffer = deepep.Buffer(dist.group.WORLD, int(1e9), 0)
        except Exception as error:  # DeepEP may refuse a group of one; say so and time the rest
            print(f"DeepEP's Buffer with one rank: {type(error).__name__}: {error}", flush=True)
    ops, entry = deep_ep._torch_ops(), native._layout_entry
    print(f"deep_ep's path for torch tensors: {'switchyard._torch_ops' if ops is not None else 'Python (_torch_layout)'}",
          flush=True)
    for num_tokens in (128, 4096):
        scores = torch.randn(num_tokens, NUM_EXPERTS, device="cuda")
        topk_idx = torch.topk(scores, TOPK, dim=-1).indices.to(torch.int64)
        stream = torch.cuda.current_stream().cuda_stream
        parts = {
            "deep_ep.get_dispatch_layout": lambda: buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS),
            "switchyard.Buffer.get_dispatch_layout": lambda: native.get_dispatch_layout(topk_idx, NUM_EXPERTS),
            "deep_ep's Python path (_torch_layout)": lambda: buffer._torch_layout(topk_idx, NUM_EXPERTS),
            "stream_of": lambda: stream_of(topk_idx),
            "exported (__dlpack__ with stream)": lambda: exported(topk_idx, "topk_idx", stream),
            "native call (export included)": lambda: native.native.get_dispatch_layout(
                exported(topk_idx, "topk_idx", stream), NUM_EXPERTS, stream, "torch"),
            "native call, dlpack framework (no torch outputs)": lambda: native.native.get_dispatch_layout(
                exported(topk_idx, "topk_idx", stream), NUM_EXPERTS, stream, "dlpack"),
            "torch.empty x3 + zero kernel (DeepEP-like floor)": lambda: (
                torch.empty(8, dtype=torch.int32, device="cuda"),
                torch.empty(NUM_EXPERTS, dtype=torch.int32, device="cuda"),
                torch.empty(num_tokens, 8, dtype=torch.bool, device="cuda").zero_()),
        }
        if ops is not None:
            parts["_torch_ops.dispatch_layout (C++ allocations)"] = lambda: ops.dispatch_layout(entry, topk_idx,
                                                                                                NUM_EXPERTS)
        if deepep_buffer is not None:
            parts["DeepEP's own get_dispatch_layout"] = lambda: deepep_buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
        for name, call in parts.items():
            print(f"N={num_tokens:5d} {name:55s} {median_host_us(call):8.1f} us", flush=True)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(200):
            buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
        profile.disable()
        torch.cuda.synchronize()
        report = io.StringIO()
        pstats.Stats(profile, stream=report).sort_stats("tottime").print_stats(18)
        print(report.getvalue()[:4000])
    dist.destroy_process_group()
    if deepep_buffer is not None:
        # DeepEP's Buffer destructor aborts in a group of one (its barrier has no kernel for one rank):
        # everything is printed, so leave without running destructors.
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
