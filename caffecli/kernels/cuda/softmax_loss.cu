// SoftmaxWithLoss (Caffe's softmax_loss_layer.cu): the forward takes one position (outer,
// inner) per thread: the softmax over its channels (the maximum subtracted), the log of its
// label's probability (at least FLT_MIN) and whether the label counts: flag 0 counted, 1 the
// ignore_label, 2 out of [0, channels) (the host explains the NaN loss that leaves). One
// block then sums the logs and counts what the normalizer needs (softmax_loss_total): the
// loss, -sum / normalizer, NaN where a label was out of range. The backward is
// (prob - onehot(label)) * counted * weight / normalizer per element.

extern "C" __global__ void softmax_loss_forward(
    const int total, const real* __restrict__ x, const real* __restrict__ labels,
    const int channels, const int inner, const int ignore_label, const int has_ignore_label,
    real* __restrict__ prob, real* __restrict__ logs, int* __restrict__ flags) {
  FOR_EACH(i, total) {
    const int outer = i / inner, at = i % inner;
    const real* in = x + outer * channels * inner + at;
    real* out = prob + outer * channels * inner + at;
    real top = in[0];
    for (int c = 1; c < channels; ++c) top = max(top, in[c * inner]);
    real sum = 0;
    for (int c = 0; c < channels; ++c) {
      const real e = exp(in[c * inner] - top);
      out[c * inner] = e;
      sum += e;
    }
    for (int c = 0; c < channels; ++c) out[c * inner] = out[c * inner] / sum;
    const int label = (int)labels[i];
    int flag = 0;
    if (has_ignore_label && label == ignore_label) flag = 1;
    else if (label < 0 || label >= channels) flag = 2;
    flags[i] = flag;
    logs[i] = flag == 0 ? log(max(out[label * inner], (real)1.175494350822287508e-38)) : (real)0;
  }
}

// One block (launched so): the sums over every position, then Caffe's get_normalizer, ``fixed``
// positions or with count_valid the counted ones, at least 1.
extern "C" __global__ void softmax_loss_total(
    const int total, const real* __restrict__ logs, const int* __restrict__ flags,
    const int fixed, const int count_valid, const real poison, real* __restrict__ loss,
    real* __restrict__ norm) {
  __shared__ double partial[CAFFECLI_THREADS];
  double sum = 0, counted = 0, bad = 0;
  for (int j = threadIdx.x; j < total; j += blockDim.x) {
    sum += (double)logs[j];
    counted += flags[j] == 0;
    bad += flags[j] == 2;
  }
  sum = block_sum(partial, sum);
  counted = block_sum(partial, counted);
  bad = block_sum(partial, bad);
  if (threadIdx.x == 0) {
    const real n = count_valid ? (real)counted : (real)fixed;
    const real divisor = n > (real)1 ? n : (real)1;
    norm[0] = divisor;
    loss[0] = bad > 0 ? poison : ((real)0 - (real)sum) / divisor;  // +0 for a zero loss
  }
}

extern "C" __global__ void softmax_loss_backward(
    const int total, const real* __restrict__ prob, const real* __restrict__ labels,
    const int* __restrict__ flags, const int channels, const int inner,
    const real* __restrict__ weight, const real* __restrict__ norm, real* __restrict__ dx) {
  FOR_EACH(i, total) {
    const int at = i % inner, c = (i / inner) % channels, outer = i / (inner * channels);
    const int position = outer * inner + at;
    const real counted = flags[position] == 0 ? (real)1 : (real)0;
    const real hot = (int)labels[position] == c ? (real)1 : (real)0;
    dx[i] = ((prob[i] - hot) * counted) * (weight[0] / norm[0]);
  }
}
