// Shared by every device kernel (kernels/device.py puts it, after "typedef <dtype> real;",
// before each kernel file). Kernels are grid-stride loops, as Caffe's CUDA_KERNEL_LOOP: any
// grid covers every element, and one thread alone takes them in order (the stand-in device
// runs them so, as host C++).
#define FOR_EACH(i, n) \
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)

#define CAFFECLI_FLT_MAX 3.402823466e+38F

// Block reductions (blocks of THREADS = 256 threads, kernels/device.py): each thread sums its
// grid-stride share in double, then the block adds the partials as a tree, in a fixed order.
#define CAFFECLI_THREADS 256
__device__ __forceinline__ double block_sum(double* partial, const double mine) {
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const double total = partial[0];
  __syncthreads();                       // partial is reused by the caller's next sum
  return total;
}
