// build: -cudart static
// Built with `-cudart static` (nvcc's default; see tests/apps/build.sh) whatever the
// build of the other apps: NVIDIA's CUDA runtime is inside the program and reaches
// the GPU through libcuda.so.1 alone (its export tables, cuGetProcAddress and the
// cuLibrary* calls). Through vmcuda it runs as natively.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void add_one(int *v) { v[threadIdx.x] += 1; }

int main() {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        printf("cudaGetDeviceCount failed: %s\n", cudaGetErrorName(e));
        return 2;
    }
    int *d = nullptr;
    int h[32];
    for (int i = 0; i < 32; i++) h[i] = i;
    if (cudaMalloc(&d, sizeof h) != cudaSuccess) return 3;
    cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
    add_one<<<1, 32>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int i = 0; i < 32; i++) ok &= h[i] == i + 1;
    printf("%s static_cudart: %d device(s), kernel %s\n", ok ? "PASS" : "FAIL", count, ok ? "ran" : "wrong");
    cudaFree(d);
    return ok ? 0 : 1;
}
