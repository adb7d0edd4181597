// cuSOLVER through vmcuda: Cholesky factorisation and solve of a symmetric positive
// definite system (potrf/potrs with a workspace the library sizes), and an LU solve
// (getrf/getrs), checked by their residuals.
#include <cmath>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("FAIL %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorName(e)); return 1; } } while (0)
#define CHECK_SOLVER(x) do { cusolverStatus_t s = (x); if (s != CUSOLVER_STATUS_SUCCESS) { printf("FAIL %s:%d cusolver status %d\n", __FILE__, __LINE__, (int)s); return 1; } } while (0)

int main() {
    const int n = 128;
    std::vector<double> m(n * n), a(n * n), b(n), x(n);
    for (int i = 0; i < n * n; i++) m[i] = (double)((i * 7919) % 1000) / 1000.0 - 0.5;
    // A = M M^T + n I (column-major, symmetric positive definite).
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += m[i + k * n] * m[j + k * n];
            a[i + j * n] = s + (i == j ? n : 0);
        }
    for (int i = 0; i < n; i++) b[i] = 1.0 + i % 5;

    cusolverDnHandle_t h;
    CHECK_SOLVER(cusolverDnCreate(&h));
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK_SOLVER(cusolverDnSetStream(h, stream));
    double *da, *db, *work;
    int *info, *pivots;
    CHECK_CUDA(cudaMalloc(&da, sizeof(double) * n * n));
    CHECK_CUDA(cudaMalloc(&db, sizeof(double) * n));
    CHECK_CUDA(cudaMalloc(&info, sizeof(int)));
    CHECK_CUDA(cudaMalloc(&pivots, sizeof(int) * n));

    // Cholesky.
    CHECK_CUDA(cudaMemcpy(da, a.data(), sizeof(double) * n * n, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(db, b.data(), sizeof(double) * n, cudaMemcpyHostToDevice));
    int lwork = 0;
    CHECK_SOLVER(cusolverDnDpotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, n, da, n, &lwork));
    CHECK_CUDA(cudaMalloc(&work, sizeof(double) * lwork));
    CHECK_SOLVER(cusolverDnDpotrf(h, CUBLAS_FILL_MODE_LOWER, n, da, n, work, lwork, info));
    CHECK_SOLVER(cusolverDnDpotrs(h, CUBLAS_FILL_MODE_LOWER, n, 1, da, n, db, n, info));
    int hinfo = -1;
    CHECK_CUDA(cudaMemcpyAsync(&hinfo, info, sizeof(int), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaMemcpyAsync(x.data(), db, sizeof(double) * n, cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    double res_chol = 0;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) s += a[i + j * n] * x[j];
        res_chol = fmax(res_chol, fabs(s - b[i]));
    }
    int info_chol = hinfo;
    CHECK_CUDA(cudaFree(work));

    // LU with partial pivoting on the same system.
    CHECK_CUDA(cudaMemcpy(da, a.data(), sizeof(double) * n * n, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(db, b.data(), sizeof(double) * n, cudaMemcpyHostToDevice));
    CHECK_SOLVER(cusolverDnDgetrf_bufferSize(h, n, n, da, n, &lwork));
    CHECK_CUDA(cudaMalloc(&work, sizeof(double) * lwork));
    CHECK_SOLVER(cusolverDnDgetrf(h, n, n, da, n, work, pivots, info));
    CHECK_SOLVER(cusolverDnDgetrs(h, CUBLAS_OP_N, n, 1, da, n, pivots, db, n, info));
    CHECK_CUDA(cudaMemcpyAsync(&hinfo, info, sizeof(int), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaMemcpyAsync(x.data(), db, sizeof(double) * n, cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    double res_lu = 0;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < n; j++) s += a[i + j * n] * x[j];
        res_lu = fmax(res_lu, fabs(s - b[i]));
    }
    CHECK_CUDA(cudaFree(work));
    CHECK_CUDA(cudaFree(da));
    CHECK_CUDA(cudaFree(db));
    CHECK_CUDA(cudaFree(info));
    CHECK_CUDA(cudaFree(pivots));
    CHECK_SOLVER(cusolverDnDestroy(h));
    CHECK_CUDA(cudaStreamDestroy(stream));
    bool ok = info_chol == 0 && hinfo == 0 && res_chol < 1e-9 && res_lu < 1e-9;
    printf("x[0..2] = %.9f %.9f %.9f\n", x[0], x[1], x[2]);
    printf("%s cusolver_potrf: cholesky info %d residual %s, lu info %d residual %s\n", ok ? "PASS" : "FAIL",
           info_chol, res_chol < 1e-9 ? "small" : "LARGE", hinfo, res_lu < 1e-9 ? "small" : "LARGE");
    return ok ? 0 : 1;
}
