"""What the GPU tests share: skipping without torch or CUDA, inputs drawn with torch, the stand-in
experts, and bitwise comparison. Imported only by the GPU tests (and their rank processes).

SWITCHYARD_TEST_REQUIRE_CUDA=1 (scripts/gpu-python-check.sh sets it) turns "no torch / no CUDA /
switchyard built without CUDA" from a skip into a failure, so that a GPU run cannot pass by skipping.
"""
import os

import pytest

import switchyard

TIMEOUT_SECONDS = 20  # every wait in the library; a failing peer is reported, not waited for long


def require_torch_cuda():
    """torch, when it and switchyard's CUDA backend can run here; otherwise the module is skipped."""
    required = os.environ.get("SWITCHYARD_TEST_REQUIRE_CUDA") == "1"

    def unavailable(why):
        if required:
            pytest.fail(f"SWITCHYARD_TEST_REQUIRE_CUDA=1, but {why}", pytrace=False)
        pytest.skip(why, allow_module_level=True)

    try:
        import torch
    except ImportError:
        unavailable("torch is not installed")
    if not torch.cuda.is_available():
        unavailable("torch sees no CUDA device")
    if not switchyard.cuda_available():
        unavailable("switchyard has no CUDA backend here (built without nvcc, or no device visible)")
    return torch


def skip_if_unsupported(error):
    """Engines whose CUDA kernels have not landed raise Unsupported: those tests skip, naming it."""
    pytest.skip(f"switchyard.Unsupported: {error}")


# ---- inputs and the stand-in experts (CPU tensors; callers move them) ----------------------------
def draw_inputs(seed, rank, num_tokens, hidden, topk, num_experts, fp8=False, none_fraction=0.25):
    """One rank's inputs: x (bf16, or float8_e4m3fn with f32 scales [N, H / 128]), topk_idx with
    distinct experts per token and some -1 slots, topk_weights."""
    import torch

    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    if fp8:
        x = torch.randint(0, 256, (num_tokens, hidden), dtype=torch.uint8, generator=generator)
        x = x.view(torch.float8_e4m3fn)
        scales = torch.randn(num_tokens, hidden // 128, generator=generator)
    else:
        x = torch.randn(num_tokens, hidden, generator=generator).to(torch.bfloat16)
        scales = None
    topk_idx = torch.argsort(torch.rand(num_tokens, num_experts, generator=generator), dim=1)[:, :topk]
    topk_idx = topk_idx.to(torch.int64).contiguous()
    topk_idx[torch.rand(num_tokens, topk, generator=generator) < none_fraction] = -1
    topk_weights = torch.rand(num_tokens, topk, generator=generator)
    return x, scales, topk_idx, topk_weights


def expert(recv_x, recv_topk_idx):
    """The normal engine's stand-in experts: row * (1 + the row's first local expert id) + 0.25 in
    fp32, rounded to bf16 (two separate IEEE operations: the same bits on the CPU and the GPU)."""
    import torch

    unused = torch.iinfo(torch.int64).max
    first = torch.where(recv_topk_idx >= 0, recv_topk_idx, torch.full_like(recv_topk_idx, unused))
    first = first.min(dim=1).values if first.shape[0] > 0 else first.new_zeros(0)
    first = torch.where(first == unused, torch.zeros_like(first), first).to(torch.float32)
    return (recv_x.to(torch.float32) * (1 + first)[:, None] + 0.25).to(torch.bfloat16)


def expert_major_expert(recv_x, recv_count):
    """The expert-major engines' stand-in: rows of local expert l become x * (1 + l) + 0.25 in fp32,
    rounded to bf16; rows at and past recv_count[l] (never written by dispatch) become 0."""
    import torch

    y = torch.zeros_like(recv_x)
    for local, count in enumerate(recv_count.tolist()):
        rows = recv_x[local, :count].to(torch.float32)
        y[local, :count] = (rows * float(1 + local) + 0.25).to(torch.bfloat16)
    return y


# ---- bitwise comparison --------------------------------------------------------------------------
def bits(tensor):
    """The tensor's bits as integers (on the CPU), so that comparing them is bitwise: NaN equals
    itself and -0 differs from +0."""
    import torch

    same_size_integer = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32,
                         torch.float64: torch.int64, torch.bool: torch.uint8,
                         getattr(torch, "float8_e4m3fn", None): torch.uint8}
    tensor = tensor.detach().contiguous().cpu()
    integer = same_size_integer.get(tensor.dtype)
    return tensor.view(integer) if integer is not None else tensor


def mismatch(name, got, want):
    """None when `got` and `want` are the same tensor bit for bit; else what differs, first where."""
    if got is None or want is None:
        return None if got is None and want is None else f"{name}: {got is None=} but {want is None=}"
    if got.dtype != want.dtype:
        return f"{name}: dtype {got.dtype} != {want.dtype}"
    got, want = bits(got), bits(want)
    if got.shape != want.shape:
        return f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    different = got != want
    if bool(different.any()):
        first = tuple(different.nonzero()[0].tolist())
        return (f"{name}: {int(different.sum())} of {got.numel()} elements differ; first at {first}: "
                f"{got[first].item()} != {want[first].item()} (as bits)")
    return None


def assert_same(pairs, context):
    """pairs: {name: (got, want)}; fails listing every tensor that differs."""
    problems = [problem for name, (got, want) in pairs.items() if (problem := mismatch(name, got, want))]
    assert not problems, f"{context}:\n  " + "\n  ".join(problems)
