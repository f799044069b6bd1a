"""Fillers whose values are fixed by their parameters (Caffe's filler.hpp)."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.errors import CaffeError
from caffecli.fillers import fill
from caffecli.proto import caffe_pb2

# One row of Caffe's bilinear kernel for widths 1-5: 1 - |x / f - (k - 1) / (2 f)|, f = ceil(k/2)
BILINEAR_ROWS = {
    1: [1.0],
    2: [0.5, 0.5],
    3: [0.5, 1.0, 0.5],
    4: [0.25, 0.75, 0.75, 0.25],
    5: [1 / 3, 2 / 3, 1.0, 2 / 3, 1 / 3],
}


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("k", sorted(BILINEAR_ROWS))
def test_bilinear_kernel_is_the_outer_product_of_its_rows(k, dtype):
    blob = fill(Blob((2, 3, k, k), dtype), caffe_pb2.FillerParameter(type="bilinear"))
    row = numpy.array(BILINEAR_ROWS[k])
    want = numpy.broadcast_to(numpy.outer(row, row), (2, 3, k, k))
    numpy.testing.assert_allclose(blob.data, want, rtol=1e-6 if dtype == numpy.float32 else 1e-15)


def test_bilinear_refuses_sparsity_and_non_square_kernels():
    with pytest.raises(CaffeError, match="Sparsity"):
        fill(Blob((1, 1, 3, 3)), caffe_pb2.FillerParameter(type="bilinear", sparse=2))
    with pytest.raises(CaffeError, match="square"):
        fill(Blob((1, 1, 3, 4)), caffe_pb2.FillerParameter(type="bilinear"))


@pytest.mark.parametrize("param, needle", [
    (dict(type="constant", sparse=0), r"Sparsity not supported by this Filler \(constant\)"),
    (dict(type="xavier", sparse=3), r"Sparsity not supported by this Filler \(xavier\)"),
    (dict(type="uniform", sparse=1), r"Sparsity not supported by this Filler \(uniform\)"),
    (dict(type="gaussian", sparse=-2), "sparse must be -1"),
    (dict(type="gaussian", std=0), "std must be positive, got 0"),
    (dict(type="gaussian", std=-1), "std must be positive, got -1"),
    (dict(type="uniform", min=1, max=0.5), "min 1 is above max 0.5"),
])
def test_configurations_caffe_aborts_on_are_refused(param, needle):
    """Caffe's fillers CHECK these (filler.hpp, caffe_rng_gaussian/uniform's arguments)."""
    with pytest.raises(CaffeError, match=needle):
        fill(Blob((4, 3)), caffe_pb2.FillerParameter(**param))
    fill(Blob((4, 3)), caffe_pb2.FillerParameter(type="uniform", min=0.5, max=0.5))


@pytest.mark.parametrize("kind", ["xavier", "msra", "positive_unitball"])
def test_fan_fillers_refuse_a_blob_without_axes(kind):
    """They divide the count by the first axis: Caffe's shape(0) check aborts on a 0-D blob
    (a Bias or Scale with num_axes 0), so caffecli refuses it too; one axis is enough."""
    with pytest.raises(CaffeError, match="at least one axis"):
        fill(Blob(()), caffe_pb2.FillerParameter(type=kind))
    assert numpy.isfinite(fill(Blob((3,)), caffe_pb2.FillerParameter(type=kind)).data).all()


def test_sparse_gaussian_keeps_sparse_of_each_inputs_outputs():
    """Caffe keeps a weight with probability sparse / shape[0] (its outputs), and aborts
    where that exceeds 1."""
    from caffecli import context
    context.set_random_seed(3)
    blob = fill(Blob((40, 500)), caffe_pb2.FillerParameter(type="gaussian", sparse=10))
    kept = (blob.data != 0).mean()
    assert abs(kept - 10 / 40) < 0.02
    with pytest.raises(CaffeError, match="sparse 41 exceeds the 40 outputs"):
        fill(Blob((40, 500)), caffe_pb2.FillerParameter(type="gaussian", sparse=41))
    assert fill(Blob(()), caffe_pb2.FillerParameter(type="gaussian")).data.shape == ()
