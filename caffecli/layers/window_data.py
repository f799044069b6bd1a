"""WindowData: R-CNN style foreground/background windows, prefetched (window_data_layer.cpp)."""
import collections

from .. import glog
from ..data.window import WindowSource
from ..registry import register_layer
from ._prefetching import PrefetchingDataLayer


@register_layer("WindowData")
class WindowDataLayer(PrefetchingDataLayer):
    exact_num_top_blobs = 2
    min_top_blobs = -1
    max_top_blobs = -1
    log_where = "window_data.output_size"

    def make_source(self, top, dtype):
        """The windows, with the lines Caffe's DataLayerSetUp logs about them."""
        p = self.layer_param.window_data_param
        glog.info("window_data.params", "Window data layer:\n"
                  "  foreground (object) overlap threshold: %s\n"
                  "  background (non-object) overlap threshold: %s\n"
                  "  foreground sampling fraction: %s\n  cache_images: %d\n  root_folder: %s"
                  % (glog.fmt(p.fg_threshold), glog.fmt(p.bg_threshold),
                     glog.fmt(p.fg_fraction), p.cache_images, p.root_folder))
        source = WindowSource(p, self.layer_param.transform_param, dtype,
                              what="Layer %s (WindowData)" % self.name)
        summary = source.summary
        for index, path, (c, h, w), num in summary["hundreds"]:
            glog.info("window_data.num", "num: %d %s %d %d %d windows to process: %d"
                      % (index, path, c, h, w, num))
        glog.info("window_data.images", "Number of images: %d" % (summary["last_index"] + 1))
        samples = collections.Counter(window[1] for window in source.fg)
        samples[0] = len(source.bg)     # Caffe's histogram starts with class 0 (background)
        for label in sorted(samples):
            glog.info("window_data.class", "class %d has %d samples" % (label, samples[label]))
        glog.info("window_data.context_pad", "Amount of context padding: %d" % p.context_pad)
        glog.info("window_data.crop_mode", "Crop mode: " + p.crop_mode)
        return source

    def setup(self, bottom, top):
        super().setup(bottom, top)
        tp = self.layer_param.transform_param
        if tp.HasField("mean_file"):   # Caffe's layer loads it again after the transformer
            glog.info("window_data.mean_file", "Loading mean file from: " + tp.mean_file)
