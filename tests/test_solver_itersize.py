"""iter_size: the logged loss averages the sub-batches, the ``loss`` blob keeps the last one."""
import re

import numpy
import pytest

from caffecli import solvers
from caffecli import Net
from caffecli.proto import caffe_pb2

from solver_helpers import solver_param

# the cursor source gives each sub-batch different records, so their losses differ
NET = '''
name: "itersize"
layer { name: "data" type: "TestCursorData" top: "x" }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
layer { name: "loss" type: "TestSquareLoss" bottom: "y" top: "loss" }
'''


def sub_batch_losses(solver, count):
    """Forward a fresh copy of the train net ``count`` times with the solver's current weights."""
    net = Net(solver.net.to_proto(), caffe_pb2.TRAIN, log=False)
    net.copy_trained_layers_from(solver.net.to_proto(write_diff=False))
    return [float(net.forward()["loss"]) for _ in range(count)]


@pytest.mark.parametrize("iter_size", [1, 3])
def test_logged_loss_is_the_sub_batch_mean(logs, iter_size):
    s = solvers.get_solver(solver_param(
        'base_lr: 0.1 lr_policy: "fixed" display: 1 random_seed: 3 snapshot_after_train: false '
        'iter_size: %d' % iter_size, NET))
    expected = sub_batch_losses(s, iter_size)
    if iter_size > 1:
        assert len(set(expected)) == iter_size  # the check below could tell mean from last
    s.step(1)
    text = logs.getvalue()
    logged = float(re.search(r"Iteration 0 \(.*\), loss = (\S+)", text).group(1))
    output = float(re.search(r"Train net output #0: loss = (\S+)", text).group(1))
    assert logged == pytest.approx(numpy.mean(expected), rel=1e-5)
    assert output == pytest.approx(expected[-1], rel=1e-5)
    assert float(s.net.blob_by_name("loss").data) == pytest.approx(expected[-1], rel=1e-6)
