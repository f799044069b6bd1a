// Cross-channel LRN (Caffe's lrn_layer.cu): one thread per (image, row, column) runs along the
// channels with a sliding window sum, in the order of the host's compiled kernel
// (kernels/lrn_jit.py). scale = k + alpha / size * (window sum of x^2); y = x * scale^-beta.

extern "C" __global__ void lrn_forward(
    const int total, const real* __restrict__ x, const int channels, const int plane,
    const int size, const real alpha_over_size, const real k, const real neg_beta,
    real* __restrict__ scale, real* __restrict__ y) {
  FOR_EACH(i, total) {
    const int img = i / plane, at = i % plane;
    const int pre = (size - 1) / 2;
    const int first = img * channels * plane + at;  // channel 0 of this column
    real s = k;
    for (int c = 0; c < min(size - pre, channels); ++c) {
      const real v = x[first + c * plane];
      s += v * v * alpha_over_size;
    }
    scale[first] = s;
    for (int c = 1; c < channels; ++c) {
      const int head = c + size - 1 - pre, tail = c - 1 - pre;
      if (head < channels) {
        const real v = x[first + head * plane];
        s += v * v * alpha_over_size;
      }
      if (tail >= 0) {
        const real v = x[first + tail * plane];
        s -= v * v * alpha_over_size;
      }
      scale[first + c * plane] = s;
    }
    for (int c = 0; c < channels; ++c) {
      const int o = first + c * plane;
      y[o] = x[o] * pow(scale[o], neg_beta);
    }
  }
}

// dx = dy * scale^-beta - 2 alpha beta / size * x * (window sum of dy * y / scale)
extern "C" __global__ void lrn_backward(
    const int total, const real* __restrict__ x, const real* __restrict__ y,
    const real* __restrict__ dy, const real* __restrict__ scale, const int channels,
    const int plane, const int size, const real neg_beta, const real ratio_coef,
    real* __restrict__ dx) {
  FOR_EACH(i, total) {
    const int img = i / plane, at = i % plane;
    const int pre = (size - 1) / 2;
    const int first = img * channels * plane + at;
    real accum = 0;
    for (int c = 0; c < min(size - 1 - pre, channels); ++c) {
      const int o = first + c * plane;
      accum += dy[o] * y[o] / scale[o];
    }
    for (int c = 0; c < channels; ++c) {
      const int head = c + size - 1 - pre, tail = c - pre;
      if (head < channels) {
        const int o = first + head * plane;
        accum += dy[o] * y[o] / scale[o];
      }
      const int o = first + c * plane;
      dx[o] = pow(scale[o], neg_beta) * dy[o] - ratio_coef * (x[o] * accum);
      if (tail >= 0) {
        const int t = first + tail * plane;
        accum -= dy[t] * y[t] / scale[t];
      }
    }
  }
}
