"""bf16 and fp8 keep their own DLPack dtypes for frameworks that have them (torch.bfloat16,
torch.float8_e4m3fn, ...): checked here with switchyard's own DLPack arrays, since numpy has
neither dtype and torch is not needed for the CPU suite."""
import numpy as np
import pytest

import reference
import switchyard
from switchyard import _C
from switchyard._tensors import stream_of


@pytest.fixture
def buffer():
    buffer = switchyard.Buffer(lambda mine: [mine], backend="cpu", sharing="threads", hidden=256, topk=2,
                               num_experts=4)
    yield buffer
    buffer.destroy()


def inputs(fp8=False):
    return reference.draw_inputs(np.random.default_rng(3), 9, 256, 2, 4, fp8=fp8)


def native_dispatch(buffer, x, x_scales, topk_idx, topk_weights, framework):
    return buffer.native.dispatch(x, x_scales, topk_idx, topk_weights, 4, 1, None, None, 0, None, None, None, None,
                                  0, framework)


def test_bf16_round_trips_with_its_own_dlpack_dtype(buffer):
    x, _, topk_idx, topk_weights = inputs()
    as_bits = native_dispatch(buffer, x, None, topk_idx, topk_weights, "numpy")
    as_bf16 = native_dispatch(buffer, x, None, topk_idx, topk_weights, "dlpack")
    assert as_bits["recv_x"].dtype == np.uint16
    assert hasattr(as_bf16["recv_x"], "__dlpack__")
    # bf16-typed input (DLPack code kDLBfloat) is taken as bf16: the same bits come back. Every
    # received row has a slot on this (only) rank; route each row to expert 0 to get all of them back.
    routed_to_expert_0 = np.where(as_bits["recv_topk_idx"] >= 0, 0, -1)
    again = native_dispatch(buffer, as_bf16["recv_x"], None, routed_to_expert_0, None, "numpy")
    np.testing.assert_array_equal(again["recv_x"], as_bits["recv_x"])
    combined_from_bits, _ = buffer.native.combine(as_bits["recv_x"], None, as_bits["handle"], None, None, 0, "numpy")
    combined_from_bf16, _ = buffer.native.combine(as_bf16["recv_x"], None, as_bf16["handle"], None, None, 0, "numpy")
    np.testing.assert_array_equal(combined_from_bf16, combined_from_bits)


def test_fp8_round_trips_with_its_own_dlpack_dtype(buffer):
    x, scales, topk_idx, topk_weights = inputs(fp8=True)
    as_bits = native_dispatch(buffer, x, scales, topk_idx, topk_weights, "numpy")
    as_fp8 = native_dispatch(buffer, x, scales, topk_idx, topk_weights, "dlpack")
    assert as_bits["recv_x"].dtype == np.uint8
    routed_to_expert_0 = np.where(as_bits["recv_topk_idx"] >= 0, 0, -1)
    again = native_dispatch(buffer, as_fp8["recv_x"], as_fp8["recv_x_scales"], routed_to_expert_0, None, "numpy")
    np.testing.assert_array_equal(again["recv_x"], as_bits["recv_x"])


# ---- no copies, and the device (switchyard._C._testing shows what the library sees) ----------------
def test_inputs_are_read_where_the_caller_keeps_them():
    x, _, topk_idx, _ = inputs()
    for tensor, dtype in ((x, "bf16"), (topk_idx, "i64")):
        seen = _C._testing.view_of(tensor)
        assert seen["data"] == tensor.ctypes.data
        assert (seen["device"], seen["dtype"], seen["shape"]) == ("cpu", dtype, list(tensor.shape))


def test_library_outputs_are_handed_over_without_copies():
    for dtype, numpy_dtype in (("bf16", np.uint16), ("fp8_e4m3", np.uint8), ("f32", np.float32), ("i64", np.int64),
                               ("bool", np.bool_)):
        array, data = _C._testing.empty("numpy", dtype, [3, 5])
        assert array.dtype == numpy_dtype and array.shape == (3, 5), dtype
        assert array.ctypes.data == data, dtype


def test_a_tensor_on_a_cuda_device_is_refused_naming_the_argument(buffer):
    x, _, topk_idx, topk_weights = inputs()
    # The same host memory, labelled as CUDA device 1's: refused before anything reads it.
    with pytest.raises(switchyard.InvalidArgument, match=r"^x: expected a tensor on cpu, got bf16\[9, 256\] on cuda:1$"):
        buffer.dispatch(_C._testing.relabelled(x, 1), topk_idx, topk_weights, num_experts=4)
    with pytest.raises(switchyard.InvalidArgument, match=r"^topk_idx: expected a tensor on cpu, got i64\[9, 2\] on cuda:1"):
        buffer.dispatch(x, _C._testing.relabelled(topk_idx, 1), topk_weights, num_experts=4)


def test_framework_default_streams_are_the_legacy_stream_and_ints_are_taken_as_given():
    class TorchStream:  # what switchyard reads of a torch.cuda.Stream
        def __init__(self, handle):
            self.cuda_stream = handle

    class CupyStream:
        def __init__(self, handle):
            self.ptr = handle

    x = inputs()[0]
    assert stream_of(x) == 0  # host tensors: no stream
    assert stream_of(x, TorchStream(0)) == 1  # torch's default stream is cudaStreamLegacy, not the Buffer's own
    assert stream_of(x, TorchStream(0x1234)) == 0x1234
    assert stream_of(x, CupyStream(0)) == 1
    assert stream_of(x, 0) == 0 and stream_of(x, 7) == 7
