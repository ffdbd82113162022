"""Which framework a tensor comes from (outputs go back in it) and the stream a call runs on."""
import sys

__all__ = ["framework_of", "stream_of", "is_tensor"]


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


def stream_of(tensor, stream=None):
    """The CUDA stream (as an integer) a call on `tensor` runs on: `stream` when given (an int, or
    an object with .cuda_stream / .ptr), else the framework's current stream on the tensor's device
    (torch.cuda.current_stream(), cupy's current stream); 0 for host tensors (CPU calls ignore it)."""
    if stream is not None:
        for attribute in ("cuda_stream", "ptr"):
            if hasattr(stream, attribute):
                return int(getattr(stream, attribute))
        return int(stream)
    framework = framework_of(tensor)
    if framework == "torch":
        if not tensor.is_cuda:
            return 0
        torch = sys.modules["torch"]
        return int(torch.cuda.current_stream(tensor.device).cuda_stream)
    if framework == "cupy":
        cupy = sys.modules["cupy"]
        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def is_tensor(value):
    return hasattr(value, "__dlpack__") or hasattr(value, "__array_interface__")
