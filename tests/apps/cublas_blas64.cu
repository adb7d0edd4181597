// The cuBLAS calls NVIDIA's cuSOLVER makes beyond what cublas_blas covers, checked
// against CPU computations: the 64-bit-size entry points (`_64`) of level 1, 2, 3 and
// the GEMMs, geam, dgmm, syrkx/herkx, the batched and strided-batched gemv, and the
// handle settings (environment mode, emulation strategy). Inputs are small integers;
// results print with limited precision, so native and forwarded runs on one GPU print
// the same. A call that fails prints its cuBLAS status or CUDA error instead.
#include <complex>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
#include <cuda_runtime.h>
#include <cublas_v2.h>

// Exported by libcublas.so.13 and called by cuSOLVER, not in cuBLAS's headers: a
// per-handle mode, 0 or 1.
extern "C" cublasStatus_t cublasSetEnvironmentMode(cublasHandle_t, int);
extern "C" cublasStatus_t cublasGetEnvironmentMode(cublasHandle_t, int*);

typedef std::complex<double> cd;
typedef std::vector<double> vec;

static int failures = 0, errors = 0;
static cublasHandle_t h;

// Small integers in [-3, 3].
static vec vals(size_t n, unsigned seed) {
    vec v(n);
    for (auto& x : v) { seed = seed * 1103515245u + 12345u; x = (double)((int)((seed >> 16) % 7) - 3); }
    return v;
}

template <class T> static T* upload(const vec& v) {
    std::vector<T> hst(v.size() ? v.size() : 1);
    for (size_t i = 0; i < v.size(); i++) hst[i] = (T)v[i];
    T* d = nullptr;
    cudaMalloc(&d, hst.size() * sizeof(T));
    cudaMemcpy(d, hst.data(), hst.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}

template <class T> static vec download(const T* d, size_t n) {
    std::vector<T> hst(n);
    cudaMemcpy(hst.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return vec(hst.begin(), hst.end());
}

static bool synced(const std::string& what) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("%s: %s\n", what.c_str(), cudaGetErrorName(e)); errors++; return false; }
    return true;
}

static bool ran(const std::string& what, cublasStatus_t s) {
    if (s != CUBLAS_STATUS_SUCCESS) { printf("%s: %s\n", what.c_str(), cublasGetStatusName(s)); errors++; return false; }
    return synced(what);
}
#define TRY(what, x) if (!ran(what, x)) continue
#define ONCE for (int once_ = 0; once_ < 1; once_++)

static void check(const std::string& what, const vec& got, const vec& want) {
    size_t bad = 0;
    double sum = 0;
    for (size_t i = 0; i < want.size(); i++) {
        if (std::abs(got[i] - want[i]) > 1e-4 * (1 + std::abs(want[i]))) bad++;
        sum += got[i] * (double)((i % 7) + 1);
    }
    if (bad) { printf("FAIL %s: %zu of %zu differ\n", what.c_str(), bad, want.size()); failures++; }
    else printf("PASS %s sum=%.3f\n", what.c_str(), sum);
}

// Column-major element (r, c) of op(A), A stored with leading dimension ld.
static double at(const vec& a, int ld, bool t, int r, int c) { return t ? a[c + (size_t)r * ld] : a[r + (size_t)c * ld]; }

static void level1_64() {
    const int64_t n = 9;
    vec x = vals(n, 1), y = vals(n, 2);
    ONCE {
        float* dx = upload<float>(x); float* dy = upload<float>(y);
        float alpha = 2;
        TRY("Saxpy_64", cublasSaxpy_v2_64(h, n, &alpha, dx, 1, dy, 1));
        vec want = y;
        for (int i = 0; i < n; i++) want[i] += 2 * x[i];
        check("Saxpy_64", download(dy, n), want);
        cudaFree(dx); cudaFree(dy);
    }
    ONCE {
        double* dx = upload<double>(x); double* dy = upload<double>(y);
        double r = 0, want = 0;
        TRY("Ddot_64", cublasDdot_v2_64(h, n, dx, 1, dy, 1, &r));
        for (int i = 0; i < n; i++) want += x[i] * y[i];
        check("Ddot_64", {r}, {want});
        int64_t imax = -1;
        TRY("Idamax_64", cublasIdamax_v2_64(h, n, dx, 1, &imax));
        int64_t best = 0;
        for (int i = 1; i < n; i++) if (std::abs(x[i]) > std::abs(x[best])) best = i;
        check("Idamax_64", {(double)imax}, {(double)(best + 1)});
        TRY("Dscal_64", cublasDscal_v2_64(h, n, &r, dy, 1));
        vec w = y;
        for (auto& v : w) v *= r;
        check("Dscal_64", download(dy, n), w);
        cudaFree(dx); cudaFree(dy);
    }
    ONCE {   // complex: interleaved pairs
        vec z = vals(2 * n, 3);
        cuDoubleComplex* dz = (cuDoubleComplex*)upload<double>(z);
        cuDoubleComplex alpha = make_cuDoubleComplex(1, -2);
        TRY("Zscal_64", cublasZscal_v2_64(h, n, &alpha, dz, 1));
        vec want(2 * n);
        for (int i = 0; i < n; i++) {
            cd v = cd(z[2 * i], z[2 * i + 1]) * cd(1, -2);
            want[2 * i] = v.real(); want[2 * i + 1] = v.imag();
        }
        check("Zscal_64", download((double*)dz, 2 * n), want);
        cudaFree(dz);
    }
}

static void level2_64() {
    const int m = 5, n = 4, lda = 6;
    vec a = vals((size_t)lda * n, 4), x = vals(m, 5), y = vals(m, 6);
    for (int t = 0; t < 2; t++) ONCE {
        std::string what = t ? "Sgemv_64 T" : "Sgemv_64 N";
        int rows = t ? n : m, cols = t ? m : n;
        float* da = upload<float>(a); float* dx = upload<float>(x); float* dy = upload<float>(y);
        float alpha = 2, beta = -1;
        TRY(what, cublasSgemv_v2_64(h, t ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, &alpha, da, lda, dx, 1, &beta, dy, 1));
        vec want(rows);
        for (int r = 0; r < rows; r++) {
            double s = 0;
            for (int c = 0; c < cols; c++) s += (t ? a[c + (size_t)r * lda] : a[r + (size_t)c * lda]) * x[c];
            want[r] = 2 * s - y[r];
        }
        check(what, download(dy, rows), want);
        cudaFree(da); cudaFree(dx); cudaFree(dy);
    }
    ONCE {
        double* da = upload<double>(a); double* dx = upload<double>(x); double* dy = upload<double>(y);
        double alpha = 3;
        TRY("Dger_64", cublasDger_v2_64(h, m, n, &alpha, dx, 1, dy, 1, da, lda));
        vec want = a;
        for (int c = 0; c < n; c++) for (int r = 0; r < m; r++) want[r + (size_t)c * lda] += 3 * x[r] * y[c];
        check("Dger_64", download(da, a.size()), want);
        cudaFree(da); cudaFree(dx); cudaFree(dy);
    }
}

// gemv over a batch: strided (32-bit sizes) and with pointer arrays (`_64`).
static void gemv_batches() {
    const int m = 3, n = 4, lda = 3, batch = 3;
    const long long sa = lda * n + 2, sx = n + 1, sy = m;
    vec a = vals(sa * batch, 7), x = vals(sx * batch, 8), y = vals(sy * batch, 9);
    auto want_for = [&](int b, const vec& yin) {
        vec w(m);
        for (int r = 0; r < m; r++) {
            double s = 0;
            for (int c = 0; c < n; c++) s += a[b * sa + r + c * lda] * x[b * sx + c];
            w[r] = 2 * s + yin[b * sy + r];
        }
        return w;
    };
    ONCE {
        float* da = upload<float>(a); float* dx = upload<float>(x); float* dy = upload<float>(y);
        float alpha = 2, beta = 1;
        TRY("SgemvStridedBatched", cublasSgemvStridedBatched(h, CUBLAS_OP_N, m, n, &alpha, da, lda, sa, dx, 1, sx, &beta, dy, 1, sy, batch));
        vec want;
        for (int b = 0; b < batch; b++) { vec w = want_for(b, y); want.insert(want.end(), w.begin(), w.end()); }
        check("SgemvStridedBatched", download(dy, sy * batch), want);
        cudaFree(da); cudaFree(dx); cudaFree(dy);
    }
    ONCE {
        double* da = upload<double>(a); double* dx = upload<double>(x); double* dy = upload<double>(y);
        std::vector<double*> pa, px, py;
        for (int b = 0; b < batch; b++) { pa.push_back(da + b * sa); px.push_back(dx + b * sx); py.push_back(dy + b * sy); }
        double** arrays = nullptr;
        cudaMalloc(&arrays, 3 * batch * sizeof(double*));
        cudaMemcpy(arrays, pa.data(), batch * sizeof(double*), cudaMemcpyHostToDevice);
        cudaMemcpy(arrays + batch, px.data(), batch * sizeof(double*), cudaMemcpyHostToDevice);
        cudaMemcpy(arrays + 2 * batch, py.data(), batch * sizeof(double*), cudaMemcpyHostToDevice);
        double alpha = 2, beta = 1;
        TRY("DgemvBatched_64", cublasDgemvBatched_64(h, CUBLAS_OP_N, m, n, &alpha, arrays, lda, arrays + batch, 1, &beta, arrays + 2 * batch, 1, batch));
        vec want;
        for (int b = 0; b < batch; b++) { vec w = want_for(b, y); want.insert(want.end(), w.begin(), w.end()); }
        check("DgemvBatched_64", download(dy, sy * batch), want);
        cudaFree(arrays); cudaFree(da); cudaFree(dx); cudaFree(dy);
    }
}

static void geam_dgmm() {
    const int m = 4, n = 3, ld = 5;
    vec a = vals((size_t)ld * std::max(m, n), 10), b = vals((size_t)ld * std::max(m, n), 11);
    for (int t = 0; t < 2; t++) ONCE {
        // C = 2 op(A) - B, op(A) = A^T for t = 1 (A stored n x m then).
        std::string what = t ? "Sgeam TN" : "Sgeam NN";
        float* da = upload<float>(a); float* db = upload<float>(b); float* dc = upload<float>(vec(ld * n, 0));
        float alpha = 2, beta = -1;
        TRY(what, cublasSgeam(h, t ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, m, n, &alpha, da, ld, &beta, db, ld, dc, ld));
        vec got = download(dc, (size_t)ld * n), want = got;
        for (int c = 0; c < n; c++) for (int r = 0; r < m; r++) want[r + c * ld] = 2 * at(a, ld, t, r, c) - b[r + c * ld];
        check(what, got, want);
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }
    ONCE {   // beta = 0: B is not read, and may be NULL
        double* da = upload<double>(a); double* dc = upload<double>(vec(ld * n, 0));
        double alpha = -1, beta = 0;
        TRY("Dgeam_64 B=NULL", cublasDgeam_64(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, &alpha, da, ld, &beta, nullptr, ld, dc, ld));
        vec got = download(dc, (size_t)ld * n), want = got;
        for (int c = 0; c < n; c++) for (int r = 0; r < m; r++) want[r + c * ld] = -a[r + c * ld];
        check("Dgeam_64 B=NULL", got, want);
        cudaFree(da); cudaFree(dc);
    }
    for (int side = 0; side < 2; side++) ONCE {
        std::string what = side ? "Sdgmm R" : "Sdgmm L";
        vec x = vals(side ? n : m, 12);
        float* da = upload<float>(a); float* dx = upload<float>(x); float* dc = upload<float>(vec(ld * n, 0));
        TRY(what, cublasSdgmm(h, side ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT, m, n, da, ld, dx, 1, dc, ld));
        vec got = download(dc, (size_t)ld * n), want = got;
        for (int c = 0; c < n; c++) for (int r = 0; r < m; r++) want[r + c * ld] = a[r + c * ld] * x[side ? c : r];
        check(what, got, want);
        cudaFree(da); cudaFree(dx); cudaFree(dc);
    }
    ONCE {
        vec x = vals(n, 13);
        double* da = upload<double>(a); double* dx = upload<double>(x); double* dc = upload<double>(vec(ld * n, 0));
        TRY("Ddgmm_64 R", cublasDdgmm_64(h, CUBLAS_SIDE_RIGHT, m, n, da, ld, dx, 1, dc, ld));
        vec got = download(dc, (size_t)ld * n), want = got;
        for (int c = 0; c < n; c++) for (int r = 0; r < m; r++) want[r + c * ld] = a[r + c * ld] * x[c];
        check("Ddgmm_64 R", got, want);
        cudaFree(da); cudaFree(dx); cudaFree(dc);
    }
}

// syrkx: C = alpha A B^T + beta C, lower triangle only (as cuSOLVER uses it).
static void syrkx() {
    const int n = 4, k = 3, ld = 5;
    vec a = vals((size_t)ld * k, 14), b = vals((size_t)ld * k, 15), c = vals((size_t)ld * n, 16);
    ONCE {
        float* da = upload<float>(a); float* db = upload<float>(b); float* dc = upload<float>(c);
        float alpha = 1, beta = 2;
        TRY("Ssyrkx L", cublasSsyrkx(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, n, k, &alpha, da, ld, db, ld, &beta, dc, ld));
        vec got = download(dc, (size_t)ld * n), want = c;
        for (int j = 0; j < n; j++) for (int i = j; i < n; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += a[i + l * ld] * b[j + l * ld];
            want[i + j * ld] = s + 2 * c[i + j * ld];
        }
        check("Ssyrkx L", got, want);
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }
    ONCE {
        double* da = upload<double>(a); double* db = upload<double>(b); double* dc = upload<double>(c);
        double alpha = -1, beta = 0;
        TRY("Dsyrkx_64 U", cublasDsyrkx_64(h, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, n, k, &alpha, da, ld, db, ld, &beta, dc, ld));
        vec got = download(dc, (size_t)ld * n), want = c;
        for (int j = 0; j < n; j++) for (int i = 0; i <= j; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += a[i + l * ld] * b[j + l * ld];
            want[i + j * ld] = -s;
        }
        check("Dsyrkx_64 U", got, want);
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }
}

// Level 3 and the GEMMs with 64-bit sizes.
static void level3_64() {
    const int m = 4, n = 3, k = 5, ld = 6;
    vec a = vals((size_t)ld * k, 17), b = vals((size_t)ld * n, 18), c = vals((size_t)ld * n, 19);
    auto gemm_want = [&](const vec& cin, double alpha, double beta) {
        vec w = cin;
        for (int j = 0; j < n; j++) for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += a[i + l * ld] * b[l + j * ld];
            w[i + j * ld] = alpha * s + beta * cin[i + j * ld];
        }
        return w;
    };
    ONCE {
        float* da = upload<float>(a); float* db = upload<float>(b); float* dc = upload<float>(c);
        float alpha = 1, beta = -2;
        TRY("Sgemm_64", cublasSgemm_v2_64(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, ld, db, ld, &beta, dc, ld));
        check("Sgemm_64", download(dc, (size_t)ld * n), gemm_want(c, 1, -2));
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }
    ONCE {
        float* da = upload<float>(a); float* db = upload<float>(b); float* dc = upload<float>(c);
        float alpha = 2, beta = 1;
        TRY("GemmEx_64 f32", cublasGemmEx_64(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, CUDA_R_32F, ld, db, CUDA_R_32F, ld, &beta, dc, CUDA_R_32F, ld, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        check("GemmEx_64 f32", download(dc, (size_t)ld * n), gemm_want(c, 2, 1));
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }
    ONCE {   // two GEMMs, the second on the same A and B (stride 0) and its own C
        vec c2 = c;
        c2.insert(c2.end(), c.begin(), c.end());
        double* da = upload<double>(a); double* db = upload<double>(b); double* dc = upload<double>(c2);
        double alpha = 1, beta = 1;
        TRY("DgemmStridedBatched_64", cublasDgemmStridedBatched_64(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da, ld, 0, db, ld, 0, &beta, dc, ld, (long long)ld * n, 2));
        vec w = gemm_want(c, 1, 1), want = w;
        want.insert(want.end(), w.begin(), w.end());
        check("DgemmStridedBatched_64", download(dc, c2.size()), want);
        cudaFree(da); cudaFree(db); cudaFree(dc);
    }
    ONCE {   // B := alpha L^-1 B with L lower triangular, unit diagonal
        vec l = vals((size_t)ld * m, 20), x = vals((size_t)ld * n, 21);
        double* dl = upload<double>(l); double* dx = upload<double>(x);
        double alpha = 1;
        TRY("Dtrsm_64 LLNU", cublasDtrsm_v2_64(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, m, n, &alpha, dl, ld, dx, ld));
        vec want = x;
        for (int j = 0; j < n; j++) for (int i = 0; i < m; i++)
            for (int p = 0; p < i; p++) want[i + j * ld] -= l[i + p * ld] * want[p + j * ld];
        check("Dtrsm_64 LLNU", download(dx, x.size()), want);
        cudaFree(dl); cudaFree(dx);
    }
}

// Handle settings: what a fresh handle reads, and a value set and read back.
static void settings() {
    int mode = -1;
    ONCE {
        TRY("GetEnvironmentMode", cublasGetEnvironmentMode(h, &mode));
        printf("environment mode %d\n", mode);
        TRY("SetEnvironmentMode", cublasSetEnvironmentMode(h, 1));
        TRY("GetEnvironmentMode", cublasGetEnvironmentMode(h, &mode));
        printf("environment mode after set %d\n", mode);
        TRY("SetEnvironmentMode", cublasSetEnvironmentMode(h, 0));
    }
    ONCE {
        cublasEmulationStrategy_t s;
        TRY("GetEmulationStrategy", cublasGetEmulationStrategy(h, &s));
        printf("emulation strategy %d\n", (int)s);
        TRY("SetEmulationStrategy", cublasSetEmulationStrategy(h, CUBLAS_EMULATION_STRATEGY_EAGER));
        TRY("GetEmulationStrategy", cublasGetEmulationStrategy(h, &s));
        printf("emulation strategy after set %d\n", (int)s);
    }
    printf("GetEnvironmentMode(NULL): %s\n", cublasGetStatusName(cublasGetEnvironmentMode(h, nullptr)));
}

int main() {
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { printf("FAIL cublasCreate\n"); return 1; }
    level1_64();
    level2_64();
    gemv_batches();
    geam_dgmm();
    syrkx();
    level3_64();
    settings();
    cublasDestroy(h);
    printf("%s cublas_blas64 (%d failures, %d errors)\n", failures ? "FAIL" : "DONE", failures, errors);
    return failures ? 1 : 0;
}
