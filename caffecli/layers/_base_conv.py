"""What Convolution and Deconvolution share (Caffe's base_conv_layer): geometry, the column
buffer and the grouped GEMMs.
"""

import numpy

from ..blob import Blob
from ..fillers import fill
from ..kernels import device, host_memory
from ..kernels import im2col as ic
from ..kernels import blas_threads, channel_jit, im2col_jit, jit
from ..kernels.caffe_blas import gemv_rows
from ..kernels.threads import for_parts, num_threads
from ..layer import Layer

COL_CHUNK_ELEMENTS = 1 << 25  # cap on the column buffer (elements); larger batches go in chunks
IMAGE_MAX_INNER = 128       # kernel_dim at most, and values of one image's columns, for products
IMAGE_MAX_COLUMNS = 1 << 17  # image by image (conv_jit): LeNet's conv1 (25 x 576) and CIFAR-10's
                             # (75 x 1024) ran 1.5-1.8x faster, LeNet's conv2 (500 x 64) and
                             # GoogLeNet's conv1 (147 x 12544) slower (2-core EPYC)


def prod(seq):
    n = 1
    for v in seq:
        n *= int(v)
    return n


def conv_geometry(layer, p, num_spatial):
    """kernel, stride, pad, dilation lists from a ConvolutionParameter, with Caffe's checks."""
    def per_axis(name, values, default, h_w):
        if h_w is not None:
            if num_spatial != 2:
                raise layer.error("%s_h & %s_w can only be used for 2D convolution "
                                  "(%d spatial axes)" % (name, name, num_spatial))
            if len(values):
                raise layer.error("Either %s or %s_h/w should be specified; not both"
                                  % (name, name))
            return list(h_w)
        n = len(values)
        if not (n == num_spatial or n == 1 or (n == 0 and default is not None)):
            raise layer.error("%s must be specified once, or once per spatial dimension "
                              "(%s specified %d times; %d spatial dims)"
                              % (name, name, n, num_spatial))
        return [int(values[0 if n == 1 else i]) if n else default for i in range(num_spatial)]

    has = p.HasField
    kernel = per_axis("kernel_size", p.kernel_size, None,
                      (p.kernel_h, p.kernel_w) if has("kernel_h") or has("kernel_w") else None)
    if any(k <= 0 for k in kernel):
        raise layer.error("Filter dimensions must be nonzero (kernel %s)" % (kernel,))
    stride = per_axis("stride", p.stride, 1,
                      (p.stride_h, p.stride_w) if has("stride_h") or has("stride_w") else None)
    if any(s <= 0 for s in stride):
        raise layer.error("Stride dimensions must be nonzero (stride %s)" % (stride,))
    pad = per_axis("pad", p.pad, 0,
                   (p.pad_h, p.pad_w) if has("pad_h") or has("pad_w") else None)
    dilation = per_axis("dilation", p.dilation, 1, None)
    if any(d <= 0 for d in dilation):
        raise layer.error("Dilation dimensions must be nonzero (dilation %s)" % (dilation,))
    return kernel, stride, pad, dilation


def setup_geometry(layer, bottom, p):
    """Set ``layer``'s channel_axis, num_spatial, kernel, stride, pad and dilation from the
    ConvolutionParameter ``p`` and the bottom blob (Convolution, Deconvolution, Im2col)."""
    layer.channel_axis = bottom.canonical_axis_index(p.axis)
    layer.num_spatial = bottom.num_axes - layer.channel_axis - 1
    if layer.num_spatial < 1:
        raise layer.error("needs at least one spatial axis after the channel axis "
                          "(bottom %s, axis %d)" % (bottom.shape_string(), p.axis))
    layer.kernel, layer.stride, layer.pad, layer.dilation = conv_geometry(
        layer, p, layer.num_spatial)


class ColumnMaker:
    """im2col into a (C, *kernel, n, *grid) buffer and col2im back, reusing buffers.

    The images of a chunk sit between the kernel offsets and the output grid, so a GEMM's
    product over a chunk, (out, n, *grid), goes back to the blob's (n, out, *grid) by moving
    whole output maps, and every im2col copy still runs over rows of the output grid. With a
    stride above 1 the padded images are kept split by phase, (*stride, C, n, *phase_grid),
    so each kernel offset is one dense copy (or add) rather than a strided lattice.
    """

    def __init__(self, kernel, stride, pad, dilation):
        self.kernel, self.stride, self.pad, self.dilation = kernel, stride, pad, dilation
        self.phased = any(s > 1 for s in stride)
        # a strided 1x1 kernel without pad reads one lattice of the image: one strided copy
        self.subsample = self.phased and all(k == 1 for k in kernel) and not any(pad)
        self._pad_in = ic.PadBuffer()
        self._pad_out = ic.PadBuffer()
        self._col = None
        self._shapes = None   # the shapes configure last saw (every Forward reshapes to them)

    def configure(self, channels, img_shape, grid_shape):
        shapes = (channels, tuple(img_shape), tuple(grid_shape))
        if shapes == self._shapes:   # the windows again: 341 us for CaffeNet's conv1's 121
            return
        self._shapes = shapes
        self.channels = channels
        self.img_shape = list(img_shape)
        self.grid_shape = list(grid_shape)
        self.padded = ic.padded_shape(img_shape, grid_shape, self.kernel, self.pad,
                                      self.stride, self.dilation)
        if self.phased:
            self.buf_lead = tuple(self.stride) + (channels,)
            self.buf_spatial = tuple(ic.phase_shape(self.padded, self.stride))
            self.interior = list(ic.phase_interior(self.pad, self.img_shape, self.stride))
            self.offsets = [(k, ic.phase_window(k, self.stride, self.dilation, self.grid_shape))
                            for k in numpy.ndindex(*self.kernel)]
        else:
            self.buf_lead, self.buf_spatial = (channels,), tuple(self.padded)

    def column_buffer(self, xp, shape, dtype):
        """The column buffer (kept between calls) as an array of ``shape``."""
        size = prod(shape)
        if (self._col is None or self._col.size < size or self._col.dtype != dtype
                or not isinstance(self._col, xp.ndarray)):
            self._col = host_memory.buffer(xp, size, dtype)
        return self._col[:size].reshape(shape)

    def _images_second(self, a):
        """(n, C, *img) viewed as (C, n, *img)."""
        return a.swapaxes(0, 1)

    def _by_image(self, col):
        """(C, *kernel, n, *grid) columns viewed as (C, n, *kernel, *grid), as windows are."""
        nk = len(self.kernel)
        return col.transpose((0, 1 + nk) + tuple(range(1, 1 + nk))
                             + tuple(range(2 + nk, col.ndim)))

    def _buffer(self, pool, xp, n, dtype):
        return pool.get(xp, self.buf_lead + (n,), self.buf_spatial, dtype)

    def _kernel_args(self, n):
        """The geometry arguments of kernels/cuda/im2col.cu, after the data pointer."""
        (kh, kw), (ph, pw), (sh, sw) = self.kernel, self.pad, self.stride
        return device.ints(n, self.channels, *self.img_shape, kh, kw, ph, pw, sh, sw,
                           *self.dilation, *self.grid_shape)

    def im2col(self, xp, x):
        """x: (n, C, *img) -> contiguous columns (C, *kernel, n, *grid); channels split across
        threads (one device kernel for 2-D images on the device)."""
        n = x.shape[0]
        if len(self.kernel) == 2 and device.usable(xp, x):
            shape = (self.channels,) + tuple(self.kernel) + (n,) + tuple(self.grid_shape)
            col = self.column_buffer(xp, shape, x.dtype)
            device.launch(xp, "im2col", "im2col", col.size, x.dtype,
                          xp.ascontiguousarray(x), *self._kernel_args(n), col)
            self.last_col = col
            return col
        shape = (self.channels,) + tuple(self.kernel) + (n,) + tuple(self.grid_shape)
        col = self.column_buffer(xp, shape, x.dtype)
        if self._compiled_applies(x, col):
            im2col_jit.im2col(x, self.stride, self.dilation, self.pad, self._split_by_image(n), col)
            self.last_col = col
            return col
        if self.subsample:
            lattice = self._lattice(x)
            cols = col.reshape(lattice.shape)
            for_parts(xp, lambda c0, c1: cols.__setitem__(slice(c0, c1), lattice[c0:c1]),
                      self.channels, col.size)
            self.last_col = col
            return col
        buf = self._buffer(self._pad_in, xp, n, x.dtype)
        xc = self._images_second(x)  # (C, n, *img)
        nk = len(self.kernel)

        def part(c, m):
            cs, ns = slice(*c), slice(*m)
            if self.phased:
                for phase, grid, img in self.interior:
                    buf[phase + (cs, ns) + grid] = xc[(cs, ns) + img]
                for k, (phase, grid) in self.offsets:
                    col[(cs,) + k + (ns,)] = buf[phase + (cs, ns) + grid]
            else:
                ic.interior(buf[cs, ns], self.pad, self.img_shape, lead_axes=2)[...] = xc[cs, ns]
                self._by_image(col[(cs,) + (slice(None),) * nk + (ns,)])[...] = ic.windows(
                    xp, buf[cs, ns], self.kernel, self.stride, self.dilation, self.grid_shape,
                    lead_axes=2)
        self._split(xp, part, n, col.size)
        self.last_col = col
        return col

    def col2im(self, xp, col, out):
        """col: (C, *kernel, n, *grid) -> out (n, C, *img) = sum of the windows (set);
        channels split across threads; adds in kernel-offset order, as Caffe's col2im."""
        n = col.shape[1 + len(self.kernel)]
        if len(self.kernel) == 2 and device.usable(xp, col) and out.flags.c_contiguous:
            device.launch(xp, "im2col", "col2im", out.size, col.dtype,
                          xp.ascontiguousarray(col), *self._kernel_args(n), out)
            return out
        if self._compiled_applies(col, out):
            im2col_jit.col2im(col, self.stride, self.dilation, self.pad,
                              self._split_by_image(n), out)
            return out
        if self.subsample:   # zeros, and each column added to its zero (-0.0 becomes 0.0)
            lattice = self._lattice(out)
            cols = col.reshape(lattice.shape)
            oc = self._images_second(out)

            def clear_add(c0, c1):
                oc[c0:c1] = 0
                lattice[c0:c1] += cols[c0:c1]
            for_parts(xp, clear_add, self.channels, out.size)
            return out
        buf = self._buffer(self._pad_out, xp, n, col.dtype)
        oc = self._images_second(out)  # (C, n, *img)
        nk = len(self.kernel)

        def part(c, m):
            cs, ns = slice(*c), slice(*m)
            cols = col[(cs,) + (slice(None),) * nk + (ns,)]
            if self.phased:
                buf[(slice(None),) * len(self.stride) + (cs, ns)] = 0
                for k, (phase, grid) in self.offsets:
                    buf[phase + (cs, ns) + grid] += cols[(slice(None),) + k]
                for phase, grid, img in self.interior:
                    oc[(cs, ns) + img] = buf[phase + (cs, ns) + grid]
            else:
                buf[cs, ns] = 0
                ic.col2im_add(buf[cs, ns], self._by_image(cols), self.kernel, self.stride,
                              self.dilation, self.grid_shape, lead_axes=2)
                oc[cs, ns] = ic.interior(buf[cs, ns], self.pad, self.img_shape, lead_axes=2)
        self._split(xp, part, n, col.size)
        return out

    def _compiled_applies(self, *arrays):
        """Whether kernels/im2col_jit.py makes these arrays' columns (or images): 2-D windows
        other than a strided 1x1 lattice (one strided copy), host arrays numba takes."""
        return len(self.kernel) == 2 and not self.subsample and jit.usable(*arrays)

    def _split_by_image(self, n):
        """Whether a split goes by images, with every channel, rather than by channels: where
        there are fewer than four channels a thread and more images than channels (LeNet's,
        CIFAR-10's and an RGB net's conv1: three channels would keep three threads busy at
        most). Every value is computed alike in any part, so the bits do not depend on it."""
        return self.channels < 4 * num_threads() and n > self.channels

    def _split(self, xp, part, n, size):
        """part((c0, c1), (n0, n1)) over the threads, by images or by channels (_split_by_image)."""
        by_image = self._split_by_image(n)
        every_c, every_n = (0, self.channels), (0, n)
        for_parts(xp, lambda a, b: part(every_c, (a, b)) if by_image
                  else part((a, b), every_n), n if by_image else self.channels, size)

    def _lattice(self, a):
        """The (C, n, *grid) view of the points of image array ``a`` (n, C, *img) that a
        strided 1x1 kernel reads."""
        return self._images_second(a)[(slice(None),) * 2 + tuple(
            slice(0, g * s, s) for g, s in zip(self.grid_shape, self.stride))]


class BaseConvolutionLayer(Layer):
    """Shared set-up of Convolution and Deconvolution (parameters, shapes, checks)."""

    skip_init_line = "base_conv.skipping_init"

    min_bottom_blobs = 1
    min_top_blobs = 1
    equal_num_bottom_top_blobs = True
    reverse = False  # Deconvolution swaps the roles of input and output

    def setup(self, bottom, top):
        p = self.layer_param.convolution_param
        setup_geometry(self, bottom[0], p)
        self.channels = bottom[0].shape[self.channel_axis]
        self.num_output = int(p.num_output)
        self.group = int(p.group)
        if self.num_output <= 0:
            raise self.error("num_output must be positive")
        if self.group <= 0:
            raise self.error("group must be positive")
        if self.channels % self.group:
            raise self.error("channels (%d) must be a multiple of group (%d)"
                             % (self.channels, self.group))
        if self.num_output % self.group:
            raise self.error("Number of output (%d) should be multiples of group (%d)"
                             % (self.num_output, self.group))
        if self.reverse:
            self.conv_out, self.conv_in = self.channels, self.num_output
        else:
            self.conv_out, self.conv_in = self.num_output, self.channels
        wshape = (self.conv_out, self.conv_in // self.group) + tuple(self.kernel)
        self.bias_term = p.bias_term
        dtype = bottom[0].dtype
        if self.blobs:
            if len(self.blobs) != 1 + int(self.bias_term):
                raise self.error("Incorrect number of weight blobs (%d, expected %d)"
                                 % (len(self.blobs), 1 + int(self.bias_term)))
            if tuple(self.blobs[0].shape) != wshape:
                raise self.error("Incorrect weight shape: expected shape %s; instead, shape "
                                 "was %s" % (Blob(wshape).shape_string(),
                                             self.blobs[0].shape_string()))
            if self.bias_term and tuple(self.blobs[1].shape) != (self.num_output,):
                raise self.error("Incorrect bias shape: expected shape %d (%d); instead, "
                                 "shape was %s" % (self.num_output, self.num_output,
                                                   self.blobs[1].shape_string()))
        else:
            self.blobs = [fill(Blob(wshape, dtype), p.weight_filler)]
            if self.bias_term:
                self.blobs.append(fill(Blob((self.num_output,), dtype), p.bias_filler))
        self.param_propagate_down = [True] * len(self.blobs)
        self.kernel_dim = self.blobs[0].count(1)
        self.cols = ColumnMaker(self.kernel, self.stride, self.pad, self.dilation)

    def compute_output_shape(self, in_shape):
        raise NotImplementedError

    reshape_by_shapes = True

    def reshape_again(self):
        self._cached = self._tiles_cached = False   # a Reshape between forward and backward

    def reshape(self, bottom, top):
        first = self.channel_axis + 1
        b0 = bottom[0]
        if b0.num_axes != first + self.num_spatial:
            raise self.error("bottom num_axes may not change (was %d, now %s)"
                             % (first + self.num_spatial, b0.shape_string()))
        if b0.shape[self.channel_axis] != self.channels:
            raise self.error("Input size incompatible with convolution kernel: bottom %s has "
                             "%d channels, the layer was set up for %d"
                             % (b0.shape_string(), b0.shape[self.channel_axis], self.channels))
        for i, b in enumerate(bottom[1:], 1):
            if b.shape != b0.shape:
                raise self.error("shape mismatch - bottom[0]: %s vs. bottom[%d]: %s"
                                 % (b0.shape_string(), i, b.shape_string()))
        self.num = b0.count(0, self.channel_axis)
        self.in_shape = list(b0.shape[first:])
        self.out_shape = self.compute_output_shape(self.in_shape)
        if any(o < 0 for o in self.out_shape):
            raise self.error("kernel %s does not fit the padded input %s (output %s)"
                             % (self.kernel, b0.shape_string(), self.out_shape))
        top_shape = b0.shape[:self.channel_axis] + (self.num_output,) + tuple(self.out_shape)
        for t in top:
            t.reshape(top_shape)
        if self.reverse:  # the image is the top, the window grid is the bottom
            self.cols.configure(self.num_output, self.out_shape, self.in_shape)
        else:
            self.cols.configure(self.channels, self.in_shape, self.out_shape)
        self._choose_algorithm()

    def _choose_algorithm(self):
        """How the GEMMs run for this shape, decided once per reshape (deterministically, so
        every run sums in the same order): one GEMM over as many images as the column buffer
        cap allows, whose batch-innermost columns make a wide product that keeps BLAS busy
        (a Convolution whose one image's products are wide enough runs them image by image:
        convolution.py). A 1x1 convolution (stride 1, no pad) needs no im2col: its columns are
        the input itself (one image) or its transpose."""
        self.pointwise = (not self.reverse and all(k == 1 for k in self.kernel)
                          and all(s == 1 for s in self.stride) and not any(self.pad))
        self.chunk = max(1, min(self.num, COL_CHUNK_ELEMENTS // max(self._image_columns(), 1)))
        # the columns of the last forward stay valid for the weight gradient
        self._cached = False

    def _image_columns(self):
        """Values of one image's columns, every group's."""
        return self.kernel_dim * self.group * prod(self.cols.grid_shape)

    def _conv_jit_takes(self):
        """Whether kernels/conv_jit.py can run this layer image by image: 2-D, compiled
        kernels, and an OpenBLAS whose threads can be held to one."""
        return jit.INSTALLED and self.num_spatial == 2 and blas_threads.available()

    def _images_pay(self):
        """Whether this layer's products run image by image (``_conv_jit_takes``): a narrow
        kernel over a small grid. The same arithmetic as Caffe's per-image GEMMs (``engine:
        CAFFE`` too)."""
        return (self.kernel_dim <= IMAGE_MAX_INNER
                and self.kernel_dim * prod(self.cols.grid_shape) <= IMAGE_MAX_COLUMNS
                and self._conv_jit_takes())

    def _geometry(self):
        """kernel, stride, dilation, pad: conv_jit's geometry arguments."""
        return self.kernel, self.stride, self.dilation, self.pad

    def _chunks(self):
        for n0 in range(0, self.num, self.chunk):
            yield n0, min(self.num, n0 + self.chunk)

    def _channels_first(self, x, n0, n1, name, bias_diff=None):
        """Images n0..n1 of x (n, c, *spatial) as a (g, c/g, nb * P) stack, image-major within
        each channel, in the scratch buffer ``name`` (a chunk's GEMM operand); channels split
        across threads. With ``bias_diff`` (c,): x's bias gradient added to it in the same pass
        (Caffe's gemv order, kernels/caffe_blas.gemv_rows)."""
        nb, c = n1 - n0, x.shape[1]
        out = self.scratch(name, (self.group, c // self.group, nb * x[0, 0].size), x.dtype)
        if bias_diff is not None:
            gemv_rows(self.xp, x[n0:n1].reshape(nb, c, -1), bias_diff, out.reshape(c, nb, -1))
            return out
        src, dst = x[n0:n1].reshape(nb, c, -1).transpose(1, 0, 2), out.reshape(c, nb, -1)
        for_parts(self.xp, lambda c0, c1: dst[c0:c1].__setitem__(Ellipsis, src[c0:c1]), c,
                  out.size)
        return out

    def _images_first(self, stack, dst, bias=None):
        """dst (nb, c, *spatial) = a (.., nb * P) stack of ``_channels_first``'s layout, plus
        ``bias`` per channel in the same pass where given (one rounding, as adding it after);
        channels split across threads; compiled for host arrays (channel_jit.split_images_first)."""
        nb, c = dst.shape[:2]
        src, out = stack.reshape(c, nb, -1), dst.reshape(nb, c, -1).transpose(1, 0, 2)
        if jit.usable(stack, dst, *(() if bias is None else (bias,))):
            channel_jit.split_images_first(src, bias, dst.reshape(nb, c, -1))
            return

        def part(c0, c1):
            if bias is None:
                out[c0:c1] = src[c0:c1]
            else:
                self.xp.add(src[c0:c1], bias[c0:c1, None, None], out=out[c0:c1])
        for_parts(self.xp, part, c, dst.size)

    def _grouped_weight(self):
        g = self.group
        return self.weights[0].data.reshape(g, self.conv_out // g, self.kernel_dim)

    def _bias_in_move(self, dy):
        """Whether the backward's move of dy (num, num_output, P) to the channels-first layout
        adds the bias gradient as it copies: one chunk of several host images and the compiled
        kernels (else ``_bias_grad``)."""
        return bool(self.bias_term and self.param_propagate_down[1] and 1 < self.num <= self.chunk
                    and jit.usable(dy, self.weights[1].diff))

    def _bias_grad(self, dy):
        """Add the bias gradient of dy (num, num_output, P): Caffe's gemv of each image's rows
        against ones into the diff, image after image (kernels/caffe_blas.gemv_rows: one device
        kernel, or OpenBLAS's order on the host)."""
        if self.bias_term and self.param_propagate_down[1]:
            gemv_rows(self.xp, dy, self.weights[1].diff)
