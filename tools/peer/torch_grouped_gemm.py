"""torch's own grouped GEMMs on the MoE layer's two GEMMs, as a user gets them without switchyard: issue 21
holds switchyard's layer (switchyard-moe-bench, run in the same device call) against these. DeepSeek-V3's
shape by default (H 7168, I 2048, 256 experts, top-8), every expert on this one GPU, the rows of R ranks of
N tokens each routed uniformly at random (as switchyard-moe-bench routes them):

    GEMM 1: [rows, H] x W1[e]^T -> [rows, 2I]    GEMM 2: [rows, I] x W2[e]^T -> [rows, H]

- fp8: torch._scaled_grouped_mm, e4m3 operands with row-wise f32 scales (torch's fp8 grouped recipe; the
  layer's is 128 x 128 blockwise), bf16 out.
- bf16: torch._grouped_mm.
Each expert's rows are padded to a multiple of 16 (torch's grouped kernels want aligned offsets); the padded
rows are counted in the time, not in the FLOPs. Prints the median of the timed calls (CUDA events), TFLOPS,
and the weight-read bound from a copy measured in the same run; --json writes them.

    python3 tools/peer/torch_grouped_gemm.py --tokens 128 4096 [--ranks 8] [--json out.json]
"""
import argparse
import json
import statistics

import torch

ALIGN = 16


def expert_rows(ranks, tokens, experts, topk, generator):
    """Rows per expert of `ranks` ranks' tokens, each to topk distinct experts uniformly at random."""
    scores = torch.rand(ranks * tokens, experts, device="cuda", generator=generator)
    chosen = scores.topk(topk, dim=1).indices.flatten()
    return torch.bincount(chosen, minlength=experts).cpu()


def padded_offsets(rows):
    padded = (rows + ALIGN - 1) // ALIGN * ALIGN
    return torch.cumsum(padded, 0).to(torch.int32).cuda(), int(padded.sum())


def time_us(call, warmup, iters):
    for _ in range(warmup):
        call()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def read_bandwidth_gbs(gib=4):
    """HBM bandwidth of a device copy (bytes read + written over time), for the weight-read bound."""
    src = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = time_us(lambda: dst.copy_(src), 2, 5)
    del src, dst
    return 2 * (gib << 30) / us / 1e3


def grouped_pair(recipe, rows_total, offs, hidden, intermediate, experts):
    """The two GEMMs of one layer call in `recipe`, as a callable."""
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    a1 = torch.randn(rows_total, hidden, **bf16)
    a2 = torch.randn(rows_total, intermediate, **bf16)
    w1 = torch.randn(experts, 2 * intermediate, hidden, **bf16).mul_(hidden**-0.5)
    w2 = torch.randn(experts, hidden, intermediate, **bf16).mul_(intermediate**-0.5)
    if recipe == "bf16":
        w1t, w2t = w1.transpose(-2, -1), w2.transpose(-2, -1)
        return lambda: (torch._grouped_mm(a1, w1t, offs=offs), torch._grouped_mm(a2, w2t, offs=offs))
    fp8 = torch.float8_e4m3fn
    a1q, a2q = a1.to(fp8), a2.to(fp8)
    w1q, w2q = w1.to(fp8), w2.to(fp8)
    del a1, a2, w1, w2
    sa1 = torch.ones(rows_total, device="cuda")
    sa2 = torch.ones(rows_total, device="cuda")
    sw1 = torch.ones(experts, 2 * intermediate, device="cuda")
    sw2 = torch.ones(experts, hidden, device="cuda")
    w1t, w2t = w1q.transpose(-2, -1), w2q.transpose(-2, -1)
    return lambda: (torch._scaled_grouped_mm(a1q, w1t, sa1, sw1, offs=offs, out_dtype=torch.bfloat16),
                    torch._scaled_grouped_mm(a2q, w2t, sa2, sw2, offs=offs, out_dtype=torch.bfloat16))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[128, 4096])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=7168)
    parser.add_argument("--intermediate", type=int, default=2048)
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--recipes", nargs="+", default=["fp8", "bf16"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    generator = torch.Generator(device="cuda").manual_seed(1)
    bandwidth = read_bandwidth_gbs()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}; copy bandwidth {bandwidth:.0f} GB/s", flush=True)
    results = []
    for tokens in args.tokens:
        rows = expert_rows(args.ranks, tokens, args.experts, args.topk, generator)
        offs, rows_total = padded_offsets(rows)
        flops = 2 * int(rows.sum()) * args.hidden * args.intermediate * 3  # 2I x H, then H x I, per row
        for recipe in args.recipes:
            try:
                call = grouped_pair(recipe, rows_total, offs, args.hidden, args.intermediate, args.experts)
                us = time_us(call, args.warmup, args.iters)
            except (RuntimeError, AttributeError, TypeError) as error:  # a torch without this recipe
                print(f"tokens {tokens:5d} {recipe}: not run ({type(error).__name__}: {str(error)[:200]})", flush=True)
                continue
            weight_bytes = args.experts * 3 * args.hidden * args.intermediate * (1 if recipe == "fp8" else 2)
            bound_us = weight_bytes / bandwidth / 1e3
            result = dict(tokens=tokens, ranks=args.ranks, recipe=recipe, us=us, tflops=flops / us / 1e6,
                          rows=int(rows.sum()), padded_rows=rows_total, weight_read_bound_us=bound_us,
                          over_bound=us / bound_us, bandwidth_gbs=bandwidth)
            results.append(result)
            print(f"tokens {tokens:5d} {recipe}: {us:9.1f} us, {result['tflops']:6.1f} TFLOPS, "
                  f"{us / bound_us:.2f}x the weight-read bound ({bound_us:.0f} us), rows {result['rows']} "
                  f"(padded {rows_total})", flush=True)
            del call
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
