// cuRAND through vmcuda: the host API's generators fill device memory; the same seed
// gives the same numbers as natively, and their moments are right.
#include <cmath>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include <curand.h>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("FAIL %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorName(e)); return 1; } } while (0)
#define CHECK_RAND(x) do { curandStatus_t r = (x); if (r != CURAND_STATUS_SUCCESS) { printf("FAIL %s:%d curand status %d\n", __FILE__, __LINE__, (int)r); return 1; } } while (0)

static int run(curandRngType_t type, const char *name) {
    const size_t n = 1 << 20;
    float *d = nullptr;
    CHECK_CUDA(cudaMalloc(&d, n * sizeof(float)));
    curandGenerator_t g;
    CHECK_RAND(curandCreateGenerator(&g, type));
    CHECK_RAND(curandSetPseudoRandomGeneratorSeed(g, 1234ULL));
    CHECK_RAND(curandGenerateUniform(g, d, n));
    std::vector<float> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    double mean = 0;
    for (float v : h) mean += v;
    mean /= n;
    CHECK_RAND(curandGenerateNormal(g, d, n, 2.0f, 3.0f));
    std::vector<float> z(n);
    CHECK_CUDA(cudaMemcpy(z.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    double zm = 0, zv = 0;
    for (float v : z) zm += v;
    zm /= n;
    for (float v : z) zv += (v - zm) * (v - zm);
    zv /= n;
    CHECK_RAND(curandDestroyGenerator(g));
    CHECK_CUDA(cudaFree(d));
    bool ok = fabs(mean - 0.5) < 0.01 && fabs(zm - 2.0) < 0.02 && fabs(sqrt(zv) - 3.0) < 0.02;
    printf("%s %s: first %.6f %.6f %.6f, uniform mean %.3f, normal mean %.2f sd %.2f\n",
           ok ? "PASS" : "FAIL", name, h[0], h[1], h[2], mean, zm, sqrt(zv));
    return ok ? 0 : 1;
}

int main() {
    int bad = 0;
    bad += run(CURAND_RNG_PSEUDO_XORWOW, "xorwow");
    bad += run(CURAND_RNG_PSEUDO_PHILOX4_32_10, "philox");
    bad += run(CURAND_RNG_PSEUDO_MTGP32, "mtgp32");
    printf("%s curand_gen\n", bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
}
