"""The unrolled nets Caffe's RNN and LSTM layers build at set-up (recurrent_layer.cpp,
rnn_layer.cpp, lstm_layer.cpp), as NetParameters. caffecli computes the recurrence directly;
it builds these nets only so that a set-up logs what Caffe's does.
"""
from ..proto import caffe_pb2


def _layer(net, type_, name=None, bottom=(), top=()):
    lp = net.layer.add(type=type_)
    if name is not None:
        lp.name = name
    lp.bottom.extend(bottom)
    lp.top.extend(top)
    return lp


def _inner_product(net, rp, num_output, name, bottom, top, params, bias, axis=2,
                   propagate_down=False):
    lp = _layer(net, "InnerProduct", name, [bottom], [top])
    ip = lp.inner_product_param
    ip.num_output = num_output
    ip.bias_term = bias
    ip.axis = axis
    ip.weight_filler.SetInParent()
    ip.weight_filler.MergeFrom(rp.weight_filler)
    if bias:
        ip.bias_filler.SetInParent()
        ip.bias_filler.MergeFrom(rp.bias_filler)
    for p in params:
        lp.param.add(name=p)
    if propagate_down:
        lp.propagate_down.append(True)
    return lp


def _slice(net, name, bottom):
    lp = _layer(net, "Slice", name, [bottom])
    lp.slice_param.axis = 0
    return lp


def _state_inputs(net, names, n, h):
    lp = _layer(net, "Input", top=names)
    for _ in names:
        lp.input_param.shape.add(dim=[1, n, h])


def _static_transform(net, rp, num_output, w, static_w):
    """x_static through its own weights, reshaped to one time step."""
    _inner_product(net, rp, num_output, w + "_x_static", "x_static",
                   w + "_x_static_preshape", [static_w], False, axis=1, propagate_down=True)
    lp = _layer(net, "Reshape", w + "_x_static_reshape", [w + "_x_static_preshape"],
                [w + "_x_static"])
    lp.reshape_param.shape.dim.extend([1, -1, num_output])


def _conted(net, t):
    lp = _layer(net, "Scale", "h_conted_%d" % (t - 1), ["h_%d" % (t - 1), "cont_%d" % t],
                ["h_conted_%d" % (t - 1)])
    lp.scale_param.axis = 0


def _sum(net, name, bottoms, top):
    lp = _layer(net, "Eltwise", name, bottoms, [top])
    lp.eltwise_param.operation = caffe_pb2.EltwiseParameter.SUM


def _concat(net, name, bottoms, top):
    lp = _layer(net, "Concat", name, bottoms, [top])
    lp.concat_param.axis = 0


def fill_rnn(net, rp, T, n, static):
    H = rp.num_output
    _state_inputs(net, ["h_0"], n, H)
    cont = _slice(net, "cont_slice", "cont")
    _inner_product(net, rp, H, "x_transform", "x", "W_xh_x", ["W_xh", "b_h"], True,
                   propagate_down=True)
    if static:
        _static_transform(net, rp, H, "W_xh", "W_xh_static")
    xs = _slice(net, "W_xh_x_slice", "W_xh_x")
    for t in range(1, T + 1):
        cont.top.append("cont_%d" % t)
        xs.top.append("W_xh_x_%d" % t)
        _conted(net, t)
        _inner_product(net, rp, H, "W_hh_h_%d" % (t - 1), "h_conted_%d" % (t - 1),
                       "W_hh_h_%d" % (t - 1), ["W_hh"], False)
        _sum(net, "h_input_sum_%d" % t, ["W_hh_h_%d" % (t - 1), "W_xh_x_%d" % t]
             + (["W_xh_x_static"] if static else []), "h_neuron_input_%d" % t)
        _layer(net, "TanH", "h_neuron_%d" % t, ["h_neuron_input_%d" % t], ["h_%d" % t])
        _inner_product(net, rp, H, "W_ho_h_%d" % t, "h_%d" % t, "W_ho_h_%d" % t,
                       ["W_ho", "b_o"], True)
        _layer(net, "TanH", "o_neuron_%d" % t, ["W_ho_h_%d" % t], ["o_%d" % t])
    _concat(net, "o_concat", ["o_%d" % t for t in range(1, T + 1)], "o")
    return ["o"]


def fill_lstm(net, rp, T, n, static):
    H = rp.num_output
    _state_inputs(net, ["c_0", "h_0"], n, H)
    cont = _slice(net, "cont_slice", "cont")
    _inner_product(net, rp, 4 * H, "x_transform", "x", "W_xc_x", ["W_xc", "b_c"], True,
                   propagate_down=True)
    if static:
        _static_transform(net, rp, 4 * H, "W_xc", "W_xc_static")
    xs = _slice(net, "W_xc_x_slice", "W_xc_x")
    for t in range(1, T + 1):
        cont.top.append("cont_%d" % t)
        xs.top.append("W_xc_x_%d" % t)
        _conted(net, t)
        _inner_product(net, rp, 4 * H, "transform_%d" % t, "h_conted_%d" % (t - 1),
                       "W_hc_h_%d" % (t - 1), ["W_hc"], False)
        _sum(net, "gate_input_%d" % t, ["W_hc_h_%d" % (t - 1), "W_xc_x_%d" % t]
             + (["W_xc_x_static"] if static else []), "gate_input_%d" % t)
        _layer(net, "LSTMUnit", "unit_%d" % t, ["c_%d" % (t - 1), "gate_input_%d" % t,
                                                "cont_%d" % t], ["c_%d" % t, "h_%d" % t])
    _layer(net, "Split", bottom=["c_%d" % T], top=["c_T"])
    _concat(net, "h_concat", ["h_%d" % t for t in range(1, T + 1)], "h")
    return ["h"]


def unrolled_net(layer_param, fill, bottom, static):
    """Caffe's unrolled NetParameter for a recurrent layer over ``bottom``: inputs x, cont
    (and x_static), the architecture ``fill`` adds, names prefixed with the layer's, and a
    pseudo-loss on each output."""
    net = caffe_pb2.NetParameter()
    inputs = _layer(net, "Input", top=["x", "cont"] + (["x_static"] if static else []))
    for b in bottom[:2 + static]:
        inputs.input_param.shape.add(dim=b.shape)
    T, n = bottom[0].shape[:2]
    outputs = fill(net, layer_param.recurrent_param, T, n, static)
    if layer_param.name:
        for lp in net.layer:
            lp.name = layer_param.name + "_" + lp.name
    for name in outputs:
        lp = _layer(net, "Reduction", name + "_pseudoloss", [name], [name + "_pseudoloss"])
        lp.loss_weight.append(1)
    return net
