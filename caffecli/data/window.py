"""WindowData's source (Caffe's window_data_layer.cpp): foreground/background windows cut
from images, with context padding, warp or square crops, mirroring and mean subtraction.

Window file: blocks of ``# image_index`` / path / channels / height / width / num_windows,
then one ``label overlap x1 y1 x2 y2`` line per window.
"""
import numpy

from .. import context
from ..errors import CaffeError
from . import image_io, workers
from .transformer import load_mean_file

F32 = numpy.float32


def c_round(x):
    """C's round(): halves away from zero."""
    x = float(x)
    return int(numpy.floor(x + 0.5)) if x >= 0 else -int(numpy.floor(-x + 0.5))


def read_window_file(path, root_folder, fg_threshold, bg_threshold):
    """(images, fg_windows, bg_windows, summary): images are (path, (c, h, w)); windows are
    tuples (image_index, label, overlap, x1, y1, x2, y2); summary holds what Caffe's set-up
    logs beyond the windows: the last image index and the images whose index is a multiple of
    100 (index, path, size, windows)."""
    try:
        with open(path) as f:
            tokens = f.read().split()
    except OSError:
        raise CaffeError("%s: failed to open window file" % path) from None
    if len(tokens) < 2:
        raise CaffeError("%s: window file is empty" % path)
    images, fg, bg = [], [], []
    summary = {"last_index": -1, "hundreds": []}
    i = 0
    try:
        while i + 1 < len(tokens):
            if tokens[i] != "#":
                raise CaffeError("%s: expected '#' at token %d, found %r" % (path, i, tokens[i]))
            image_index = int(tokens[i + 1])
            image_path = root_folder + tokens[i + 2]
            size = tuple(int(t) for t in tokens[i + 3:i + 6])
            num = int(tokens[i + 6])
            i += 7
            images.append((image_path, size))
            summary["last_index"] = image_index
            if image_index % 100 == 0:
                summary["hundreds"].append((image_index, image_path, size, num))
            for _ in range(num):
                label, overlap = int(tokens[i]), float(tokens[i + 1])
                x1, y1, x2, y2 = (int(t) for t in tokens[i + 2:i + 6])
                i += 6
                overlap32 = F32(overlap)
                if overlap32 >= F32(fg_threshold):
                    if label <= 0:
                        raise CaffeError("%s: foreground window of image %d has label %d "
                                         "(must be > 0)" % (path, image_index, label))
                    fg.append((image_index, label, overlap, x1, y1, x2, y2))
                elif overlap32 < F32(bg_threshold):
                    bg.append((image_index, 0, 0.0, x1, y1, x2, y2))
    except (ValueError, IndexError):
        raise CaffeError("%s: malformed window file near token %d" % (path, i)) from None
    return images, fg, bg, summary


class WindowSource:
    """Samples batch_size windows per batch: background first, then fg_fraction foreground."""

    def __init__(self, param, transform_param, dtype, what="WindowData"):
        self.what = what
        self.dtype = dtype
        self.batch_size = int(param.batch_size)
        if self.batch_size <= 0:
            raise CaffeError("%s: batch_size must be positive" % what)
        self.images, self.fg, self.bg, self.summary = read_window_file(
            param.source, param.root_folder, param.fg_threshold, param.bg_threshold)
        self.channels = self.images[-1][1][0]
        self.crop_size = int(transform_param.crop_size)
        if self.crop_size <= 0:
            raise CaffeError("%s: transform_param.crop_size must be positive" % what)
        self.mirror = bool(transform_param.mirror)
        self.scale = F32(param.scale)
        self.context_pad = int(param.context_pad)
        self.square = param.crop_mode == "square"
        self.fg_fraction = F32(param.fg_fraction)
        self.cache = {}
        if param.cache_images:
            for path, _ in self.images:
                with open(path, "rb") as f:
                    self.cache[path] = f.read()
        self.mean = None
        self.mean_values = [float(v) for v in transform_param.mean_value]
        if transform_param.HasField("mean_file"):
            if self.mean_values:
                raise CaffeError("%s: cannot specify mean_file and mean_value at the same time"
                                 % what)
            self.mean = load_mean_file(transform_param.mean_file)
        if self.mean_values and len(self.mean_values) not in (1, self.channels):
            raise CaffeError("%s: specify either 1 mean_value or as many as channels: %d"
                             % (what, self.channels))
        self.rng = context.rng().child()     # Caffe's prefetch_rng_

    def first_shape(self):
        return (1, self.channels, self.crop_size, self.crop_size)

    def _rand(self):
        return self.rng.rand()

    def _image(self, path):
        if path in self.cache:
            return image_io.decode(self.cache[path], image_io.COLOR, what=path)
        return image_io.read_image(path, is_color=True)

    def _geometry(self, x1, y1, x2, y2, rows, cols, do_mirror):
        """Context-padded crop box, the resized size and its offset in the output square."""
        crop = self.crop_size
        size_w = size_h = crop
        pad_w = pad_h = 0
        if self.context_pad > 0 or self.square:
            context_scale = F32(crop) / F32(crop - 2 * self.context_pad)
            half_h = F32(y2 - y1 + 1) / F32(2.0)
            half_w = F32(x2 - x1 + 1) / F32(2.0)
            cx, cy = F32(x1) + half_w, F32(y1) + half_h
            if self.square:
                half_h = half_w = max(half_h, half_w)
            x1 = c_round(cx - half_w * context_scale)
            x2 = c_round(cx + half_w * context_scale)
            y1 = c_round(cy - half_h * context_scale)
            y2 = c_round(cy + half_h * context_scale)
            unclipped_h, unclipped_w = y2 - y1 + 1, x2 - x1 + 1
            px1, py1 = max(0, -x1), max(0, -y1)
            px2, py2 = max(0, x2 - cols + 1), max(0, y2 - rows + 1)
            x1, x2, y1, y2 = x1 + px1, x2 - px2, y1 + py1, y2 - py2
            if x1 < 0 or y1 < 0 or x2 >= cols or y2 >= rows:
                raise CaffeError("%s: window outside its image" % self.what)
            sx, sy = F32(crop) / F32(unclipped_w), F32(crop) / F32(unclipped_h)
            size_w = c_round(F32(x2 - x1 + 1) * sx)
            size_h = c_round(F32(y2 - y1 + 1) * sy)
            px1, px2 = c_round(F32(px1) * sx), c_round(F32(px2) * sx)
            py1 = c_round(F32(py1) * sy)
            pad_h = py1
            pad_w = px2 if do_mirror else px1
            size_h = min(size_h, crop - pad_h)
            size_w = min(size_w, crop - pad_w)
        return (x1, y1, x2, y2), (size_h, size_w), (pad_h, pad_w)

    def next_batch(self):
        """The next batch: its windows and mirror coins drawn in Caffe's order (background
        first), then each window's crop made on the data threads."""
        if not self.fg or not self.bg:
            raise CaffeError("%s: need both foreground (%d) and background (%d) windows"
                             % (self.what, len(self.fg), len(self.bg)))
        crop, c = self.crop_size, self.channels
        out = numpy.zeros((self.batch_size, c, crop, crop), dtype=self.dtype)
        labels = numpy.zeros(self.batch_size, dtype=self.dtype)
        num_fg = int(F32(self.batch_size) * self.fg_fraction)
        drawn = []
        for pool, count in ((self.bg, self.batch_size - num_fg), (self.fg, num_fg)):
            for _ in range(count):
                window = pool[self._rand() % len(pool)]
                do_mirror = self.mirror and self._rand() % 2 == 1
                index = window[0]
                if not 0 <= index < len(self.images):
                    raise CaffeError("%s: window refers to image %d of %d"
                                     % (self.what, index, len(self.images)))
                labels[len(drawn)] = window[1]
                drawn.append((window, do_mirror, out[len(drawn)]))
        workers.map_items(lambda job: self._crop(*job), drawn)
        return [out, labels], self.get_state()

    def _crop(self, window, do_mirror, out):
        """out (C, crop, crop) = ``window``'s context-padded crop of its image, warped to
        the crop size, mirrored when asked, less the mean, scaled."""
        c = self.channels
        img = self._image(self.images[window[0]][0])
        (x1, y1, x2, y2), (sh, sw), (ph, pw) = self._geometry(
            *window[3:], img.shape[0], img.shape[1], do_mirror)
        patch = image_io.resize(img[y1:y2 + 1, x1:x2 + 1], sh, sw)
        if do_mirror:
            patch = patch[:, ::-1]
        chw = image_io.to_chw(patch).astype(self.dtype)
        if self.mean is not None:
            off = (self.mean.shape[2] - self.crop_size) // 2
            mean = self.mean[:c, off + ph:off + ph + sh, off + pw:off + pw + sw]
            chw = chw - mean.astype(self.dtype)
        elif self.mean_values:
            mv = numpy.resize(numpy.asarray(self.mean_values, dtype=self.dtype), c)
            chw = chw - mv[:, None, None]
        out[:, ph:ph + sh, pw:pw + sw] = chw * self.dtype.type(self.scale)

    def get_state(self):
        return {"rng": self.rng.state}

    def set_state(self, state):
        self.rng.state = state["rng"]

    def close(self):
        pass
