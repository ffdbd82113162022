#!/usr/bin/env python3
"""Smoke test of switchyard-bench: exit codes, one-line errors, --json and --dump (.npy) files, the
minimal bound, every iteration checked, 0 tokens and one rank, and the output a person reads.

    python3 tools/bench/smoke_test.py build/bench/tools/bench/switchyard-bench

Standard library only; with NumPy installed it also loads every .npy file and compares the
engine's outputs with the reference's, byte for byte.
"""
import ast
import json
import os
import resource
import subprocess
import sys
import tempfile

SMALL = ["--backend", "cpu", "--ranks", "4", "--tokens", "32", "--hidden", "256", "--iters", "2", "--warmup", "1"]
# NOTES: a wedged bench must fail the test, not hang it.
TIMEOUT_SECONDS = 120

NPY_ITEM_BYTES = {"<u2": 2, "|u1": 1, "<f4": 4, "<i4": 4, "<i8": 8, "|b1": 1}


def run(bench, args):
    return subprocess.run([bench] + args, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)


def expect(condition, what):
    if not condition:
        raise AssertionError(what)


def read_npy_header(path):
    """(descr, shape, data offset) of a .npy 1.0 file, checked against the format."""
    with open(path, "rb") as f:
        preamble = f.read(10)
        expect(preamble[:6] == b"\x93NUMPY", f"{path}: bad magic")
        expect(preamble[6:8] == b"\x01\x00", f"{path}: not format 1.0")
        header_len = int.from_bytes(preamble[8:10], "little")
        header = f.read(header_len).decode("latin1")
    expect((10 + header_len) % 64 == 0, f"{path}: data not 64-byte aligned")
    expect(header.endswith("\n"), f"{path}: header does not end with a newline")
    fields = ast.literal_eval(header.strip())
    expect(fields["fortran_order"] is False, f"{path}: not C order")
    return fields["descr"], tuple(fields["shape"]), 10 + header_len


# The files every rank of each engine dumps, and where its reference's files are.
DUMPED = {
    "normal": ("x", "topk_idx", "topk_weights", "recv_x", "recv_topk_idx", "recv_topk_weights",
               "num_recv_tokens_per_expert", "y", "combined_x", "combined_topk_weights"),
    "low_latency": ("x", "topk_idx", "topk_weights", "recv_x", "recv_count", "layout_range", "src_info", "y",
                    "combined_x"),
}
DUMPED["symmetric"] = DUMPED["low_latency"]
# The NCCL baseline (cuda, one GPU per rank) dumps normal's outputs and shares its reference.
DUMPED["nccl"] = DUMPED["normal"]
# symmetric must give low_latency's outputs: one reference.
REFERENCE_GROUP = {"normal": "reference", "low_latency": "reference_low_latency",
                   "symmetric": "reference_low_latency", "nccl": "reference"}
# Engine results in --json: these keys on every engine, numbers when it ran, null when skipped.
RESULT_NUMBERS = ("tokens", "delivered_rows", "dispatch_us", "combine_us", "dispatch_p99_us", "combine_p99_us",
                  "dispatch_bytes", "combine_bytes", "dispatch_gbps_per_rank", "combine_gbps_per_rank",
                  "dispatch_gbps_all_ranks", "combine_gbps_all_ranks", "remote_dispatch_bytes",
                  "remote_combine_bytes", "minimal_dispatch_bytes", "minimal_combine_bytes", "minimal_fraction",
                  "dispatch_minimal_us", "combine_minimal_us", "dispatch_minimal_fraction",
                  "combine_minimal_fraction", "checked_iterations", "cache_flush_bytes", "input_sets")
# The design roofline: numbers when the engine ran and its passes are counted (design_note null), else null.
DESIGN_NUMBERS = ("design_dispatch_bytes", "design_combine_bytes", "dispatch_design_roofline_us",
                  "combine_design_roofline_us", "dispatch_design_fraction", "combine_design_fraction",
                  "design_fraction")
# The expert-major engines' extra rows: CUDA graph replay (cuda) and the hook split (low_latency).
GRAPH_NUMBERS = ("graph_replay_dispatch_us", "graph_replay_dispatch_p99_us", "graph_replay_combine_us",
                 "graph_replay_combine_p99_us", "dispatch_launch_us", "combine_launch_us",
                 "graph_replay_minimal_fraction", "graph_replay_design_fraction")
SPLIT_NUMBERS = ("dispatch_send_us", "dispatch_send_p99_us", "dispatch_recv_us", "dispatch_recv_p99_us",
                 "combine_send_us", "combine_send_p99_us", "combine_recv_us", "combine_recv_p99_us")


# The normal engine across nodes: numbers with --ranks-per-node < --ranks, null on one node.
NODE_BYTES = ("rdma_dispatch_bytes", "nvlink_dispatch_bytes", "direct_rdma_dispatch_bytes", "rdma_combine_bytes",
              "nvlink_combine_bytes", "direct_rdma_combine_bytes", "rdma_dispatch_saved_bytes",
              "rdma_combine_saved_bytes", "own_node_dispatch_bytes", "own_node_combine_bytes")
# low_latency across nodes: numbers with --ranks-per-node < --ranks, null on one node and for symmetric.
DIRECT_NODE_BYTES = ("rdma_dispatch_bytes", "nvlink_dispatch_bytes", "rdma_combine_bytes", "nvlink_combine_bytes",
                     "rdma_dispatch_signals", "rdma_combine_signals")


def close(a, b):
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1e-12)


def expect_keys(result, keys, present):
    for key in keys:
        expect(key in result, f"{result['engine']}: json lacks {key}")
        expect((result[key] is not None) == present, f"{result['engine']}: {key} = {result[key]}")


def check_result(result, ran, ranks=None):
    expect_keys(result, RESULT_NUMBERS, ran)
    expect("speedup_vs_nccl" in result and "note" in result, f"{result['engine']}: json lacks speedup_vs_nccl or note")
    expect("design_note" in result, f"{result['engine']}: json lacks design_note")
    expect_keys(result, DESIGN_NUMBERS, ran and result["design_note"] is None)
    if not ran:
        return
    expect(result["dispatch_us"] > 0 and result["combine_us"] > 0 and result["minimal_fraction"] >= 0, result)
    expect(0 <= result["remote_dispatch_bytes"] <= result["dispatch_bytes"], result)
    expect(result["dispatch_p99_us"] >= result["dispatch_us"], result)
    expect(result["combine_p99_us"] >= result["combine_us"], result)
    # The minimal bound is a true lower bound: no phase, no engine, ever runs faster than it.
    expect(result["minimal_fraction"] <= 1, f"{result['engine']}: minimal fraction {result['minimal_fraction']}")
    for phase in ("dispatch", "combine"):
        fraction = result[f"{phase}_minimal_fraction"]
        expect(0 <= fraction <= 1, f"{result['engine']} {phase}: minimal fraction {fraction}")
        # Per phase: bound / median; both phases: the sum of the bounds / the sum of the medians.
        expect(close(fraction, result[f"{phase}_minimal_us"] / result[f"{phase}_us"]), result)
    both = (result["dispatch_minimal_us"] + result["combine_minimal_us"]) / (result["dispatch_us"] + result["combine_us"])
    expect(close(result["minimal_fraction"], both), result)
    # Read every input once and write every output once: never more than a read and a write per row.
    expect(result["minimal_dispatch_bytes"] <= 2 * result["dispatch_bytes"] or result["dispatch_bytes"] == 0, result)
    expect(result["minimal_combine_bytes"] <= 2 * result["combine_bytes"] or result["combine_bytes"] == 0, result)
    # DeepEP's GB/s: per rank, from each rank's received rows; they sum to the delivered rows.
    rows = result["received_rows_by_rank"]
    expect(sum(rows) == result["delivered_rows"], result)
    expect(ranks is None or len(rows) == len(result["dispatch_gbps_by_rank"]) == ranks, result)
    by_rank = result["dispatch_gbps_by_rank"]
    expect(close(result["dispatch_gbps_per_rank"], sum(by_rank) / len(by_rank)), result)
    # Every iteration checked: at least the check, warmup and timed ones.
    expect(result["checked_iterations"] >= 1 + result.get("iters", 0), result)
    expect(result["cache_flush_bytes"] > 0, result)
    if result["design_note"] is None:
        for phase in ("dispatch", "combine"):
            expect(close(result[f"{phase}_design_fraction"],
                         result[f"{phase}_design_roofline_us"] / result[f"{phase}_us"]), result)
            # The design's passes include the minimal bound's one read and one write.
            expect(result[f"design_{phase}_bytes"] >= result[f"minimal_{phase}_bytes"], result)
        expect(result["design_fraction"] >= result["minimal_fraction"], result)


def check_design_bytes(result, tokens, hidden, x_row, dispatch_row):
    """The design roofline's bytes, recounted from --help's formulas (all ranks' tokens, bf16 combine rows)."""
    rows, combine_row = result["delivered_rows"], hidden * 2
    combine = 3 * rows * combine_row + tokens * combine_row  # 3 per row + the output
    if result.get("symmetric_combine") == "pull":
        combine = rows * combine_row + tokens * combine_row  # the home reads y in place + the output
    if result["engine"] == "symmetric" and result.get("symmetric_dispatch") == "zero_copy" and x_row == dispatch_row:
        dispatch = rows * (x_row + dispatch_row)  # bf16 pulled from x in place, written to recv_x
    elif result["engine"] == "symmetric":
        dispatch = tokens * (x_row + dispatch_row) + 2 * rows * dispatch_row  # publish per token + pull per row
    else:
        dispatch = rows * (x_row + 3 * dispatch_row)  # 4 per row
    expect(result["design_dispatch_bytes"] == dispatch and result["design_combine_bytes"] == combine,
           (result["engine"], dispatch, combine, result["design_dispatch_bytes"], result["design_combine_bytes"]))


def check_cpu_extra_rows(result, split):
    """An expert-major engine on cpu: no graph rows (null, with the reason); the hook split when `split`."""
    expect(result["graph_replay"] == "not available (cpu backend)", result)
    expect_keys(result, GRAPH_NUMBERS, False)
    expect((result["hook_split"] == "measured") == split, result)
    expect_keys(result, SPLIT_NUMBERS, split)
    if split:
        for half in ("dispatch_send", "dispatch_recv", "combine_send", "combine_recv"):
            expect(0 < result[f"{half}_us"] <= result[f"{half}_p99_us"], result)


def check_dump(root, engines):
    meta = json.load(open(os.path.join(root, "meta.json")))
    expect(meta["engines"] == engines, f"meta.json engines: {meta['engines']}")
    for key in ("ranks", "ranks_per_node", "tokens", "hidden", "topk", "experts", "dtype", "seed", "files"):
        expect(key in meta, f"meta.json lacks {key}")
    names = set()
    for entry in meta["files"]:
        path = os.path.join(root, entry["path"])
        descr, shape, offset = read_npy_header(path)
        expect(descr == entry["stored_as"], f"{path}: descr {descr}, meta says {entry['stored_as']}")
        expect(list(shape) == entry["shape"], f"{path}: shape {shape}, meta says {entry['shape']}")
        count = 1
        for size in shape:
            count *= size
        expect(os.path.getsize(path) == offset + count * NPY_ITEM_BYTES[descr], f"{path}: wrong size")
        names.add(entry["path"])
    for engine in engines:
        for rank in range(meta["ranks"]):
            for name in DUMPED[engine]:
                expect(f"{engine}/rank{rank}/{name}.npy" in names, f"dump lacks {engine}/rank{rank}/{name}.npy")
    try:
        import numpy
    except ImportError:
        return
    compared = set()
    for name in names:
        group, rank_dir, file = name.split("/")
        array = numpy.load(os.path.join(root, name))
        if group not in engines:
            continue
        expected_path = os.path.join(root, REFERENCE_GROUP[group], rank_dir, file)
        if os.path.exists(expected_path):
            compared.add((group, file))
            expected = numpy.load(expected_path)
            expect(array.dtype == expected.dtype and array.shape == expected.shape and
                   array.tobytes() == expected.tobytes(), f"{name} differs from the reference")
    for engine in engines:
        expect((engine, "combined_x.npy") in compared, f"{engine}: combined_x not compared with its reference")


def test_passing_run_writes_json_and_dump(bench, tmp):
    json_path, dump_dir = os.path.join(tmp, "out.json"), os.path.join(tmp, "dump")
    result = run(bench, SMALL + ["--json", json_path, "--dump", dump_dir])
    expect(result.returncode == 0, f"exit {result.returncode}: {result.stderr}")
    expect("check: pass" in result.stdout, result.stdout)
    expect("copy bandwidth" in result.stdout and "both phases: minimal" in result.stdout, result.stdout)
    report = json.load(open(json_path))
    for key in ("backend", "ranks", "ranks_per_node", "tokens", "hidden", "topk", "experts", "dtype", "copy_gbps",
                "copy_devices", "devices", "devices_request", "visible_devices", "peer_copy_gbps",
                "peer_copy_pair_gbps", "peer_copy_method", "dependent_launch"):
        expect(key in report, f"json lacks {key}")
    # cpu: the ranks are host threads, no GPU map, no peer copy.
    expect(report["devices"] == [] and report["devices_request"] == "auto" and report["copy_devices"] == 1, report)
    expect(report["peer_copy_gbps"] is None and report["peer_copy_method"] is None, report)
    # cpu: no kernels, so no launch mode (null, and no header line).
    expect("dependent_launch" in report and report["dependent_launch"] is None, report)
    expect("kernel launches:" not in result.stdout, result.stdout)
    expect("devices: none (cpu backend" in result.stdout, result.stdout)
    expect(report["ll_tokens"] == 32, report)  # min(--tokens 32, the laptop shape's 64)
    by_engine = {r["engine"]: r for r in report["results"]}
    normal = by_engine["normal"]
    expect(normal["check"] == "pass", normal)
    check_result(normal, True, ranks=4)
    expect(normal["combine_bytes"] == normal["dispatch_bytes"], normal)  # bf16 both ways
    # Every token is routed here: dispatch reads 128 x rows and writes the rows; combine reads the rows and
    # writes 128 rows.
    expect(normal["minimal_dispatch_bytes"] == normal["minimal_combine_bytes"] ==
           4 * 32 * 512 + normal["dispatch_bytes"], normal)
    # check, warmup and timed iterations, each checked.
    expect(normal["checked_iterations"] == 1 + 1 + 2, normal)
    expect(normal["tokens"] == 32 and "graph_replay" not in normal and "hook_split" not in normal, normal)
    check_design_bytes(normal, 4 * 32, 256, 512, 512)
    for key in NODE_BYTES:  # one node: no RDMA
        expect(key in normal and normal[key] is None, f"normal on one node: {key} = {normal.get(key)}")
    expect("across nodes" not in result.stdout, result.stdout)
    low_latency = by_engine["low_latency"]
    expect(low_latency["check"] == "pass", low_latency)
    check_result(low_latency, True)
    expect(low_latency["tokens"] == 32, low_latency)
    # bf16 both ways: (token, expert) rows x hidden * 2
    expect(low_latency["dispatch_bytes"] == low_latency["combine_bytes"] == low_latency["delivered_rows"] * 256 * 2,
           low_latency)
    check_design_bytes(low_latency, 4 * 32, 256, 512, 512)
    # cpu: no CUDA graph rows; the hook split on both backends.
    check_cpu_extra_rows(low_latency, split=True)
    for row in ("dispatch send", "dispatch recv", "combine send", "combine recv"):
        expect(result.stdout.count(f"  {row} ") == 1, f"one {row} row expected:\n{result.stdout}")
    expect("  dispatch (graph)" not in result.stdout and "graph replay: skipped" not in result.stdout, result.stdout)
    expect("p99 us" in result.stdout and "GB/s/rank" in result.stdout and "ns/token" in result.stdout, result.stdout)
    symmetric = by_engine["symmetric"]
    expect(symmetric["check"] == "pass", symmetric)
    check_result(symmetric, True)
    expect(symmetric["delivered_rows"] == low_latency["delivered_rows"], symmetric)
    # cpu, ranks as threads: auto picks the pull combine, and the bench reports the path it took.
    expect(symmetric["symmetric_combine"] == "pull" and normal["symmetric_combine"] is None, symmetric)
    expect("combine path: pull" in result.stdout, result.stdout)
    # ... and the zero-copy dispatch source (bf16 here), whose design bytes drop the publish copy.
    expect(symmetric["symmetric_dispatch"] == "zero_copy" and normal["symmetric_dispatch"] is None, symmetric)
    expect("dispatch source: zero_copy" in result.stdout, result.stdout)
    check_design_bytes(symmetric, 4 * 32, 256, 512, 512)
    # One stage each way: no hook split, said why.
    check_cpu_extra_rows(symmetric, split=False)
    expect("not supported" in symmetric["hook_split"], symmetric)
    expect("hook split: not supported by the symmetric engine" in result.stdout, result.stdout)
    # --engine all lists the NCCL baseline too: skipped on cpu, with the reason, and no numbers.
    nccl = by_engine["nccl"]
    expect(nccl["check"] == "skipped" and "cpu backend" in nccl["reason"], nccl)
    check_result(nccl, False)
    expect("nccl: skipped: not available on the cpu backend" in result.stdout, result.stdout)
    expect("vs nccl" not in result.stdout, result.stdout)
    for engine in ("normal", "low_latency", "symmetric"):
        expect(by_engine[engine]["remote_dispatch_bytes"] == 0 and by_engine[engine]["speedup_vs_nccl"] is None,
               by_engine[engine])
    check_dump(dump_dir, ["normal", "low_latency", "symmetric"])


def test_low_latency_tokens(bench, tmp):
    json_path = os.path.join(tmp, "out.json")
    # --ll-tokens overrides; with --engine low_latency and --dtype fp8 the engine casts (use_fp8).
    result = run(bench, SMALL + ["--engine", "low_latency", "--ll-tokens", "8", "--dtype", "fp8", "--json",
                                 json_path])
    expect(result.returncode == 0 and "check: pass" in result.stdout, f"{result.returncode}: {result.stdout}")
    expect("bf16 inputs cast to fp8 by the engine (use_fp8)" in result.stdout, result.stdout)
    report = json.load(open(json_path))
    expect(report["ll_tokens"] == 8 and [r["engine"] for r in report["results"]] == ["low_latency"], report)
    ll = report["results"][0]
    check_result(ll, True)
    # fp8 rows carry f32 scales per 128 channels: 256 + 2 * 4 bytes; combine returns bf16.
    expect(ll["dispatch_bytes"] == ll["delivered_rows"] * (256 + 8), ll)
    expect(ll["combine_bytes"] == ll["delivered_rows"] * 512, ll)
    # The sender reads bf16 x; the slot, its read and recv_x carry the fp8 row and its scales.
    check_design_bytes(ll, 4 * 8, 256, 512, 256 + 8)
    check_cpu_extra_rows(ll, split=True)
    # An explicit --tokens, low_latency alone: its tokens.
    result = run(bench, SMALL + ["--engine", "low_latency", "--tokens", "24", "--json", json_path])
    expect(result.returncode == 0, f"{result.returncode}: {result.stderr}")
    expect(json.load(open(json_path))["ll_tokens"] == 24, "--tokens with --engine low_latency")
    # More tokens than 128 with --engine all and the deepseek-v3 shape: low_latency takes min(--tokens, 128).
    result = run(bench, ["--backend", "cpu", "--shape", "deepseek-v3", "--ranks", "2", "--experts", "8", "--topk",
                         "2", "--tokens", "200",
                         "--hidden", "128", "--iters", "1", "--warmup", "0", "--json", json_path])
    expect(result.returncode == 0, f"{result.returncode}: {result.stderr}")
    report = json.load(open(json_path))
    expect(report["tokens"] == 200 and report["ll_tokens"] == 128, report)
    expect("min(--tokens, 128)" in result.stdout, result.stdout)


def read_topk_idx(path):
    """The rows of an int64 [N, K] .npy file, standard library only."""
    descr, shape, offset = read_npy_header(path)
    expect(descr == "<i8" and len(shape) == 2, f"{path}: {descr} {shape}")
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    values = [int.from_bytes(data[i:i + 8], "little", signed=True) for i in range(0, len(data), 8)]
    return [values[t * shape[1]:(t + 1) * shape[1]] for t in range(shape[0])]


def test_two_nodes_report_rdma_and_nvlink_bytes(bench, tmp):
    json_path, dump_dir = os.path.join(tmp, "out.json"), os.path.join(tmp, "dump")
    ranks, per_node, experts, hidden = 4, 2, 16, 256
    result = run(bench, ["--backend", "cpu", "--engine", "normal", "--ranks", str(ranks), "--ranks-per-node",
                         str(per_node), "--tokens", "32", "--hidden", str(hidden), "--experts", str(experts),
                         "--topk", "4", "--iters", "1", "--warmup", "0", "--json", json_path, "--dump", dump_dir])
    expect(result.returncode == 0 and "check: pass" in result.stdout, f"{result.returncode}: {result.stdout}")
    expect("across nodes" in result.stdout and "RDMA bytes" in result.stdout and "saves" in result.stdout,
           result.stdout)
    normal = json.load(open(json_path))["results"][0]
    check_result(normal, True)
    # The hierarchy's roles are in the design roofline (recounted below).
    expect(normal["design_note"] is None and "per (token, node)" in result.stdout, result.stdout)
    for key in NODE_BYTES:
        expect(isinstance(normal.get(key), int), f"{key} = {normal.get(key)}")
    for phase in ("dispatch", "combine"):
        rdma, nvlink = normal[f"rdma_{phase}_bytes"], normal[f"nvlink_{phase}_bytes"]
        direct = normal[f"direct_rdma_{phase}_bytes"]
        expect(0 < rdma <= direct <= nvlink, normal)
        expect(nvlink == normal[f"{phase}_bytes"], normal)  # every (token, destination rank) row
        expect(normal[f"rdma_{phase}_saved_bytes"] == direct - rdma, normal)
    # The definitions, recounted from the dumped topk_idx (bf16 both ways: hidden * 2 bytes a row).
    rdma_rows = nvlink_rows = direct_rows = own_rows = tokens = 0
    for source in range(ranks):
        for row in read_topk_idx(os.path.join(dump_dir, "normal", f"rank{source}", "topk_idx.npy")):
            tokens += 1
            dest_ranks = {e // (experts // ranks) for e in row if e >= 0}
            other = [r for r in dest_ranks if r // per_node != source // per_node]
            nvlink_rows += len(dest_ranks)
            direct_rows += len(other)
            rdma_rows += len({r // per_node for r in other})
            own_rows += any(r // per_node == source // per_node for r in dest_ranks)
    row = hidden * 2
    expect(normal["rdma_dispatch_bytes"] == normal["rdma_combine_bytes"] == rdma_rows * row, (rdma_rows, normal))
    expect(normal["nvlink_dispatch_bytes"] == nvlink_rows * row, (nvlink_rows, normal))
    expect(normal["direct_rdma_dispatch_bytes"] == direct_rows * row, (direct_rows, normal))
    expect(normal["own_node_dispatch_bytes"] == normal["own_node_combine_bytes"] == own_rows * row, (own_rows, normal))
    # --help's hierarchical formulas: staged = (token, destination node) pairs, the own node included.
    staged = rdma_rows + own_rows
    expect(normal["design_dispatch_bytes"] == staged * 4 * row + nvlink_rows * 4 * row, (staged, normal))
    expect(normal["design_combine_bytes"] == nvlink_rows * 3 * row + staged * 4 * row + tokens * row,
           (staged, normal))


def test_two_nodes_low_latency_bytes_by_link(bench, tmp):
    json_path, dump_dir = os.path.join(tmp, "out.json"), os.path.join(tmp, "dump")
    ranks, per_node, experts, hidden = 4, 2, 16, 256
    result = run(bench, ["--backend", "cpu", "--engine", "low_latency", "--ranks", str(ranks), "--ranks-per-node",
                         str(per_node), "--tokens", "16", "--hidden", str(hidden), "--experts", str(experts),
                         "--topk", "4", "--iters", "1", "--warmup", "0", "--json", json_path, "--dump", dump_dir])
    expect(result.returncode == 0 and "check: pass" in result.stdout, f"{result.returncode}: {result.stdout}")
    expect("RDMA signals" in result.stdout and "saves" not in result.stdout, result.stdout)
    ll = json.load(open(json_path))["results"][0]
    check_result(ll, True)
    expect(ll["design_note"] is None, ll)
    for key in DIRECT_NODE_BYTES:
        expect(isinstance(ll.get(key), int), f"{key} = {ll.get(key)}")
    # Recounted from the dumped topk_idx: every valid slot is a row on its expert's rank.
    rdma_rows = nvlink_rows = leaving = tokens = 0
    for source in range(ranks):
        for row in read_topk_idx(os.path.join(dump_dir, "low_latency", f"rank{source}", "topk_idx.npy")):
            tokens += 1
            remote = [e for e in row if e >= 0 and (e // (experts // ranks)) // per_node != source // per_node]
            rdma_rows += len(remote)
            nvlink_rows += sum(1 for e in row if e >= 0) - len(remote)
            leaving += bool(remote)
    local_experts = experts // ranks
    count_signals = ranks * (ranks - per_node) * local_experts  # cpu: no rows-landed adds
    message, row = hidden * 2 + 16, hidden * 2  # bf16 row + the 16-byte source fields
    expect(ll["rdma_dispatch_signals"] == ll["rdma_combine_signals"] == count_signals, ll)
    expect(ll["rdma_dispatch_bytes"] == rdma_rows * message + count_signals * 8, (rdma_rows, ll))
    expect(ll["nvlink_dispatch_bytes"] == nvlink_rows * message + ranks * per_node * local_experts * 8, ll)
    expect(ll["rdma_combine_bytes"] == rdma_rows * row + count_signals * 8, ll)
    rows = rdma_rows + nvlink_rows
    expect(ll["delivered_rows"] == rows, (rows, ll))
    expect(ll["design_dispatch_bytes"] == rows * 4 * row + (rdma_rows + leaving) * row, (leaving, ll))
    expect(ll["design_combine_bytes"] == rows * 3 * row + tokens * row + rdma_rows * 2 * row, ll)


def test_fp8_passes(bench, tmp):
    result = run(bench, SMALL + ["--dtype", "fp8", "--engine", "normal", "--ranks", "2", "--experts", "8",
                                 "--topk", "4", "--ring-slots", "4", "--chunk-tokens", "2"])
    expect(result.returncode == 0 and "check: pass" in result.stdout, f"{result.returncode}: {result.stdout}")


def test_normal_heap_inputs_pass_as_threads_and_processes(bench, tmp):
    """--normal-heap on: the normal engine in place (docs/normal-in-place.md), every iteration checked bit for
    bit, bf16 and fp8, ranks as threads and as processes (whose heaps each rank maps at addresses of its own);
    --normal-heap staged: the same Buffer with the calls' ordinary tensors, which it copies in (one case each
    way), its design bytes counting the copies."""
    cases = [("on", ranks_as, dtype) for ranks_as in ("threads", "processes") for dtype in ("bf16", "fp8")]
    cases += [("staged", "threads", "fp8"), ("staged", "processes", "bf16")]
    results = {}
    for mode, ranks_as, dtype in cases:
        json_path = os.path.join(tmp, f"heap_{mode}_{ranks_as}_{dtype}.json")
        result = run(bench, SMALL + ["--engine", "normal", "--normal-heap", mode, "--dtype", dtype,
                                     "--ranks-as", ranks_as, "--json", json_path])
        where = f"--normal-heap {mode}, {ranks_as}, {dtype}"
        expect(result.returncode == 0 and "check: pass" in result.stdout,
               f"{where}: {result.returncode}: {result.stdout[-1500:]}{result.stderr[-500:]}")
        expect(f"normal heap inputs: {mode}" in result.stdout, f"{where}: the report does not say so")
        with open(json_path) as f:
            document = json.load(f)
        normal = [r for r in document["results"] if r["engine"] == "normal"]
        expect(len(normal) == 1 and normal[0]["check"] == "pass", f"{where}: {normal}")
        check_result(normal[0], True, ranks=4)
        results[(mode, ranks_as, dtype)] = normal[0]
    # Staged counts the copies into the heap on top of the same in-place passes.
    for (mode, ranks_as, dtype), staged in results.items():
        if mode != "staged":
            continue
        plain = results[("on", ranks_as, dtype)]
        for key in ("design_dispatch_bytes", "design_combine_bytes"):
            expect(staged.get(key) is not None and plain.get(key) is not None and staged[key] > plain[key],
                   f"staged {ranks_as} {dtype}: {key} {staged.get(key)} not above in place's {plain.get(key)}")


def test_bad_arguments_exit_2_with_one_line(bench, tmp):
    cases = [
        (["--bogus"], "--bogus"),
        (["--tokens", "abc"], "--tokens"),
        (["--tokens", "-1"], "--tokens"),
        (["--ranks"], "--ranks"),
        (["--ranks", "8", "--ranks-per-node", "3"], "--ranks-per-node"),
        (["--experts", "102"], "--experts"),
        (["--topk", "300"], "--topk"),
        (["--dtype", "fp8", "--hidden", "100"], "--hidden"),
        (["--dtype", "fp16"], "--dtype"),
        (["--backend", "tpu"], "--backend"),
        (["--ll-tokens", "x"], "--ll-tokens"),
        (["--ll-tokens", "-3"], "--ll-tokens"),
        (["--engine", "fast"], "--engine"),
        (["--engine", "nccl"], "nccl is not available on the cpu backend"),
        (["--devices", "x"], "--devices"),
        (["--devices", "0"], "--devices"),
        (["--devices", "2"], "--devices: expected auto with --backend cpu"),
        (["--iters", "0"], "--iters"),
        (["--timeout", "0"], "--timeout"),
        (["--chunk-tokens", "9", "--ring-slots", "8"], "--chunk-tokens"),
        (["--json", os.path.join(tmp, "missing", "dir", "out.json")], "--json"),
        (["--hidden", "3"], "hidden"),  # refused by the library, at run time
    ]
    for args, named in cases:
        result = run(bench, SMALL + args)
        lines = result.stderr.strip().splitlines()
        # Progress lines may precede a library refusal; the error itself is the last line.
        expect(result.returncode == 2, f"{args}: exit {result.returncode}, stderr {result.stderr!r}")
        expect(lines and lines[-1].startswith("switchyard-bench: ") and named in lines[-1], f"{args}: {lines}")
        if args[0] != "--hidden":
            expect(len(lines) == 1, f"{args}: expected one line, got {lines}")


def test_timeout_never_crashes(bench, tmp):
    for engine in ("normal", "low_latency", "symmetric"):
        result = run(bench, SMALL + ["--engine", engine, "--timeout", "0.000000001"])
        expect(result.returncode in (0, 1), f"{engine}: exit {result.returncode}: {result.stderr}")
        if result.returncode == 1:
            expect("check: error" in result.stdout, result.stdout)


def test_help(bench, tmp):
    result = run(bench, ["--help"])
    expect(result.returncode == 0 and "Usage: switchyard-bench" in result.stdout, result.stdout)
    expect("minimal fraction = bound / median" in result.stdout, "help does not document the minimal bound")
    for text in ("--ranks-as threads|processes", "--ll-tokens", "p99", "rows delivered x row payload", "graph replay", "dispatch RDMA bytes",
                 "dispatch NVLink bytes", "direct RDMA bytes", "--devices auto|N", "peer copy bandwidth",
                 "remote bytes / peer copy bandwidth", "normal|low_latency|symmetric|nccl|all", "vs nccl",
                 "--shape laptop|deepseek-v3", "dispatch memory bytes = routed tokens x x row + rows x dispatch row",
                 "combine memory bytes  = rows x combine row + tokens x combine row", "GB/s/rank DeepEP's convention",
                 "ns/token", "a scratch buffer of twice the cache", "the verdict", "every iteration",
                 "design fraction =", "normal dispatch      4 per row", "symmetric dispatch   publish",
                 "nccl                 not counted", "'dispatch (graph)'", "plain call time - graph replay time",
                 "'dispatch send'", "host barrier", "not waiting for slow peers' sends", "poisoned outputs"):
        expect(text in result.stdout, f"help does not document {text}")


def test_every_engine_stays_within_its_minimal_bound(bench, tmp):
    """The bound is a true lower bound for every engine, on two ranks and on one, fp8 included."""
    json_path = os.path.join(tmp, "out.json")
    for extra in ([], ["--ranks", "1", "--experts", "8"], ["--dtype", "fp8", "--engine", "normal"]):
        result = run(bench, SMALL + extra + ["--json", json_path])
        expect(result.returncode == 0, f"{extra}: exit {result.returncode}: {result.stdout[-2000:]}")
        ranks = 1 if "--ranks" in extra else 4
        for engine in json.load(open(json_path))["results"]:
            check_result(engine, engine["check"] != "skipped", ranks=ranks)


def test_zero_tokens_is_a_valid_step(bench, tmp):
    json_path = os.path.join(tmp, "out.json")
    for ranks in ("4", "1"):
        result = run(bench, SMALL + ["--tokens", "0", "--ranks", ranks, "--experts", "8", "--json", json_path])
        expect(result.returncode == 0, f"--tokens 0 --ranks {ranks}: exit {result.returncode}: {result.stderr}")
        report = json.load(open(json_path))
        expect(report["tokens"] == 0 and report["ll_tokens"] == 0, report)
        for engine in report["results"]:
            if engine["check"] == "skipped":
                continue
            expect(engine["check"] == "pass" and engine["delivered_rows"] == 0, engine)
            expect(engine["minimal_fraction"] == 0 and engine["dispatch_ns_per_token"] is None, engine)
        expect(result.stdout.rstrip().splitlines()[-1].startswith("verdict: pass"), result.stdout)


def test_every_timed_iteration_is_checked(bench, tmp):
    """A timed call that wrote nothing fails its engine, though later iterations write correctly."""
    environment = dict(os.environ, SWITCHYARD_BENCH_FORGET_TIMED_ITERATION="2")
    for engine in ("normal", "low_latency", "symmetric"):
        result = subprocess.run([bench] + SMALL + ["--engine", engine, "--iters", "4"], capture_output=True,
                                text=True, timeout=TIMEOUT_SECONDS, env=environment)
        expect(result.returncode == 1, f"{engine}: exit {result.returncode}: {result.stdout[-2000:]}")
        last = result.stdout.rstrip().splitlines()[-1]
        expect(last.startswith(f"verdict: FAIL: {engine} fail: rank 0 timed iteration 2/4: "), last)
    result = run(bench, SMALL + ["--engine", "normal"])
    expect(result.returncode == 0 and "check: pass, 4 iterations each into poisoned outputs" in result.stdout,
           result.stdout)
    expect("poisoned just before it and is compared bit for bit" in result.stdout, result.stdout)


def test_output_is_a_table_and_a_verdict_with_nothing_on_a_pipe(bench, tmp):
    result = run(bench, SMALL + ["--engine", "all"])
    expect(result.returncode == 0, result.stderr)
    # Piped stderr: no progress at all.
    expect(result.stderr == "", f"stderr when piped: {result.stderr!r}")
    lines = result.stdout.rstrip().splitlines()
    expect(lines[-1].startswith("verdict: pass: every iteration of normal, low_latency, symmetric matched"), lines[-1])
    expect("nccl skipped" in lines[-1], lines[-1])
    expect(any(line.startswith("results:") for line in lines), result.stdout)
    for engine in ("normal", "low_latency", "symmetric", "nccl"):
        expect(any(line.split()[:1] == [engine] for line in lines), f"no table row for {engine}")
    expect("cache: before every timed phase rank 0 writes a" in result.stdout, result.stdout)
    expect("GB/s/rank" in result.stdout and "all ranks:" in result.stdout, result.stdout)


def test_cpu_default_is_laptop_sized(bench, tmp):
    """No arguments on cpu: the laptop shape, under 1 GB, and the DeepSeek-V3 shape one flag away."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = run(bench, ["--backend", "cpu", "--iters", "2", "--warmup", "0"])
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    expect(result.returncode == 0, result.stdout[-2000:])
    expect("shape: laptop (the cpu default" in result.stdout, result.stdout)
    expect("4 ranks" in result.stdout and "256 tokens per rank, hidden 2048, top-8 of 64 experts" in result.stdout,
           result.stdout)
    # The children's peak so far; a larger earlier child would only make this weaker, never fail it.
    expect(rss_kib < 1024 * 1024 or before >= 1024 * 1024, f"max RSS {rss_kib} KiB")
    json_path = os.path.join(tmp, "out.json")
    result = run(bench, ["--backend", "cpu", "--shape", "deepseek-v3", "--ranks", "2", "--experts", "8",
                         "--tokens", "4", "--iters", "1", "--warmup", "0", "--engine", "normal", "--json", json_path])
    expect(result.returncode == 0 and "shape: deepseek-v3 (--shape" in result.stdout, result.stdout)
    expect(json.load(open(json_path))["hidden"] == 7168, "deepseek-v3 hidden")


def test_ranks_as_processes_run_every_engine_with_the_same_checks(bench, tmp):
    """One forked process per rank: every engine, the same checks, bounds and JSON as threads."""
    json_path = os.path.join(tmp, "out.json")
    result = run(bench, SMALL + ["--ranks-as", "processes", "--json", json_path])
    expect(result.returncode == 0, f"exit {result.returncode}: {result.stdout[-2000:]} {result.stderr}")
    expect("ranks as processes (--ranks-as)" in result.stdout, result.stdout)
    report = json.load(open(json_path))
    expect(report["ranks_as"] == "processes", report)
    by_engine = {r["engine"]: r for r in report["results"]}
    for engine in ("normal", "low_latency", "symmetric"):
        expect(by_engine[engine]["check"] == "pass", by_engine[engine])
        check_result(by_engine[engine], True, ranks=4)
        expect(by_engine[engine]["dispatch_host_us"] > 0, by_engine[engine])
    # Processes cannot read each other's rows in place: the symmetric engine publishes and pushes.
    expect(by_engine["symmetric"]["symmetric_dispatch"] == "publish", by_engine["symmetric"])
    expect(by_engine["symmetric"]["symmetric_combine"] == "push", by_engine["symmetric"])
    check_cpu_extra_rows(by_engine["low_latency"], split=True)
    # A timed call that wrote nothing is caught in a child process too.
    environment = dict(os.environ, SWITCHYARD_BENCH_FORGET_TIMED_ITERATION="1")
    failed = subprocess.run([bench] + SMALL + ["--ranks-as", "processes", "--engine", "normal"], capture_output=True,
                            text=True, timeout=TIMEOUT_SECONDS, env=environment)
    expect(failed.returncode == 1, f"exit {failed.returncode}: {failed.stdout[-2000:]}")
    expect(failed.stdout.rstrip().splitlines()[-1].startswith("verdict: FAIL: normal fail: rank 0 timed iteration 1/2"),
           failed.stdout)
    # 0 tokens and one rank, as processes.
    for extra in (["--tokens", "0"], ["--ranks", "1", "--experts", "8"]):
        result = run(bench, SMALL + ["--ranks-as", "processes"] + extra)
        expect(result.returncode == 0 and result.stdout.rstrip().splitlines()[-1].startswith("verdict: pass"),
               f"{extra}: {result.stdout[-1500:]}")
    # --dump collects every rank's files in one process.
    result = run(bench, SMALL + ["--ranks-as", "processes", "--dump", os.path.join(tmp, "dump")])
    expect(result.returncode == 2 and "--dump: expected ranks as threads" in result.stderr, result.stderr)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: smoke_test.py PATH/TO/switchyard-bench")
    bench = sys.argv[1]
    tests = [test_passing_run_writes_json_and_dump, test_low_latency_tokens, test_two_nodes_report_rdma_and_nvlink_bytes,
             test_two_nodes_low_latency_bytes_by_link, test_fp8_passes, test_normal_heap_inputs_pass_as_threads_and_processes,
             test_bad_arguments_exit_2_with_one_line, test_timeout_never_crashes, test_help,
             test_every_engine_stays_within_its_minimal_bound, test_zero_tokens_is_a_valid_step,
             test_every_timed_iteration_is_checked, test_output_is_a_table_and_a_verdict_with_nothing_on_a_pipe,
             test_cpu_default_is_laptop_sized, test_ranks_as_processes_run_every_engine_with_the_same_checks]
    failed = 0
    for test in tests:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                test(bench, tmp)
                print(f"ok   {test.__name__}")
            except (AssertionError, subprocess.TimeoutExpired) as error:
                failed += 1
                print(f"FAIL {test.__name__}: {error}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
