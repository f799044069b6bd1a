// BatchNorm (Caffe's batch_norm_layer.cu) over (num, channels, spatial) data, in the host
// layer's arithmetic (layers/batch_norm.py). With global statistics one pass normalizes:
// mean and variance are the stored sums times 1 / the stored scale factor (0 for 0, rounded
// from double as Caffe's host Dtype), and image 0 leaves each channel's std for the backward.
// With batch statistics the reductions stay array code; one thread per channel updates the
// running sums and the std, then one pass divides the centered data.

extern "C" __global__ void batch_norm_global_forward(
    const int total, const real* x, const real* __restrict__ mean_sum,
    const real* __restrict__ var_sum, const real* __restrict__ factor_sum, const int channels,
    const int spatial, const real eps, real* y, real* __restrict__ std) {
  FOR_EACH(i, total) {
    const int c = (i / spatial) % channels;
    const double s = (double)factor_sum[0];
    const real factor = s != 0 ? (real)(1.0 / s) : (real)0;
    const real sd = sqrt(var_sum[c] * factor + eps);
    y[i] = (x[i] - mean_sum[c] * factor) / sd;
    if (i < channels * spatial && i % spatial == 0) std[c] = sd;
  }
}

extern "C" __global__ void batch_norm_running_stats(
    const int total, const real* __restrict__ mean, const real* __restrict__ var,
    const real moving_average_fraction, const real correction, const real eps,
    real* __restrict__ mean_sum, real* __restrict__ var_sum, real* __restrict__ factor_sum,
    real* __restrict__ std) {
  FOR_EACH(c, total) {
    const real keep = moving_average_fraction;
    if (c == 0) factor_sum[0] = factor_sum[0] * keep + (real)1;
    mean_sum[c] = mean[c] + mean_sum[c] * keep;
    var_sum[c] = var[c] * correction + var_sum[c] * keep;
    std[c] = sqrt(var[c] + eps);
  }
}

// x_norm = centered / std (in place when they are one array), and y = x_norm
extern "C" __global__ void batch_norm_normalize(
    const int total, const real* centered, const real* __restrict__ std, const int channels,
    const int spatial, real* x_norm, real* y) {
  FOR_EACH(i, total) {
    const real v = centered[i] / std[(i / spatial) % channels];
    x_norm[i] = v;
    y[i] = v;
  }
}
