"""caffe.io: BlobProto/Datum conversions, image loading, pycaffe's resizing numbers, oversampling
and the Transformer's preprocess/deprocess."""
import numpy
import pytest
from PIL import Image

import caffe
from caffe import io as caffe_io
from caffecli.proto import caffe_pb2


# ---- protobuf conversions ---------------------------------------------------------------------
def test_blobproto_to_array_uses_legacy_dims_then_shape():
    blob = caffe_pb2.BlobProto(num=1, channels=2, height=3, width=1)
    blob.data.extend(range(6))
    blob.diff.extend(range(10, 16))
    assert caffe_io.blobproto_to_array(blob).shape == (1, 2, 3, 1)
    assert caffe_io.blobproto_to_array(blob).dtype == numpy.float64     # as BVLC's pycaffe
    assert caffe_io.blobproto_to_array(blob, return_diff=True)[0, 1, 2, 0] == 15
    shaped = caffe_pb2.BlobProto()
    shaped.shape.dim.extend([2, 3])
    shaped.data.extend(range(6))
    assert caffe_io.blobproto_to_array(shaped).tolist() == [[0, 1, 2], [3, 4, 5]]


def test_blobproto_without_shape_is_one_value_only():
    one = caffe_pb2.BlobProto(data=[123])
    assert caffe_io.blobproto_to_array(one) == 123
    with pytest.raises(ValueError):
        caffe_io.blobproto_to_array(caffe_pb2.BlobProto(data=[1, 2]))


def test_array_to_blobproto_round_trip_with_diff():
    arr = numpy.arange(24, dtype=numpy.float32).reshape(2, 3, 4)
    blob = caffe_io.array_to_blobproto(arr, diff=-arr)
    assert list(blob.shape.dim) == [2, 3, 4] and not blob.HasField("num")
    numpy.testing.assert_array_equal(caffe_io.blobproto_to_array(blob), arr)
    numpy.testing.assert_array_equal(caffe_io.blobproto_to_array(blob, return_diff=True), -arr)


def test_blobprotovector_string_round_trip():
    arrays = [numpy.ones((2, 2)), numpy.arange(5.0)]
    text = caffe_io.arraylist_to_blobprotovector_str(arrays)
    assert isinstance(text, bytes)
    back = caffe_io.blobprotovector_str_to_arraylist(text)
    assert [a.tolist() for a in back] == [a.tolist() for a in arrays]


def test_datum_uint8_bytes_and_float_data():
    pixels = numpy.arange(24, dtype=numpy.uint8).reshape(2, 3, 4)
    datum = caffe_io.array_to_datum(pixels, label=7)
    assert (datum.channels, datum.height, datum.width, datum.label) == (2, 3, 4, 7)
    assert datum.data == pixels.tobytes() and not datum.float_data
    back = caffe_io.datum_to_array(datum)
    assert back.dtype == numpy.uint8 and (back == pixels).all()
    floats = caffe_io.array_to_datum(pixels.astype(numpy.float32) / 2)
    assert not floats.data and not floats.HasField("label")
    assert caffe_io.datum_to_array(floats)[1, 2, 3] == 11.5
    with pytest.raises(ValueError):
        caffe_io.array_to_datum(numpy.zeros((2, 2)))


# ---- images -------------------------------------------------------------------------------------
def test_load_image_colour_gray_and_alpha(tmp_path):
    rgba = numpy.array([[[255, 0, 0, 255], [0, 255, 0, 0]]], dtype=numpy.uint8)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    colour = caffe_io.load_image(str(tmp_path / "a.png"))
    assert colour.dtype == numpy.float32 and colour.shape == (1, 2, 3)
    assert colour[0, 0].tolist() == [1, 0, 0] and colour[0, 1].tolist() == [0, 1, 0]
    gray = caffe_io.load_image(str(tmp_path / "a.png"), color=False)
    assert gray.shape == (1, 2, 1)
    # rgb2gray weights; the transparent pixel is composited on white first
    numpy.testing.assert_allclose(gray[:, :, 0], [[0.2125, 1.0]], rtol=1e-6)
    Image.fromarray(numpy.array([[0, 51]], numpy.uint8), "L").save(tmp_path / "g.png")
    tiled = caffe_io.load_image(str(tmp_path / "g.png"))
    assert tiled.shape == (1, 2, 3) and tiled[0, 1].tolist() == [numpy.float32(0.2)] * 3


def test_resize_image_matches_scikit_image_numbers():
    """4x4 -> 2x3 (anti-aliased, zero beyond the border), values computed by scikit-image 0.26
    through pycaffe's resize_image."""
    im = numpy.arange(0, 32, 2, dtype=numpy.float32).reshape(4, 4, 1)
    out = caffe_io.resize_image(im, (2, 3))
    assert out.dtype == numpy.float32 and out.shape == (2, 3, 1)
    numpy.testing.assert_allclose(out[:, :, 0], [[4.7444735, 7.268502, 9.79253],
                                                 [18.602793, 21.126822, 23.65085]], atol=2e-6)


def test_resize_image_spline_orders_match_scikit_image_and_scipy_numbers():
    """Orders 2 to 5 as pycaffe's libraries compute them: the 1/3-channel values by scikit-image
    0.26 (through BVLC's resize_image), the other channel counts by scipy.ndimage.zoom."""
    from scipy import ndimage
    im = numpy.arange(0, 32, 2, dtype=numpy.float32).reshape(4, 4, 1)
    numpy.testing.assert_allclose(caffe_io.resize_image(im, (2, 3), 3)[:, :, 0],
                                  [[4.541368, 6.721305, 10.799693],
                                   [22.884312, 22.794313, 29.14264]], atol=2e-5)
    peak = numpy.array([[0, 10, 0], [10, 40, 10]], numpy.float32).reshape(2, 3, 1)
    numpy.testing.assert_allclose(caffe_io.resize_image(peak, (3, 5), 2)[:, :, 0],
                                  [[0, 2.0192754, 6.0428896, 2.0192754, 0],
                                   [2.6854548, 16.461731, 29.289322, 16.461731, 2.6854548],
                                   [5.3984776, 22.33258, 37.284832, 22.33258, 5.3984776]],
                                  atol=2e-5)
    four = numpy.random.RandomState(0).rand(5, 6, 4).astype(numpy.float32)
    for order in (2, 3, 4, 5):
        want = ndimage.zoom(four, (7 / 5, 3 / 6, 1), order=order).astype(numpy.float32)
        numpy.testing.assert_array_equal(caffe_io.resize_image(four, (7, 3), order), want)
    with pytest.raises(ValueError, match="0 to 5"):
        caffe_io.resize_image(im, (2, 3), 6)


def test_resize_image_upsampling_blends_border_towards_minimum():
    """skimage's mode='constant' reads zero (the image minimum after scaling) past the edge."""
    im = numpy.array([10, 20], dtype=numpy.float32).reshape(2, 1, 1)
    out = caffe_io.resize_image(im, (4, 1))
    assert out[:, 0, 0].tolist() == [10.0, 12.5, 17.5, 17.5]


def test_resize_image_other_channel_counts_zoom_corner_to_corner():
    im = numpy.arange(0, 32, 2, dtype=numpy.float32).reshape(4, 4)
    out = caffe_io.resize_image(numpy.stack([im, 30 - im], -1), (3, 6))
    numpy.testing.assert_allclose(out[:, :, 0], [[0, 1.2, 2.4, 3.6, 4.8, 6],
                                                 [12, 13.2, 14.4, 15.6, 16.8, 18],
                                                 [24, 25.2, 26.4, 27.6, 28.8, 30]], atol=1e-5)
    numpy.testing.assert_allclose(out[:, :, 1], 30 - out[:, :, 0], atol=1e-5)


def test_resize_image_constant_and_order_checks():
    out = caffe_io.resize_image(numpy.full((3, 3, 3), 0.5, numpy.float64), (5, 2))
    assert out.dtype == numpy.float32 and out.shape == (5, 2, 3) and (out == 0.5).all()
    with pytest.raises(ValueError, match="interp_order"):
        caffe_io.resize_image(numpy.random.rand(3, 3, 3), (5, 5), interp_order=7)


def test_oversample_corners_centre_and_mirrors():
    image = numpy.arange(5 * 6 * 2, dtype=numpy.float32).reshape(5, 6, 2)
    crops = caffe_io.oversample([image, image + 1000], (3, 4))
    assert crops.shape == (20, 3, 4, 2) and crops.dtype == numpy.float32
    expected = [image[:3, :4], image[:3, 2:], image[2:, :4], image[2:, 2:], image[1:4, 1:5]]
    for k, crop in enumerate(expected):
        numpy.testing.assert_array_equal(crops[k], crop)
        numpy.testing.assert_array_equal(crops[k + 5], crop[:, ::-1])
    numpy.testing.assert_array_equal(crops[10:], crops[:10] + 1000)


# ---- Transformer --------------------------------------------------------------------------------
def _transformer():
    t = caffe.io.Transformer({"data": (1, 3, 4, 5)})
    t.set_transpose("data", (2, 0, 1))
    t.set_channel_swap("data", (2, 1, 0))
    t.set_raw_scale("data", 255.0)
    t.set_mean("data", numpy.array([10.0, 20.0, 30.0]))
    t.set_input_scale("data", 0.5)
    return t


def test_transformer_preprocess_order_and_round_trip():
    image = numpy.random.RandomState(0).rand(4, 5, 3).astype(numpy.float32)
    before = image.copy()
    out = _transformer().preprocess("data", image)
    assert out.shape == (3, 4, 5) and out.dtype == numpy.float32
    expected = (image.transpose(2, 0, 1)[::-1] * 255 - numpy.array([10, 20, 30])[:, None, None])
    numpy.testing.assert_allclose(out, expected * 0.5, rtol=1e-5)
    assert (image == before).all()  # the caller's array is left alone
    numpy.testing.assert_allclose(_transformer().deprocess("data", out), image, atol=1e-5)


def test_transformer_resizes_to_the_input_size():
    t = caffe.io.Transformer({"data": (1, 1, 4, 5)})
    t.set_transpose("data", (2, 0, 1))
    out = t.preprocess("data", numpy.random.rand(8, 10, 1))
    assert out.shape == (1, 4, 5)


def test_transformer_elementwise_mean_is_resized():
    t = caffe.io.Transformer({"data": (1, 2, 4, 4)})
    mean = numpy.stack([numpy.full((8, 8), 3.0), numpy.full((8, 8), 5.0)])
    mean[0, 0, 0] = 1.0
    t.set_mean("data", mean)
    assert t.mean["data"].shape == (2, 4, 4)
    assert 1.0 <= t.mean["data"].min() and t.mean["data"].max() <= 5.0


@pytest.mark.parametrize("call, message", [
    (lambda t: t.set_transpose("data", (1, 0)), "Transpose order"),
    (lambda t: t.set_channel_swap("data", (1, 0)), "Channel swap"),
    (lambda t: t.set_mean("data", numpy.zeros(2)), "Mean channels"),
    (lambda t: t.set_mean("data", numpy.zeros((1, 1, 3, 4))), "Mean shape"),
    (lambda t: t.set_raw_scale("image", 1.0), "not one of the net inputs"),
])
def test_transformer_rejects_mismatched_settings(call, message):
    with pytest.raises(Exception, match=message):
        call(caffe.io.Transformer({"data": (1, 3, 4, 5)}))
