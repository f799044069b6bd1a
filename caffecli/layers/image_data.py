"""ImageData: the images an image list names, decoded by OpenCV and prefetched (Caffe's
image_data_layer), dealt among data-parallel ranks in TRAIN as Data's records are."""
from .. import context, glog
from ..data.sources import ImageListSource, read_image_list
from ..proto import caffe_pb2
from ..registry import register_layer
from ._prefetching import PrefetchingDataLayer


@register_layer("ImageData")
class ImageDataLayer(PrefetchingDataLayer):
    """Images listed in ``image_data_param.source`` ("path label" lines), decoded by OpenCV."""

    exact_num_top_blobs = 2
    min_top_blobs = -1
    max_top_blobs = -1
    log_where = "image_data.output_size"

    def make_source(self, top, dtype):
        p = self.layer_param.image_data_param
        glog.info("image_data.opening", "Opening file " + p.source)
        lines = read_image_list(p.source)
        if p.shuffle:
            glog.info("image_data.shuffling", "Shuffling data")
        glog.info("image_data.images", "A total of %d images." % len(lines))
        return ImageListSource(lines, p.root_folder, p.batch_size, self.transformer, dtype,
                               new_height=p.new_height, new_width=p.new_width,
                               is_color=p.is_color, shuffle=p.shuffle, rand_skip=p.rand_skip,
                               what="Layer %s (ImageData)" % self.name,
                               share=context.data_share(self.phase == caffe_pb2.TRAIN))
