"""kernels/cublas_direct.py: the products a CUDA graph records go to cuBLAS by pointer, with
the transposes and leading dimensions that make its column-major view the row-major operands.
Runs on the stand-in device, whose ``cublas_library`` reads memory by address as cuBLAS does
(test_gpu.py captures through the real libcublas)."""
import numpy
import pytest

from caffecli import standin, syncedmem
from caffecli.kernels import cublas_direct, gemm


def layouts(rs, rows, cols, dtype):
    """The same matrix as C-ordered, F-ordered and transposed-view operands."""
    m = rs.randn(rows, cols).astype(dtype)
    return {"C": m.copy(), "F": numpy.asfortranarray(m), "T of C": m.T.copy().T}


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("m,n,k", [(5, 7, 3), (1, 6, 4), (6, 1, 4), (3, 4, 1), (1, 1, 9)])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_every_layout_gives_the_product(dtype, m, n, k, beta):
    rs = numpy.random.RandomState(m * 100 + n * 10 + k)
    for na, a in layouts(rs, m, k, dtype).items():
        for nb, b in layouts(rs, k, n, dtype).items():
            for no, out in layouts(rs, m, n, dtype).items():
                want = a @ b + beta * out
                da, db, dout = (standin.ndarray(x.copy(order="A")) for x in (a, b, out))
                assert cublas_direct.gemm(standin, da, db, dout, beta), (na, nb, no)
                numpy.testing.assert_allclose(dout._a, want, rtol=1e-5, atol=1e-5,
                                              err_msg="%s @ %s -> %s" % (na, nb, no))


def test_a_strided_operand_is_left_to_the_caller():
    x = standin.ndarray(numpy.ones((4, 6), numpy.float32))
    assert cublas_direct.plan(x[:, ::2], x[:3], x[:, :3].copy()) is None
    assert not cublas_direct.gemm(standin, x[:, ::2], x[:3], x[:, :3].copy(), 0.0)


def test_a_bad_leading_dimension_is_cublas_status_7():
    lib, a = standin.cublas_library, numpy.ones((4, 4), numpy.float32)
    one = cublas_direct.ctypes.pointer(cublas_direct.ctypes.c_float(1.0))
    for lda, ldc in ((3, 4), (4, 3)):
        assert lib.cublasSgemm_v2(1, 0, 0, 4, 4, 4, one, a.ctypes.data, lda, a.ctypes.data, 4,
                                  one, a.ctypes.data, ldc) == 7
    assert (a == 1).all()


def test_products_inside_a_capture_go_to_cublas_directly():
    """cupy's cublas.gemm refuses a capturing stream (the stand-in too); gemm() then calls
    cuBLAS itself, and the graph replays the product."""
    xp = standin
    a = xp.asarray(numpy.arange(6, dtype=numpy.float32).reshape(2, 3))
    b = xp.asarray(numpy.ones((3, 2), numpy.float32))
    out = xp.zeros((2, 2), numpy.float32)
    stream = xp.cuda.Stream(non_blocking=True)
    stream.begin_capture()
    with pytest.raises(NotImplementedError, match="stream capture"):
        xp.cublas.gemm("N", "N", a, b, out=out)
    syncedmem.capture.watch = object()     # what replay.capturing() reads
    try:
        gemm.gemm(xp, a, b, out)
    finally:
        syncedmem.capture.watch = None
    graph = stream.end_capture()
    assert not out.get().any()           # a capture records, it does not run
    graph.launch()
    numpy.testing.assert_array_equal(out.get(), [[3, 3], [12, 12]])
