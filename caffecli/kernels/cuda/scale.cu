// Scale's forward in one pass (Caffe's scale_layer.cu): y = x * scale[d] (+ bias[d]) over
// (outer, dim, inner) data, d the element's index along dim; when the layer runs in place,
// x is kept in copy for the scale's gradient. x and y may be one array.

extern "C" __global__ void scale_forward(
    const int total, const real* x, const real* __restrict__ scale,
    const real* __restrict__ bias, const int has_bias, const int dim, const int inner,
    const int keep_input, real* __restrict__ copy, real* y) {
  FOR_EACH(i, total) {
    const int d = (i / inner) % dim;
    const real v = x[i];
    if (keep_input) copy[i] = v;
    const real scaled = v * scale[d];
    y[i] = has_bias ? scaled + bias[d] : scaled;
  }
}
