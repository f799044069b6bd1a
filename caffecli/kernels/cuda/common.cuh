// Shared by every device kernel (kernels/device.py puts it, after "typedef <dtype> real;",
// before each kernel file). Kernels are grid-stride loops, as Caffe's CUDA_KERNEL_LOOP: any
// grid covers every element, and one thread alone takes them in order (the stand-in device
// runs them so, as host C++).
#define FOR_EACH(i, n) \
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)

#define CAFFECLI_FLT_MAX 3.402823466e+38F
