#!/usr/bin/env python3
"""The MoE layer (switchyard-moe-bench) against torch's two grouped GEMMs alone (torch_grouped_gemm.py), in
interleaved rounds under one protocol: issue 21's comparison, run on the GPU machine.

Both sides take the same warm-up calls and the median of the same number of timed calls. The GPU's clock
falls over a run's first calls, so a comparison with different warm-ups compares a cooler side with a hotter
one (bench/NOTES.md, session 27). The order of the two alternates from round to round, so that neither side
always runs on a GPU the other has just heated. Prints every round, how many rounds the layer won, and the
median ratio. Timing only: moe-bench runs with --check-tokens 0 (its reference check at DeepSeek-V3's shape
takes minutes; the GPU suites check the layer's bits). Exit status: 0 when every run passed (whoever was
faster), 1 when a run failed.

  python3 tools/peer/layer_vs_torch.py --moe-bench build/release/tools/moe_bench/switchyard-moe-bench
  python3 tools/peer/layer_vs_torch.py --moe-bench ... --rounds 5 --ranks-as processes -- --heap on

With --ranks-as processes the ranks share the GPU through MPS, which the caller starts. Arguments after `--`
go to moe-bench.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run_json(command, json_path, what):
    """Runs `command`, which writes its results to json_path; returns them, or None when it failed."""
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if completed.returncode != 0 or not os.path.exists(json_path):
        print(f"{what}: failed (exit status {completed.returncode}); its output ends:", flush=True)
        print("\n".join(completed.stdout.splitlines()[-15:]), flush=True)
        return None
    with open(json_path) as results:
        return json.load(results)


def count(minimum):
    """An argparse type: an integer >= minimum, or an error that says what was expected and given."""
    def parse(text):
        value = int(text)
        if value < minimum:
            what = "a positive count" if minimum == 1 else f"a count >= {minimum}"
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value
    parse.__name__ = "count"  # argparse names the type in its refusal: "invalid count value: 'x'"
    return parse


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moe-bench", required=True, help="the switchyard-moe-bench binary")
    parser.add_argument("--torch-script", default=os.path.join(here, "torch_grouped_gemm.py"))
    parser.add_argument("--tokens", type=count(1), default=4096, help="tokens per rank (default 4096)")
    parser.add_argument("--ranks", type=count(1), default=8)
    parser.add_argument("--ranks-as", choices=["threads", "processes"], default="threads")
    parser.add_argument("--rounds", type=count(1), default=5)
    parser.add_argument("--warmup", type=count(0), default=3, help="untimed calls on both sides (default 3)")
    parser.add_argument("--iters", type=count(1), default=10, help="timed calls on both sides (default 10)")
    parser.add_argument("--gate-up", choices=["interleaved", "halves"], default="interleaved")
    parser.add_argument("--json", help="write every round's figures here")
    parser.add_argument("bench_args", nargs="*", help="more arguments for moe-bench (after --)")
    args = parser.parse_args()

    protocol = ["--warmup", str(args.warmup), "--iters", str(args.iters)]
    rounds = []
    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            layer_json = os.path.join(scratch, f"layer-{round_index}.json")
            torch_json = os.path.join(scratch, f"torch-{round_index}.json")
            layer_command = [args.moe_bench, "--ranks", str(args.ranks), "--ranks-as", args.ranks_as,
                             "--tokens", str(args.tokens), "--gate-up", args.gate_up, "--check-tokens", "0",
                             "--json", layer_json] + protocol + args.bench_args
            torch_command = [sys.executable, args.torch_script, "--tokens", str(args.tokens), "--ranks",
                             str(args.ranks), "--recipes", "fp8", "--json", torch_json] + protocol
            # Alternate which side runs first.
            order = [("layer", layer_command, layer_json), ("torch", torch_command, torch_json)]
            if round_index % 2 == 1:
                order.reverse()
            figures = {}
            for side, command, json_path in order:
                results = run_json(command, json_path, f"round {round_index + 1}, {side}")
                if results is None:
                    failed = True
                    break
                figures[side] = results["layer_us"] if side == "layer" else results[0]["us"]
            if len(figures) != 2:
                break
            figures["ratio"] = figures["layer"] / figures["torch"]
            rounds.append(figures)
            print(f"round {round_index + 1}: layer {figures['layer']:9.1f} us, torch's two fp8 GEMMs alone "
                  f"{figures['torch']:9.1f} us, layer / torch {figures['ratio']:.4f}", flush=True)

    if rounds:
        ahead = sum(1 for figures in rounds if figures["ratio"] < 1.0)
        ratios = [figures["ratio"] for figures in rounds]
        print(f"{args.tokens} tokens x {args.ranks} ranks as {args.ranks_as}, {args.warmup} warm-up and "
              f"{args.iters} timed calls each side: the layer ahead in {ahead} of {len(rounds)} rounds; "
              f"layer / torch median {statistics.median(ratios):.4f}, range {min(ratios):.4f}-{max(ratios):.4f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(dict(tokens=args.tokens, ranks=args.ranks, ranks_as=args.ranks_as, warmup=args.warmup,
                           iters=args.iters, rounds=rounds), out, indent=1)
    return 1 if failed or not rounds else 0


if __name__ == "__main__":
    sys.exit(main())
