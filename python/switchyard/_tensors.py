"""Which framework a tensor comes from (outputs go back in it), the CUDA stream a call runs on, and
how tensors are handed to the library (DLPack, without copies)."""
import sys

from ._errors import InvalidArgument

__all__ = ["framework_of", "stream_of", "exported", "is_tensor", "is_row_major", "transposed_if_column_major",
           "OWN_STREAM", "LEGACY_DEFAULT_STREAM", "framework_stream", "torch_current_stream"]

# switchyard's `stream` argument: 0 is the Buffer's own stream (a non-blocking stream no framework
# knows), any other value a cudaStream_t.
OWN_STREAM = 0
# cudaStreamLegacy, as DLPack's __dlpack__(stream=...) also names the default stream. torch and cupy
# report their default stream as 0, which would mean switchyard's own stream: it becomes this.
LEGACY_DEFAULT_STREAM = 1
# __dlpack__(stream=-1): the producer does not synchronise (DLPack's convention).
_NO_SYNCHRONISATION = -1


def framework_of(tensor):
    """'torch', 'numpy', 'cupy', 'jax' or 'dlpack' (any other object with __dlpack__)."""
    module = type(tensor).__module__.split(".", 1)[0]
    if module == "torch":
        return "torch"
    if module == "numpy":
        return "numpy"
    if module == "cupy":
        return "cupy"
    if module in ("jax", "jaxlib"):
        return "jax"
    if hasattr(tensor, "__dlpack__"):
        return "dlpack"
    return "numpy"  # buffer-protocol objects (memoryview, array.array) come back as numpy arrays


def framework_stream(handle):
    """A framework's stream handle as switchyard takes it: its default stream (0) is the legacy one."""
    handle = int(handle)
    return LEGACY_DEFAULT_STREAM if handle == 0 else handle


def torch_current_stream(torch, device_index: int) -> int:
    """torch's current stream of `device_index` as switchyard takes it: torch's raw getter where it has one (a
    fraction of a microsecond), else through torch.cuda.current_stream (a few: issue 20 counts every call's
    host time). torch's default stream, which torch reports as 0 (to switchyard: the Buffer's own stream), is
    the legacy default stream."""
    getter = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return framework_stream(getter(device_index) if getter is not None
                            else torch.cuda.current_stream(device_index).cuda_stream)


def _cupy_current_stream(tensor):
    cupy = sys.modules["cupy"]
    try:
        return cupy.cuda.get_current_stream(tensor.device.id)  # per device in recent cupy
    except TypeError:
        with tensor.device:
            return cupy.cuda.get_current_stream()


def stream_of(tensor, stream=None):
    """The CUDA stream (as an integer) a call on `tensor` runs on.

    `stream` when given: a torch.cuda.Stream (.cuda_stream), a cupy Stream (.ptr), or an integer
    cudaStream_t taken as it is (0: the Buffer's own stream, which no framework's stream waits for).
    Otherwise the framework's current stream on the tensor's device: torch.cuda.current_stream(),
    cupy's current stream; their default stream is the legacy default stream (cudaStreamLegacy).
    0 for host tensors (CPU calls ignore it)."""
    if stream is not None:
        if hasattr(stream, "cuda_stream"):
            return framework_stream(stream.cuda_stream)
        if hasattr(stream, "ptr"):
            return framework_stream(stream.ptr)
        return int(stream)
    framework = framework_of(tensor)
    if framework == "torch":
        if not tensor.is_cuda:
            return OWN_STREAM
        return torch_current_stream(sys.modules["torch"], tensor.get_device())
    if framework == "cupy":
        return framework_stream(_cupy_current_stream(tensor).ptr)
    return OWN_STREAM


def exported(tensor, name, stream, on_current_stream=False):
    """What the library receives for the argument `name`, read (or written) by a call on `stream`.

    - torch CUDA tensors of a call on torch's current stream (`on_current_stream`) go as they are: the
      library reads their data_ptr, shape, dtype and device, since DLPack's stream ordering would do
      nothing there and its export and import cost several times the call's own host time.
    - torch tensors that require grad are read through .detach() (the same memory): switchyard does
      not take part in autograd, as DeepEP's kernels do not.
    - torch's float8_e4m3fn goes as its bits (a uint8 view): torch builds whose DLPack export lacks
      the fp8 code can pass it too.
    - CUDA tensors of torch and cupy are exported here with DLPack's stream argument set to the
      call's stream, so that the framework orders its pending work on the tensor before that stream
      (torch makes it wait for its current stream when the two differ). With the Buffer's own
      stream, which the framework cannot name, it does not synchronise: the caller orders the work.
    - Anything else (numpy, jax, other __dlpack__ objects, CPU tensors) goes as it is.
    """
    if tensor is None:
        return None
    framework = framework_of(tensor)
    if framework == "torch":
        if on_current_stream and type(tensor).__name__ == "Tensor" and tensor.is_cuda:
            return tensor
        torch = sys.modules["torch"]
        if tensor.requires_grad:
            tensor = tensor.detach()
        if tensor.dtype == getattr(torch, "float8_e4m3fn", None):
            tensor = tensor.view(torch.uint8)
        if not tensor.is_cuda:
            return tensor
    elif framework != "cupy":
        return tensor
    producer_stream = _NO_SYNCHRONISATION if stream == OWN_STREAM else int(stream)
    try:
        if framework == "torch" and tensor.device.index != torch.cuda.current_device():
            # torch exports a CUDA tensor with a stream only from its own device ("Can't export
            # tensors on a different CUDA device index"): a Buffer on another GPU than the current
            # one is legitimate, and a tensor on the wrong GPU is refused after export by the
            # library's placement check, which names the argument and both devices.
            with torch.cuda.device(tensor.device):
                return tensor.__dlpack__(stream=producer_stream)
        return tensor.__dlpack__(stream=producer_stream)
    except (BufferError, RuntimeError, TypeError, ValueError) as error:
        raise InvalidArgument(f"{name}: expected a tensor {framework} can export by DLPack, got one it refused "
                              f"({type(error).__name__}: {error})") from error


def is_tensor(value):
    return hasattr(value, "__dlpack__") or hasattr(value, "__array_interface__")


def is_row_major(tensor):
    """Whether `tensor` (torch, numpy or cupy) is row-major contiguous, as the library reads tensors;
    True for anything else (the library checks those itself)."""
    if framework_of(tensor) == "torch":
        return tensor.is_contiguous()
    flags = getattr(tensor, "flags", None)
    return flags is None or bool(flags["C_CONTIGUOUS"])


def transposed_if_column_major(tensor):
    """(tensor.T, True) for a 2-D column-major tensor of torch, numpy or cupy (strides (1, rows): its
    memory is the row-major transpose, as DeepEP's users pass fp8 scales, `x_scales.T.contiguous().T`);
    else (tensor, False). The transpose is a view: nothing is copied. A tensor that is row-major too
    (one row or one column) counts as row-major."""
    if tensor is None or len(getattr(tensor, "shape", ())) != 2 or is_row_major(tensor):
        return tensor, False
    if framework_of(tensor) == "torch":
        transposed = tensor.t()
        return (transposed, True) if transposed.is_contiguous() else (tensor, False)
    flags = getattr(tensor, "flags", None)
    if flags is not None and flags["F_CONTIGUOUS"]:
        return tensor.T, True
    return tensor, False
