// Each solver's whole update of one parameter in one pass (Caffe's *_solver.cu fuse only the
// update value): the gradient normalized by iter_size, regularized, turned into the update
// value (left in diff, as Caffe leaves it), and applied (data -= diff). The arithmetic is the
// host solvers' (solvers/sgd.py, solvers/adaptive.py) operation by operation, with Caffe's
// float hyper-parameters; the rate (and Adam's bias correction) are device scalars, so a
// captured graph reads the values refilled before each replay.

// the gradient times 1 / iter_size, plus the L2 (reg 2) or L1 (reg 1) decay term
__device__ __forceinline__ real regularized(const real g, const real w, const float norm,
                                            const int reg, const float decay) {
  const real scaled = g * (real)norm;
  if (reg == 2) return scaled + (real)decay * w;
  if (reg == 1) return scaled + (real)decay * (real)((w > 0) - (w < 0));
  return scaled;
}

// the update value u left in diff (as Caffe leaves it) and applied: data -= u
__device__ __forceinline__ void apply_update(real* data, real* diff, const int i, const real u) {
  diff[i] = u;
  data[i] = data[i] - u;
}

extern "C" __global__ void sgd_update(
    const int total, real* __restrict__ data, real* __restrict__ diff, real* __restrict__ h,
    const float* __restrict__ rate, const float lr_mult, const float norm, const int reg,
    const float decay, const float momentum) {
  FOR_EACH(i, total) {
    const real g = regularized(diff[i], data[i], norm, reg, decay);
    const real v = h[i] * (real)momentum + (real)(rate[0] * lr_mult) * g;
    h[i] = v;
    apply_update(data, diff, i, v);
  }
}

extern "C" __global__ void nesterov_update(
    const int total, real* __restrict__ data, real* __restrict__ diff, real* __restrict__ h,
    const float* __restrict__ rate, const float lr_mult, const float norm, const int reg,
    const float decay, const float momentum) {
  FOR_EACH(i, total) {
    const real g = regularized(diff[i], data[i], norm, reg, decay);
    const real previous = h[i];
    const real v = previous * (real)momentum + (real)(rate[0] * lr_mult) * g;
    h[i] = v;
    const real u = (real)(1.0f + momentum) * v - (real)momentum * previous;
    apply_update(data, diff, i, u);
  }
}

extern "C" __global__ void adagrad_update(
    const int total, real* __restrict__ data, real* __restrict__ diff, real* __restrict__ h,
    const float* __restrict__ rate, const float lr_mult, const float norm, const int reg,
    const float decay, const float delta) {
  FOR_EACH(i, total) {
    const real g = regularized(diff[i], data[i], norm, reg, decay);
    const real hist = h[i] + g * g;
    h[i] = hist;
    const real u = (real)(rate[0] * lr_mult) * (g / (sqrt(hist) + (real)delta));
    apply_update(data, diff, i, u);
  }
}

extern "C" __global__ void rmsprop_update(
    const int total, real* __restrict__ data, real* __restrict__ diff, real* __restrict__ h,
    const float* __restrict__ rate, const float lr_mult, const float norm, const int reg,
    const float decay, const float rms_decay, const float delta) {
  FOR_EACH(i, total) {
    const real g = regularized(diff[i], data[i], norm, reg, decay);
    const real hist = h[i] * (real)rms_decay + (real)(1.0f - rms_decay) * (g * g);
    h[i] = hist;
    const real u = (real)(rate[0] * lr_mult) * (g / (sqrt(hist) + (real)delta));
    apply_update(data, diff, i, u);
  }
}

// history h: the squared gradients' average; h2: the squared updates'
extern "C" __global__ void adadelta_update(
    const int total, real* __restrict__ data, real* __restrict__ diff, real* __restrict__ h,
    real* __restrict__ h2, const float* __restrict__ rate, const float lr_mult,
    const float norm, const int reg, const float decay, const float momentum,
    const float delta) {
  FOR_EACH(i, total) {
    const real g = regularized(diff[i], data[i], norm, reg, decay);
    const real keep = (real)momentum, mix = (real)(1.0f - momentum);
    const real grads = h[i] * keep + mix * (g * g);
    h[i] = grads;
    const real step = g * sqrt((h2[i] + (real)delta) / (grads + (real)delta));
    h2[i] = h2[i] * keep + mix * (step * step);
    const real u = step * (real)(rate[0] * lr_mult);
    apply_update(data, diff, i, u);
  }
}

// m, v: the moving averages of the gradient and its square
extern "C" __global__ void adam_update(
    const int total, real* __restrict__ data, real* __restrict__ diff, real* __restrict__ m,
    real* __restrict__ v, const float* __restrict__ rate, const float* __restrict__ correction,
    const float lr_mult, const float norm, const int reg, const float decay, const float beta1,
    const float beta2, const float delta) {
  FOR_EACH(i, total) {
    const real g = regularized(diff[i], data[i], norm, reg, decay);
    const real mean = m[i] * (real)beta1 + (real)(1.0f - beta1) * g;
    const real square = v[i] * (real)beta2 + (real)(1.0f - beta2) * (g * g);
    m[i] = mean;
    v[i] = square;
    const real step = (real)(rate[0] * lr_mult * correction[0]);
    const real u = step * (mean / (sqrt(square) + (real)delta));
    apply_update(data, diff, i, u);
  }
}
