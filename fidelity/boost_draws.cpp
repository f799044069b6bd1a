// What boost 1.74 draws for Caffe's caffe_rng_* calls (math_functions.cpp), written raw for
// fidelity/seeded.py: seed, count and output file on the command line.
#include <boost/random.hpp>
#include <boost/math/special_functions/next.hpp>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
typedef boost::mt19937 rng_t;
template <typename T> void gauss(rng_t* r, int n, T a, T s, FILE* f) {
  boost::normal_distribution<T> d(a, s);
  boost::variate_generator<rng_t*, boost::normal_distribution<T> > g(r, d);
  for (int i = 0; i < n; ++i) { T v = g(); fwrite(&v, sizeof(T), 1, f); }
}
template <typename T> void unif(rng_t* r, int n, T a, T b, FILE* f) {
  boost::uniform_real<T> d(a, boost::math::nextafter<T>(b, std::numeric_limits<T>::max()));
  boost::variate_generator<rng_t*, boost::uniform_real<T> > g(r, d);
  for (int i = 0; i < n; ++i) { T v = g(); fwrite(&v, sizeof(T), 1, f); }
}
template <typename T> void bern(rng_t* r, int n, T p, FILE* f) {
  boost::bernoulli_distribution<T> d(p);
  boost::variate_generator<rng_t*, boost::bernoulli_distribution<T> > g(r, d);
  for (int i = 0; i < n; ++i) { int v = g(); fwrite(&v, sizeof(int), 1, f); }
}
int main(int argc, char** argv) {
  unsigned seed = atoi(argv[1]);
  int n = atoi(argv[2]);
  rng_t r(seed);
  FILE* f = fopen(argv[3], "wb");
  unsigned w = r(); fwrite(&w, 4, 1, f);
  gauss<float>(&r, n, 0.5f, 2.0f, f);
  unif<float>(&r, n, -0.3f, 0.7f, f);
  bern<float>(&r, n, 0.3f, f);
  bern<double>(&r, n, 1. - 0.5f, f);
  gauss<double>(&r, n, -1.0, 0.25, f);
  unif<double>(&r, n, -2.0, 3.0, f);
  std::vector<int> v(n); for (int i = 0; i < n; ++i) v[i] = i;
  // caffe::shuffle
  for (long i = n - 1; i > 0; --i) { boost::uniform_int<long> d(0, i); std::iter_swap(v.begin() + i, v.begin() + d(r)); }
  fwrite(v.data(), 4, n, f);
  w = r(); fwrite(&w, 4, 1, f);
  fclose(f);
}
