"""Host kernels: BLAS GEMMs into given buffers."""
import functools
import os
import subprocess
import sys
import threading

import numpy
import pytest

from caffecli.kernels import jit, skinny_jit
from caffecli.kernels import threads as threads_mod
from caffecli.kernels.gemm import gemm, gemm_stack
from host_blas import assert_bits_or_close

R = numpy.random.RandomState(3)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("orders", ["CCC", "CFC", "FCF", "FFC", "CCF"])
def test_gemm_writes_and_accumulates_in_place(dtype, orders):
    a = numpy.asarray(R.randn(5, 7), dtype, order=orders[0])
    b = numpy.asarray(R.randn(7, 3), dtype, order=orders[1])
    out = numpy.asarray(R.randn(5, 3), dtype, order=orders[2])
    start = out.copy()
    assert gemm(numpy, a, b, out, accumulate=True) is out
    tol = 1e-5 if dtype == numpy.float32 else 1e-12
    numpy.testing.assert_allclose(out, start + a @ b, rtol=tol, atol=tol)
    gemm(numpy, a, b, out)
    numpy.testing.assert_allclose(out, a @ b, rtol=tol, atol=tol)


def test_gemm_falls_back_for_strided_operands_and_other_dtypes():
    a = R.randn(6, 8)[::2, ::2]          # neither C nor Fortran ordered
    b = R.randn(4, 3)
    out = numpy.ones((3, 3))
    gemm(numpy, a, b, out, accumulate=True)
    numpy.testing.assert_allclose(out, 1 + a @ b, rtol=1e-12)
    ints = numpy.zeros((2, 2), dtype=numpy.int64)
    gemm(numpy, numpy.eye(2, dtype=numpy.int64), numpy.full((2, 2), 3), ints, accumulate=True)
    assert (ints == [[3, 3], [3, 3]]).all()


def test_gemm_empty_inner_dimension_sets_or_keeps():
    out = numpy.full((2, 3), 5.0)
    gemm(numpy, numpy.empty((2, 0)), numpy.empty((0, 3)), out, accumulate=True)
    assert (out == 5).all()
    gemm(numpy, numpy.empty((2, 0)), numpy.empty((0, 3)), out)
    assert (out == 0).all()


def test_gemm_accumulates_without_a_product_sized_temporary():
    import tracemalloc
    a, b = R.randn(4, 300).T.copy(), R.randn(4, 200)  # out (300, 200): 480 kB of float64
    out = numpy.zeros((300, 200))
    tracemalloc.start()
    try:
        gemm(numpy, a, b, out, accumulate=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < out.nbytes // 10
    numpy.testing.assert_allclose(out, a @ b, rtol=1e-12)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_an_outer_product_goes_to_blas_not_to_numpys_own_loop(monkeypatch, dtype):
    """An inner dimension of 1 (an inner product's weight gradient at batch 1, written after
    a solver's clear) is each value's one product; numpy's matmul runs it without BLAS."""
    from caffecli.kernels import gemm as gemm_mod
    real = numpy.matmul
    inner = []
    monkeypatch.setattr(gemm_mod.numpy, "matmul", lambda a, b, **kw: (
        inner.append(a.shape[-1]), real(a, b, **kw))[1])
    dy, x = numpy.asarray(R.randn(1, 50), dtype), numpy.asarray(R.randn(1, 80), dtype)
    out = numpy.full((50, 80), 7, dtype)
    gemm(numpy, dy.T, x, out)
    assert 1 not in inner
    numpy.testing.assert_array_equal(out, dy.T * x)
    gemm(numpy, numpy.asarray(R.randn(50, 2), dtype), numpy.asarray(R.randn(2, 80), dtype), out)
    assert gemm_mod.NUMPY_BLAS_QUIET == (2 in inner)   # other products: numpy's BLAS


@pytest.mark.parametrize("inner", [1, 3, 10, 12])
def test_a_short_inner_product_written_fresh_is_blas_bits_in_one_pass(monkeypatch, inner):
    """kernels/outer_jit writes a fresh float32 product with a short inner dimension (BLAS
    would zero the output first: a weight gradient at a small batch) with OpenBLAS's bits
    (SKYLAKEX's kernels'; others' within rounding: host_blas), +0.0 for a zero sum, split
    across the threads; an accumulated one, one into a Fortran-ordered output, a float64 one or
    a longer inner dimension stays with BLAS."""
    dtype = numpy.float32
    from scipy.linalg import blas
    from caffecli.kernels import gemm as gemm_mod, outer_jit
    if not jit.usable(numpy.zeros(1)):
        pytest.skip("compiled kernels not installed (numba)")
    dy = numpy.asarray(R.randn(inner, 300), dtype)
    x = numpy.asarray(R.randn(inner, 700), dtype)   # more columns than a chunk
    dy[:, ::7], x[:, ::5] = 0.0, -0.0
    x[:, 1::5] *= 1e-30   # products that round to zero, of either sign
    ran = []
    real_product = outer_jit.product
    monkeypatch.setattr(outer_jit, "product", lambda *a: ran.append(1) or real_product(*a))
    parts = []
    real_native = outer_jit.for_native
    monkeypatch.setattr(outer_jit, "for_native", lambda driver, n, size, *a: parts.append(
        threads_mod._parts(n, size, None, pooled=False)) or real_native(driver, n, size, *a))
    out = numpy.full((300, 700), 7, dtype)
    gemm(numpy, dy.T, x, out)
    expected = blas.sgemm(1.0, dy.T, x, beta=0.0)
    assert ran and parts == [min(threads_mod.num_threads(), out.size // (1 << 15))]
    assert_bits_or_close(out, numpy.ascontiguousarray(expected))
    assert (out == 0).any() and not numpy.signbit(out[out == 0]).any()
    before = out.copy()
    monkeypatch.setattr(gemm_mod, "_host_gemm", lambda a, b, o, beta: (
        o.__iadd__(a @ b) if beta else o.__setitem__(Ellipsis, a @ b), True)[1])
    gemm(numpy, dy.T, x, out, accumulate=True)
    numpy.testing.assert_array_equal(out, before + dy.T @ x)
    gemm(numpy, dy.T, x, numpy.empty((300, 700), dtype, order="F"))
    gemm(numpy, dy.T.astype(numpy.float64), x.astype(numpy.float64), out.astype(numpy.float64))
    longer = numpy.asarray(R.randn(outer_jit.MAX_INNER + 1, 700), dtype)
    gemm(numpy, numpy.asarray(R.randn(outer_jit.MAX_INNER + 1, 300), dtype).T, longer, out)
    assert len(ran) == 1


def test_gemm_stack_runs_each_group():
    a, b = R.randn(3, 2, 4), R.randn(3, 4, 5)
    out = numpy.zeros((3, 2, 5))
    gemm_stack(numpy, a, b, out, accumulate=True)
    numpy.testing.assert_allclose(out, numpy.matmul(a, b), rtol=1e-12)


def test_threads_follow_omp_num_threads_then_affinity(monkeypatch):
    import os
    from caffecli.kernels import threads
    for three in ("3", " 3 "):
        monkeypatch.setenv("OMP_NUM_THREADS", three)
        assert threads.num_threads() == 3
    for other in ("", "0", "4,2", "x", "\u00b2"):    # not one positive count: the affinity's
        monkeypatch.setenv("OMP_NUM_THREADS", other)
        assert threads.num_threads() == len(os.sched_getaffinity(0))


def test_the_cheap_environment_reads_follow_every_change(monkeypatch):
    """util/environ.get is os.environ.get, changes made while running included: a value
    set, changed, emptied and removed, and the compiled kernels' switch with it."""
    import os
    from caffecli.kernels import jit
    from caffecli.util import environ
    name = "CAFFECLI_TEST_ENVIRON"
    monkeypatch.delenv(name, raising=False)
    assert environ.get(name) is None and environ.get(name, "d") == "d"
    for value in ("1", "2", "", "\u00e9 x"):
        monkeypatch.setenv(name, value)
        assert environ.get(name, "d") == value == os.environ.get(name)
    monkeypatch.delenv(name)
    assert environ.get(name, "d") == "d"
    x = numpy.zeros(3, numpy.float32)
    for switch, usable in (("0", False), ("1", jit.INSTALLED)):
        monkeypatch.setenv("CAFFECLI_JIT", switch)
        assert jit.usable(x, x) == usable
    assert not jit.usable(x, x.astype(numpy.int32)) and not jit.usable(x[::2])
    assert not jit.usable(x.astype(">f4"))


def test_for_parts_covers_the_range_once_and_raises_a_pool_threads_error(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    seen, names = numpy.zeros(10, int), set()   # names: the threads that ran a part

    def part(a, b):
        seen[a:b] += 1
        names.add(threading.get_ident())
    threads_mod.for_parts(numpy, part, 10, 1 << 30, min_part=1)
    assert seen.tolist() == [1] * 10 and len(names) == 4

    def fail_late(a, b):
        if a >= 5:
            raise ValueError("part %d-%d" % (a, b))
    with pytest.raises(ValueError, match="part 5-7"):
        threads_mod.for_parts(numpy, fail_late, 10, 1 << 30, min_part=1)
    seen[...] = 0
    threads_mod.for_parts(numpy, part, 10, 1 << 30, min_part=1)   # the pool still works
    assert seen.tolist() == [1] * 10


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
def test_a_kernel_marked_fast_compiles_with_its_flags_wherever_it_is_called(monkeypatch):
    """A kernel marked with jit.fast compiles once with its fastmath flags, whether a driver
    (on the pool or numba's threads) or Python calls it first; unmarked kernels get none."""
    from caffecli.kernels import channel_jit
    monkeypatch.setattr(jit, "_compiled", {})
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    a, b = R.randn(3, 40).astype(numpy.float32), R.randn(40, 9).astype(numpy.float32)
    out = numpy.zeros((3, 9), numpy.float32)
    skinny_jit.product(a, b, out)     # the driver compiles _dots first
    numpy.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    assert jit.kernel(skinny_jit._dots).targetoptions["fastmath"] == {"reassoc", "contract"}
    assert jit.kernel(skinny_jit._rows).targetoptions["fastmath"] == {"contract"}
    assert not jit.kernel(channel_jit._images_first).targetoptions["fastmath"]


@pytest.mark.skipif(not (jit.INSTALLED and hasattr(os, "sched_yield")),
                    reason="the spinning hand-off needs numba and sched_yield")
def test_handoff_waits_for_its_count_spinning_or_asleep():
    """A wait returns once the counter reaches its target, whether it finds it spinning or
    must sleep; a wake left over from a post that raced its waiter's sleep does not end a
    later wait early."""
    from caffecli.kernels import handoff
    signal = handoff.Signal()
    seen = []

    def waiter(target, spins):
        signal.wait(target, spins)
        seen.append(int(signal.flags[handoff.COUNTER]))
    for target, spins in ((1, 1 << 20), (2, 0), (3, 1)):
        t = threading.Thread(target=waiter, args=(target, spins), daemon=True)
        t.start()
        t.join(0.05)
        assert t.is_alive(), "returned before its count"
        signal.post(target)
        t.join(5)
        assert not t.is_alive() and seen[-1] >= target
    # the stray wake: the waiter marked itself asleep, then saw the count and went on
    signal.flags[handoff.SLEEPER] = 1
    signal.post(4)
    signal.flags[handoff.SLEEPER] = 0
    t = threading.Thread(target=waiter, args=(5, 0), daemon=True)
    t.start()
    t.join(0.05)
    assert t.is_alive(), "a stray wake ended the wait"
    signal.post(5)
    t.join(5)
    assert not t.is_alive() and seen[-1] == 5


@pytest.mark.skipif(not (jit.INSTALLED and hasattr(os, "sched_yield")),
                    reason="the spinning hand-off needs numba and sched_yield")
def test_handoff_post_then_wait_wakes_a_sleeping_waiter_then_waits():
    """A worker's 'done' and its wait for the next part in one call: the caller, asleep on
    'done', wakes; the worker returns only once 'go' is posted."""
    from caffecli.kernels import handoff
    done, go = handoff.Signal(), handoff.Signal()
    caller = threading.Thread(target=done.wait, args=(1, 0), daemon=True)
    caller.start()
    for _ in range(1000):
        if done.flags[handoff.SLEEPER]:
            break
        caller.join(0.001)
    assert done.flags[handoff.SLEEPER] == 1, "the caller never went to sleep"
    worker = threading.Thread(target=done.post_then_wait, args=(1, go, 1, 1 << 12),
                              daemon=True)
    worker.start()
    caller.join(5)
    assert not caller.is_alive(), "the sleeping caller was not woken"
    worker.join(0.05)
    assert worker.is_alive(), "returned before its next part"
    go.post(1)
    worker.join(5)
    assert not worker.is_alive()


@pytest.mark.parametrize("spin", [True, False])
def test_pool_hands_off_by_spinning_or_by_semaphore(monkeypatch, spin):
    """The pool's workers spin for their parts where numba and sched_yield are at hand (not
    with CAFFECLI_SPIN_WAIT=0), else sleep on a semaphore; either way each part runs once, and
    many splits in a row each wait for their own parts."""
    monkeypatch.setattr(threads_mod, "SPIN_WAIT", spin)
    monkeypatch.setattr(threads_mod, "_pool", threads_mod._Pool())
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    out = numpy.zeros((200, 9))
    for i in range(200):
        threads_mod.for_parts(numpy, lambda a, b: out[i, a:b].__iadd__(i + 1), 9, 1 << 30,
                              min_part=1)
    assert (out == numpy.arange(1, 201)[:, None]).all()
    spinning = spin and jit.INSTALLED and hasattr(os, "sched_yield")
    kind = "Signal" if spinning else "_Semaphore"
    assert all(type(w.go).__name__ == kind for w in threads_mod._pool.workers)
    assert len(threads_mod._pool.workers) == 2


def test_for_parts_inside_a_part_or_from_two_threads_runs_whole(monkeypatch):
    """A split that finds the pool busy (a nested split, another thread's) runs on its own
    thread instead of waiting for the pool: it finishes, with every value written once."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    out = numpy.zeros((6, 50))

    def inner(row):
        def fill(a, b):
            out[row, a:b] += row + 1
        return fill
    threads_mod.for_parts(numpy, lambda a, b: [threads_mod.for_parts(
        numpy, inner(r), 50, 1 << 30, min_part=1) for r in range(a, b)], 6, 1 << 30, min_part=1)
    assert (out == numpy.arange(1, 7)[:, None]).all()
    out[...] = 0
    callers = [threading.Thread(target=threads_mod.for_parts, args=(
        numpy, inner(r), 50, 1 << 30), kwargs={"min_part": 1}) for r in range(6)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert (out == numpy.arange(1, 7)[:, None]).all()


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
def test_for_native_takes_numbas_threads_only_when_free(monkeypatch):
    """A split of three or more parts starts them on numba's threads; two parts, a split while
    another holds the threads, in a forked child, or with CAFFECLI_NATIVE_THREADS=0, the serial
    driver runs each part on the pool; the values are the same."""
    from caffecli.kernels import relu_jit
    monkeypatch.setattr("caffecli.kernels.jit.PASS_MIN_PART", 1)
    x = R.randn(1000).astype(numpy.float32)
    want = numpy.maximum(x, 0)
    kinds = []
    real = jit.parallel
    monkeypatch.setattr(jit, "parallel", lambda d, threaded=False: kinds.append(threaded)
                        or real(d, threaded))
    for count, native, busy, forked, threaded in (
            ("3", True, False, False, True), ("2", True, False, False, False),
            ("3", True, True, False, False), ("3", True, False, True, False),
            ("3", False, False, False, False)):
        monkeypatch.setenv("OMP_NUM_THREADS", count)
        monkeypatch.setattr(threads_mod, "NATIVE", native)
        monkeypatch.setattr(threads_mod, "_native", [not forked])
        y = numpy.full_like(x, 7)
        if busy:
            threads_mod._pool.busy.acquire()
        try:
            relu_jit.forward(x, numpy.float32(0), y)
        finally:
            if busy:
                threads_mod._pool.busy.release()
        assert numpy.array_equal(y, want)
        assert kinds[-1] is threaded, (count, native, busy, forked)
        kinds.clear()


def test_pool_parts_grow_as_the_root_of_the_work(monkeypatch):
    """Pool threads start one after another, so a split of the default part size takes about
    sqrt(elements / part) parts; a given part size, numba's threads and two threads are not
    capped."""
    monkeypatch.setenv("OMP_NUM_THREADS", "16")
    part = threads_mod.MIN_PART_ELEMENTS
    assert threads_mod._parts(64, 2 * part, None) == 2
    assert threads_mod._parts(64, 9 * part, None) == 3
    assert threads_mod._parts(64, 100 * part, None) == 10
    assert threads_mod._parts(64, 1000 * part, None) == 16
    assert threads_mod._parts(64, 100 * part, part) == 16          # its own part size
    assert threads_mod._parts(64, 100 * part, None, pooled=False) == 16
    assert threads_mod._parts(6, 100 * part, None) == 6            # no more parts than items
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert threads_mod._parts(64, 3 * part, None) == 2


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("named", ["", "omp"])
def test_kernel_threads_are_numbas_work_queue_unless_a_layer_is_named(named):
    """numba's work queue shares no OpenMP runtime with other libraries (PyTorch's); a layer
    the user names in NUMBA_THREADING_LAYER is kept."""
    env = dict(os.environ, NUMBA_THREADING_LAYER=named)
    code = ("from caffecli.kernels import threads; assert threads.start(); "
            "import numba; print(numba.threading_layer())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[-1] == (named or "workqueue")


@pytest.mark.parametrize("name,features,user,expected", [
    ("emeraldrapids", "+avx2,+avx512f,-amx-fp16", (None, None), "+avx2,+avx512f,-amx-fp16,"
                                                                 "-prefer-256-bit"),
    ("skylake-avx512", "+avx512f", (None, None), "+avx512f,-prefer-256-bit"),
    ("emeraldrapids", "+avx512f", ("haswell", None), None),       # the user's CPU name
    ("emeraldrapids", "+avx512f", (None, "+avx2"), None),         # the user's features
    ("znver5", "+avx2,+avx512f", (None, None), None),             # AMD: LLVM's own choice
    ("alderlake", "+avx2,-avx512f", (None, None), None),          # no AVX-512
])
def test_kernels_drop_the_256_bit_preference_only_on_intel_avx512(name, features, user,
                                                                  expected):
    assert jit.vector_features(name, features, *user) == expected


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("user", [False, True])
def test_compiled_kernels_take_the_chosen_features_unless_the_user_set_them(user):
    """The first kernel caffecli compiles sets numba's features to vector_features' choice for
    this host; NUMBA_CPU_FEATURES set by the user is kept as given."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CPU_NAME",
                                                            "NUMBA_CPU_FEATURES")}
    code = ("import llvmlite.binding as ll; from caffecli.kernels import jit\n"
            "def twice(v):\n    return 2 * v\n"
            "assert jit.kernel(twice)(2.0) == 4.0\n"
            "from numba.core.registry import cpu_target\n"
            "print(cpu_target.target_context.codegen()._tm_features)\n"
            "from numba.core.codegen import get_host_cpu_features as features\n"
            "print(jit.vector_features(ll.get_host_cpu_name(), features()))\n"
            "print(features())")
    if user:
        env["NUMBA_CPU_FEATURES"] = "+sse2"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    if user:
        assert out[0] == "+sse2"
    else:
        assert out[0] == (out[2] if out[1] == "None" else out[2] + ",-prefer-256-bit")


@pytest.mark.parametrize("text,shape", [
    ('type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }', (5, 3, 9, 8)),
    ('type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 }', (5, 3, 9, 8)),
    ('type: "LRN" lrn_param { local_size: 5 alpha: 0.1 beta: 0.75 }', (5, 7, 4, 3)),
    ('type: "ReLU"', (5, 3, 4, 4)),
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 pad: 1 '
     'weight_filler { type: "gaussian" std: 0.3 } }', (3, 5, 6, 6)),
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 stride: 2 '
     'weight_filler { type: "gaussian" std: 0.3 } }', (3, 5, 9, 8)),
    # few channels, more images: the numpy im2col/col2im split by image, strided and 3-D
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 stride: 2 '
     'weight_filler { type: "gaussian" std: 0.3 } }', (7, 2, 9, 8)),
    ('type: "Convolution" convolution_param { num_output: 3 kernel_size: 3 pad: 1 '
     'weight_filler { type: "gaussian" std: 0.3 } }', (5, 2, 4, 5, 3)),
    ('type: "Deconvolution" convolution_param { num_output: 4 kernel_size: 3 stride: 2 '
     'weight_filler { type: "gaussian" std: 0.3 } }', (5, 3, 5, 4)),
])
def test_split_across_threads_gives_the_same_bits(monkeypatch, text, shape, conv_algorithm):
    """Layers whose host work is split across threads: one part or many, on the pool or on
    numba's own threads, the same values (parameter gradients too)."""
    from caffecli import context
    from caffecli.blob import Blob
    from caffecli.kernels import threads
    from gradcheck import make_layer
    x = R.randn(*shape).astype(numpy.float32)
    results = []
    for count, min_part, native in (("1", 1 << 30, False), ("3", 1, False), ("3", 1, True)):
        if native and not jit.INSTALLED:
            continue
        monkeypatch.setenv("OMP_NUM_THREADS", count)
        monkeypatch.setattr(threads, "NATIVE", native)
        monkeypatch.setattr(threads, "MIN_PART_ELEMENTS", min_part)
        monkeypatch.setattr("caffecli.kernels.jit.PASS_MIN_PART", min_part)
        context.set_random_seed(4)
        layer = make_layer(text)
        bottom, top = [Blob(shape)], [Blob()]
        bottom[0].data[...] = x
        layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
        top[0].diff[...] = numpy.linspace(-1, 1, top[0].count).reshape(top[0].shape)
        layer.Backward(top, [True], bottom)
        results.append((top[0].data.copy(), bottom[0].diff.copy(),
                        [b.diff.copy() for b in layer.blobs]))
    (y1, dx1, p1), *split = results
    for y3, dx3, p3 in split:
        assert numpy.array_equal(y1, y3) and numpy.array_equal(dx1, dx3)
        assert all(numpy.array_equal(a, b) for a, b in zip(p1, p3))
    assert numpy.abs(dx1).sum() > 0


def test_counter_random_bits_are_uniform_repeatable_and_keyed():
    from caffecli.kernels.random import random_bits, uint_threshold
    bits = random_bits(numpy, (200, 500), key=12345)
    assert bits.dtype == numpy.uint32 and bits.shape == (200, 500)
    counts = numpy.bincount((bits >> 28).ravel(), minlength=16)   # 16 equal bins
    expected = bits.size / 16
    assert ((counts - expected) ** 2 / expected).sum() < 50          # chi2(15): p < 1e-4
    numpy.testing.assert_array_equal(bits, random_bits(numpy, (200, 500), key=12345))
    other = random_bits(numpy, (200, 500), key=12346)
    assert (bits == other).mean() < 1e-3
    flat = random_bits(numpy, (100000,), key=12345)
    numpy.testing.assert_array_equal(flat, bits.ravel()[:100000])  # element i hashes (key, i)
    assert uint_threshold(0.0) == 0 and uint_threshold(0.5) == 2 ** 31
    assert abs((bits >= uint_threshold(0.3)).mean() - 0.7) < 0.01


def test_device_gemm_goes_to_cublas_in_place_and_strided_operands_fall_back(monkeypatch):
    from caffecli import standin
    from caffecli.kernels import gemm as gemm_mod
    calls = []
    real = standin.cublas.gemm
    monkeypatch.setattr(standin.cublas, "gemm", lambda *a, **k: calls.append(k["beta"]) or
                        real(*a, **k))
    rs = numpy.random.RandomState(0)
    a, b, c = rs.rand(4, 3), rs.rand(3, 5), rs.rand(4, 5)
    da, db = standin.asarray(numpy.asfortranarray(a)), standin.asarray(b)
    out = standin.asarray(c)
    target = out._a                                   # the device memory itself
    gemm_mod.gemm(standin, da, db, out, accumulate=True)
    stale = standin.asarray(numpy.full((4, 5), numpy.nan))     # beta 0 never reads it
    gemm_mod.gemm(standin, da, db, stale)
    assert calls == [1.0, 0.0]
    numpy.testing.assert_allclose(standin.asnumpy(stale), a @ b)
    numpy.testing.assert_allclose(target, c + a @ b)
    strided = standin.asarray(rs.rand(4, 6))[:, ::2]
    fresh = standin.empty((4, 3))
    gemm_mod.gemm(standin, strided, standin.asarray(numpy.eye(3)), fresh)
    assert calls == [1.0, 0.0]                        # matmul, the reference path
    numpy.testing.assert_allclose(standin.asnumpy(fresh), standin.asnumpy(strided))


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("rows,cols", [(5, 3), (3, 5)])   # the temporary as is, transposed
def test_gemm_accumulates_a_small_diff_over_a_long_inner_dimension(dtype, rows, cols,
                                                                    monkeypatch):
    """A convolution's weight gradient over a batch: numpy's product plus an add, not BLAS's
    beta = 1 (which must not be called), with the same sum, whichever layout of the temporary
    (the taller) is computed."""
    from caffecli.kernels import gemm as gemm_mod
    monkeypatch.setattr(gemm_mod, "NUMPY_BLAS_QUIET", True)
    monkeypatch.setattr(gemm_mod, "_GEMM", {numpy.dtype(dtype): lambda *a, **k: 1 / 0})
    a = numpy.asarray(R.randn(rows, gemm_mod.LONG_INNER), dtype)
    b = numpy.asarray(R.randn(gemm_mod.LONG_INNER, cols), dtype).T.copy().T  # Fortran-ordered
    out = numpy.asarray(R.randn(rows, cols), dtype)
    start = out.copy()
    gemm(numpy, a, b, out, accumulate=True)
    tol = 1e-4 if dtype == numpy.float32 else 1e-11
    numpy.testing.assert_allclose(out, start + a.astype(numpy.float64) @ b, rtol=tol, atol=tol)


def _skinny_results(monkeypatch, a, b, out_shape, dtype):
    """gemm(a, b) with kernels/skinny_jit.py's loops at 1, 2 and 3 threads, in tiny chunks and
    groups (several chunks, a ragged last one, rows of w left over from the fours), and at 2
    threads with the input gradient's chunks narrower still or each thread's whole share (as
    for a large w: its chunk follows the thread count and w's size, so it must not change a
    bit)."""
    from caffecli.kernels import gemm as gemm_mod
    monkeypatch.setattr(skinny_jit, "MIN_WEIGHTS", 1)
    monkeypatch.setattr(skinny_jit, "MIN_WEIGHTS_ONE_ROW", 1)
    monkeypatch.setattr(skinny_jit, "CHUNK", 64)
    monkeypatch.setattr(skinny_jit, "GROUP", 6)
    monkeypatch.setattr(gemm_mod, "_host_gemm", lambda *a: 1 / 0)   # not BLAS
    results = []
    for threads, rows_chunk, stream in (("1", 32, False), ("2", 32, False), ("3", 32, False),
                                        ("2", 8, False), ("2", 32, True)):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        monkeypatch.setattr(skinny_jit, "ROWS_CHUNK", rows_chunk)
        monkeypatch.setattr(skinny_jit, "STREAM_WEIGHTS", 1 if stream else 1 << 40)
        monkeypatch.setattr(skinny_jit, "for_native", functools.partial(
            threads_mod.for_native, min_part=1))
        results.append(gemm(numpy, a, b, numpy.full(out_shape, numpy.nan, dtype)))
    tol = 1e-5 if dtype == numpy.float32 else 1e-13
    numpy.testing.assert_allclose(results[0], a.astype(numpy.float64) @ b.astype(numpy.float64),
                                  rtol=tol, atol=tol)
    assert len({r.tobytes() for r in results}) == 1


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("rows,outputs", [(1, 9), (3, 16), (6, 11), (10, 9), (13, 6), (16, 7)])
def test_few_rows_times_a_large_transpose_stream_it(dtype, rows, outputs, monkeypatch):
    """A fully connected forward at a small batch (kernels/skinny_jit.py): BLAS's product to
    rounding, the same bits for any thread count (remainder rows of a and w included)."""
    a = numpy.asarray(R.randn(rows, 300), dtype)
    w = numpy.asarray(R.randn(outputs, 300), dtype)
    _skinny_results(monkeypatch, a, w.T, (rows, outputs), dtype)


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("rows,outputs", [(2, 9), (5, 16), (12, 23)])
def test_few_rows_times_a_large_matrix_stream_it(dtype, rows, outputs, monkeypatch):
    """A fully connected input gradient at a small batch, dy @ W (kernels/skinny_jit.py's
    rows_product): BLAS's product to rounding, the same bits for any thread count."""
    calls = []
    real = skinny_jit.rows_product
    monkeypatch.setattr(skinny_jit, "rows_product", lambda *a: calls.append(1) or real(*a))
    dy = numpy.asarray(R.randn(rows, outputs), dtype)
    w = numpy.asarray(R.randn(outputs, 150), dtype)
    _skinny_results(monkeypatch, dy, w, (rows, 150), dtype)
    assert len(calls) == 5


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("rows,outputs", [(4, 9), (5, 16), (20, 25), (13, 6)])
def test_weight_gradient_sums_add_into_the_diff(dtype, rows, outputs, monkeypatch):
    """diff += dy @ col.T over a long inner dimension (a convolution's weight gradient over a
    batch: kernels/skinny_jit.py's dot products): the diff's old values plus the product, to
    rounding, the same bits at 1, 2 and 3 threads, and BLAS not called."""
    from caffecli.kernels import gemm as gemm_mod
    monkeypatch.setattr(skinny_jit, "MIN_SUMS_INNER", 100)
    monkeypatch.setattr(skinny_jit, "CHUNK", 256)       # several chunks, a ragged last one
    monkeypatch.setattr(gemm_mod, "_host_gemm", lambda *a: 1 / 0)   # not BLAS
    monkeypatch.setattr(skinny_jit, "for_native", functools.partial(threads_mod.for_native,
                                                                    min_part=1))
    dy = numpy.asarray(R.randn(rows, 700), dtype)
    col = numpy.asarray(R.randn(outputs, 700), dtype)
    start = numpy.asarray(R.randn(rows, outputs), dtype)
    results = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        diff = start.copy()
        assert gemm(numpy, dy, col.T, diff, accumulate=True) is diff
        results.append(diff)
    want = start + dy.astype(numpy.float64) @ col.T.astype(numpy.float64)
    tol = 1e-4 if dtype == numpy.float32 else 1e-12
    numpy.testing.assert_allclose(results[0], want, rtol=tol, atol=tol)
    assert len({r.tobytes() for r in results}) == 1


def test_weight_gradient_sums_only_where_they_pay():
    dy, col = numpy.ones((64, 2048), numpy.float32), numpy.ones((500, 2048), numpy.float32)
    diff = numpy.zeros((64, 500), numpy.float32)
    assert skinny_jit.applies_sums(dy, col.T, diff) == jit.usable(dy)
    assert not skinny_jit.applies_sums(numpy.ones((65, 2048), numpy.float32), col.T,
                                       numpy.zeros((65, 500), numpy.float32))  # many rows
    assert not skinny_jit.applies_sums(dy[:, :1000], col[:, :1000].T, diff)   # short sums
    assert not skinny_jit.applies_sums(dy, numpy.ones((2048, 600), numpy.float32),
                                       numpy.zeros((64, 600), numpy.float32))  # out too big
    assert not skinny_jit.applies_sums(dy, numpy.ones((2048, 500), numpy.float32), diff)
    # CIFAR-10's conv2: few values out, but 32 x 800 sums 25600 long is 5x MAX_SUMS_MACS
    long_dy, long_col = numpy.ones((32, 25600), numpy.float32), numpy.ones((800, 25600),
                                                                           numpy.float32)
    long_diff = numpy.zeros((32, 800), numpy.float32)
    assert not skinny_jit.applies_sums(long_dy, long_col.T, long_diff)
    assert skinny_jit.applies_sums(numpy.ones((32, 4096), numpy.float32),
                                   numpy.ones((800, 4096), numpy.float32).T, long_diff) \
        == jit.usable(dy)   # LeNet's conv2 size: kept


def test_skinny_products_only_where_they_pay(monkeypatch):
    monkeypatch.setattr(skinny_jit, "MIN_WEIGHTS", 100)
    a, w = numpy.ones((16, 10), numpy.float32), numpy.ones((12, 10), numpy.float32)
    out = numpy.empty((16, 12), numpy.float32)
    assert skinny_jit.applies(a, w.T, out) == jit.usable(a)
    assert not skinny_jit.applies(numpy.ones((17, 10), numpy.float32), w.T,
                                  numpy.empty((17, 12), numpy.float32))       # BLAS's case
    assert not skinny_jit.applies(a, numpy.ones((10, 12), numpy.float32), out)   # not a w.T
    assert not skinny_jit.applies(a, w[:9].T, out[:, :9])                        # too small
    assert not skinny_jit.applies(a, w.T.astype(numpy.float64), out)             # mixed types
    dy, dx = numpy.ones((10, 12), numpy.float32), numpy.empty((10, 10), numpy.float32)
    assert skinny_jit.applies_rows(dy, w, dx) == jit.usable(dy)
    assert not skinny_jit.applies_rows(dy[:1], w, dx[:1])            # one row: BLAS streams it
    assert not skinny_jit.applies_rows(numpy.ones((13, 12), numpy.float32), w,
                                       numpy.empty((13, 10), numpy.float32))
    assert not skinny_jit.applies_rows(dy, w[:, :8], dx[:, :8])    # too small
    monkeypatch.setattr(skinny_jit, "MIN_WEIGHTS_ONE_ROW", 121)
    assert not skinny_jit.applies(a[:1], w.T, out[:1])     # one row: gemv's size from 121
    assert skinny_jit.applies(a[:2], w.T, out[:2]) == jit.usable(a)


def test_skinny_products_take_weights_that_leave_the_caches():
    """From 2 MB of weights with two rows or more (CaffeNet's fc8 at batch 10, ResNet-50's
    fc1000 at batch 2), from 16 MB for one row; LeNet's ip1 (1.6 MB) stays with BLAS."""
    def takes(rows, outputs, inputs):
        a = numpy.ones((rows, inputs), numpy.float32)
        w = numpy.ones((outputs, inputs), numpy.float32)
        return skinny_jit.applies(a, w.T, numpy.empty((rows, outputs), numpy.float32))
    if not jit.usable(numpy.zeros(1, numpy.float32)):
        pytest.skip("compiled kernels are off (numba missing or CAFFECLI_JIT=0)")
    assert takes(10, 1000, 4096) and takes(2, 1000, 2048) and takes(10, 1000, 1024)
    assert not takes(8, 500, 800)
    assert not takes(1, 1000, 2048) and takes(1, 4096, 4096)


@pytest.mark.parametrize("first,early", [("import caffecli", False),
                                         ("import numpy, caffecli", True)])
def test_numpy_blas_serves_in_either_import_order(first, early):
    """numpy's BLAS reads OPENBLAS_THREAD_TIMEOUT when it loads: loaded before caffecli set it,
    its threads are restarted to read it, so its products serve in both orders."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    out = subprocess.run([sys.executable, "-c", first + "; import caffecli.kernels.gemm as g; "
                          "print(caffecli.NUMPY_BLAS_QUIET, g.NUMPY_BLAS_QUIET)"],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(not early), "True"]


def test_numpy_blas_loaded_first_runs_a_ranks_share_of_the_cores():
    """Under an MPI launcher (two ranks here) caffecli gives each rank its share of the cores;
    numpy's BLAS, loaded before that, is set to it too once caffecli's kernels load."""
    env = {k: v for k, v in os.environ.items() if k not in (
        "OPENBLAS_THREAD_TIMEOUT", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_LOCAL_SIZE="2")
    out = subprocess.run([sys.executable, "-c", "import numpy, caffecli.kernels.gemm; "
                          "from caffecli.kernels import blas_threads; "
                          "print(*[get() for get, _ in blas_threads._find()])"],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out and set(out) == {str(max(1, len(os.sched_getaffinity(0)) // 2))}, out


SPIN = """
import resource, sys, time
import numpy
def busy_during_sleep():   # CPU seconds the process spends while its main thread sleeps
    a = numpy.ones((600, 600), numpy.float32)
    a @ a                  # a threaded product
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(0.1)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
spinning = min(busy_during_sleep() for _ in range(3))
import caffecli.kernels.gemm
print(spinning, max(busy_during_sleep() for _ in range(3)))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="BLAS runs one thread on one core")
def test_numpy_blas_loaded_first_stops_spinning_after_caffecli_loads():
    """With numpy imported first its BLAS threads spin ~0.1 s after a product (OpenBLAS's
    default timeout); once caffecli's kernels load they sleep at once (kernels/blas_threads.py's
    restart)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", SPIN], env=env, capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    spinning, quiet = map(float, out.stdout.split())
    if spinning < 0.03:
        pytest.skip("numpy's BLAS threads did not spin here (%.3f s busy)" % spinning)
    assert quiet < 0.02, (spinning, quiet)


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("shape", [(3, 5, 1000), (2, 8, 4099), (4, 3, 7), (1, 13, 9)])
def test_image_rows_add_caffes_gemv_per_image_and_move_the_rows(dtype, shape):
    """A convolution's bias gradient on the host (caffe_gemv_jit.add_image_rows): each image's
    rows added into the diff in Caffe's gemv order, image after image (caffe_gemv.row_totals
    with a start, bit for bit), and with ``moved`` the rows copied channels first."""
    from caffecli.kernels import caffe_gemv, caffe_gemv_jit
    x = numpy.asarray(R.randn(*shape) * 10 ** R.uniform(-3, 3, shape), dtype)
    start = numpy.asarray(R.randn(shape[1]) * 100, dtype)
    want = start.copy()
    for o in range(shape[0]):
        want = caffe_gemv.row_totals(x[o], 1, want)
    for move in (False, True):
        out = start.copy()
        moved = numpy.full((shape[1], shape[0], shape[2]), -1, dtype) if move else None
        caffe_gemv_jit.add_image_rows(x, out, moved)
        assert out.tobytes() == want.tobytes()
        if move:
            numpy.testing.assert_array_equal(moved, x.transpose(1, 0, 2))


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 64, 4097, 8199])
def test_row_parts_added_in_order_are_the_gemv_into_the_diff(n):
    """Each image's row sums taken apart (caffe_gemv_jit.matrix_row_parts: conv_jit's images in
    parallel) and added in image order (add_parts) give Caffe's per-image gemv into the diff
    bit for bit: blocks of 4096, the tails, the rows' three kernels."""
    from caffecli.kernels import caffe_gemv, caffe_gemv_jit
    x = (R.randn(3, 7, n) * 10 ** R.uniform(-3, 3, (3, 7, n))).astype(numpy.float32)
    start = (R.randn(7) * 100).astype(numpy.float32)
    want = start.copy()
    for o in range(3):
        want = caffe_gemv.row_totals(x[o], 1, want)
    parts = numpy.empty((3, 7, caffe_gemv_jit.row_part_count(n)), numpy.float32)
    matrix_row_parts = jit.kernel(caffe_gemv_jit.matrix_row_parts)
    box = numpy.empty(1, numpy.float32)
    for o in range(3):   # rows 0-3 four at a time (one block), 4-5 a pair, 6 the odd last
        matrix_row_parts(x[o], numpy.float32(0), parts[o], box)
    got = start.copy()
    jit.kernel(caffe_gemv_jit.add_parts)(parts, got)
    assert got.tobytes() == want.tobytes()


@pytest.mark.usefixtures("batched_convolution")
@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("threads", ["1", "3"])
def test_convolution_bias_gradient_in_the_move_of_dy(monkeypatch, threads):
    """A single chunk of several images sums its bias gradient while its gradient moves channels
    first: the same bits as the separate sum, added to the diff already there; the weight and
    input gradients unchanged; any thread count."""
    from caffecli import context
    from caffecli.blob import Blob
    from caffecli.kernels import threads as kernel_threads
    from caffecli.layers import _base_conv
    from gradcheck import make_layer
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.setattr(kernel_threads, "MIN_PART_ELEMENTS", 1)
    x = R.randn(6, 3, 7, 7).astype(numpy.float32)
    got = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(_base_conv.BaseConvolutionLayer, "_bias_in_move",
                                lambda self, dy: False)
        context.set_random_seed(4)
        layer = make_layer('type: "Convolution" convolution_param { num_output: 5 kernel_size: 3 '
                           'weight_filler { type: "gaussian" std: 0.3 } '
                           'bias_filler { type: "gaussian" std: 1 } }')
        bottom, top = [Blob(x.shape)], [Blob()]
        bottom[0].data[...] = x
        layer.SetUp(bottom, top)
        assert layer.chunk >= layer.num > 1
        if fused:
            assert layer._bias_in_move(top[0].diff.reshape(6, 5, -1))
        layer.Forward(bottom, top)
        top[0].diff[...] = numpy.linspace(-1, 3, top[0].count).reshape(top[0].shape)
        layer.blobs[1].diff[...] = 0.5
        layer.Backward(top, [True], bottom)
        got.append([layer.blobs[1].diff.copy(), layer.blobs[0].diff.copy(),
                    bottom[0].diff.copy()])
    for a, b in zip(*got):
        assert numpy.array_equal(a, b)
    want = 0.5 + top[0].diff.astype(numpy.float64).sum(axis=(0, 2, 3))
    numpy.testing.assert_allclose(got[0][0], want, rtol=1e-6)


@pytest.mark.usefixtures("batched_convolution")
@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("spec,shape", [
    ("num_output: 50 kernel_size: 5", (5, 20, 12, 12)),                    # LeNet's conv2
    ("num_output: 12 kernel_size: 3 group: 2 stride: 2 pad: 1", (3, 16, 9, 8)),
    ("num_output: 9 kernel_size: 3 dilation: 2 pad: 2 engine: CAFFE", (2, 8, 10, 7)),
    ("num_output: 6 kernel_size: 5 pad: 1", (1, 8, 6, 6)),                  # a single image
])
def test_convolution_input_gradient_by_position_is_col2ims(monkeypatch, spec, shape):
    """Layers of eight channels a group or more compute the input gradient as dy.T @ W (W's
    columns channels last) and col2im by output position: the same bits as W.T @ dy and
    col2im (SKYLAKEX's kernels; others' within rounding: host_blas); narrower layers keep
    col2im."""
    from caffecli import context
    from caffecli.blob import Blob
    from caffecli.layers import convolution
    from gradcheck import make_layer
    x = R.randn(*shape).astype(numpy.float32)
    got, calls = [], []
    real = convolution.im2col_jit.col2im_positions
    monkeypatch.setattr(convolution.im2col_jit, "col2im_positions",
                        lambda *a: calls.append(1) or real(*a))
    for by_position in (True, False):
        if not by_position:
            monkeypatch.setattr(convolution, "POSITION_MIN_CHANNELS", 1 << 30)
        context.set_random_seed(5)
        layer = make_layer('type: "Convolution" convolution_param { %s '
                           'weight_filler { type: "gaussian" std: 0.3 } }' % spec)
        bottom, top = [Blob(x.shape)], [Blob()]
        bottom[0].data[...] = x
        layer.SetUp(bottom, top)
        assert layer.by_position == by_position and not layer.winograd
        layer.Forward(bottom, top)
        top[0].diff[...] = numpy.sin(numpy.arange(top[0].count)).reshape(top[0].shape)
        layer.Backward(top, [True], bottom)
        got.append((bottom[0].diff.copy(), layer.blobs[0].diff.copy()))
    assert len(calls) == 1
    assert got[0][0].tobytes() != numpy.zeros_like(got[0][0]).tobytes()
    assert_bits_or_close(got[0][0], got[1][0])
    assert_bits_or_close(got[0][1], got[1][1])


def test_convolution_by_position_needs_eight_channels_a_group_and_a_small_plane():
    """LeNet's conv1 (one channel) keeps col2im: runs of one value would add too slowly; so
    does a layer whose image, every channel, takes more than 64 KiB."""
    from caffecli.blob import Blob
    from gradcheck import make_layer
    for channels, group, side, want in ((1, 1, 9, False), (7, 1, 9, False), (8, 1, 9, True),
                                        (16, 2, 9, True), (16, 4, 9, False),
                                        (16, 1, 32, True), (16, 1, 33, False)):
        layer = make_layer('type: "Convolution" convolution_param { num_output: 4 '
                           'kernel_size: 5 group: %d }' % group)
        layer.SetUp([Blob((2, channels, side, side))], [Blob()])
        assert layer.by_position == want


@pytest.mark.parametrize("rows,inputs,outputs,bias", [(64, 800, 500, True), (30, 70, 130, False)])
def test_inner_product_forward_by_output_is_the_same(monkeypatch, rows, inputs, outputs, bias):
    """A small batch against many outputs computes y.T = W @ x.T: the same values (the same
    dot products; OpenBLAS's SKYLAKEX kernels give the same bits, others the same within
    rounding: host_blas) as x @ W.T, the bias added once."""
    from caffecli import context
    from caffecli.blob import Blob
    from caffecli.layers import inner_product
    from gradcheck import make_layer
    x = R.randn(rows, inputs).astype(numpy.float32)
    got = []
    for by_output in (True, False):
        if not by_output:
            monkeypatch.setattr(inner_product, "BY_OUTPUT_RATIO", 1 << 30)
        context.set_random_seed(2)
        layer = make_layer('type: "InnerProduct" inner_product_param { num_output: %d '
                           'bias_term: %s weight_filler { type: "gaussian" std: 0.1 } '
                           'bias_filler { type: "gaussian" std: 1 } }'
                           % (outputs, "true" if bias else "false"))
        bottom, top = [Blob(x.shape)], [Blob()]
        bottom[0].data[...] = x
        layer.SetUp(bottom, top)
        assert layer._by_output(x, top[0].data) == by_output
        layer.Forward(bottom, top)
        got.append(top[0].data.copy())
    want = x.astype(numpy.float64) @ layer.blobs[0].data.T.astype(numpy.float64)
    if bias:
        want += layer.blobs[1].data
    numpy.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    assert_bits_or_close(got[0], got[1])


def test_inner_product_forward_by_output_only_for_a_small_batch():
    """Not for 256 items, fewer than 4x as many outputs as items, or transposed weights."""
    from caffecli.blob import Blob
    from gradcheck import make_layer
    for rows, outputs, transpose, want in ((64, 256, False, True), (64, 255, False, False),
                                           (129, 4096, False, False), (64, 500, True, False)):
        layer = make_layer('type: "InnerProduct" inner_product_param { num_output: %d '
                           'transpose: %s }' % (outputs, "true" if transpose else "false"))
        bottom, top = [Blob((rows, 40))], [Blob()]
        layer.SetUp(bottom, top)
        assert layer._by_output(bottom[0].data, top[0].data) == want


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
def test_a_drivers_cache_key_covers_the_kernels_it_reaches_in_other_modules():
    """batch_norm_jit's driver reaches caffe_gemv_jit's kernels through its own kernel; their
    code keys the driver's disk cache entry (a compiled driver holds its whole call tree: after
    an edit there the driver once ran the old code from the cache)."""
    from caffecli.kernels import batch_norm_jit, caffe_gemv_jit
    driver = jit.parallel(batch_norm_jit._forward_moments_parts)
    foreign = driver.py_func.foreign
    assert caffe_gemv_jit.four_totals in foreign and caffe_gemv_jit._lanes8_four in foreign
    assert batch_norm_jit._forward_moments not in foreign   # its own file's stamp covers it
    assert batch_norm_jit._forward_moments in driver.py_func.reach


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
def test_a_closure_driver_loads_from_the_disk_cache_in_a_new_process(tmp_path):
    """im2col's parts hold compiled kernels in their closure; a second process finds the first
    one's cache entry instead of compiling again and adding one (numba's own key pickled the
    kernels with a fresh id each process)."""
    code = ("import numpy; from caffecli.kernels import im2col_jit as k; "
            "k.im2col(numpy.ones((2, 3, 6, 6), numpy.float32), (1, 1), (1, 1), (0, 0), False, "
            "numpy.empty((3, 3, 3, 2, 4, 4), numpy.float32))")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    entries = []
    for _ in range(2):
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
        entries.append(sorted(p.name for p in tmp_path.rglob("*parts*.nbc")))
    assert entries[0] and entries[1] == entries[0]


def _caffe_softmax(x, dy):
    """softmax_layer.cpp's CPU steps over (outer, C, inner) in x's dtype: the running maximum
    by std::max, exp of the difference (the C library's, through libm), the channels' sum by
    gemv and the dot product by sdot in OpenBLAS's orders (kernels/caffe_gemv.py, which the
    golden Softmax cases hold to Caffe's bits), the quotient, then (dy - dot) * y.
    Returns (y, dx)."""
    from caffecli.kernels import caffe_gemv, libm
    t = x.dtype.type
    m = x[:, 0].copy()
    for j in range(1, x.shape[1]):
        m = numpy.where(m < x[:, j], x[:, j], m)
    e = libm.exp(numpy, x - m[:, None])
    y = e / caffe_gemv.channel_sums(e)[:, None]
    dot = caffe_gemv.channel_dots(y, dy)
    return y, ((dy - dot[:, None]) * y).astype(t)


@pytest.mark.parametrize("shape", [(6, 10, 1), (2, 21, 3000), (1, 3, 5000), (3, 1000, 1),
                                   (2, 97, 1), (2, 4, 13), (3, 5, 3), (2, 4, 2), (1, 4, 5000),
                                   (2, 60, 3), (2, 60, 13), (1, 53, 4100), (1, 21, 16390)])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_compiled_softmax_is_caffes_loops_bit_for_bit(shape, dtype):
    """kernels/softmax_jit.py against Caffe's steps: the same bits forward and backward
    (positions split in runs of INNER_CHUNK across the threads; sdot's unit-stride kernel for a
    classifier's 1000 and 97 channels, its strided pairs, gemv's channel orders for four
    channels, fewer than four positions, groups of eight channels and more than 16384
    positions)."""
    from caffecli.kernels import activations, softmax_jit
    rs = numpy.random.RandomState(sum(shape))
    x = (rs.randn(*shape) * 4).astype(dtype)
    dy = rs.randn(*shape).astype(dtype)
    want_y, want_dx = _caffe_softmax(x, dy)
    y = activations.softmax(numpy, x)
    assert softmax_jit._forward in jit._compiled
    dx = activations.softmax_backward(y, dy)
    assert y.tobytes() == want_y.tobytes() and dx.tobytes() == want_dx.tobytes()


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_compiled_softmax_loss_gradient_is_the_array_expression(dtype):
    """SoftmaxWithLoss's gradient ((prob - onehot) * valid) * scale in one compiled pass: the
    bits of the array code (layers/softmax_with_loss.py), ignored positions zero."""
    from caffecli.kernels import softmax_jit
    rs = numpy.random.RandomState(2)
    prob = rs.rand(3, 7, 2500).astype(dtype)
    labels = rs.randint(0, 7, size=(3, 2500)).astype(numpy.int64)
    labels[:, ::9] = 255
    valid = labels != 255
    scale = dtype(1.0) / dtype(3 * 2500 - valid.size + valid.sum())
    onehot = numpy.arange(7)[None, :, None] == labels[:, None, :]
    want = (prob - onehot.astype(dtype)) * valid[:, None, :].astype(dtype) * scale
    dx = numpy.empty_like(prob)
    assert softmax_jit.loss_backward(prob, labels, valid, scale, dx) is dx
    assert dx.tobytes() == want.tobytes() and (dx[:, :, ::9] == 0).all()


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
def test_an_inlined_kernel_compiles_inline_and_keys_its_callers_cache():
    """``jit.inlined`` functions compile with numba's inline="always", others never; the mark
    is part of what keys a caller's disk cache entry (it changes no bytecode)."""
    from caffecli.kernels import caffe_gemv_jit
    assert jit.kernel(caffe_gemv_jit.plain_row_sums).targetoptions["inline"] == "always"
    assert jit.kernel(caffe_gemv_jit.scale_row_sums).targetoptions["inline"] == "never"

    def row():
        return 0
    key = jit._stable(row, repr)
    jit.inlined(row)
    assert jit._stable(row, repr) != key
