// tests/gpu/cuda12/vector_add.cu: the kernel cu12_library loads, built by nvcc into a
// cubin (sm_90) and PTX (compute_90, JIT-compiled by the driver at load).
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void scale(float* x, float f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= f;
}
