"""Split: hands one bottom to several tops (shared data); backward sums the top diffs."""
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
        d = bottom[0].diff
        if len(top) == 1:
            d[...] = top[0].diff
            return
        self.xp.add(top[0].diff, top[1].diff, out=d)  # Caffe's copy + axpy, in one pass
        for t in top[2:]:
            d += t.diff
