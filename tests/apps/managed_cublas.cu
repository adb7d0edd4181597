// managed_cublas: cuBLAS on managed memory, checked against the CPU: Sgemm (plain and
// transposed A), SgemmStridedBatched, Saxpy and Sdot with host scalars, Saxpy and Sdot
// with their scalars in managed memory (device pointer mode), cublasSetVector /
// GetVector into and out of managed memory, and a handle on a stream whose
// allocations are attached to it. Inputs are small integers, so every result is exact
// whatever the summation order. The CPU writes the inputs in place and reads the
// results only after synchronizing, as a device without concurrent managed access
// requires.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include <cublas_v2.h>

#define CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL %s: %s\n", #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define BLAS(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    printf("FAIL %s: %s\n", #x, cublasGetStatusName(s_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { printf("MISMATCH line %d: %s\n", __LINE__, #cond); exit(1); } } while (0)

// Small integers in [-3, 3], from a fixed recurrence.
static void fill_ints(float* p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((int)((seed >> 16) % 7) - 3);
    }
}

static float* managed(size_t n) {
    float* p;
    CUDA(cudaMallocManaged(&p, n * sizeof(float)));
    return p;
}

static double checksum(const float* p, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += p[i] * (double)((i % 13) + 1);
    return s;
}

// C = alpha op(A) B + beta C, column-major, on the CPU.
static std::vector<float> cpu_gemm(bool ta, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                                   int ldb, float beta, const float* c, int ldc) {
    std::vector<float> out(c, c + (size_t)ldc * n);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += (ta ? a[l + (size_t)i * lda] : a[i + (size_t)l * lda]) * b[l + (size_t)j * ldb];
            out[i + (size_t)j * ldc] = (float)(alpha * s + beta * c[i + (size_t)j * ldc]);
        }
    return out;
}

static bool same(const float* p, const std::vector<float>& q) {
    for (size_t i = 0; i < q.size(); i++)
        if (p[i] != q[i]) {
            printf("  differs at %zu: %.1f vs %.1f\n", i, p[i], q[i]);
            return false;
        }
    return true;
}

int main() {
    cublasHandle_t h;
    BLAS(cublasCreate(&h));
    CUDA(cudaDeviceSynchronize());  // whatever the handle set up is done before the host writes

    // Sgemm, A as is and transposed.
    const int M = 96, N = 80, K = 64;
    float *a = managed((size_t)M * K), *b = managed((size_t)K * N), *c = managed((size_t)M * N);
    fill_ints(a, (size_t)M * K, 1);
    fill_ints(b, (size_t)K * N, 2);
    fill_ints(c, (size_t)M * N, 3);
    std::vector<float> want = cpu_gemm(false, M, N, K, 1.0f, a, M, b, K, 2.0f, c, M);
    float alpha = 1.0f, beta = 2.0f;
    BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, a, M, b, K, &beta, c, M));
    CUDA(cudaDeviceSynchronize());
    bool ok = same(c, want);
    printf("sgemm NN %dx%dx%d: %s checksum %.1f\n", M, N, K, ok ? "ok" : "WRONG", checksum(c, (size_t)M * N));
    EXPECT(ok);
    // A read as K x M, transposed; the CPU rewrites part of B first.
    for (int i = 0; i < K; i++) b[i] = (float)(i % 3);
    alpha = -1.0f;
    beta = 0.0f;
    want = cpu_gemm(true, M, N, K, alpha, a, K, b, K, beta, c, M);
    BLAS(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &alpha, a, K, b, K, &beta, c, M));
    CUDA(cudaDeviceSynchronize());
    ok = same(c, want);
    printf("sgemm TN: %s checksum %.1f\n", ok ? "ok" : "WRONG", checksum(c, (size_t)M * N));
    EXPECT(ok);

    // Three 16 x 16 products at once, from consecutive matrices.
    const int S = 16, BATCH = 3;
    float *ba = managed((size_t)S * S * BATCH), *bb = managed((size_t)S * S * BATCH), *bc = managed((size_t)S * S * BATCH);
    fill_ints(ba, (size_t)S * S * BATCH, 4);
    fill_ints(bb, (size_t)S * S * BATCH, 5);
    fill_ints(bc, (size_t)S * S * BATCH, 6);
    std::vector<float> wantb;
    for (int i = 0; i < BATCH; i++) {
        size_t o = (size_t)S * S * i;
        std::vector<float> r = cpu_gemm(false, S, S, S, 1.0f, ba + o, S, bb + o, S, 1.0f, bc + o, S);
        wantb.insert(wantb.end(), r.begin(), r.end());
    }
    alpha = 1.0f;
    beta = 1.0f;
    BLAS(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, S, S, S, &alpha, ba, S, S * S, bb, S, S * S, &beta, bc,
                                   S, S * S, BATCH));
    CUDA(cudaDeviceSynchronize());
    ok = same(bc, wantb);
    printf("sgemm strided batched x%d: %s checksum %.1f\n", BATCH, ok ? "ok" : "WRONG", checksum(bc, wantb.size()));
    EXPECT(ok);

    // Saxpy and Sdot with host scalars.
    const int n = 100000;
    float *x = managed(n), *y = managed(n);
    fill_ints(x, n, 7);
    fill_ints(y, n, 8);
    std::vector<float> wanty(n);
    for (int i = 0; i < n; i++) wanty[i] = 3.0f * x[i] + y[i];
    alpha = 3.0f;
    BLAS(cublasSaxpy(h, n, &alpha, x, 1, y, 1));
    double wantdot = 0;
    for (int i = 0; i < n; i++) wantdot += (double)x[i] * wanty[i];
    float dot = 0;
    BLAS(cublasSdot(h, n, x, 1, y, 1, &dot));  // host result: returns when it is there
    CUDA(cudaDeviceSynchronize());
    ok = same(y, wanty);
    printf("saxpy: %s checksum %.1f; sdot %.1f (%s)\n", ok ? "ok" : "WRONG", checksum(y, n), dot,
           dot == (float)wantdot ? "ok" : "WRONG");
    EXPECT(ok && dot == (float)wantdot);

    // The scalars in managed memory: alpha read and the dot written by the device.
    float* scalars = managed(2);
    scalars[0] = -2.0f;
    scalars[1] = 0.0f;
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    BLAS(cublasSaxpy(h, n, &scalars[0], x, 1, y, 1));
    BLAS(cublasSdot(h, n, y, 1, y, 1, &scalars[1]));
    BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    CUDA(cudaDeviceSynchronize());
    double wantsq = 0;
    for (int i = 0; i < n; i++) {
        wanty[i] += -2.0f * x[i];
        wantsq += (double)wanty[i] * wanty[i];
    }
    ok = same(y, wanty) && scalars[1] == (float)wantsq;
    printf("device-pointer scalars: saxpy checksum %.1f; sdot %.1f (%s)\n", checksum(y, n), scalars[1],
           ok ? "ok" : "WRONG");
    EXPECT(ok);

    // cublasSetVector / GetVector with managed memory on the device side.
    std::vector<float> hv(n), hb(n);
    for (int i = 0; i < n; i++) hv[i] = (float)(i % 17);
    BLAS(cublasSetVector(n, sizeof(float), hv.data(), 1, x, 1));
    BLAS(cublasGetVector(n / 2, sizeof(float), y, 2, hb.data(), 1));
    CUDA(cudaDeviceSynchronize());
    EXPECT(x[16] == 16.0f && x[17] == 0.0f && hb[1] == wanty[2]);
    printf("set/get vector: x[16]=%.1f hb[1]=%.1f\n", x[16], hb[1]);

    // A handle on a stream whose allocations are attached to that stream alone.
    cudaStream_t s;
    CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *sx = managed(4096), *sy = managed(4096);
    CUDA(cudaStreamAttachMemAsync(s, sx, 0, cudaMemAttachSingle));
    CUDA(cudaStreamAttachMemAsync(s, sy, 0, cudaMemAttachSingle));
    CUDA(cudaStreamSynchronize(s));
    for (int i = 0; i < 4096; i++) {
        sx[i] = (float)(i % 5);
        sy[i] = 1.0f;
    }
    BLAS(cublasSetStream(h, s));
    alpha = 2.0f;
    BLAS(cublasSaxpy(h, 4096, &alpha, sx, 1, sy, 1));
    BLAS(cublasSscal(h, 4096, &alpha, sy, 1));
    CUDA(cudaStreamSynchronize(s));
    double ssum = 0;
    for (int i = 0; i < 4096; i++) ssum += sy[i];
    EXPECT(sy[3] == 14.0f);
    printf("on an attached stream: sy[3]=%.1f sum %.1f\n", sy[3], ssum);
    BLAS(cublasSetStream(h, 0));
    CUDA(cudaStreamDestroy(s));

    BLAS(cublasDestroy(h));
    for (float* p : {a, b, c, ba, bb, bc, x, y, scalars, sx, sy}) CUDA(cudaFree(p));
    printf("done\n");
    return 0;
}
