// im2col and col2im for 2-D convolutions, in caffecli's column layout (layers/_base_conv.py):
// columns (C, kh, kw, n, oh, ow) for images (n, C, h, w), so one GEMM covers a chunk of
// images. col2im gathers each pixel's windows (no atomics: deterministic), adding them in
// kernel-offset order as the host col2im does.

extern "C" __global__ void im2col(
    const int total, const real* __restrict__ x, const int n, const int channels,
    const int height, const int width, const int kh, const int kw, const int pad_h,
    const int pad_w, const int stride_h, const int stride_w, const int dil_h, const int dil_w,
    const int oh, const int ow, real* __restrict__ col) {
  FOR_EACH(i, total) {
    int t = i;
    const int q = t % ow; t /= ow;
    const int p = t % oh; t /= oh;
    const int img = t % n; t /= n;
    const int j = t % kw; t /= kw;
    const int k = t % kh;
    const int c = t / kh;
    const int h = p * stride_h - pad_h + k * dil_h;
    const int w = q * stride_w - pad_w + j * dil_w;
    col[i] = (h >= 0 && h < height && w >= 0 && w < width)
        ? x[((img * channels + c) * height + h) * width + w] : (real)0;
  }
}

extern "C" __global__ void col2im(
    const int total, const real* __restrict__ col, const int n, const int channels,
    const int height, const int width, const int kh, const int kw, const int pad_h,
    const int pad_w, const int stride_h, const int stride_w, const int dil_h, const int dil_w,
    const int oh, const int ow, real* __restrict__ x) {
  FOR_EACH(i, total) {
    int t = i;
    const int w = t % width; t /= width;
    const int h = t % height; t /= height;
    const int c = t % channels;
    const int img = t / channels;
    real sum = 0;
    for (int k = 0; k < kh; ++k) {
      const int hs = h + pad_h - k * dil_h;          // the window row's start, times stride
      if (hs < 0 || hs % stride_h != 0 || hs / stride_h >= oh) continue;
      const int p = hs / stride_h;
      for (int j = 0; j < kw; ++j) {
        const int ws = w + pad_w - j * dil_w;
        if (ws < 0 || ws % stride_w != 0 || ws / stride_w >= ow) continue;
        const int q = ws / stride_w;
        sum += col[((((c * kh + k) * kw + j) * n + img) * oh + p) * ow + q];
      }
    }
    x[i] = sum;
  }
}

// A chunk's GEMM product, (channels, n, spatial) with its images side by side, back to the
// blob's (n, channels, spatial) with each channel's bias added: Convolution's forward.
extern "C" __global__ void images_first_bias(
    const int total, const real* __restrict__ stack, const real* __restrict__ bias, const int n,
    const int channels, const int spatial, real* __restrict__ y) {
  FOR_EACH(i, total) {
    const int p = i % spatial;
    const int c = (i / spatial) % channels;
    const int img = i / (spatial * channels);
    y[i] = stack[(c * n + img) * spatial + p] + bias[c];
  }
}
