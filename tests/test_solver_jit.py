"""The solvers' compiled host update (kernels/solver_jit.py) against their numpy code, bit for
bit: every solver, L1 and L2, iter_size, float32 and float64, zeros of both signs."""
import numpy
import pytest

from caffecli import solvers
from caffecli.kernels import jit, solver_jit
from caffecli.proto.io import parse_text
from caffecli.proto import caffe_pb2

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")

NET = '''
name: "n"
layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 3 dim: 5 } } }
layer { name: "t" type: "Input" top: "t" input_param { shape { dim: 3 dim: 4 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
'''
SOLVERS = {
    "SGD": "momentum: 0.9", "Nesterov": "momentum: 0.87", "AdaGrad": "delta: 1e-6",
    "RMSProp": "rms_decay: 0.93 delta: 1e-6", "AdaDelta": "momentum: 0.95 delta: 1e-5",
    "Adam": "momentum: 0.9 momentum2: 0.999 delta: 1e-7"}


def trained(kind, extra, dtype, monkeypatch, compiled):
    """Parameters, diffs and histories after four iterations, through the compiled update or
    the numpy code."""
    monkeypatch.setenv("CAFFECLI_JIT", "1" if compiled else "0")
    calls = []
    real = solver_jit.update
    monkeypatch.setattr(solver_jit, "update", lambda *a: calls.append(a[0]) or real(*a))
    text = ('type: "%s" base_lr: 0.05 lr_policy: "fixed" random_seed: 5 %s %s '
            'snapshot_after_train: false' % (kind, SOLVERS[kind], extra))
    param = parse_text(text, caffe_pb2.SolverParameter())
    parse_text(NET, param.net_param)
    s = solvers.get_solver(param, dtype=dtype)
    rs = numpy.random.RandomState(2)
    s.net.blob_by_name("x").data[...] = rs.randn(3, 5)
    s.net.blob_by_name("t").data[...] = rs.randn(3, 4)
    w = s.net.layer_by_name("ip").blobs[0]
    w.data.flat[:3] = [0.0, -0.0, 0.0]      # L1's sign of a zero, either sign
    s.step(4)
    assert calls == ([s.update_kernel] * 2 * 4 if compiled else [])
    blobs = s.net.learnable_params + s.history
    return [b.data.copy() for b in blobs] + [b.diff.copy() for b in s.net.learnable_params]


@pytest.mark.parametrize("kind", sorted(SOLVERS))
@pytest.mark.parametrize("extra", ["weight_decay: 0.01", "weight_decay: 0.02 "
                                   'regularization_type: "L1" iter_size: 3', ""])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_compiled_update_is_the_numpy_update(kind, extra, dtype, monkeypatch):
    got = trained(kind, extra, dtype, monkeypatch, compiled=True)
    want = trained(kind, extra, dtype, monkeypatch, compiled=False)
    for a, b in zip(got, want):
        assert a.dtype == dtype and a.tobytes() == b.tobytes()
    assert not numpy.array_equal(got[0], got[0] * 0)


def test_a_step_of_its_own_keeps_the_numpy_update(monkeypatch):
    """A subclass that overrides one of the update's steps is not updated by the kernel."""
    calls = []
    monkeypatch.setattr(solver_jit, "update", lambda *a: calls.append(a))

    class Halved(solvers.SGDSolver):
        def regularize(self, param_id):
            self.param_at(param_id).diff[...] *= 0.5
    param = parse_text('base_lr: 0.1 lr_policy: "fixed" snapshot_after_train: false',
                       caffe_pb2.SolverParameter())
    parse_text(NET, param.net_param)
    s = Halved(param)
    s.step(1)
    assert calls == []
