"""Dropout: in TRAIN zero each input with probability dropout_ratio and scale the kept ones by
1 / (1 - ratio); in TEST pass the input through unchanged (BVLC Caffe's inverted dropout)."""
import numpy

from .. import context, replay
from ..kernels import device, dropout_jit, jit
from ..kernels.random import draw_key, random_bits, uint_threshold
from ..layer import NeuronLayer
from ..proto import caffe_pb2
from ..registry import register_layer


@register_layer("Dropout")
class DropoutLayer(NeuronLayer):

    def setup(self, bottom, top):
        self.ratio = self.layer_param.dropout_param.dropout_ratio
        if not 0 <= self.ratio < 1:
            raise self.error("dropout_ratio must be in [0, 1), got %g" % self.ratio)
        self.scale = 1.0 / (1.0 - self.ratio)
        self.threshold = uint_threshold(self.ratio)
        self.mask = None
        self.device_key = None

    def forward(self, bottom, top):
        x = bottom[0].data
        if self.phase != caffe_pb2.TRAIN:
            if top[0] is not bottom[0]:
                top[0].data[...] = x
            return
        # Bernoulli(1 - ratio) keep mask. On the host Caffe's CPU mask: a word of the rank's
        # stream per value, compared in double. On the device a counter-based draw keyed by the
        # rank's device stream (Caffe's GPU mask comes from cuRAND: neither is the other's).
        y = top[0].data
        if jit.usable(x, y):   # the same words, mask and top in one compiled pass
            self.mask = self.scratch("mask", x.shape, x.dtype)
            threshold = numpy.float64(1.0 - self.ratio) * numpy.float64(4294967295.0)
            dropout_jit.forward(context.rng().words(x.size), threshold, x.reshape(-1),
                                self.scale, self.mask.reshape(-1), y.reshape(-1))
            return
        if self.xp is numpy:
            keep = context.rng().bernoulli(x.size, 1.0 - self.ratio, numpy.float64)
        else:
            key = self.device_key if replay.capturing() else draw_key(context.device_rng())
            keep = random_bits(self.xp, x.shape, key) >= self.threshold
        self.mask = keep.reshape(x.shape).astype(numpy.dtype(bottom[0].dtype))
        top[0].data[...] = x * self.mask * self.scale

    def forward_gpu(self, bottom, top):
        """TRAIN: the mask drawn and applied in one device kernel, its key a device scalar
        (filled by a kernel, no copy; a captured graph's is refilled before each replay)."""
        x = bottom[0].data
        if self.phase != caffe_pb2.TRAIN or not device.usable(self.xp, x):
            return self.forward(bottom, top)
        if not replay.capturing():
            if self.device_key is None or not isinstance(self.device_key, self.xp.ndarray):
                self.device_key = self.xp.zeros((), numpy.uint64)
            self.device_key.fill(draw_key(context.device_rng()))
        self.mask = self.scratch("mask", x.shape, x.dtype)
        device.launch(self.xp, "dropout", "dropout_forward", x.size, x.dtype, x,
                      self.device_key, self.threshold, x.dtype.type(self.scale), self.mask,
                      top[0].data)

    def capture_feeds(self, xp):
        """In a CUDA graph the key is a device scalar, drawn from the same stream before each
        replay."""
        if self.phase != caffe_pb2.TRAIN:
            return []
        self.device_key = xp.zeros((), numpy.uint64)
        return [lambda: self.device_key.fill(draw_key(context.device_rng()))]

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].diff
        if self.phase == caffe_pb2.TRAIN:
            dx = bottom[0].diff
            if jit.usable(dy, self.mask, dx):
                dropout_jit.backward(dy.reshape(-1), self.mask.reshape(-1), self.scale,
                                     dx.reshape(-1))
            else:
                dx[...] = dy * self.mask * self.scale
        elif top[0] is not bottom[0]:
            bottom[0].diff[...] = dy
