// Per-channel sums over (outer, channels, inner) data, of x or of x * y, into out (added, or
// written): the bias gradients of Convolution, Deconvolution, InnerProduct and Bias, as Caffe's
// gemv with a vector of ones, and Scale's gradient (the sums of dy * x). One block per channel,
// deterministic.

extern "C" __global__ void channel_sums(
    const int total, const real* __restrict__ x, const real* __restrict__ y, const int times_y,
    const int outer, const int inner, const int accumulate, real* __restrict__ out) {
  __shared__ double partial[CAFFECLI_THREADS];
  const int count = outer * inner;
  for (int c = blockIdx.x; c < total; c += gridDim.x) {
    double s = 0;
    for (int j = threadIdx.x; j < count; j += blockDim.x) {
      const int o = j / inner, i = j - o * inner;
      const int at = (o * total + c) * inner + i;
      s += times_y ? (double)(x[at] * y[at]) : (double)x[at];
    }
    s = block_sum(partial, s);
    if (threadIdx.x == 0) out[c] = accumulate ? out[c] + (real)s : (real)s;
  }
}

// Scale's whole backward (a learned scale, and its bias) in one pass over dy, a block per
// channel: the sums of dy (into the bias's diff, added) and of dy * x (into the scale's, added
// or written), and dx = dy * scale; dx may be dy (in place: each element is read, then written,
// by one thread).
extern "C" __global__ void scale_backward(
    const int total, const real* dy, const real* __restrict__ x, const real* __restrict__ scale,
    const int outer, const int inner, const int has_bias, const int accumulate,
    real* __restrict__ bias_diff, real* __restrict__ scale_diff, real* dx) {
  __shared__ double partial[CAFFECLI_THREADS];
  const int count = outer * inner;
  for (int c = blockIdx.x; c < total; c += gridDim.x) {
    double s = 0, b = 0;
    for (int j = threadIdx.x; j < count; j += blockDim.x) {
      const int o = j / inner, i = j - o * inner;
      const int at = (o * total + c) * inner + i;
      const real g = dy[at];
      b += (double)g;
      s += (double)(g * x[at]);
      dx[at] = g * scale[c];
    }
    s = block_sum(partial, s);
    b = block_sum(partial, b);
    if (threadIdx.x == 0) {
      scale_diff[c] = accumulate ? scale_diff[c] + (real)s : (real)s;
      if (has_bias) bias_diff[c] += (real)b;
    }
  }
}
