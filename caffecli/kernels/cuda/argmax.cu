// ArgMax's top_k per row (Caffe's argmax_layer): one thread per (outer, inner) position ranks
// the row's dim values by descending value, the larger index first on ties, NaN last (as the
// host's stable sort). Pick j is the first-ranked value after pick j - 1, so top_k passes over
// the row need no memory. Each pick's index and value go to idx and val, (outer, top_k, inner).

// whether value a at index ai ranks before value b at index bi
__device__ __forceinline__ bool ranks_before(const real a, const int ai, const real b,
                                             const int bi) {
  const bool a_nan = a != a, b_nan = b != b;
  if (a_nan != b_nan) return b_nan;
  if (a_nan) return ai > bi;
  return a > b || (a == b && ai > bi);
}

extern "C" __global__ void argmax_top_k(
    const int total, const real* __restrict__ x, const int dim, const int inner,
    const int top_k, real* __restrict__ idx, real* __restrict__ val) {
  FOR_EACH(i, total) {
    const int outer = i / inner, at = i % inner;
    const real* row = x + outer * dim * inner + at;
    int last = -1;                                 // the previous pick (none yet)
    for (int j = 0; j < top_k; ++j) {
      int best = -1;
      for (int k = 0; k < dim; ++k) {
        const real v = row[k * inner];
        if ((last < 0 || ranks_before(row[last * inner], last, v, k))
            && (best < 0 || ranks_before(v, k, row[best * inner], best))) best = k;
      }
      const int o = (outer * top_k + j) * inner + at;
      idx[o] = (real)best;
      val[o] = row[best * inner];
      last = best;
    }
  }
}
