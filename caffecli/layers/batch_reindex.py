"""BatchReindex: top[i] = bottom[0][index[i]] along the first axis (Caffe's batch_reindex_layer)."""

from ..kernels.indexing import checked_indices, scatter_add
from ..layer import Layer
from ..registry import register_layer


@register_layer("BatchReindex")
class BatchReindexLayer(Layer):
    """top[i] = bottom[0][index[i]] along the first axis; backward sums repeated picks."""

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        if bottom[1].num_axes != 1:
            raise self.error("the index bottom must have 1 axis, got shape %s"
                             % bottom[1].shape_string())
        if bottom[0].num_axes < 1:
            raise self.error("the data bottom needs at least 1 axis")
        top[0].reshape((bottom[1].shape[0],) + tuple(bottom[0].shape[1:]))

    def forward(self, bottom, top):
        idx = checked_indices(self, self.xp, bottom[1].data, bottom[0].shape[0],
                              check_values=True)
        if top[0].count == 0:
            return
        top[0].data[...] = bottom[0].data[idx]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("Cannot backprop to index.")
        if not propagate_down[0]:
            return
        grad = bottom[0].diff
        grad[...] = 0
        if top[0].count:
            scatter_add(self.xp, grad, bottom[1].data.astype(self.xp.int64), top[0].diff)
