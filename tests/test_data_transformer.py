"""DataTransformer: (x - mean) * scale, crops, mirrors, parameter errors."""
import numpy
import pytest

import caffecli
from caffecli.data.transformer import DataTransformer
from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text, write_binary

X = numpy.arange(2 * 2 * 5 * 6, dtype=numpy.float32).reshape(2, 2, 5, 6)


def tp(text):
    return parse_text(text, caffe_pb2.TransformationParameter())


def test_mean_value_is_subtracted_before_scale():
    t = DataTransformer(tp("scale: 0.5 mean_value: 10 mean_value: 4"))
    out = t.transform(X)
    assert out.dtype == numpy.float32
    numpy.testing.assert_array_equal(out[:, 0], (X[:, 0] - 10) * 0.5)
    numpy.testing.assert_array_equal(out[:, 1], (X[:, 1] - 4) * 0.5)


def test_single_mean_value_applies_to_every_channel():
    out = DataTransformer(tp("mean_value: 3")).transform(X)
    numpy.testing.assert_array_equal(out, X - 3)


def test_wrong_number_of_mean_values_is_error():
    with pytest.raises(CaffeError, match="mean_value"):
        DataTransformer(tp("mean_value: 1 mean_value: 2 mean_value: 3")).transform(X)


def _mean_file(tmp_path, arr):
    p = caffe_pb2.BlobProto(num=1, channels=arr.shape[0], height=arr.shape[1], width=arr.shape[2])
    p.data.extend(arr.ravel().tolist())
    path = str(tmp_path / "mean.binaryproto")
    write_binary(path, p)
    return path


def test_mean_file_is_cropped_with_the_image_in_test(tmp_path):
    mean = numpy.random.RandomState(0).rand(2, 5, 6).astype(numpy.float32) * 50
    path = _mean_file(tmp_path, mean)
    t = DataTransformer(tp('mean_file: "%s" crop_size: 3 scale: 2' % path), caffe_pb2.TEST)
    out = t.transform(X)
    # centre crop: offsets (5-3)//2 = 1, (6-3)//2 = 1
    want = (X[:, :, 1:4, 1:4] - mean[None, :, 1:4, 1:4]) * numpy.float32(2)
    numpy.testing.assert_array_equal(out, want)


def test_mean_file_with_mean_value_is_error(tmp_path):
    path = _mean_file(tmp_path, numpy.zeros((2, 5, 6), numpy.float32))
    with pytest.raises(CaffeError, match="mean_file and mean_value"):
        DataTransformer(tp('mean_file: "%s" mean_value: 1' % path))


def test_mean_file_shape_mismatch_is_error(tmp_path):
    path = _mean_file(tmp_path, numpy.zeros((2, 4, 6), numpy.float32))
    with pytest.raises(CaffeError, match="2x4x6.*2x5x6"):
        DataTransformer(tp('mean_file: "%s"' % path)).transform(X)


def test_missing_mean_file_is_error(tmp_path):
    with pytest.raises(CaffeError, match="nope.binaryproto"):
        DataTransformer(tp('mean_file: "%s"' % (tmp_path / "nope.binaryproto")))


def test_train_crops_are_random_windows_and_mirrors_reverse_columns():
    caffecli.set_random_seed(1)
    t = DataTransformer(tp("crop_size: 3 mirror: true"), caffe_pb2.TRAIN)
    big = numpy.repeat(X[:1], 64, axis=0)
    out = t.transform(big)
    windows = set()
    mirrored = 0
    for o in out:     # every output is a (possibly mirrored) 3x3 window of the input
        found = False
        for h in range(3):
            for w in range(4):
                win = big[0, :, h:h + 3, w:w + 3]
                if numpy.array_equal(o, win):
                    windows.add((h, w, 0))
                    found = True
                elif numpy.array_equal(o, win[:, :, ::-1]):
                    windows.add((h, w, 1))
                    mirrored += 1
                    found = True
        assert found
    assert len(windows) > 6 and 10 < mirrored < 54


def test_test_phase_crop_is_centred_and_deterministic():
    t = DataTransformer(tp("crop_size: 4"), caffe_pb2.TEST)
    numpy.testing.assert_array_equal(t.transform(X), X[:, :, 0:4, 1:5])
    assert t.rng is None


def test_crop_larger_than_input_is_error():
    with pytest.raises(CaffeError, match="crop_size 7"):
        DataTransformer(tp("crop_size: 7")).transform(X)


def test_uint8_input_and_float64_output():
    u8 = numpy.full((1, 1, 2, 2), 200, dtype=numpy.uint8)
    out = DataTransformer(tp("scale: 0.1 mean_value: 100")).transform(u8, numpy.float64)
    assert out.dtype == numpy.float64
    numpy.testing.assert_allclose(out, 10.0)


@pytest.mark.parametrize("jit", ["1", "0"])   # the compiled pass and numpy's reference
@pytest.mark.parametrize("mean_kind", ["file", "values", "none"])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_train_crops_mirrors_and_means_follow_caffes_indexing(tmp_path, monkeypatch, dtype,
                                                              mean_kind, jit):
    """Each value as Caffe's Transform loop computes it: the pixel and the mean at the source
    position (h_off + h, w_off + w), written to column ow - 1 - w when the item is mirrored."""
    monkeypatch.setenv("CAFFECLI_JIT", jit)
    rs = numpy.random.RandomState(2)
    mean = (rs.rand(2, 5, 6) * 50).astype(numpy.float32)
    param = "crop_size: 3 mirror: true scale: 0.7 " + {
        "file": 'mean_file: "%s"' % _mean_file(tmp_path, mean),
        "values": "mean_value: 20.5 mean_value: 7.25", "none": ""}[mean_kind]
    if mean_kind == "values":
        mean = numpy.empty((2, 5, 6), numpy.float32)
        mean[0], mean[1] = 20.5, 7.25
    elif mean_kind == "none":
        mean = None
    batch = rs.randint(0, 256, (16, 2, 5, 6)).astype(numpy.uint8)
    caffecli.set_random_seed(5)
    out = DataTransformer(tp(param), caffe_pb2.TRAIN).transform(batch, dtype)
    caffecli.set_random_seed(5)
    words = DataTransformer(tp(param), caffe_pb2.TRAIN)._draws(16, True)
    want = numpy.empty((16, 2, 3, 3), dtype)
    scale = dtype(numpy.float32(0.7))   # a float field of the parameter, as in Caffe
    for i, (coin, hw, ww) in enumerate(words):
        h_off, w_off = hw % 3, ww % 4
        for c in range(2):
            for h in range(3):
                for w in range(3):
                    value = dtype(batch[i, c, h_off + h, w_off + w])
                    if mean is not None:
                        value = value - dtype(mean[c, h_off + h, w_off + w])
                    want[i, c, h, 2 - w if coin % 2 else w] = value * scale
    assert len({(int(a % 2), int(b % 3), int(c % 4)) for a, b, c in words}) > 4
    numpy.testing.assert_array_equal(out, want)
    assert out.dtype == dtype
