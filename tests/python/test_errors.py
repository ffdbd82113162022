"""Errors are Python exceptions that keep the library's messages, which name the argument."""
import numpy as np
import pytest

import switchyard


def solo_allgather(mine):
    return [mine]


@pytest.fixture
def buffer():
    buffer = switchyard.Buffer(solo_allgather, backend="cpu", sharing="threads", hidden=256, topk=2, num_experts=4)
    yield buffer
    buffer.destroy()


def inputs(num_tokens=5, hidden=256):
    x = np.zeros((num_tokens, hidden), np.uint16)
    topk_idx = np.tile(np.array([[0, 3]], np.int64), (num_tokens, 1))
    topk_weights = np.ones((num_tokens, 2), np.float32)
    return x, topk_idx, topk_weights


def test_error_classes_also_derive_from_the_matching_builtins():
    assert issubclass(switchyard.InvalidArgument, switchyard.Error)
    assert issubclass(switchyard.InvalidArgument, ValueError)
    assert issubclass(switchyard.TimeoutError, switchyard.Error)
    assert issubclass(switchyard.TimeoutError, TimeoutError)
    assert issubclass(switchyard.Unsupported, switchyard.Error)
    assert issubclass(switchyard.Unsupported, NotImplementedError)
    assert switchyard.InvalidArgument.__module__ == "switchyard"


def test_bad_dtype_of_x_names_x(buffer):
    x, topk_idx, topk_weights = inputs()
    with pytest.raises(switchyard.InvalidArgument, match=r"^x: expected dtype bf16.*got float64"):
        buffer.dispatch(x.astype(np.float64), topk_idx, topk_weights, num_experts=4)


def test_bad_dtype_of_topk_idx_names_topk_idx(buffer):
    x, topk_idx, topk_weights = inputs()
    with pytest.raises(switchyard.InvalidArgument, match=r"^topk_idx: expected dtype i64"):
        buffer.dispatch(x, topk_idx.astype(np.int32), topk_weights, num_experts=4)
    with pytest.raises(switchyard.InvalidArgument, match=r"topk_idx"):
        buffer.get_dispatch_layout(topk_idx.astype(np.int32), 4)


def test_bad_dtype_of_topk_weights_names_topk_weights(buffer):
    x, topk_idx, topk_weights = inputs()
    with pytest.raises(switchyard.InvalidArgument, match=r"^topk_weights: .*float16"):
        buffer.dispatch(x, topk_idx, topk_weights.astype(np.float16), num_experts=4)


def test_not_a_tensor_is_an_invalid_argument(buffer):
    _, topk_idx, topk_weights = inputs()
    with pytest.raises(switchyard.InvalidArgument, match=r"^x: expected a tensor .*got list"):
        buffer.dispatch([[1, 2]], topk_idx, topk_weights, num_experts=4)


def test_non_contiguous_input_is_refused(buffer):
    x, topk_idx, topk_weights = inputs(hidden=512)
    with pytest.raises(switchyard.InvalidArgument, match=r"^x: expected a row-major contiguous tensor"):
        buffer.dispatch(x[:, ::2], topk_idx, topk_weights, num_experts=4)


def test_expert_out_of_range_names_topk_idx(buffer):
    x, topk_idx, topk_weights = inputs()
    topk_idx[2, 1] = 4
    with pytest.raises(switchyard.InvalidArgument, match=r"topk_idx"):
        buffer.dispatch(x, topk_idx, topk_weights, num_experts=4)


def test_combine_rows_must_match_the_dispatch(buffer):
    recv = buffer.dispatch(*inputs(), num_experts=4)
    with pytest.raises(switchyard.InvalidArgument, match=r"^x: "):
        buffer.combine(recv.recv_x[:3], recv.handle)


def test_read_only_output_is_refused(buffer):
    x, topk_idx, topk_weights = inputs()
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=4)
    out = np.zeros_like(x)
    out.flags.writeable = False
    with pytest.raises(switchyard.InvalidArgument, match=r"^out_combined_x: expected a writable array"):
        buffer.combine(recv.recv_x, recv.handle, out_combined_x=out)


def test_bad_backend_and_sharing_are_named():
    with pytest.raises(switchyard.InvalidArgument, match=r"^backend: expected 'cpu' or 'cuda'"):
        switchyard.Buffer(solo_allgather, backend="tpu")
    with pytest.raises(switchyard.InvalidArgument, match=r"^sharing:"):
        switchyard.Buffer(solo_allgather, backend="cpu", sharing="files")


def test_bad_config_names_the_field():
    with pytest.raises(switchyard.InvalidArgument, match=r"chunk_tokens"):
        switchyard.Buffer(solo_allgather, backend="cpu", config=switchyard.Config(ring_slots=8, chunk_tokens=16))


def test_cuda_backend_without_a_gpu_is_an_error():
    if switchyard.cuda_available():
        pytest.skip("a CUDA device is visible")
    with pytest.raises(switchyard.Error):
        switchyard.Buffer(solo_allgather, backend="cuda")


def test_use_after_destroy_is_an_error():
    buffer = switchyard.Buffer(solo_allgather, backend="cpu", hidden=256, topk=2, num_experts=4)
    buffer.destroy()
    with pytest.raises(switchyard.Error, match="destroy"):
        buffer.dispatch(*inputs(), num_experts=4)


def test_groups_can_be_callables_or_mpi4py_like_communicators():
    class FakeComm:  # the part of mpi4py's Comm that switchyard uses
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 1

        def allgather(self, mine):
            return [mine]

    for group in (solo_allgather, FakeComm()):
        buffer = switchyard.Buffer(group, backend="cpu", hidden=256, topk=2, num_experts=4)
        assert (buffer.rank, buffer.num_ranks) == (0, 1)
        buffer.destroy()
    with pytest.raises(TypeError, match="group"):
        switchyard.Buffer(42, backend="cpu")
