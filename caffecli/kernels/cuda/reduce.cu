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
