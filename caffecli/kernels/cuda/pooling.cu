// MAX and AVE pooling of (n, C, h, w) maps, with Caffe's windows (pooling_layer.cu): a window
// starts at p * stride - pad; MAX's first maximum wins (arg: its kernel offset, -1 for an
// empty window; mask, when asked, Caffe's h * W + w); AVE divides by the window clipped to the
// padded map. The backwards gather, per input pixel, the windows that cover it.

// the windows [first, last) along one axis that cover input position at: those p with
// p * stride - pad <= at < p * stride - pad + kernel, p < out
__device__ __forceinline__ void covering(const int at, const int pad, const int kernel,
                                         const int stride, const int out, int* first,
                                         int* last) {
  *first = (at + pad < kernel) ? 0 : (at + pad - kernel) / stride + 1;
  *last = min((at + pad) / stride + 1, out);
}

extern "C" __global__ void max_pool_forward(
    const int total, const real* __restrict__ x, const int height, const int width,
    const int oh, const int ow, const int kh, const int kw, const int stride_h,
    const int stride_w, const int pad_h, const int pad_w, real* __restrict__ top,
    int* __restrict__ arg, const int write_mask, real* __restrict__ mask) {
  FOR_EACH(i, total) {
    const int q = i % ow;
    const int p = (i / ow) % oh;
    const int map = i / (ow * oh);
    const int y0 = p * stride_h - pad_h, x0 = q * stride_w - pad_w;
    const real* in = x + map * height * width;
    real best = -CAFFECLI_FLT_MAX;
    int won = -1, at = -1;
    for (int a = max(y0, 0); a < min(y0 + kh, height); ++a) {
      for (int b = max(x0, 0); b < min(x0 + kw, width); ++b) {
        if (in[a * width + b] > best) {
          best = in[a * width + b];
          won = (a - y0) * kw + (b - x0);
          at = a * width + b;
        }
      }
    }
    top[i] = best;
    arg[i] = won;
    if (write_mask) mask[i] = (real)at;
  }
}

extern "C" __global__ void max_pool_backward(
    const int total, const real* __restrict__ dtop, const int* __restrict__ arg,
    const int height, const int width, const int oh, const int ow, const int kh, const int kw,
    const int stride_h, const int stride_w, const int pad_h, const int pad_w,
    real* __restrict__ dx) {
  FOR_EACH(i, total) {
    const int w = i % width;
    const int h = (i / width) % height;
    const int map = i / (width * height);
    int p0, p1, q0, q1;
    covering(h, pad_h, kh, stride_h, oh, &p0, &p1);
    covering(w, pad_w, kw, stride_w, ow, &q0, &q1);
    const int base = map * oh * ow;
    real sum = 0;
    for (int p = p0; p < p1; ++p) {
      for (int q = q0; q < q1; ++q) {
        const int offset = (h - (p * stride_h - pad_h)) * kw + (w - (q * stride_w - pad_w));
        if (arg[base + p * ow + q] == offset) sum += dtop[base + p * ow + q];
      }
    }
    dx[i] = sum;
  }
}

extern "C" __global__ void ave_pool_forward(
    const int total, const real* __restrict__ x, const int height, const int width,
    const int oh, const int ow, const int kh, const int kw, const int stride_h,
    const int stride_w, const int pad_h, const int pad_w, real* __restrict__ top) {
  FOR_EACH(i, total) {
    const int q = i % ow;
    const int p = (i / ow) % oh;
    const int map = i / (ow * oh);
    const int y0 = p * stride_h - pad_h, x0 = q * stride_w - pad_w;
    const int y1 = min(y0 + kh, height + pad_h), x1 = min(x0 + kw, width + pad_w);
    const int size = (y1 - y0) * (x1 - x0);          // padding counts, as in Caffe
    const real* in = x + map * height * width;
    real sum = 0;
    for (int a = max(y0, 0); a < min(y1, height); ++a) {
      for (int b = max(x0, 0); b < min(x1, width); ++b) {
        sum += in[a * width + b];
      }
    }
    top[i] = sum / size;
  }
}

extern "C" __global__ void ave_pool_backward(
    const int total, const real* __restrict__ dtop, const int height, const int width,
    const int oh, const int ow, const int kh, const int kw, const int stride_h,
    const int stride_w, const int pad_h, const int pad_w, real* __restrict__ dx) {
  FOR_EACH(i, total) {
    const int w = i % width;
    const int h = (i / width) % height;
    const int map = i / (width * height);
    int p0, p1, q0, q1;
    covering(h, pad_h, kh, stride_h, oh, &p0, &p1);
    covering(w, pad_w, kw, stride_w, ow, &q0, &q1);
    const real* grad = dtop + map * oh * ow;
    real sum = 0;
    for (int p = p0; p < p1; ++p) {
      for (int q = q0; q < q1; ++q) {
        const int y0 = p * stride_h - pad_h, x0 = q * stride_w - pad_w;
        const int y1 = min(y0 + kh, height + pad_h), x1 = min(x0 + kw, width + pad_w);
        sum += grad[p * ow + q] / ((y1 - y0) * (x1 - x0));
      }
    }
    dx[i] = sum;
  }
}
