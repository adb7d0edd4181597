// cuBLAS GEMM families checked against a CPU computation: Sgemm (host scalars),
// Dgemm (device scalars), GemmEx (half in, float out; bfloat16 in and out),
// SgemmStridedBatched (broadcast B), SgemmBatched (device pointer arrays), Zgemm
// (conjugate transpose), and cuBLAS's own argument errors. Inputs are small integers,
// so every result is exact whatever the summation order: the output is the same on
// any GPU and through any correct forwarding.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>

static int failures = 0;

#define CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL %s: %s\n", #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define BLAS(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    printf("FAIL %s: %s\n", #x, cublasGetStatusName(s_)); exit(1); } } while (0)

// Small integers in [-3, 3], from a fixed recurrence.
static std::vector<double> ints(size_t n, unsigned seed) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (double)((int)((seed >> 16) % 7) - 3);
    }
    return v;
}

// op(X)(r, c) of a column-major matrix with leading dimension ld.
static double at(const std::vector<double>& x, int ld, bool t, int r, int c) {
    return t ? x[c + (size_t)r * ld] : x[r + (size_t)c * ld];
}

// C = alpha * op(A) op(B) + beta * C on the CPU, exactly (small integers).
static void cpu_gemm(bool ta, bool tb, int m, int n, int k, double alpha,
                     const std::vector<double>& a, int lda, const std::vector<double>& b,
                     int ldb, double beta, std::vector<double>& c, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += at(a, lda, ta, i, l) * at(b, ldb, tb, l, j);
            c[i + (size_t)j * ldc] = alpha * s + beta * c[i + (size_t)j * ldc];
        }
}

template <typename T> static void* upload(const std::vector<double>& v) {
    std::vector<T> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = (T)(float)v[i];
    void* d;
    CUDA(cudaMalloc(&d, h.size() * sizeof(T)));
    CUDA(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <> void* upload<double>(const std::vector<double>& v) {
    void* d;
    CUDA(cudaMalloc(&d, v.size() * sizeof(double)));
    CUDA(cudaMemcpy(d, v.data(), v.size() * sizeof(double), cudaMemcpyHostToDevice));
    return d;
}

template <typename T> static std::vector<double> download(void* d, size_t n) {
    std::vector<T> h(n);
    CUDA(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<double> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (double)(float)h[i];
    return v;
}
template <> std::vector<double> download<double>(void* d, size_t n) {
    std::vector<double> v(n);
    CUDA(cudaMemcpy(v.data(), d, n * sizeof(double), cudaMemcpyDeviceToHost));
    return v;
}

static void check(const char* what, const std::vector<double>& got, const std::vector<double>& want) {
    long long sum = 0;
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); i++) {
        if (got[i] != want[i]) bad++;
        sum += (long long)got[i] * (long long)((i % 7) + 1);
    }
    if (bad) { printf("FAIL %s: %zu of %zu elements differ\n", what, bad, want.size()); failures++; }
    else printf("PASS %s checksum=%lld\n", what, sum);
}

int main() {
    cublasHandle_t h;
    BLAS(cublasCreate(&h));
    cudaStream_t stream;
    CUDA(cudaStreamCreate(&stream));
    BLAS(cublasSetStream(h, stream));
    cudaStream_t got_stream;
    BLAS(cublasGetStream(h, &got_stream));
    printf("%s stream round trip\n", got_stream == stream ? "PASS" : "FAIL");
    int version = 0;
    BLAS(cublasGetVersion(h, &version));
    printf("%s version is 13.x\n", version / 10000 == 13 ? "PASS" : "FAIL");

    // Sgemm, host scalars, all four transpose combinations, C with a larger ldc.
    const int m = 37, n = 29, k = 23, ldc = 40;
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        int lda = ta ? k : m, ldb = tb ? n : k;
        auto a = ints((size_t)lda * (ta ? m : k), 1 + t), b = ints((size_t)ldb * (tb ? k : n), 7 + t);
        auto c = ints((size_t)ldc * n, 13 + t);
        void *da = upload<float>(a), *db = upload<float>(b), *dc = upload<float>(c);
        float alpha = 2, beta = -1;
        BLAS(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                         &alpha, (float*)da, lda, (float*)db, ldb, &beta, (float*)dc, ldc));
        cpu_gemm(ta, tb, m, n, k, 2, a, lda, b, ldb, -1, c, ldc);
        char what[64];
        snprintf(what, sizeof what, "sgemm %c%c", ta ? 'T' : 'N', tb ? 'T' : 'N');
        check(what, download<float>(dc, c.size()), c);
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }

    // Dgemm, device scalars.
    {
        auto a = ints((size_t)k * m, 21), b = ints((size_t)k * n, 22), c = ints((size_t)m * n, 23);
        void *da = upload<double>(a), *db = upload<double>(b), *dc = upload<double>(c);
        double scalars[2] = {3, 2};
        double* ds;
        CUDA(cudaMalloc(&ds, sizeof scalars));
        CUDA(cudaMemcpy(ds, scalars, sizeof scalars, cudaMemcpyHostToDevice));
        BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
        cublasPointerMode_t mode;
        BLAS(cublasGetPointerMode(h, &mode));
        BLAS(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, ds, (double*)da, k, (double*)db, k,
                         ds + 1, (double*)dc, m));
        BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
        cpu_gemm(true, false, m, n, k, 3, a, k, b, k, 2, c, m);
        check(mode == CUBLAS_POINTER_MODE_DEVICE ? "dgemm TN device scalars" : "dgemm mode not kept",
              download<double>(dc, c.size()), c);
        cudaFree(da); cudaFree(db); cudaFree(dc); cudaFree(ds);
    }

    // GemmEx: half inputs, float output, float compute.
    {
        auto a = ints((size_t)m * k, 31), b = ints((size_t)k * n, 32), c = ints((size_t)m * n, 33);
        void *da = upload<__half>(a), *db = upload<__half>(b), *dc = upload<float>(c);
        float alpha = 1, beta = 1;
        BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_16F, m, db,
                          CUDA_R_16F, k, &beta, dc, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT));
        cpu_gemm(false, false, m, n, k, 1, a, m, b, k, 1, c, m);
        check("gemmEx f16 in f32 out", download<float>(dc, c.size()), c);
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }

    // GemmEx: bfloat16 in and out (results stay within bfloat16's exact integers).
    {
        const int kk = 8;
        auto a = ints((size_t)m * kk, 41), b = ints((size_t)kk * n, 42);
        std::vector<double> c((size_t)m * n, 0);
        void *da = upload<__nv_bfloat16>(a), *db = upload<__nv_bfloat16>(b), *dc = upload<__nv_bfloat16>(c);
        float alpha = 1, beta = 0;
        BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, kk, &alpha, da, CUDA_R_16BF, m, db,
                          CUDA_R_16BF, kk, &beta, dc, CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT));
        cpu_gemm(false, false, m, n, kk, 1, a, m, b, kk, 0, c, m);
        check("gemmEx bf16", download<__nv_bfloat16>(dc, c.size()), c);
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }

    // SgemmStridedBatched: 5 GEMMs, one B for all (stride 0), C strided with a gap.
    {
        const int batch = 5, mm = 12, nn = 9, kk = 7;
        const long long sa = mm * kk, sc = mm * nn + 3;
        auto a = ints((size_t)sa * batch, 51), b = ints((size_t)kk * nn, 52);
        auto c = ints((size_t)sc * batch, 53);
        void *da = upload<float>(a), *db = upload<float>(b), *dc = upload<float>(c);
        float alpha = 1, beta = 3;
        BLAS(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, mm, nn, kk, &alpha, (float*)da, mm, sa,
                                       (float*)db, kk, 0, &beta, (float*)dc, mm, sc, batch));
        for (int i = 0; i < batch; i++) {
            std::vector<double> ai(a.begin() + i * sa, a.begin() + (i + 1) * sa);
            std::vector<double> ci(c.begin() + i * sc, c.begin() + i * sc + mm * nn);
            cpu_gemm(false, false, mm, nn, kk, 1, ai, mm, b, kk, 3, ci, mm);
            std::copy(ci.begin(), ci.end(), c.begin() + i * sc);
        }
        check("sgemmStridedBatched", download<float>(dc, c.size()), c);
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }

    // SgemmBatched: arrays of device pointers in device memory (in reverse order).
    {
        const int batch = 3, mm = 6, nn = 5, kk = 4;
        std::vector<std::vector<double>> a, b, c;
        std::vector<float*> pa, pb, pc;
        for (int i = 0; i < batch; i++) {
            a.push_back(ints(mm * kk, 61 + i)); b.push_back(ints(kk * nn, 71 + i));
            c.push_back(ints(mm * nn, 81 + i));
            pa.push_back((float*)upload<float>(a[i])); pb.push_back((float*)upload<float>(b[i]));
            pc.push_back((float*)upload<float>(c[i]));
        }
        std::vector<float*> ra(pa.rbegin(), pa.rend()), rb(pb.rbegin(), pb.rend()), rc(pc.rbegin(), pc.rend());
        float **dpa, **dpb, **dpc;
        CUDA(cudaMalloc(&dpa, batch * sizeof(float*)));
        CUDA(cudaMalloc(&dpb, batch * sizeof(float*)));
        CUDA(cudaMalloc(&dpc, batch * sizeof(float*)));
        CUDA(cudaMemcpy(dpa, ra.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
        CUDA(cudaMemcpy(dpb, rb.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
        CUDA(cudaMemcpy(dpc, rc.data(), batch * sizeof(float*), cudaMemcpyHostToDevice));
        float alpha = -1, beta = 1;
        BLAS(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, mm, nn, kk, &alpha, dpa, mm, dpb, kk, &beta,
                                dpc, mm, batch));
        std::vector<double> want, got;
        for (int i = 0; i < batch; i++) {
            cpu_gemm(false, false, mm, nn, kk, -1, a[i], mm, b[i], kk, 1, c[i], mm);
            want.insert(want.end(), c[i].begin(), c[i].end());
            auto g = download<float>(pc[i], c[i].size());
            got.insert(got.end(), g.begin(), g.end());
            cudaFree(pa[i]); cudaFree(pb[i]); cudaFree(pc[i]);
        }
        check("sgemmBatched", got, want);
        cudaFree(dpa); cudaFree(dpb); cudaFree(dpc);
    }

    // Zgemm: C = A^H * B with complex integers.
    {
        const int mm = 5, nn = 4, kk = 3;
        auto a = ints(2 * kk * mm, 91), b = ints(2 * kk * nn, 92);
        std::vector<double> c(2 * mm * nn, 0), want(2 * mm * nn, 0);
        void *da = upload<double>(a), *db = upload<double>(b), *dc = upload<double>(c);
        cuDoubleComplex alpha = {1, 0}, beta = {0, 0};
        BLAS(cublasZgemm(h, CUBLAS_OP_C, CUBLAS_OP_N, mm, nn, kk, &alpha, (cuDoubleComplex*)da, kk,
                         (cuDoubleComplex*)db, kk, &beta, (cuDoubleComplex*)dc, mm));
        for (int j = 0; j < nn; j++)
            for (int i = 0; i < mm; i++) {
                double re = 0, im = 0;
                for (int l = 0; l < kk; l++) {
                    double ar = a[2 * (l + i * kk)], ai = -a[2 * (l + i * kk) + 1];
                    double br = b[2 * (l + j * kk)], bi = b[2 * (l + j * kk) + 1];
                    re += ar * br - ai * bi;
                    im += ar * bi + ai * br;
                }
                want[2 * (i + j * mm)] = re;
                want[2 * (i + j * mm) + 1] = im;
            }
        check("zgemm CN", download<double>(dc, want.size()), want);
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }

    // Argument errors come back from the call itself, as cuBLAS checks them first.
    {
        float one = 1, *d;
        CUDA(cudaMalloc(&d, 64 * sizeof(float)));
        printf("sgemm(m=-1): %s\n", cublasGetStatusName(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 2, 2, &one, d, 2, d, 2, &one, d, 2)));
        printf("sgemm(lda<m): %s\n", cublasGetStatusName(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, d, 3, d, 2, &one, d, 4)));
        printf("sgemm(ldc<m): %s\n", cublasGetStatusName(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, d, 4, d, 2, &one, d, 3)));
        printf("sgemm(m=0): %s\n", cublasGetStatusName(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 2, 2, &one, d, 1, d, 2, &one, d, 1)));
        cudaFree(d);
    }
    CUDA(cudaStreamSynchronize(stream));
    BLAS(cublasDestroy(h));
    CUDA(cudaStreamDestroy(stream));
    printf("%s cublas_gemm (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
