"""Convolution: im2col and grouped GEMMs over a chunk of images, a plain GEMM for 1x1 kernels
(Caffe's conv_layer), Winograd's F(2x2, 3x3) for 3x3 kernels with ``engine: DEFAULT``, products
image by image in compiled code for narrow kernels on small maps (kernels/conv_jit), or, for a
depthwise layer (one input channel a group) with ``engine: DEFAULT``, compiled loops plane by
plane (kernels/depthwise_jit)."""

from ..kernels import (blas_blocks, conv_jit, depthwise_jit, device, im2col_jit, jit, relu_jit,
                       winograd)
from ..kernels import im2col as ic
from ..kernels.gemm import gemm_stack
from ..kernels.threads import for_parts
from ..registry import register_layer
from ._base_conv import COL_CHUNK_ELEMENTS, BaseConvolutionLayer, prod

# Winograd's F(2x2, 5x5) (6x6 tiles, points 0, +-1, 2, -1/2) was measured for 5x5 kernels and
# left out: forward + backward 0.84-0.86x im2col's time on 16x16 and 27x27 maps (CIFAR-10's and
# CaffeNet's conv2, 2-core Xeon) but 1.06-1.30x on 8x8 and 14x14 (LeNet's, GoogLeNet's), and
# float32 errors against float64 about 3x im2col's in the forward and 12x in the weight gradient
# (CaffeNet's conv2, 2.2e-3 against 1.8e-4 of 361), where F(2x2, 3x3)'s stay within 2x of it.
WINOGRAD_MIN_CHANNELS = 16  # per group, in and out: narrower GEMMs run too far below peak
WINOGRAD_MIN_TILES = 64     # per chunk: fewer leave the filters' transform the larger cost
WINOGRAD_MAX_OVERHANG = 1.2  # outputs the 2x2 tiles cover over the map's at most: 7x7 maps
                             # (1.31, 8x8 covered) ran at 0.75-0.86x im2col's speed (GoogLeNet's
                             # inception_5a/5b, fwd+bwd, 2-core Xeon), 13x13 (1.16) at 1.09-1.21x
                             # (CaffeNet's conv3-5), exact 14x14 to 56x56 at 0.98-1.46x
DOWN_MAX_MACS = 1 << 24     # multiply-adds of one image's input gradient (a group's) at most for
                            # it to run image by image (conv_jit) where the rest stays batched:
                            # LeNet's conv2 (1.6M) 2.75 -> 2.53 ms, CIFAR-10's conv2 (6.6M) 20.7 ->
                            # 16.5 ms; CaffeNet's conv2 (118M) 55 -> 79 ms (2-core EPYC)
DOWN_MAX_FILTER_BYTES = 1 << 18  # and its filters at most this size, its kernel wider than
                                 # 1x1: each image reads the filters again, and a 1x1 kernel's
                                 # col2im adds no overlapping windows for one image's columns in
                                 # cache to save. Per layer in the pass (2-core EPYC), by image
                                 # against batched: GoogLeNet's 5x5s of 400 and 600 KB 1.05-1.15x
                                 # at batch 10 and 32, ResNet-50's strided 1x1s 1.4-3.5x, its
                                 # 2-9 MB filters on 32x32 inputs 1.6-17x (the pass 63.5 -> 35.6
                                 # ms); 5x5s of 50-200 KB 0.61-1.08x
NARROW_MAX_ROWS = 32        # filters a group at most, columns of a chunk more than this and
NARROW_MAX_COLUMNS = 1 << 22  # one image's at most, for a layer to run image by image where BLAS
                            # has its small-matrix kernels: the batched product streams its
                            # columns from memory (2 flops a value a filter). SkylakeX's kernels
                            # (2-core EPYC), forward-backward: CIFAR-10's conv2 (32 filters, 82 MB
                            # of columns at batch 100) in the pass 18.7-19.1 -> 16.3-16.6 ms; alone,
                            # against the batched path, 32 and 16 filters over 5-10 MB an image
                            # 0.69-1.03x, over 20 MB an image 1.05x. With Haswell's kernels image
                            # by image ran 25.4 ms (batched 24.9-26.2) and 8 MB chunks of columns
                            # 0.86x or 1.04-1.07x by the process: left batched there
BY_IMAGE_MIN_GRID = 2048    # positions of one image's grid from which the im2col path runs a
                            # chunk of one image (Caffe's layout: no move of the input, the
                            # product or dy, one image's columns in cache), or from
BY_IMAGE_MIN_GRID_WIDE = 512  # this many with at least BY_IMAGE_MIN_ROWS filters a group and
BY_IMAGE_MIN_ROWS = 128       # BY_IMAGE_MIN_FILTER_VALUES values in a group's filters. In the
BY_IMAGE_MIN_FILTER_VALUES = 1 << 16  # pass, 2-core EPYC Zen 5, per layer: CaffeNet's conv1
                            # 0.89x, conv2 0.93x, GoogLeNet's conv1 0.92x, conv2/3x3_reduce
                            # 0.82-0.85x, ResNet-50's at batch 8 res2 1x1s 0.74-0.78x, res3 1x1s
                            # 0.91-0.93x; GoogLeNet's inception_3a/3b (784 positions, narrower
                            # filters) 1.1-1.6x slower
DEPTHWISE_MIN_GROUPS = 2    # groups of one input channel (group = channels) from which a layer
                            # runs plane by plane (kernels/depthwise_jit.py): MobileNet's 3x3s at
                            # batch 4 (2-core EPYC, alone, forward / backward) 112x112 2.06 ->
                            # 0.30 / 4.0 -> 0.74 ms, stride 2 1.2 -> 0.60 / 3.0 -> 1.55, 14x14
                            # 0.49 -> 0.29 / 1.5 -> 1.07, 7x7 0.65 -> 0.37-0.52 / 2.0 -> 1.65-1.84;
                            # one group (LeNet's conv1, 20 outputs of 5x5) ran 1.3x / 1.5x slower
POSITION_MIN_CHANNELS = 8   # per group: on fewer, col2im by output position adds runs too short
POSITION_MAX_PLANE = 1 << 16  # bytes of one image's padded gradient, every channel: col2im by
                              # position sums it in one plane, which runs slower than col2im's
                              # plane a channel beyond (GoogLeNet's inception_3b/5x5, 128 KiB, and
                              # CaffeNet's conv2, 369 KiB, lost 2-3%)


@register_layer("Convolution")
class ConvolutionLayer(BaseConvolutionLayer):
    """N-D grouped, strided, padded, dilated convolution; weights (out, in/group, *kernel).

    Columns are (group, kernel_dim, nb * P), the images of a chunk side by side; a chunk of
    one image is Caffe's layout, so its GEMMs read and write the blobs' own memory.
    """

    relu_after = None   # a ReLU's slope while fusion.ConvReLUChain runs the forward

    def compute_output_shape(self, in_shape):
        return ic.conv_out_shape(in_shape, self.kernel, self.pad, self.stride, self.dilation)

    def _choose_algorithm(self):
        """im2col's choice, or Winograd's F(2x2, 3x3) for a 3x3, stride-1, undilated layer
        with ``engine: DEFAULT`` whose GEMMs are wide enough and whose tiles do not overhang
        the map by much (kernels/winograd.py: 2.25x fewer multiplies, float32 rounding instead
        of im2col's; ``engine: CAFFE`` keeps Caffe's arithmetic). Its input gradient is the
        same algorithm on dy (pad 2 - pad, the filters turned), its weight gradient the same
        tiles' sums differentiated by the filter."""
        super()._choose_algorithm()
        self._tiles_cached = False
        p, g = self.layer_param.convolution_param, self.group
        tiles = prod(winograd.tiles(self.out_shape)) if self.num_spatial == 2 else 0
        self.winograd = (
            jit.INSTALLED and p.engine == p.DEFAULT and self.num_spatial == 2
            and self.kernel == [3, 3] and self.stride == [1, 1] and self.dilation == [1, 1]
            and max(self.pad) <= 2 and min(self.channels, self.num_output) // g
            >= WINOGRAD_MIN_CHANNELS and self.num * tiles >= WINOGRAD_MIN_TILES
            and 4 * tiles <= WINOGRAD_MAX_OVERHANG * prod(self.out_shape))
        if self.winograd:
            per_item = 16 * max(self.channels, self.num_output) * tiles
            self.chunk = max(1, min(self.chunk, COL_CHUNK_ELEMENTS // per_item))
        # one input channel a group (MobileNet's depthwise layers): kernels/depthwise_jit.py
        self.depthwise = (jit.INSTALLED and p.engine == p.DEFAULT and self.num_spatial == 2
                          and self.group >= DEPTHWISE_MIN_GROUPS
                          and self.channels == self.group and not self.pointwise)
        self.by_image = not (self.winograd or self.pointwise or self.depthwise) and (
            self._images_pay() or self._narrow_images())
        self.wide_by_image = not (self.winograd or self.by_image or self.depthwise) \
            and self._wide_by_image()
        if self.wide_by_image:
            self.chunk = 1
        # the input gradient alone image by image (the weight gradient's batched columns stay)
        self.down_by_image = (
            not (self.by_image or self.winograd or self.pointwise or self.depthwise)
            and self.kernel_dim * self.num_output // g * prod(self.out_shape) <= DOWN_MAX_MACS
            and prod(self.kernel) > 1
            and self.blobs[0].count() * self.blobs[0].dtype.itemsize <= DOWN_MAX_FILTER_BYTES
            and self._conv_jit_takes())
        plane = prod(self.cols.padded) * self.channels * self.blobs[0].dtype.itemsize
        self.by_position = (self.num_spatial == 2 and not (self.pointwise or self.depthwise)
                            and self.channels // g >= POSITION_MIN_CHANNELS
                            and plane <= POSITION_MAX_PLANE)

    def _narrow_images(self):
        """Whether few filters a group (NARROW_MAX_ROWS) would make the batched product stream
        more columns than cache holds (NARROW_MAX_COLUMNS) from memory while one image's fit
        it, where BLAS has the small-matrix kernels (blas_blocks.small_macs) that run one
        image's products well."""
        image = self._image_columns()
        return (self.num_output // self.group <= NARROW_MAX_ROWS
                and image <= NARROW_MAX_COLUMNS < image * self.chunk
                and bool(blas_blocks.small_macs()) and self._conv_jit_takes())

    def _wide_by_image(self):
        """Whether one image's products are wide enough to run alone: BY_IMAGE_MIN_GRID
        positions, or BY_IMAGE_MIN_GRID_WIDE with a group's filters at least BY_IMAGE_MIN_ROWS
        rows and BY_IMAGE_MIN_FILTER_VALUES values."""
        grid, rows = prod(self.out_shape), self.num_output // self.group
        return grid >= BY_IMAGE_MIN_GRID or (
            grid >= BY_IMAGE_MIN_GRID_WIDE and rows >= BY_IMAGE_MIN_ROWS
            and rows * self.kernel_dim >= BY_IMAGE_MIN_FILTER_VALUES)

    def _winograd(self, src, dst, flipped):
        """dst = Winograd's convolution of src (the forward, or with ``flipped`` the input
        gradient of dy) by this layer's filters, chunk by chunk; False where the arrays are not
        host arrays the compiled transforms take (the caller runs im2col's path)."""
        if not (self.winograd and jit.usable(src, dst)):
            return False
        g, k, c = self.group, self.num_output, self.channels
        w = self.weights[0].data
        u = winograd.filter_transform(w, self.scratch("_wino_u", (16, k, c // g), w.dtype),
                                      flipped, g)
        u = u.reshape((16 * g,) + ((c // g, k // g) if flipped else (k // g, c // g)))
        pad = [2 - q for q in self.pad] if flipped else self.pad
        tiles = prod(winograd.tiles(dst.shape[2:]))
        for n0, n1 in self._chunks():
            p = (n1 - n0) * tiles
            winograd.convolve(src[n0:n1], u, pad, g,
                              self.scratch("_wino_v", (16, src.shape[1], p), src.dtype),
                              self.scratch("_wino_m", (16, dst.shape[1], p), src.dtype),
                              dst[n0:n1])
        return True

    def _winograd_weight_gradient(self, x, dy, wdiff):
        """wdiff += Winograd's weight gradient, chunk by chunk, reusing the forward's input
        tiles when they are still valid; False where im2col's path must run."""
        if not (self.winograd and jit.usable(x, dy, wdiff)):
            return False
        g, k, c = self.group, self.num_output, self.channels
        tile_hw = winograd.tiles(self.out_shape)
        for n0, n1 in self._chunks():
            p = (n1 - n0) * prod(tile_hw)
            v = self.scratch("_wino_v", (16, c, p), x.dtype)
            if not self._tiles_cached:
                winograd.input_tiles(x[n0:n1], self.pad, tile_hw, v)
            winograd.weight_gradient(v, dy[n0:n1], g, self.scratch("_wino_m", (16, k, p), x.dtype),
                                     self.scratch("_wino_u", (16, k, c // g), x.dtype), wdiff)
            self._tiles_cached = False
        return True

    def _input_gradient_by_position(self, dyt, dx):
        """dx (nb, C, H, W) = col2im of dyt's columns computed as (g, nb * P, kernel, C/g):
        dyt.T @ W with W's columns turned channels last, which OpenBLAS runs faster than
        W.T @ dyt for narrow layers (LeNet's conv2 1.3-1.7 -> 1.1 ms) with the same dot products,
        then im2col_jit's col2im by position (the same bits as col2im); host arrays."""
        g, m, c = self.group, self.num_output, self.channels
        w = self.weights[0].data
        turned = self.scratch("_w_last", (g, m // g, self.kernel_dim), w.dtype)
        turned.reshape(m, -1, c // g)[...] = w.reshape(m, c // g, -1).transpose(0, 2, 1)
        dcol = gemm_stack(self.xp, dyt.transpose(0, 2, 1), turned, self.cols.column_buffer(
            self.xp, (g, dyt.shape[2], self.kernel_dim), dyt.dtype))
        shape = (g, dx.shape[0]) + tuple(self.out_shape) + tuple(self.kernel) + (c // g,)
        im2col_jit.col2im_positions(dcol.reshape(shape), self.stride, self.dilation, self.pad,
                                    dx)

    def _backward_by_image(self, x, dy, w, wdiff, dx, need_w):
        """conv_jit's backward: each image's gradients, the weights' and the bias's added in
        image order (host arrays)."""
        biases = self.bias_term and self.param_propagate_down[1]
        conv_jit.backward(
            x, dy.reshape((self.num, self.num_output) + tuple(self.out_shape)), w,
            *self._geometry(), wdiff if need_w else None, dx,
            self.scratch("_image_weights", (self.num,) + w.shape, w.dtype),
            bdiff=self.weights[1].diff if biases else None)

    def _columns(self, x, n0, n1):
        """The (g, kernel_dim, nb * P) columns of images n0..n1 (for 1x1 kernels, the input)."""
        shape = (self.group, self.kernel_dim, prod(self.out_shape) * (n1 - n0))
        if not self.pointwise:
            return self.cols.im2col(self.xp, x[n0:n1]).reshape(shape)
        if n1 - n0 == 1:
            return x[n0].reshape(shape)
        self.cols.last_col = self._channels_first(x, n0, n1, "_in")
        return self.cols.last_col

    def _image_shape(self):
        return (self.num, self.channels) + tuple(self.in_shape)

    def _fused_bias(self):
        """The bias, where it is added as each chunk's product moves into place (every chunk
        holds several images: a chunk of one has its product written in place), else None."""
        if not (self.bias_term and self.chunk > 1 and (self.num - 1) % self.chunk):
            return None
        return self.weights[1].data

    def _im2col_forward(self, x, w, y, bias=None, relu=None):
        """y = the convolution of x, chunk by chunk, plus ``bias`` where given (added as each
        chunk moves into place), rectified with slope ``relu`` where given (host arrays)."""
        xp, g, m = self.xp, self.group, self.num_output
        P = y.shape[2]
        for n0, n1 in self._chunks():
            nb = n1 - n0
            col = self._columns(x, n0, n1)
            if nb == 1:
                gemm_stack(xp, w, col, y[n0].reshape(g, m // g, P))
                continue
            out = gemm_stack(xp, w, col, self.scratch("_out", (g, m // g, P * nb), col.dtype))
            if relu is not None:
                relu_jit.split_images_first_relu(out.reshape(m, nb, P), bias, relu, y[n0:n1])
            elif bias is not None and device.usable(xp, y, bias):
                device.launch(xp, "im2col", "images_first_bias", out.size, out.dtype, out, bias,
                              *device.ints(nb, m, P), y[n0:n1])
            else:
                self._images_first(out, y[n0:n1], bias)

    def forward(self, bottom, top):
        m = self.num_output
        P = prod(self.out_shape)
        w = self._grouped_weight()
        winograd_done = images_done = False
        relu = self.relu_after
        for b, t in zip(bottom, top):
            x = b.data.reshape(self._image_shape())
            y = t.data.reshape(self.num, m, P)
            if self.depthwise and jit.usable(x, y, w):   # bias and ReLU in the same pass
                depthwise_jit.forward(x, self.weights[0].data,
                                      self.weights[1].data if self.bias_term else None, relu,
                                      self.stride, self.dilation, self.pad,
                                      y.reshape((self.num, m) + tuple(self.out_shape)))
                images_done = True
                continue
            if self.by_image and jit.usable(x, y, w):   # bias and ReLU in the same pass
                conv_jit.forward(x, w, self.weights[1].data if self.bias_term else None, relu,
                                 *self._geometry(),
                                 y.reshape((self.num, m) + tuple(self.out_shape)))
                images_done = True
                continue
            bias, rectified = None, False
            if self._winograd(x, y.reshape((self.num, m) + tuple(self.out_shape)), False):
                winograd_done = True
            else:
                bias = self._fused_bias()
                # every chunk moves into place (none of one image): the ReLU goes with it
                rectified = bool(relu is not None and self.chunk > 1
                                 and (self.num - 1) % self.chunk)
                self._im2col_forward(x, w, y, bias, relu if rectified else None)
            if relu is not None and not rectified:
                add = self.weights[1].data if self.bias_term and bias is None else None
                relu_jit.split_bias_relu(y, add, relu)
            elif self.bias_term and bias is None:
                add = self.weights[1].data.reshape(m, 1)
                for_parts(self.xp, lambda c0, c1: y[:, c0:c1].__iadd__(add[c0:c1]), m, y.size)
        # the columns of a single chunk stay valid for the weight gradient (a 1x1 layer's
        # single image has none: its input is its columns)
        single = (len(bottom) == 1 and self.chunk >= self.num and not self.bottom_rewritten
                  and not images_done)
        self._cached = single and not winograd_done and not (self.pointwise and self.num == 1)
        self._tiles_cached = single and winograd_done   # Winograd's input tiles, likewise

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        g, m = self.group, self.num_output
        P = prod(self.out_shape)
        w = self._grouped_weight()
        wt = w.transpose(0, 2, 1)
        need_w = self.param_propagate_down[0]
        for t, b, down in zip(top, bottom, propagate_down):
            dy = t.diff.reshape(self.num, m, P)
            if not (need_w or down):
                self._bias_grad(dy)
                continue
            x = b.data.reshape(self._image_shape())
            dx = b.diff.reshape(self._image_shape())
            wdiff = self.weights[0].diff.reshape(w.shape)
            dy4 = dy.reshape((self.num, m) + tuple(self.out_shape))
            if self.depthwise and jit.usable(x, dy, w, dx, wdiff):
                depthwise_jit.backward(x, dy4, self.weights[0].data, self.stride, self.dilation,
                                       self.pad, self.weights[0].diff if need_w else None,
                                       dx if down else None)
                self._bias_grad(dy)
                continue
            if self.by_image and jit.usable(x, dy, w, dx, wdiff):
                self._backward_by_image(x, dy, w, wdiff, dx if down else None, need_w)
                continue
            if down and self.down_by_image and jit.usable(x, dy, w, dx):
                conv_jit.backward(x, dy4, w, *self._geometry(), None, dx)
                down = False
            weights_left = need_w and not self._winograd_weight_gradient(
                x, dy4, self.weights[0].diff)
            if down and self._winograd(dy4, dx, True):   # after: it overwrites the tiles
                down = False
            # the bias gradient's sums, in the move of dy below where it makes one
            in_move = bool(weights_left or down) and self._bias_in_move(dy)
            if not in_move:
                self._bias_grad(dy)
            if not (weights_left or down):
                continue
            for n0, n1 in self._chunks():
                nb = n1 - n0
                if nb == 1:
                    dyt = dy[n0].reshape(g, m // g, P)
                else:
                    dyt = self._channels_first(dy, n0, n1, "_out",
                                               self.weights[1].diff if in_move else None)
                col = None
                if weights_left:
                    col = self.cols.last_col.reshape(g, self.kernel_dim, P * nb) \
                        if self._cached else self._columns(x, n0, n1)
                    gemm_stack(xp, dyt, col.transpose(0, 2, 1), wdiff, accumulate=True)
                if not down:
                    continue
                if self.pointwise and nb == 1:
                    gemm_stack(xp, wt, dyt, dx[n0].reshape(g, self.kernel_dim, P))
                    continue
                # the input gradient's columns overwrite the forward's (Caffe's col_buffer)
                self._cached = False
                if self.by_position and jit.usable(dyt, dx):
                    self._input_gradient_by_position(dyt, dx[n0:n1])
                    continue
                dcol = gemm_stack(xp, wt, dyt, self.cols.column_buffer(
                    xp, (g, self.kernel_dim, P * nb), dy.dtype))
                if self.pointwise:
                    self._images_first(dcol, dx[n0:n1])
                    continue
                shape = (self.channels,) + tuple(self.kernel) + (nb,) + tuple(self.out_shape)
                self.cols.col2im(xp, dcol.reshape(shape), dx[n0:n1])
