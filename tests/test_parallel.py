"""Data-parallel gradient averaging: two ranks on half batches equal one rank on the full batch."""
import numpy
import pytest

from caffecli import comms, context
from caffecli.solvers.data_parallel import run_ranks
from conftest import real_gpu_reason
from caffecli.layer import Layer
from caffecli import Net, TRAIN
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from caffecli.registry import register_layer


@register_layer("TestMeanSqLoss")
class MeanSqLoss(Layer):
    """loss = sum(x^2) / (2 N): normalised by the batch like Caffe's losses."""
    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1
    is_loss = True

    def reshape(self, bottom, top):
        top[0].reshape(())

    def forward(self, bottom, top):
        top[0].data[...] = (bottom[0].data ** 2).sum() / (2.0 * bottom[0].shape[0])

    def backward(self, top, propagate_down, bottom):
        bottom[0].diff[...] = bottom[0].data * (top[0].diff / bottom[0].shape[0])


NET = '''
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: %d dim: 5 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 1 }
                              bias_filler { type: "gaussian" std: 1 } } }
layer { name: "loss" type: "TestMeanSqLoss" bottom: "y" top: "loss" }
'''


def make_net(batch, dtype=numpy.float64):
    return Net(parse_text(NET % batch, caffe_pb2.NetParameter()), TRAIN, log=False, dtype=dtype)


def grads(net):
    return [p.diff.copy() for p in net.learnable_params]


def test_two_half_batches_average_to_full_batch():
    x = numpy.random.RandomState(0).randn(8, 5)
    full = make_net(8)
    full.blobs["x"].data[...] = x
    full.clear_param_diffs()
    full.forward_backward()
    want = grads(full)
    nets = [make_net(4), make_net(4)]
    for j in range(2):  # rank 0 holds the weights; rank 1 starts at zero until the broadcast
        nets[0].params["ip"][j].data[...] = full.params["ip"][j].data
        nets[1].params["ip"][j].data[...] = 0
    comm = comms.ThreadComm(2)
    seen = {}

    def work(rank):
        net = nets[rank]
        sync = comms.GradientSync(net, comm, rank)
        sync.broadcast_params()
        seen[rank] = (context.solver_rank(), context.solver_count())
        net.blobs["x"].data[...] = x[4 * rank:4 * rank + 4]
        net.clear_param_diffs()
        net.forward_backward()
        sync.on_gradients_ready()

    run_ranks(2, work)
    assert seen == {0: (0, 2), 1: (1, 2)}
    assert context.solver_count() == 1
    for rank in range(2):
        assert numpy.array_equal(nets[rank].params["ip"][0].data, full.params["ip"][0].data)
        for g, w in zip(grads(nets[rank]), want):
            assert numpy.allclose(g, w, rtol=1e-12, atol=1e-12)


def test_rank_failure_is_raised():
    def work(rank):
        if rank == 1:
            raise ValueError("rank 1 broke")
    with pytest.raises(ValueError, match="rank 1 broke"):
        run_ranks(2, work)


def test_nccl_needs_gpu(monkeypatch):
    monkeypatch.delenv("CAFFECLI_STANDIN_GPU", raising=False)
    if real_gpu_reason() is None:
        pytest.skip("a GPU is present; tests/test_gpu.py covers NCCL")
    from caffecli.errors import CaffeError
    with pytest.raises(CaffeError):
        comms.NcclComm.for_devices([0])
