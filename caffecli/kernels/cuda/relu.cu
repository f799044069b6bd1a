// ReLU (Caffe's relu_layer.cu): y = x where x > 0, else negative_slope * x (NaN stays NaN);
// dx = dy * ((x > 0) + (x <= 0) * negative_slope), 0 where x is NaN as in Caffe. In place,
// x is the top's data, which has the input's signs. The arrays may be one.

extern "C" __global__ void relu_forward(const int total, const real* x, const real slope,
                                        real* y) {
  FOR_EACH(i, total) {
    const real v = x[i];
    y[i] = v > 0 ? v : v * slope;
  }
}

extern "C" __global__ void relu_backward(const int total, const real* x, const real* dy,
                                         const real slope, real* dx) {
  FOR_EACH(i, total) {
    const real v = x[i];
    dx[i] = dy[i] * ((real)(v > 0) + (real)(v <= 0) * slope);
  }
}
