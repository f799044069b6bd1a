"""Split: hands one bottom to several tops (shared data); backward sums the top diffs."""
from ..kernels.threads import split_copy, split_sum
from ..layer import Layer
from ..registry import register_layer


@register_layer("Split")
class SplitLayer(Layer):
    exact_num_bottom_blobs = 1
    min_top_blobs = 1

    def tops_alias_bottom(self, bottom_count, top_count):
        return True

    def reshape(self, bottom, top):
        for t in top:
            if t is bottom[0]:
                raise self.error("does not allow in-place computation")
            t.reshape_like(bottom[0])
            t.share_data(bottom[0])

    def forward(self, bottom, top):
        pass  # tops share the bottom's data

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        d = bottom[0].diff.reshape(-1)
        if len(top) == 1:
            split_copy(self.xp, d.reshape(1, -1), top[0].diff.reshape(1, -1))
            return
        # Caffe's copy + axpys, in one pass a part, the parts on every core
        split_sum(self.xp, [t.diff.reshape(-1) for t in top], d)
