"""Every reference prototxt in shared/zoo parses (and upgrades); deploy nets build with Caffe's
shapes and compute with the compiled kernels what numpy's reference code does."""
import os

import numpy
import pytest

from caffecli import registry
from caffecli import Net
from caffecli.proto import caffe_pb2
from caffecli.proto.io import read_net_param, read_solver_param

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def zoo_dir():
    """The zoo: CAFFECLI_ZOO, ../shared beside the checkout, or shared/ inside it (make carry)."""
    for cand in (os.environ.get("CAFFECLI_ZOO"), os.path.join(ROOT, "..", "shared", "zoo"),
                 os.path.join(ROOT, "shared", "zoo"), os.path.join(ROOT, "tests", "zoo_data")):
        if cand and os.path.isdir(cand):
            return os.path.abspath(cand)
    return None


def zoo_files():
    d = zoo_dir()
    return sorted(f for f in os.listdir(d) if f.endswith(".prototxt")) if d else []


FILES = zoo_files()
SOLVERS = [f for f in FILES if "solver" in f]
NETS = [f for f in FILES if f not in SOLVERS]


def path(name):
    if zoo_dir() is None:
        pytest.skip("zoo prototxts not found (set CAFFECLI_ZOO)")
    return os.path.join(zoo_dir(), name)


def is_deploy(param):
    """A net fed by Input layers only (no databases)."""
    return any(lp.type == "Input" for lp in param.layer) and not any(
        lp.type in ("Data", "ImageData", "HDF5Data", "WindowData") for lp in param.layer)


def require_layers(param):
    missing = sorted({lp.type for lp in param.layer} - set(registry.layer_types()))
    if missing:
        pytest.skip("layer types not implemented yet: " + ", ".join(missing))


def test_zoo_is_present():
    path("README.md")
    assert len(NETS) >= 10 and len(SOLVERS) >= 2


@pytest.mark.parametrize("name", NETS or ["<none>"])
def test_net_parses_and_upgrades(name):
    param = read_net_param(path(name))
    assert len(param.layer) > 0
    assert len(param.layers) == 0 and len(param.input) == 0
    for lp in param.layer:
        assert lp.type, lp.name


@pytest.mark.parametrize("name", SOLVERS or ["<none>"])
def test_solver_parses(name):
    s = read_solver_param(path(name))
    assert s.base_lr > 0 and s.max_iter > 0
    assert s.net or s.train_net or s.HasField("net_param")
    assert not s.HasField("solver_type")


# Shapes Caffe gives, computed by hand: out = (in + 2 pad - kernel) / stride + 1 for
# convolution (floor), ceil for pooling.
LENET = {"data": (64, 1, 28, 28), "conv1": (64, 20, 24, 24), "pool1": (64, 20, 12, 12),
         "conv2": (64, 50, 8, 8), "pool2": (64, 50, 4, 4), "ip1": (64, 500),
         "ip2": (64, 10), "prob": (64, 10)}
CIFAR_QUICK = {"data": (1, 3, 32, 32), "conv1": (1, 32, 32, 32), "pool1": (1, 32, 16, 16),
               "conv2": (1, 32, 16, 16), "pool2": (1, 32, 8, 8), "conv3": (1, 64, 8, 8),
               "pool3": (1, 64, 4, 4), "ip1": (1, 64), "ip2": (1, 10), "prob": (1, 10)}
CIFAR_FULL = {"data": (1, 3, 32, 32), "conv1": (1, 32, 32, 32), "pool1": (1, 32, 16, 16),
              "norm1": (1, 32, 16, 16), "conv2": (1, 32, 16, 16), "pool2": (1, 32, 8, 8),
              "norm2": (1, 32, 8, 8), "conv3": (1, 64, 8, 8), "pool3": (1, 64, 4, 4),
              "ip1": (1, 10), "prob": (1, 10)}
CAFFENET = {"data": (10, 3, 227, 227), "conv1": (10, 96, 55, 55), "pool1": (10, 96, 27, 27),
            "norm1": (10, 96, 27, 27), "conv2": (10, 256, 27, 27), "pool2": (10, 256, 13, 13),
            "norm2": (10, 256, 13, 13), "conv3": (10, 384, 13, 13), "conv4": (10, 384, 13, 13),
            "conv5": (10, 256, 13, 13), "pool5": (10, 256, 6, 6), "fc6": (10, 4096),
            "fc7": (10, 4096), "fc8": (10, 1000), "prob": (10, 1000)}
ALEXNET = dict(CAFFENET, norm1=(10, 96, 55, 55), norm2=(10, 256, 27, 27))
EXPECTED = {
    "mnist__lenet.prototxt": LENET,
    "cifar10__cifar10_quick.prototxt": CIFAR_QUICK,
    "cifar10__cifar10_full.prototxt": CIFAR_FULL,
    "bvlc_reference_caffenet__deploy.prototxt": CAFFENET,
    "bvlc_alexnet__deploy.prototxt": ALEXNET,
    "bvlc_reference_rcnn_ilsvrc13__deploy.prototxt": dict(
        {k: v for k, v in CAFFENET.items() if k not in ("fc8", "prob")},
        **{"fc-rcnn": (10, 200)}),
    "finetune_flickr_style__deploy.prototxt": dict(
        {k: v for k, v in CAFFENET.items() if k not in ("fc8", "prob")},
        fc8_flickr=(10, 20), prob=(10, 20)),
    "bvlc_googlenet__deploy.prototxt": {
        "data": (10, 3, 224, 224), "conv1/7x7_s2": (10, 64, 112, 112),
        "pool1/3x3_s2": (10, 64, 56, 56), "conv2/3x3": (10, 192, 56, 56),
        "pool2/3x3_s2": (10, 192, 28, 28), "inception_3a/output": (10, 256, 28, 28),
        "inception_3b/output": (10, 480, 28, 28), "pool3/3x3_s2": (10, 480, 14, 14),
        "inception_4a/output": (10, 512, 14, 14), "inception_4e/output": (10, 832, 14, 14),
        "pool4/3x3_s2": (10, 832, 7, 7), "inception_5b/output": (10, 1024, 7, 7),
        "pool5/7x7_s1": (10, 1024, 1, 1), "loss3/classifier": (10, 1000), "prob": (10, 1000)},
}
DEPLOY = [n for n in NETS if n in EXPECTED or "deploy" in n]
RESNET = "ResNet-50-deploy.prototxt"
MOBILENET = "mobilenet_v1_deploy.prototxt"   # bench/nets: the depthwise net
CHUNK = 1 << 18   # values compared at a time: small temporaries, their pages reused


@pytest.mark.parametrize("name", DEPLOY or ["<none>"])
def test_deploy_net_builds_with_caffe_shapes(name):
    param = read_net_param(path(name))
    assert is_deploy(param)
    require_layers(param)
    net = Net(param, caffe_pb2.TEST, log=False)
    want = EXPECTED.get(name)
    assert want is not None, "no expected shapes for " + name
    for blob, shape in want.items():
        assert net.blob_by_name(blob).shape == shape, blob
    last = [lp for lp in param.layer][-1]
    assert net.output_names == sorted(last.top)


def test_expected_tables_cover_every_deploy_net():
    assert set(DEPLOY) == set(EXPECTED) & set(NETS)


def without_fillers(param):
    """``param`` with every filler cleared (constant zero): the test sets each blob itself, and
    a Gaussian fill of fc6 through numpy's reference code (CAFFECLI_JIT=0) takes half a minute."""
    for lp in param.layer:
        for _, message in lp.ListFields():
            if not hasattr(message, "ListFields"):
                continue
            for field, _ in message.ListFields():
                if field.message_type is not None and field.message_type.name == "FillerParameter":
                    message.ClearField(field.name)
    return param


def pass_values(param, batch, compiled, monkeypatch):
    """Every blob (parameters too), by a name, after one forward-backward pass in float64 at
    ``batch``, on seeded inputs, weights and output gradients, with the compiled
    kernels or with numpy's reference code (CAFFECLI_JIT=0)."""
    monkeypatch.setenv("CAFFECLI_JIT", "1" if compiled else "0")
    param = caffe_pb2.NetParameter.FromString(param.SerializeToString())
    param.force_backward = True
    for lp in param.layer:
        for shape in lp.input_param.shape:
            shape.dim[0] = batch
    net = Net(without_fillers(param), caffe_pb2.TEST, dtype=numpy.float64, log=False)
    rs = numpy.random.default_rng(5)    # uniform draws: 61M weights take 0.3 s, not 2
    for blob in net.input_blobs:
        rs.random(out=blob.data.reshape(-1))
        blob.data[...] -= 0.5
    for rec in net.records:
        for blob in rec.layer.blobs:
            rs.random(out=blob.data.reshape(-1))
            blob.data[...] *= 0.1
            blob.data[...] += 0.95 if rec.layer.type == "BatchNorm" else -0.05
    net.clear_param_diffs()
    net.forward_pass()
    for name in net.output_names:
        blob = net.blob_by_name(name)
        blob.diff[...] = rs.random(blob.shape) - 0.5
    net.backward_pass()
    blobs, seen = {}, set()
    for rec in net.records:   # each blob once (in place, a layer's top is its bottom)
        for i, blob in enumerate(rec.tops + rec.bottoms + rec.layer.blobs):
            if id(blob) not in seen:
                seen.add(id(blob))
                blobs["%s blob %d" % (rec.layer.name, i)] = blob
    return blobs   # not copied: a gigabyte of copies took 5 s (their pages' first touch)


@pytest.mark.parametrize("name", (DEPLOY + [RESNET] if DEPLOY else []) + [MOBILENET])
def test_deploy_net_computes_with_compiled_kernels_what_numpy_does(name, monkeypatch):
    """A forward-backward pass at batch 2 in float64 (Winograd, the fused chains, the compiled
    pooling, LRN, depthwise layers and moves on real geometries) against numpy's reference
    code, value by value."""
    if name == MOBILENET:   # the bench's, in the repository
        param = read_net_param(os.path.join(ROOT, "bench", "nets", MOBILENET))
    elif name == RESNET:   # shared/nets, beside the zoo
        resnet = os.path.join(zoo_dir() or ROOT, "..", "nets", "KaimingHe__" + RESNET)
        if not os.path.isfile(resnet):
            pytest.skip("ResNet-50's prototxt not found beside the zoo (nets/)")
        param = read_net_param(resnet)
    else:
        param = read_net_param(path(name))
        require_layers(param)
    fast = pass_values(param, 2, True, monkeypatch)
    reference = pass_values(param, 2, False, monkeypatch)
    assert fast.keys() == reference.keys()
    for key, blob in reference.items():
        for what in ("data", "diff"):
            got, want = getattr(fast[key], what).ravel(), getattr(blob, what).ravel()
            scale = max(float(numpy.abs(want).max(initial=0)), 1e-3)
            gap = max((float(numpy.abs(got[i:i + CHUNK] - want[i:i + CHUNK]).max())
                       for i in range(0, want.size, CHUNK)), default=0.0)
            assert gap <= 1e-11 * scale, (key, what)
