"""A V2 net as the V1 format (``layers { type: ENUM }``, blobs_lr, weight_decay) with the
legacy net inputs, so that Caffe's upgrade path is compared too."""
from caffe.proto import caffe_pb2
from google.protobuf import text_format

V1 = {"AbsVal": "ABSVAL", "Accuracy": "ACCURACY", "ArgMax": "ARGMAX", "BNLL": "BNLL",
      "Concat": "CONCAT", "ContrastiveLoss": "CONTRASTIVE_LOSS", "Convolution": "CONVOLUTION",
      "Deconvolution": "DECONVOLUTION", "Dropout": "DROPOUT", "EuclideanLoss": "EUCLIDEAN_LOSS",
      "Eltwise": "ELTWISE", "Exp": "EXP", "Flatten": "FLATTEN", "HingeLoss": "HINGE_LOSS",
      "Im2col": "IM2COL", "InfogainLoss": "INFOGAIN_LOSS", "InnerProduct": "INNER_PRODUCT",
      "LRN": "LRN", "MultinomialLogisticLoss": "MULTINOMIAL_LOGISTIC_LOSS", "MVN": "MVN",
      "Pooling": "POOLING", "Power": "POWER", "ReLU": "RELU", "Sigmoid": "SIGMOID",
      "SigmoidCrossEntropyLoss": "SIGMOID_CROSS_ENTROPY_LOSS", "Silence": "SILENCE",
      "Softmax": "SOFTMAX", "SoftmaxWithLoss": "SOFTMAX_LOSS", "Split": "SPLIT",
      "Slice": "SLICE", "TanH": "TANH", "Threshold": "THRESHOLD"}
COMMON = {"name", "type", "bottom", "top", "param", "loss_weight", "include", "exclude",
          "phase", "propagate_down"}


def convert(text, legacy_dims=False):
    """None when a layer has no V1 type or a field V1 lacks."""
    net = caffe_pb2.NetParameter()
    text_format.Merge(text, net)
    out = caffe_pb2.NetParameter()
    out.name = net.name
    out.force_backward = net.force_backward
    for lp in net.layer:
        if lp.type == "Input":
            for t, s in zip(lp.top, lp.input_param.shape):
                out.input.append(t)
                if legacy_dims and len(s.dim) == 4:
                    out.input_dim.extend(s.dim)
                else:
                    out.input_shape.add().CopyFrom(s)
            continue
        if lp.type not in V1 or len(lp.propagate_down):
            return None
        v = out.layers.add()
        v.name = lp.name
        v.type = getattr(caffe_pb2.V1LayerParameter, V1[lp.type])
        v.bottom.extend(lp.bottom)
        v.top.extend(lp.top)
        v.loss_weight.extend(lp.loss_weight)
        v.include.extend(lp.include)
        v.exclude.extend(lp.exclude)
        for p in lp.param:
            if p.name:
                v.param.append(p.name)
        if any(p.HasField("lr_mult") for p in lp.param):
            v.blobs_lr.extend(p.lr_mult if p.HasField("lr_mult") else 1 for p in lp.param)
        if any(p.HasField("decay_mult") for p in lp.param):
            v.weight_decay.extend(p.decay_mult if p.HasField("decay_mult") else 1
                                  for p in lp.param)
        for f, val in lp.ListFields():
            if f.name in COMMON:
                continue
            if f.name not in v.DESCRIPTOR.fields_by_name:
                return None
            getattr(v, f.name).CopyFrom(val)
    if legacy_dims and len(out.input_dim) != 4 * len(out.input):
        return None
    return text_format.MessageToString(out)
