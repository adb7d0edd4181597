// cuBLASLt matmuls the way PyTorch's addmm / nn.Linear makes them (gemm_and_bias):
// descriptors, layouts and a preference with a workspace limit, one heuristic result,
// then cublasLtMatmul on a stream. fp32, fp16 and bf16 with fp32 compute, transposes,
// the bias and ReLU+bias epilogues, a strided batch, device-side alpha/beta, a cuBLAS
// handle passed as the Lt handle (as PyTorch does), and cuBLASLt's documented argument
// errors. Inputs are small integers, so every result is exact whatever the summation
// order: the output is the same on any GPU and through any correct forwarding.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cublasLt.h>

static int failures = 0;

#define CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL %s: %s\n", #x, cudaGetErrorName(e_)); exit(1); } } while (0)
#define LT(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    printf("FAIL %s: %s\n", #x, cublasLtGetStatusName(s_)); exit(1); } } while (0)

// Small integers in [-3, 3], from a fixed recurrence.
static std::vector<double> ints(size_t n, unsigned seed) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (double)((int)((seed >> 16) % 7) - 3);
    }
    return v;
}

static size_t elem_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

static void* upload(const std::vector<double>& v, cudaDataType t) {
    std::vector<unsigned char> h(v.size() * elem_size(t));
    for (size_t i = 0; i < v.size(); i++) {
        if (t == CUDA_R_32F) ((float*)h.data())[i] = (float)v[i];
        else if (t == CUDA_R_16F) ((__half*)h.data())[i] = __float2half((float)v[i]);
        else ((__nv_bfloat16*)h.data())[i] = __float2bfloat16((float)v[i]);
    }
    void* d;
    CUDA(cudaMalloc(&d, h.size()));
    CUDA(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice));
    return d;
}

static std::vector<double> download(void* d, size_t n, cudaDataType t) {
    std::vector<unsigned char> h(n * elem_size(t));
    CUDA(cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost));
    std::vector<double> v(n);
    for (size_t i = 0; i < n; i++) {
        if (t == CUDA_R_32F) v[i] = ((float*)h.data())[i];
        else if (t == CUDA_R_16F) v[i] = __half2float(((__half*)h.data())[i]);
        else v[i] = __bfloat162float(((__nv_bfloat16*)h.data())[i]);
    }
    return v;
}

struct Case {
    const char* name;
    cudaDataType type;
    cublasOperation_t ta, tb;
    int m, n, k, batch;
    cublasLtEpilogue_t epilogue;
    float alpha, beta;
    bool device_scalars;
    bool blas_handle;
};

static const char* type_name(cudaDataType t) {
    return t == CUDA_R_32F ? "fp32" : t == CUDA_R_16F ? "fp16" : "bf16";
}

template <typename T>
static void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, T v) {
    LT(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}
template <typename T>
static void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, T v) {
    LT(cublasLtMatrixLayoutSetAttribute(l, a, &v, sizeof v));
}

static void run(cublasLtHandle_t lt, cublasHandle_t blas, cudaStream_t stream, void* workspace,
                size_t workspace_size, const Case& c) {
    bool ta = c.ta != CUBLAS_OP_N, tb = c.tb != CUBLAS_OP_N;
    // Stored shapes, column-major: A is m x k (k x m transposed), B is k x n (n x k).
    int a_rows = ta ? c.k : c.m, a_cols = ta ? c.m : c.k;
    int b_rows = tb ? c.n : c.k, b_cols = tb ? c.k : c.n;
    long long sa = (long long)a_rows * a_cols, sb = (long long)b_rows * b_cols,
              sc = (long long)c.m * c.n;
    std::vector<double> a = ints(sa * c.batch, 11), b = ints(sb * c.batch, 23),
                        cin = ints(sc * c.batch, 37), bias = ints(c.m, 51);
    bool has_bias = c.epilogue == CUBLASLT_EPILOGUE_BIAS || c.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
    bool relu = c.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
    void *da = upload(a, c.type), *db = upload(b, c.type), *dc = upload(cin, c.type),
         *dd = upload(std::vector<double>(sc * c.batch, 99.0), c.type),
         *dbias = upload(bias, c.type);

    cublasLtMatmulDesc_t op;
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set_desc(op, CUBLASLT_MATMUL_DESC_TRANSA, c.ta);
    set_desc(op, CUBLASLT_MATMUL_DESC_TRANSB, c.tb);
    if (has_bias) {
        set_desc(op, CUBLASLT_MATMUL_DESC_EPILOGUE, c.epilogue);
        set_desc(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void*)dbias);
    }
    const void *alpha = &c.alpha, *beta = &c.beta;
    void* scalars = nullptr;
    if (c.device_scalars) {
        float host[2] = {c.alpha, c.beta};
        CUDA(cudaMalloc(&scalars, sizeof host));
        CUDA(cudaMemcpy(scalars, host, sizeof host, cudaMemcpyHostToDevice));
        set_desc(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE);
        alpha = scalars;
        beta = (float*)scalars + 1;
    }
    cublasLtMatrixLayout_t la, lb, lc, ld;
    LT(cublasLtMatrixLayoutCreate(&la, c.type, a_rows, a_cols, a_rows));
    LT(cublasLtMatrixLayoutCreate(&lb, c.type, b_rows, b_cols, b_rows));
    LT(cublasLtMatrixLayoutCreate(&lc, c.type, c.m, c.n, c.m));
    LT(cublasLtMatrixLayoutCreate(&ld, c.type, c.m, c.n, c.m));
    if (c.batch > 1) {
        cublasLtMatrixLayout_t ls[4] = {la, lb, lc, ld};
        long long strides[4] = {sa, sb, sc, sc};
        for (int i = 0; i < 4; i++) {
            set_layout(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, (int32_t)c.batch);
            set_layout(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, (int64_t)strides[i]);
        }
    }
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t max_ws = workspace_size;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &max_ws, sizeof max_ws));
    cublasLtHandle_t h = c.blas_handle ? (cublasLtHandle_t)blas : lt;
    cublasLtMatmulHeuristicResult_t result = {};
    int returned = 0;
    LT(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, ld, pref, 1, &result, &returned));
    char what[96];
    snprintf(what, sizeof what, "%s %s %c%c m=%d n=%d k=%d batch=%d", c.name, type_name(c.type),
             ta ? 'T' : 'N', tb ? 'T' : 'N', c.m, c.n, c.k, c.batch);
    if (returned != 1 || result.state != CUBLAS_STATUS_SUCCESS || result.workspaceSize > max_ws) {
        printf("FAIL %s: heuristic returned %d (state %d)\n", what, returned, (int)result.state);
        failures++;
        return;
    }
    LT(cublasLtMatmul(h, op, alpha, da, la, db, lb, beta, dc, lc, dd, ld, &result.algo,
                      workspace, workspace_size, stream));
    CUDA(cudaStreamSynchronize(stream));
    std::vector<double> got = download(dd, sc * c.batch, c.type);

    // D = epilogue(alpha * op(A) op(B) + beta * C + bias) on the CPU, exactly.
    long long sum = 0;
    size_t bad = 0;
    for (int p = 0; p < c.batch; p++)
        for (int j = 0; j < c.n; j++)
            for (int i = 0; i < c.m; i++) {
                double s = 0;
                for (int l = 0; l < c.k; l++) {
                    double x = ta ? a[p * sa + l + (size_t)i * a_rows] : a[p * sa + i + (size_t)l * a_rows];
                    double y = tb ? b[p * sb + j + (size_t)l * b_rows] : b[p * sb + l + (size_t)j * b_rows];
                    s += x * y;
                }
                size_t at = p * sc + i + (size_t)j * c.m;
                double want = c.alpha * s + c.beta * cin[at] + (has_bias ? bias[i] : 0.0);
                if (relu && want < 0) want = 0;
                if (got[at] != want) bad++;
                sum += (long long)got[at] * (long long)((at % 13) + 1);
            }
    if (bad) {
        printf("FAIL %s: %zu of %zu elements differ\n", what, bad, got.size());
        failures++;
    } else {
        printf("PASS %s checksum=%lld\n", what, sum);
    }
    LT(cublasLtMatmulPreferenceDestroy(pref));
    LT(cublasLtMatrixLayoutDestroy(la));
    LT(cublasLtMatrixLayoutDestroy(lb));
    LT(cublasLtMatrixLayoutDestroy(lc));
    LT(cublasLtMatrixLayoutDestroy(ld));
    LT(cublasLtMatmulDescDestroy(op));
    CUDA(cudaFree(da));
    CUDA(cudaFree(db));
    CUDA(cudaFree(dc));
    CUDA(cudaFree(dd));
    CUDA(cudaFree(dbias));
    if (scalars) CUDA(cudaFree(scalars));
}

int main() {
    cublasLtHandle_t lt;
    LT(cublasLtCreate(&lt));
    cublasHandle_t blas;
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
        printf("FAIL cublasCreate\n");
        return 1;
    }
    printf("%s cuBLASLt version is 13.x\n", cublasLtGetVersion() / 10000 == 13 ? "PASS" : "FAIL");
    cudaStream_t stream;
    CUDA(cudaStreamCreate(&stream));
    // PyTorch's cuBLASLt workspace size on Hopper.
    size_t workspace_size = 32 << 20;
    void* workspace;
    CUDA(cudaMalloc(&workspace, workspace_size));

    const Case cases[] = {
        {"plain", CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 1, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, false, false},
        {"bias", CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, 6, 5, 7, 1, CUBLASLT_EPILOGUE_BIAS, 2, 1, false, false},
        {"device-scalars", CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, 4, 6, 5, 1, CUBLASLT_EPILOGUE_DEFAULT, 1, -1, true, false},
        {"plain", CUDA_R_16F, CUBLAS_OP_T, CUBLAS_OP_N, 16, 8, 32, 1, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, false, false},
        {"relu-bias", CUDA_R_16F, CUBLAS_OP_N, CUBLAS_OP_T, 8, 16, 24, 1, CUBLASLT_EPILOGUE_RELU_BIAS, 1, 0, false, true},
        {"bias", CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_T, 8, 8, 16, 1, CUBLASLT_EPILOGUE_BIAS, 1, 0, false, true},
        {"relu-bias", CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N, 16, 8, 8, 1, CUBLASLT_EPILOGUE_RELU_BIAS, 1, 1, false, false},
        {"strided-batch", CUDA_R_16F, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 16, 3, CUBLASLT_EPILOGUE_DEFAULT, 1, 0, false, false},
        {"strided-batch-bias", CUDA_R_32F, CUBLAS_OP_T, CUBLAS_OP_N, 4, 3, 5, 2, CUBLASLT_EPILOGUE_BIAS, 1, 1, false, true},
    };
    for (const Case& c : cases) run(lt, blas, stream, workspace, workspace_size, c);

    // Attributes read back; cuBLASLt's documented argument errors.
    {
        cublasLtMatmulDesc_t op;
        LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        int32_t trans = CUBLAS_OP_T, got = -1;
        size_t written = 0;
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans));
        LT(cublasLtMatmulDescGetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &got, sizeof got, &written));
        printf("%s TRANSA read back (%d, %zu bytes)\n", got == CUBLAS_OP_T && written == 4 ? "PASS" : "FAIL",
               got, written);
        int64_t wide = CUBLAS_OP_T;
        printf("set TRANSA with 8 bytes: %s\n",
               cublasLtGetStatusName(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide)));
        cublasLtMatrixLayout_t l;
        LT(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 4, 4, 4));
        int32_t batch = 0;
        LT(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch, &written));
        printf("%s default batch count is %d\n", batch == 1 ? "PASS" : "FAIL", batch);
        cublasLtMatmulPreference_t pref;
        LT(cublasLtMatmulPreferenceCreate(&pref));
        cublasLtMatmulHeuristicResult_t result;
        int returned = -1;
        printf("heuristic(requested=0): %s\n",
               cublasLtGetStatusName(cublasLtMatmulAlgoGetHeuristic(lt, op, l, l, l, l, pref, 0, &result, &returned)));
        LT(cublasLtMatmulPreferenceDestroy(pref));
        LT(cublasLtMatrixLayoutDestroy(l));
        LT(cublasLtMatmulDescDestroy(op));
    }
    CUDA(cudaFree(workspace));
    CUDA(cudaStreamDestroy(stream));
    cublasDestroy(blas);
    LT(cublasLtDestroy(lt));
    CUDA(cudaDeviceSynchronize());
    printf("%s cublaslt_matmul (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
