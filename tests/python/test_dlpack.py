"""bf16 and fp8 keep their own DLPack dtypes for frameworks that have them (torch.bfloat16,
torch.float8_e4m3fn, ...): checked here with switchyard's own DLPack arrays, since numpy has
neither dtype and torch is not needed for the CPU suite."""
import numpy as np
import pytest

import reference
import switchyard


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
