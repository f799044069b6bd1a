"""Crop: cut bottom[0] to bottom[1]'s shape from ``axis`` on, at the given offsets."""
from ..layer import Layer
from ..registry import register_layer


@register_layer("Crop")
class CropLayer(Layer):
    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.crop_param
        dims = bottom[0].num_axes
        start = bottom[0].canonical_axis_index(p.axis)
        if len(p.offset) > 1 and start + len(p.offset) != dims:
            raise self.error("number of offset values specified must be equal to the number "
                             "of dimensions following axis (axis %d, %d offsets, bottom %s)"
                             % (start, len(p.offset), bottom[0].shape_string()))

    def reshape(self, bottom, top):
        p = self.layer_param.crop_param
        b0, b1 = bottom
        start = b0.canonical_axis_index(p.axis)
        if b1.num_axes < b0.num_axes:
            raise self.error("the shape bottom %s has fewer axes than the data bottom %s"
                             % (b1.shape_string(), b0.shape_string()))
        shape, self.slices = [], []
        for i, size in enumerate(b0.shape):
            offset, new = 0, size
            if i >= start:
                new = b1.shape[i]
                if len(p.offset) == 1:
                    offset = p.offset[0]
                elif len(p.offset) > 1:
                    offset = p.offset[i - start]
                if size - offset < new:
                    raise self.error("the crop for dimension %d is out-of-bounds with size %d "
                                     "and offset %d (data %s, shape %s)"
                                     % (i, new, offset, b0.shape_string(), b1.shape_string()))
            shape.append(new)
            self.slices.append(slice(offset, offset + new))
        self.slices = tuple(self.slices)
        top[0].reshape(shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data[self.slices]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = 0
            bottom[0].diff[self.slices] = top[0].diff
