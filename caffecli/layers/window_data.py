"""WindowData: R-CNN style foreground/background windows, prefetched (window_data_layer.cpp)."""
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
        p = self.layer_param.window_data_param
        source = WindowSource(p, self.layer_param.transform_param, dtype,
                              what="Layer %s (WindowData)" % self.name)
        glog.info("window_data.images", "Number of images: %d" % len(source.images))
        return source
