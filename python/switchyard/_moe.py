"""switchyard.MoE: the routed MoE layer over a Buffer's symmetric region (docs/MOE.md)."""
from typing import Optional

from . import _C
from ._errors import InvalidArgument
from ._tensors import exported, framework_of, stream_of

__all__ = ["MoE", "interleave_gate_up"]


def interleave_gate_up(w1):
    """w1 [L, 2I, H] (rows [0, I) gate, [I, 2I) up), or its scales [L, 2I / 128, H / 128], as a new
    contiguous array with gate and up interleaved (MoE(..., gate_up="interleaved")): w1 in 64-row blocks
    (gate rows [0, 64), up rows [0, 64), gate rows [64, 128), ...), its scales in single rows (gate scale
    row 0, up scale row 0, ...: each covers 128 rows of one projection). I must be a multiple of 128.
    torch tensors stay on their device; numpy arrays work too. The same function
    switchyard::interleave_gate_up is in C++."""
    if getattr(w1, "ndim", None) != 3:
        raise InvalidArgument(f"w1: expected a 3-d array [L, 2I, H] or its scales, got {getattr(w1, 'shape', w1)!r}")
    scales = str(w1.dtype) in ("float32", "torch.float32")
    block = 1 if scales else 64
    multiple = 2 if scales else 256
    experts, rows, cols = (int(d) for d in w1.shape)
    if rows % multiple != 0:
        raise InvalidArgument(
            f"w1: expected dimension 1 a multiple of {multiple} (I in whole 128-row blocks), got {tuple(w1.shape)}")
    blocks = rows // (2 * block)
    swapped = w1.reshape(experts, 2, blocks, block, cols).swapaxes(1, 2)  # torch and numpy alike
    if hasattr(swapped, "clone"):  # torch: one copy, always a new tensor
        copied = swapped.clone() if swapped.is_contiguous() else swapped.contiguous()
    else:
        copied = swapped.copy()
    return copied.reshape(experts, rows, cols)


class MoE:
    """The MoE layer: symmetric dispatch, each local expert's h = x W1^T, a = silu(gate) * up and
    o = a W2^T, symmetric combine: y[t] = sum over slots j ascending of topk_weights[t, j] * o_j
    (fp32 with fused multiply-add, rounded to bf16 once). Bit-identical run after run; every rounding
    point is in docs/MOE.md.

    Weights, per rank (L = num_experts / num_ranks local experts):
      w1: [L, 2I, H], rows [0, I) the gate projection, [I, 2I) the up projection;
      w2: [L, H, I];
      bf16 (torch.bfloat16, or uint16 bits with numpy), or fp8 e4m3 (torch.float8_e4m3fn, or uint8 bits)
      with w1_scales f32 [L, 2I / 128, H / 128] and w2_scales f32 [L, H / 128, I / 128], one per
      128 x 128 block (DeepSeek-V3's checkpoint format).
    They are read in place and kept alive by the layer (no copy). The Buffer needs
    symmetric_max_tokens_per_rank >= max_tokens_per_rank; making the layer is not collective, calling it is.
    expert_capacity: rows per local expert (0: num_ranks * max_tokens_per_rank); an expert that receives
    more raises switchyard.CapacityError on every rank. activation_clamp > 0: gate = min(gate, c),
    up = clamp(up, -c, c) before silu(gate) * up.
    gate_up: w1's layout, "halves" (above) or "interleaved": 64-row blocks alternating gate, up, with the
    scales' rows alternating likewise (interleave_gate_up makes both). The same y bit for bit; on CUDA with fp8 weights GEMM 1
    then applies SwiGLU in its epilogue and h never reaches memory (docs/MOE.md).
    expert_output: where GEMM 2 writes each expert-output row, "local" (the layer's workspace; the combine
    moves it home) or "home" (straight into its home rank's combine buffer from GEMM 2's epilogue, CUDA with
    fp8 weights; the combine then only waits and reduces). The same y bit for bit (docs/MOE.md).
    """

    def __init__(self, buffer, w1, w2, *, num_experts: int, max_tokens_per_rank: int, w1_scales=None,
                 w2_scales=None, expert_capacity: int = 0, activation_clamp: float = 0.0,
                 gate_up: str = "halves", expert_output: str = "local"):
        buffer._check_alive()
        self.buffer = buffer  # the layer uses the Buffer's heap: it must outlive the layer
        options = _C.MoeLayerOptions(int(num_experts), int(max_tokens_per_rank), int(expert_capacity),
                                     float(activation_clamp), str(expert_output))
        stream = stream_of(w1)

        def arg(tensor, name):
            return exported(tensor, name, stream)

        self._native = _C.MoeLayer(buffer._native, arg(w1, "w1"), arg(w2, "w2"), arg(w1_scales, "w1_scales"),
                                   arg(w2_scales, "w2_scales"), options, gate_up)
        # The weights' exports must live as long as the layer that reads them; the C++ side keeps the
        # arrays it was given, and these are the objects behind them.
        self._weights = (w1, w2, w1_scales, w2_scales)

    @property
    def hidden(self) -> int:
        return self._native.hidden

    @property
    def intermediate(self) -> int:
        return self._native.intermediate

    @property
    def local_experts(self) -> int:
        return self._native.local_experts

    @property
    def expert_capacity(self) -> int:
        return self._native.expert_capacity

    @property
    def weight_dtype(self) -> str:
        """'bf16' or 'fp8_e4m3': the recipe."""
        return self._native.weight_dtype

    def __call__(self, x, topk_idx, topk_weights, *, x_scales=None, out=None, stream: Optional[object] = None):
        """Collective. x: bf16 [N, H] (N <= max_tokens_per_rank; 0 allowed); topk_idx: int64 [N, K], global
        expert ids, -1 = none; topk_weights: f32 [N, K]. out: a preallocated bf16 [N, H] (returned as given).
        Returns y, bf16 [N, H], in the framework of x. With fp8 weights x may also be rows the caller cast:
        fp8 e4m3 [N, H] (uint8 bits with numpy, torch.float8_e4m3fn) with x_scales f32 [N, H / 128], or the
        tuple (x_fp8, x_scales); they are used as given (bf16 x is cast by the dispatch instead)."""
        if isinstance(x, tuple):
            if x_scales is not None:
                raise InvalidArgument("x_scales: given twice (x is already a tuple (x, x_scales))")
            x, x_scales = x
        self.buffer._check_alive()
        framework = framework_of(x)
        call_stream = stream_of(x, stream)
        self.buffer._last_stream = call_stream

        def arg(tensor, name):
            return exported(tensor, name, call_stream)

        y = self._native.forward(arg(x, "x"), arg(topk_idx, "topk_idx"), arg(topk_weights, "topk_weights"),
                                 arg(x_scales, "x_scales"), arg(out, "out"), call_stream, framework)
        return out if out is not None else y
