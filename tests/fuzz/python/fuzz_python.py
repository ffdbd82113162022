"""atheris harness over switchyard's Python argument layer (python/switchyard, bindings in python/src).

From the input: a few calls of switchyard.Buffer on a 1-rank CPU buffer connected to itself
(get_dispatch_layout, dispatch fresh and cached, combine, low_latency and symmetric dispatch and
combine, hooks, low_latency_combine_buffer, synchronize), whose arguments are numpy arrays of any
dtype, rank and size, non-contiguous (sliced, transposed, Fortran order, broadcast), read-only,
misaligned, memoryviews, plain Python objects and out-of-range scalars, with contents from the input
(expert ids out of range, -1s, NaNs).

A call must return or raise a switchyard.Error. TypeError, ValueError and OverflowError are taken
only where the input passed a scalar or handle of the wrong Python type. Anything else is a finding,
as are a crash, a hang, a non-contiguous input or read-only output that a call accepted, and a call
that wrote into a read-only buffer.

Run with the interpreter that has switchyard installed (scripts/run-fuzz.sh python):
    python3 tests/fuzz/python/fuzz_python.py [libFuzzer flags] [corpus dir]
"""
import os
import sys

import atheris
import numpy as np

with atheris.instrument_imports(include=["switchyard"]):
    import switchyard

# NOTES: arrays of one input hold at most this many bytes, so that an input runs in milliseconds.
MAX_INPUT_ARRAY_BYTES = 1 << 20
# NOTES: a 1-rank call never waits on a peer; this bounds a wait that bad input would leave open.
TIMEOUT_SECONDS = 5.0

VERBOSE = bool(os.environ.get("SWITCHYARD_FUZZ_VERBOSE"))
SIZING = dict(max_tokens_per_rank=16, hidden=256, topk=4, num_experts=8, low_latency_max_tokens_per_rank=8,
              symmetric_max_tokens_per_rank=8, symmetric_heap_input=True, symmetric_heap_output_rows_per_expert=8)
DTYPES = [np.uint16, np.uint8, np.int64, np.int32, np.float32, np.bool_, np.float64, np.float16, np.int8,
          np.uint64, np.complex64]
SPECIAL_WEIGHTS = [np.nan, -np.inf, np.inf, -0.0, np.finfo(np.float32).tiny, np.finfo(np.float32).max]


def worst_case_rows(rows):
    """NOTES: from 2^16 to 2^61 rows, worst-case outputs are caller-sized allocations (up to exabytes),
    not a validation question; from 2^61 on their byte counts overflow, which the library must refuse."""
    if isinstance(rows, int) and 1 << 16 < rows < 1 << 61:
        return 1 << 16
    return rows


class Finding(Exception):
    """A contract the argument layer broke; atheris reports it and saves the input."""


def make_buffer():
    config = switchyard.Config(timeout_seconds=TIMEOUT_SECONDS)
    return switchyard.Buffer(lambda mine: [mine], rank=0, backend="cpu", sharing="threads", config=config, **SIZING)


class Draw:
    """Arguments drawn from the input. Most are what a valid call passes; the rest are wrong in one way."""

    def __init__(self, data):
        self.fdp = atheris.FuzzedDataProvider(data)
        self.bytes_left = MAX_INPUT_ARRAY_BYTES
        self.wrong_python_type = False  # a TypeError / ValueError / OverflowError is then acceptable
        self.non_contiguous = []        # inputs a call must refuse
        self.not_passed = []            # drawn inputs the call was given something else for (kept alive)
        self.read_only_outputs = []     # outputs a call must refuse
        self.frozen = []                # (bytes object, its content): nothing may write into them

    def int_in(self, low, high):
        return self.fdp.ConsumeIntInRange(low, high)

    def bool(self):
        return self.fdp.ConsumeBool()

    def size(self, usual):
        choice = self.int_in(0, 255)
        if choice < 200:
            return usual
        if choice < 215:
            return usual + 1
        if choice < 230:
            return max(usual - 1, 0)
        if choice < 240:
            return 0
        return self.int_in(0, 40)

    def scalar(self, usual):
        """An int argument: mostly `usual`, sometimes at an edge, huge, or not an int at all."""
        choice = self.int_in(0, 255)
        if choice < 200:
            return usual
        if choice < 230:
            return self.fdp.ConsumeIntInRange(-2, 64)
        if choice < 240:
            value = self.fdp.ConsumeInt(9)  # beyond int64 at times
            # NOTES: nanobind refuses an int beyond its C parameter's range with TypeError, as it does a
            # wrong type; a value that fits must be judged by the library.
            self.wrong_python_type = self.wrong_python_type or not -2**31 <= value < 2**31
            return value
        self.wrong_python_type = True
        return [None, "8", 8.5, float("nan"), [8], b"8"][self.int_in(0, 5)]

    def elements(self, dtype, count, fill, num_experts):
        if fill == "expert_ids" and dtype == np.int64:
            choices = [self.int_in(0, 255) for _ in range(count)]
            ids = max(num_experts, 0) + 1  # -1 and each expert
            return np.array([c % ids - 1 if c < 240 else self.fdp.ConsumeInt(8) for c in choices],
                            dtype=np.int64)
        if fill == "weights" and dtype == np.float32:
            choices = [self.int_in(0, 255) for _ in range(count)]
            return np.array([c / 64.0 - 1.0 if c < 224 else SPECIAL_WEIGHTS[c % len(SPECIAL_WEIGHTS)]
                             for c in choices], dtype=np.float32)
        raw = self.fdp.ConsumeBytes(count * np.dtype(dtype).itemsize)
        raw += bytes(count * np.dtype(dtype).itemsize - len(raw))
        return np.frombuffer(raw, dtype=dtype).copy()

    def array(self, dtype, shape, fill="bits", num_experts=0, output=False):
        """An array argument (or None, or something that is not an array)."""
        mode = self.int_in(0, 255)
        if output and mode < 160:
            return None
        if mode >= 252:
            # NOTES: the bindings take None only where an argument is optional; elsewhere nanobind raises
            # TypeError ("incompatible function arguments"), as Python does for a wrong type.
            self.wrong_python_type = True
            return None
        if mode >= 248:
            self.wrong_python_type = True
            return [b"\0" * 16, [1, 2, 3], 7, "x"][self.int_in(0, 3)]
        if mode >= 240:
            dtype = DTYPES[self.int_in(0, len(DTYPES) - 1)]
        if 232 <= mode < 240:
            shape = [self.int_in(0, 6) for _ in range(self.int_in(0, 5))]
        shape = [self.size(dim) for dim in shape]
        count = int(np.prod(shape)) if shape else 1
        if count * np.dtype(dtype).itemsize > self.bytes_left:
            self.wrong_python_type = self.wrong_python_type or not output  # None, as above
            return None
        self.bytes_left -= count * np.dtype(dtype).itemsize
        array = self.elements(dtype, count, fill, num_experts).reshape(shape)
        return self.layout(array, output)

    def layout(self, array, output):
        """The array as given, or another layout of it: the library sees only its memory."""
        choice = self.int_in(0, 255)
        if choice < 180:
            result = array
        elif choice < 190 and array.ndim >= 1:
            result = np.repeat(array, 2, axis=-1)[..., ::2]  # every other element of a larger array
        elif choice < 200 and array.ndim >= 2:
            result = np.ascontiguousarray(array.swapaxes(-1, -2)).swapaxes(-1, -2)  # a transposed view
        elif choice < 205:
            result = np.asfortranarray(array)
        elif choice < 210 and array.ndim >= 1 and array.size > 0:
            result = np.broadcast_to(array.reshape(-1)[:1].reshape((1,) * array.ndim), array.shape)
        elif choice < 220:
            result = array.copy()
            result.flags.writeable = False
        elif choice < 230 and array.dtype.itemsize > 1:
            raw = bytearray(array.nbytes + 1)
            result = np.frombuffer(raw, dtype=array.dtype, offset=1, count=array.size).reshape(array.shape)
            result[...] = array
        elif choice < 240:
            result = memoryview(np.ascontiguousarray(array))
        elif choice < 248:
            frozen = np.ascontiguousarray(array).tobytes()
            self.frozen.append((frozen, bytes(frozen)))
            result = memoryview(frozen).cast("B")  # a read-only buffer over an immutable bytes object
        else:
            result = array[::-1] if array.ndim >= 1 else array
        self.classify(result, output)
        return result

    def classify(self, given, output):
        if isinstance(given, np.ndarray):
            if not given.flags.c_contiguous:
                self.non_contiguous.append(given)
            if output and not given.flags.writeable:
                self.read_only_outputs.append(given)
        elif isinstance(given, memoryview) and output and given.readonly:
            self.read_only_outputs.append(given)


class Session:
    """A few calls on one input, with the handles of earlier calls available to later ones."""

    def __init__(self, buffer, draw):
        self.buffer = buffer
        self.draw = draw
        self.layouts = []
        self.normal = []        # (result, num_tokens, hidden, topk, num_worst_tokens)
        self.expert_major = []  # (engine, result, topk_idx, num_tokens, hidden, topk, local, rows)
        self.hooks = []

    def num_experts(self):
        return self.draw.scalar(1 << self.draw.int_in(0, 3))

    def tokens(self, most):
        return self.draw.size(self.draw.int_in(0, most))

    def hidden(self, fp8=False):
        choice = self.draw.int_in(0, 9)
        if choice == 0:
            return 8
        if choice == 1:
            return self.draw.int_in(1, 300)
        if choice == 2:
            return SIZING["hidden"] + (128 if fp8 else 8)
        return 128 * self.draw.int_in(1, SIZING["hidden"] // 128)

    def get_dispatch_layout(self):
        n, k, experts = self.tokens(16), self.draw.int_in(1, 4), self.num_experts()
        topk_idx = self.draw.array(np.int64, [n, k], "expert_ids", experts if isinstance(experts, int) else 8)
        self.layouts.append(self.buffer.get_dispatch_layout(topk_idx, experts))

    def dispatch(self):
        fp8 = self.draw.int_in(0, 255) >= 192
        n, h, k = self.tokens(17), self.hidden(fp8), self.draw.int_in(1, 4)
        experts = self.num_experts()
        ids_range = experts if isinstance(experts, int) and 0 <= experts < 64 else 8
        x = self.draw.array(np.uint8 if fp8 else np.uint16, [n, h])
        x_scales = self.draw.array(np.float32, [n, max(h // 128, 1)]) if fp8 or self.draw.int_in(0, 255) > 240 else None
        topk_idx = self.draw.array(np.int64, [n, k], "expert_ids", ids_range)
        weights = self.draw.array(np.float32, [n, k], "weights") if self.draw.bool() else None
        layout = self.layouts[self.draw.int_in(0, len(self.layouts) - 1)] if self.layouts and self.draw.bool() else None
        worst = [0, 0, 0, n, self.draw.size(n + 2)][self.draw.int_in(0, 4)]
        rows = worst if worst > 0 else n
        result = self.buffer.dispatch(
            x, topk_idx, weights, num_experts=experts, x_scales=x_scales, layout=layout,
            expert_alignment=self.draw.scalar(1), num_worst_tokens=worst_case_rows(self.draw.scalar(worst)),
            out_recv_x=self.draw.array(np.uint8 if fp8 else np.uint16, [rows, h], output=True),
            out_recv_topk_idx=self.draw.array(np.int64, [rows, k], output=True),
            out_recv_topk_weights=self.draw.array(np.float32, [rows, k], output=True))
        self.normal.append((result, n, h, k, worst))

    def cached_dispatch(self):
        if not self.normal:
            return
        earlier, n, h, k, worst = self.normal[self.draw.int_in(0, len(self.normal) - 1)]
        x = self.draw.array(np.uint16, [self.draw.size(n), h])
        result = self.buffer.dispatch(x, handle=self.handle(earlier.handle),
                                      num_worst_tokens=worst_case_rows(self.draw.scalar(worst)))
        self.normal.append((result, n, h, k, worst))

    def handle(self, real):
        choice = self.draw.int_in(0, 255)
        if choice < 240:
            return real
        self.draw.wrong_python_type = True  # None too: the bindings require a handle
        if choice < 248:
            return None
        return [b"handle", 0, "handle"][self.draw.int_in(0, 2)]

    def combine(self):
        if not self.normal:
            return
        earlier, n, h, k, worst = self.normal[self.draw.int_in(0, len(self.normal) - 1)]
        rows = worst if worst > 0 else max(earlier.num_recv_tokens, 0)
        x = self.draw.array(np.uint16, [rows, h])
        weights = self.draw.array(np.float32, [rows, k], "weights") if self.draw.bool() else None
        self.buffer.combine(x, self.handle(earlier.handle), weights,
                            out_combined_x=self.draw.array(np.uint16, [n, h], output=True))

    def expert_major_dispatch(self, engine):
        low_latency = engine == "low_latency"
        most = SIZING["low_latency_max_tokens_per_rank"]
        max_tokens = self.draw.scalar(self.draw.int_in(1, most))
        flags = self.draw.int_in(0, 255)
        use_fp8, round_scale, use_ue8m0 = bool(flags & 1), (flags & 6) == 6, (flags & 24) == 24
        hook = bool(flags & 32) and (bool(flags & 64) or low_latency)
        n = self.tokens(max_tokens if isinstance(max_tokens, int) and 0 <= max_tokens <= most else most)
        h, k, experts = self.hidden(use_fp8), self.draw.int_in(1, 4), self.num_experts()
        ids_range = experts if isinstance(experts, int) and 0 <= experts < 64 else 8
        x = self.draw.array(np.uint16, [n, h])
        topk_idx = self.draw.array(np.int64, [n, k], "expert_ids", ids_range)
        extra = {}
        if low_latency:  # DeepEP's wait statistics: int64 [R], added to by the receive half
            extra["wait_recv_cost_stats"] = self.draw.array(np.int64, [1], output=True)
        if not low_latency and self.draw.int_in(0, 255) >= 224:
            extra["expert_capacity"] = self.draw.scalar(self.draw.int_in(0, n + 1))
        if not low_latency and flags & 128:
            # The heap-resident input, of the call's shape or another (refused by name); filled when they agree.
            view = self.buffer.symmetric_input(self.draw.scalar(n), self.draw.scalar(h))
            if isinstance(x, np.ndarray) and x.shape == view.shape and x.dtype == view.dtype:
                view[...] = x
            # The drawn x is not passed: a non-contiguous one must not count as accepted.
            self.draw.not_passed.append(x)
            x = view
        method = self.buffer.low_latency_dispatch if low_latency else self.buffer.symmetric_dispatch
        result = method(x, topk_idx, max_tokens, experts, use_fp8=use_fp8, round_scale=round_scale,
                        use_ue8m0=use_ue8m0, return_recv_hook=hook, **extra)
        if result.hook is not None:
            self.hooks.append(result.hook)
        local = experts if isinstance(experts, int) else 1
        self.expert_major.append((engine, result, topk_idx, n, h, k, local, max_tokens))

    def expert_major_combine(self, engine):
        if not self.expert_major:
            return
        _, earlier, topk_idx, n, h, k, local, rows = self.expert_major[self.draw.int_in(0, len(self.expert_major) - 1)]
        low_latency = engine == "low_latency"
        flags = self.draw.int_in(0, 255)
        zero_copy, hook = (flags & 3) == 3, bool(flags & 4) and (bool(flags & 8) or low_latency)
        handle = self.handle(earlier.handle)
        if zero_copy and low_latency and flags & 16:
            x = self.buffer.low_latency_combine_buffer(handle)
        elif not low_latency and flags & 64:
            x = self.buffer.symmetric_expert_output(handle, self.draw.scalar(0))  # 0: the dispatch's hidden
        elif zero_copy and flags & 32:
            x = None
        else:
            x = self.draw.array(np.uint16, [local, rows if isinstance(rows, int) else 1, h])
        if self.draw.int_in(0, 255) >= 200:
            topk_idx = self.draw.array(np.int64, [n, k], "expert_ids", local)
        weights = self.draw.array(np.float32, [n, k], "weights")
        method = self.buffer.low_latency_combine if low_latency else self.buffer.symmetric_combine
        # low_latency: LogFMT on whatever x holds (NaN, infinities, any hidden size).
        options = dict(use_logfmt=bool(flags & 128),
                       wait_recv_cost_stats=self.draw.array(np.int64, [1], output=True)) if low_latency else {}
        result = method(x, topk_idx, weights, handle, zero_copy=zero_copy, return_recv_hook=hook,
                        out=self.draw.array(np.uint16, [n, h], output=True), **options)
        if result.hook is not None:
            self.hooks.append(result.hook)

    def run_a_hook(self):
        if self.hooks:
            self.hooks[self.draw.int_in(0, len(self.hooks) - 1)]()  # a second call is refused

    def synchronize(self):
        self.buffer.synchronize()
        _ = (self.buffer.symmetric_combine_path, self.buffer.symmetric_dispatch_path)

    def run_one(self):
        calls = [self.get_dispatch_layout, self.dispatch, self.cached_dispatch, self.combine,
                 lambda: self.expert_major_dispatch("low_latency"), lambda: self.expert_major_combine("low_latency"),
                 lambda: self.expert_major_dispatch("symmetric"), lambda: self.expert_major_combine("symmetric"),
                 self.run_a_hook, self.synchronize]
        call = calls[self.draw.int_in(0, len(calls) - 1)]
        if VERBOSE:
            print(f"call {getattr(call, '__name__', 'expert-major')}", file=sys.stderr)
        accepted_inputs = len(self.draw.non_contiguous)
        accepted_outputs = len(self.draw.read_only_outputs)
        self.draw.wrong_python_type = False
        self.draw.not_passed.clear()
        try:
            call()
        except switchyard.TimeoutError as error:
            raise Finding(f"a 1-rank call timed out: {error}") from error
        except switchyard.Error:
            return
        except (TypeError, ValueError, OverflowError) as error:
            if not self.draw.wrong_python_type:
                raise Finding(f"{type(error).__name__} that is not a switchyard.Error: {error}") from error
            return
        passed = [a for a in self.draw.non_contiguous[accepted_inputs:]
                  if not any(a is replaced for replaced in self.draw.not_passed)]
        if passed:
            raise Finding(f"a call accepted a non-contiguous array: strides {passed[-1].strides}")
        if len(self.draw.read_only_outputs) > accepted_outputs:
            raise Finding("a call accepted a read-only output")

    def finish(self):
        for hook in self.hooks:
            try:
                hook()
            except switchyard.TimeoutError as error:
                raise Finding(f"a hook timed out: {error}") from error
            except switchyard.Error:
                pass
        for frozen, content in self.draw.frozen:
            if frozen != content:
                raise Finding("a call wrote into an immutable bytes object (a read-only buffer)")


BUFFER = None


def test_one_input(data):
    global BUFFER
    if BUFFER is None:
        BUFFER = make_buffer()
    draw = Draw(data)
    session = Session(BUFFER, draw)
    for _ in range(draw.int_in(1, 5)):
        session.run_one()
    session.finish()


def main():
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
