// vector_add: the classic cudaMalloc / cudaMemcpy / <<<>>> / cudaFree program.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

__global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main() {
    const int n = (1 << 20) + 7;
    const size_t bytes = n * sizeof(float);
    std::vector<float> a(n), b(n), c(n, -1.0f);
    for (int i = 0; i < n; i++) {
        a[i] = (float)(i % 1000) * 0.5f;
        b[i] = (float)(i % 77) * 2.0f;
    }
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dc, 0, bytes));

    const int block = 256;
    const int grid = (n + block - 1) / block;
    vadd<<<grid, block>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));

    double sum = 0.0, expect = 0.0;
    int wrong = 0;
    for (int i = 0; i < n; i++) {
        sum += c[i];
        expect += (double)(a[i] + b[i]);
        if (c[i] != a[i] + b[i]) wrong++;
    }
    printf("n=%d grid=%d block=%d\n", n, grid, block);
    printf("first: %.2f %.2f %.2f %.2f %.2f\n", c[0], c[1], c[2], c[3], c[4]);
    printf("last: %.2f\n", c[n - 1]);
    printf("checksum: %.1f (cpu %.1f)\n", sum, expect);
    printf("wrong elements: %d\n", wrong);

    // Sanity: inputs survived on the device untouched (no kernel involved).
    std::vector<float> back(n);
    CHECK(cudaMemcpy(back.data(), da, bytes, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(back.data(), a.data(), bytes) == 0);

    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    printf("done\n");
    return 0;
}
