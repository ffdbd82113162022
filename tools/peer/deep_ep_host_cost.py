"""The host cost of switchyard.deep_ep's normal-mode calls, one rank on one GPU (a gloo group of one), with
the stream idle before each call: layout, dispatch after it, cached dispatch (bf16, and fp8 with DeepEP's
column-major scales) and combine, each as a median over repeats, through switchyard._torch_ops (where it is
built) and without it (deep_ep's general path); then, per call, cProfile's entries by their own time, which
say where the Python side of the time goes. Issue 20 holds every call's host time against
DeepEP's (bench/NOTES.md, session 13). Run on the GPU machine with switchyard installed:

    python3 tools/peer/deep_ep_host_cost.py [--tokens 128] [--repeats 200]
"""
import argparse
import cProfile
import io
import os
import pstats

import torch
import torch.distributed as dist

from layout_host_cost import median_host_us  # this folder's (python3 puts it first on sys.path)

HIDDEN, NUM_EXPERTS, TOPK = 7168, 256, 8


def per_token_cast_to_fp8(x):
    """fp8 e4m3 rows with one f32 scale per 128 channels, the scales column-major as DeepEP's tests make them."""
    rows, hidden = x.shape
    view = x.float().view(rows, -1, 128)
    amax = view.abs().amax(dim=2).clamp(1e-4)
    fp8 = (view * (448.0 / amax.unsqueeze(2))).to(torch.float8_e4m3fn).view(rows, hidden)
    return fp8, (amax / 448.0).T.contiguous().T


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--profile-lines", type=int, default=12)
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29913")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from switchyard import deep_ep

    torch.cuda.set_device(0)
    buffer = deep_ep.Buffer(dist.group.WORLD, int(1e9), 0)
    generator = torch.Generator().manual_seed(13)
    x = torch.randn((args.tokens, HIDDEN), generator=generator).to(torch.bfloat16).cuda()
    scores = torch.randn((args.tokens, NUM_EXPERTS), generator=generator).abs().cuda()
    topk_idx = torch.topk(scores, TOPK, dim=-1, sorted=False).indices.to(torch.int64)
    topk_weights = torch.rand((args.tokens, TOPK), generator=generator).cuda()
    x_fp8 = per_token_cast_to_fp8(x)

    per_rank, per_rdma, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
    recv_x, _, recv_weights, _, handle, _ = buffer.dispatch(
        x, num_tokens_per_rank=per_rank, num_tokens_per_rdma_rank=per_rdma, is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert, topk_idx=topk_idx, topk_weights=topk_weights)

    def layout_dispatch():
        a, b, c, d, _ = buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS)
        buffer.dispatch(x, num_tokens_per_rank=a, num_tokens_per_rdma_rank=b, is_token_in_rank=d,
                        num_tokens_per_expert=c, topk_idx=topk_idx, topk_weights=topk_weights)

    calls = {
        "layout": lambda: buffer.get_dispatch_layout(topk_idx, NUM_EXPERTS),
        "layout + dispatch": layout_dispatch,
        "cached dispatch bf16": lambda: buffer.dispatch(x, handle=handle),
        "cached dispatch fp8": lambda: buffer.dispatch(x_fp8, handle=handle),
        "combine": lambda: buffer.combine(recv_x, handle, recv_weights),
    }
    print(f"switchyard.deep_ep host time per call, {args.tokens} tokens, hidden {HIDDEN}, top-{TOPK} of "
          f"{NUM_EXPERTS}, one rank, stream idle before each (median of {args.repeats}), us:")
    ops = buffer._torch_ops  # None where switchyard._torch_ops is not built against this torch
    paths = {"_torch_ops": ops, "general": None} if ops is not None else {"general (no _torch_ops)": None}
    print(f"  {'':24s}" + "".join(f" {label:>24s}" for label in paths))
    for name, call in calls.items():
        times = []
        for module in paths.values():
            buffer._torch_ops = module  # deep_ep's switch between the two paths
            times.append(median_host_us(call, args.repeats))
        buffer._torch_ops = ops
        print(f"  {name:24s}" + "".join(f" {time:24.1f}" for time in times), flush=True)
    for name, call in calls.items():
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.repeats):
            call()
        profile.disable()
        torch.cuda.synchronize()
        report = io.StringIO()
        pstats.Stats(profile, stream=report).sort_stats("tottime").print_stats(args.profile_lines)
        print(f"---- {name}: cProfile over {args.repeats} calls, by own time")
        print(report.getvalue()[:5000])
    buffer.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
