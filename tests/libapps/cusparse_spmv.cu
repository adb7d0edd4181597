// cuSPARSE through vmcuda: the generic API's sparse matrix-vector product (CSR, with
// the external buffer the library sizes) and a sparse-dense matrix product, checked
// against the CPU.
#include <cmath>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include <cusparse.h>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("FAIL %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorName(e)); return 1; } } while (0)
#define CHECK_SPARSE(x) do { cusparseStatus_t s = (x); if (s != CUSPARSE_STATUS_SUCCESS) { printf("FAIL %s:%d cusparse status %d\n", __FILE__, __LINE__, (int)s); return 1; } } while (0)

int main() {
    const int n = 4096;
    // A tridiagonal matrix (-1, 4, -1) with a few long-range entries.
    std::vector<int> rows(n + 1), cols;
    std::vector<float> vals;
    for (int i = 0; i < n; i++) {
        rows[i] = (int)cols.size();
        if (i > 0) { cols.push_back(i - 1); vals.push_back(-1.0f); }
        cols.push_back(i); vals.push_back(4.0f);
        if (i + 1 < n) { cols.push_back(i + 1); vals.push_back(-1.0f); }
        if (i % 97 == 0 && i + 500 < n) { cols.push_back(i + 500); vals.push_back(0.5f); }
    }
    rows[n] = (int)cols.size();
    const int nnz = rows[n];
    std::vector<float> x(n), y(n), ref(n);
    for (int i = 0; i < n; i++) x[i] = (float)(i % 13) * 0.25f;
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int k = rows[i]; k < rows[i + 1]; k++) s += vals[k] * x[cols[k]];
        ref[i] = (float)s;
    }

    int *drows, *dcols;
    float *dvals, *dx, *dy;
    CHECK_CUDA(cudaMalloc(&drows, sizeof(int) * (n + 1)));
    CHECK_CUDA(cudaMalloc(&dcols, sizeof(int) * nnz));
    CHECK_CUDA(cudaMalloc(&dvals, sizeof(float) * nnz));
    CHECK_CUDA(cudaMalloc(&dx, sizeof(float) * n));
    CHECK_CUDA(cudaMalloc(&dy, sizeof(float) * n));
    CHECK_CUDA(cudaMemcpy(drows, rows.data(), sizeof(int) * (n + 1), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dcols, cols.data(), sizeof(int) * nnz, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dvals, vals.data(), sizeof(float) * nnz, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dx, x.data(), sizeof(float) * n, cudaMemcpyHostToDevice));

    cusparseHandle_t h;
    CHECK_SPARSE(cusparseCreate(&h));
    cusparseSpMatDescr_t a;
    cusparseDnVecDescr_t vx, vy;
    CHECK_SPARSE(cusparseCreateCsr(&a, n, n, nnz, drows, dcols, dvals, CUSPARSE_INDEX_32I,
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    CHECK_SPARSE(cusparseCreateDnVec(&vx, n, dx, CUDA_R_32F));
    CHECK_SPARSE(cusparseCreateDnVec(&vy, n, dy, CUDA_R_32F));
    float alpha = 1.0f, beta = 0.0f;
    size_t size = 0;
    CHECK_SPARSE(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, a, vx, &beta, vy,
                                         CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, &size));
    void *buffer = nullptr;
    CHECK_CUDA(cudaMalloc(&buffer, size > 0 ? size : 1));
    CHECK_SPARSE(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, a, vx, &beta, vy, CUDA_R_32F,
                              CUSPARSE_SPMV_ALG_DEFAULT, buffer));
    CHECK_CUDA(cudaMemcpy(y.data(), dy, sizeof(float) * n, cudaMemcpyDeviceToHost));
    double err = 0;
    for (int i = 0; i < n; i++) err = fmax(err, fabs(y[i] - ref[i]));

    // SpMM: A times a dense n x 4 matrix (column-major).
    const int k = 4;
    std::vector<float> bm(n * k), cm(n * k);
    for (int i = 0; i < n * k; i++) bm[i] = (float)((i * 31) % 17) * 0.125f;
    float *db, *dc;
    CHECK_CUDA(cudaMalloc(&db, sizeof(float) * n * k));
    CHECK_CUDA(cudaMalloc(&dc, sizeof(float) * n * k));
    CHECK_CUDA(cudaMemcpy(db, bm.data(), sizeof(float) * n * k, cudaMemcpyHostToDevice));
    cusparseDnMatDescr_t mb, mc;
    CHECK_SPARSE(cusparseCreateDnMat(&mb, n, k, n, db, CUDA_R_32F, CUSPARSE_ORDER_COL));
    CHECK_SPARSE(cusparseCreateDnMat(&mc, n, k, n, dc, CUDA_R_32F, CUSPARSE_ORDER_COL));
    size_t size2 = 0;
    CHECK_SPARSE(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                         &alpha, a, mb, &beta, mc, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, &size2));
    void *buffer2 = nullptr;
    CHECK_CUDA(cudaMalloc(&buffer2, size2 > 0 ? size2 : 1));
    CHECK_SPARSE(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, a, mb,
                              &beta, mc, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, buffer2));
    CHECK_CUDA(cudaMemcpy(cm.data(), dc, sizeof(float) * n * k, cudaMemcpyDeviceToHost));
    double err2 = 0;
    for (int c = 0; c < k; c++)
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int q = rows[i]; q < rows[i + 1]; q++) s += vals[q] * bm[c * n + cols[q]];
            err2 = fmax(err2, fabs(cm[c * n + i] - s));
        }

    CHECK_SPARSE(cusparseDestroySpMat(a));
    CHECK_SPARSE(cusparseDestroyDnVec(vx));
    CHECK_SPARSE(cusparseDestroyDnVec(vy));
    CHECK_SPARSE(cusparseDestroyDnMat(mb));
    CHECK_SPARSE(cusparseDestroyDnMat(mc));
    CHECK_SPARSE(cusparseDestroy(h));
    for (void *p : {(void *)drows, (void *)dcols, (void *)dvals, (void *)dx, (void *)dy, buffer, buffer2,
                    (void *)db, (void *)dc})
        CHECK_CUDA(cudaFree(p));
    bool ok = err < 1e-4 && err2 < 1e-4;
    printf("y[0..2] = %.4f %.4f %.4f\n", y[0], y[1], y[2]);
    printf("%s cusparse_spmv: spmv %s, spmm %s\n", ok ? "PASS" : "FAIL", err < 1e-4 ? "ok" : "wrong",
           err2 < 1e-4 ? "ok" : "wrong");
    return ok ? 0 : 1;
}
