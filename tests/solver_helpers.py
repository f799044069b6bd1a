"""Test-only layers and nets for the solver tests: a closed-form loss and a seekable data source."""
import numpy

from caffecli import registry
from caffecli.layer import Layer
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text


def _register(name, cls):
    registry.unregister_layer(name)
    registry.register_layer(name)(cls)


class SquareLoss(Layer):
    """loss = 0.5 * sum(x^2): the gradient is x itself, so updates have closed forms."""
    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1
    is_loss = True

    def reshape(self, bottom, top):
        top[0].reshape(())

    def forward(self, bottom, top):
        x = bottom[0].data
        top[0].data[...] = 0.5 * (x * x).sum()

    def backward(self, top, propagate_down, bottom):
        bottom[0].diff[...] = bottom[0].data * top[0].diff.reshape(-1)[0]


class CursorData(Layer):
    """Deterministic batches that depend on a record cursor (saved/restored for resume), made
    on the host as data layers make them."""
    device_code = False
    exact_num_bottom_blobs = 0
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        self.cursor = 0
        self.batch = 3
        self.records = 7   # not a multiple of the batch: resumes land mid-epoch
        top[0].reshape((self.batch, 4))

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        idx = (self.cursor + numpy.arange(self.batch)) % self.records
        vals = numpy.sin(idx[:, None] * 1.3 + numpy.arange(4)[None, :] * 0.7)
        top[0].data[...] = vals.astype(top[0].dtype)
        self.cursor = (self.cursor + self.batch) % self.records

    def backward(self, top, propagate_down, bottom):
        pass

    def get_data_state(self):
        return {"cursor": int(self.cursor), "order": numpy.arange(3)}

    def set_data_state(self, state):
        assert list(state["order"]) == [0, 1, 2]
        self.cursor = state["cursor"]


_register("TestSquareLoss", SquareLoss)
_register("TestCursorData", CursorData)

TINY_NET = '''
name: "tiny"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
        inner_product_param { num_output: 1 bias_term: false
                              weight_filler { type: "constant" value: 1 } } }
layer { name: "loss" type: "TestSquareLoss" bottom: "y" top: "loss" }
'''

SMALL_NET = '''
name: "small"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
        param { lr_mult: LR1 decay_mult: DM1 } param { lr_mult: LR2 decay_mult: DM2 }
        inner_product_param { num_output: 2
                              weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
layer { name: "loss" type: "TestSquareLoss" bottom: "y" top: "loss" }
'''

RESUME_NET = '''
name: "resume"
layer { name: "data" type: "TestCursorData" top: "x" }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h"
        inner_product_param { num_output: 5
                              weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
layer { name: "drop" type: "Dropout" bottom: "h" top: "h" dropout_param { dropout_ratio: 0.4 } }
layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "y"
        inner_product_param { num_output: 2
                              weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "TestSquareLoss" bottom: "y" top: "loss" }
'''


def solver_param(text, net_text=None):
    """A SolverParameter from ``text`` with ``net_text`` as its net_param."""
    param = parse_text(text, caffe_pb2.SolverParameter())
    if net_text is not None:
        parse_text(net_text, param.net_param)
    return param


def small_net(lr1=1, dm1=1, lr2=2, dm2=0):
    return (SMALL_NET.replace("LR1", str(lr1)).replace("DM1", str(dm1))
            .replace("LR2", str(lr2)).replace("DM2", str(dm2)))
