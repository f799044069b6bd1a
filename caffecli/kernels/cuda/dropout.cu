// Dropout's forward in one pass: element i keeps its value when the i-th counter-based draw
// of the key (splitmix64 of key + (i + 1) * golden gamma, the high 32 bits; kernels/random.py)
// is at least the threshold. The key is a device scalar, so a captured graph reads the key
// drawn before each replay. x and y may be one array (in-place dropout).

extern "C" __global__ void dropout_forward(
    const int total, const real* x, const unsigned long long* __restrict__ key,
    const unsigned int threshold, const real scale, real* __restrict__ mask, real* y) {
  FOR_EACH(i, total) {
    unsigned long long z = (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ULL + key[0];
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ULL;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBULL;
    z ^= z >> 31;
    const real keep = ((unsigned int)(z >> 32) >= threshold) ? (real)1 : (real)0;
    mask[i] = keep;
    y[i] = x[i] * keep * scale;
  }
}
