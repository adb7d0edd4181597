// launch_api: kernel launch entry points other than <<<>>>: cudaLaunchKernel
// (void** args), cudaLaunchKernelExC / cudaLaunchKernelEx with launch attributes
// (cooperative, priority, cluster dimension), compile-time cluster dims,
// cudaLaunchCooperativeKernel with a grid-wide sync (and one too large), and
// driver entry point lookup (cudaGetDriverEntryPointByVersion / cudaGetDriverEntryPoint).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

__global__ void axpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

__global__ void coop(int* data, int* out, int n) {
    cg::grid_group g = cg::this_grid();
    int i = (int)g.thread_rank();
    if (i < n) data[i] = i * 3 + 1;
    g.sync();
    if (i < n) out[i] = data[(i + 1) % n] + data[n - 1 - i];
}

__global__ void cluster_info(int* out) {
    cg::cluster_group c = cg::this_cluster();
    if (threadIdx.x == 0) out[blockIdx.x] = (int)(c.num_blocks() * 1000 + c.block_rank());
}

__global__ void __cluster_dims__(2, 1, 1) cluster_fixed(int* out) {
    cg::cluster_group c = cg::this_cluster();
    if (threadIdx.x == 0) out[blockIdx.x] = (int)(c.num_blocks() * 1000 + c.block_rank());
}

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still exported.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static cudaError_t old_entry_point(const char* sym, void** fn, cudaDriverEntryPointQueryResult* q) {
    return cudaGetDriverEntryPoint(sym, fn, cudaEnableDefault, q);
}
#pragma GCC diagnostic pop

static void print_ints(const char* what, const int* d, int n) {
    int h[16];
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    printf("%s:", what);
    for (int i = 0; i < n; i++) printf(" %d", h[i]);
    printf("\n");
}

int main() {
    const int n = 1024;
    float *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    float hx[n], hy[n];
    for (int i = 0; i < n; i++) { hx[i] = (float)(i % 10); hy[i] = 1.0f; }
    CHECK(cudaMemcpy(x, hx, sizeof(hx), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(y, hy, sizeof(hy), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));

    // cudaLaunchKernel with a void** argument array.
    float a = 2.5f;
    int nn = n;
    void* args[] = {&y, &x, &a, &nn};
    CHECK(cudaLaunchKernel((const void*)axpy, dim3(n / 128), dim3(128), args, 0, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(hy, y, sizeof(hy), cudaMemcpyDeviceToHost));
    printf("cudaLaunchKernel: %.2f %.2f %.2f\n", hy[0], hy[1], hy[9]);

    // Cooperative kernel with grid sync.
    int *data, *out;
    CHECK(cudaMalloc(&data, n * sizeof(int)));
    CHECK(cudaMalloc(&out, n * sizeof(int)));
    CHECK(cudaMemset(out, 0, n * sizeof(int)));
    int coopSupported = 0;
    CHECK(cudaDeviceGetAttribute(&coopSupported, cudaDevAttrCooperativeLaunch, 0));
    printf("cooperative launch supported: %d\n", coopSupported);
    void* cargs[] = {&data, &out, &nn};
    CHECK(cudaLaunchCooperativeKernel((const void*)coop, dim3(8), dim3(128), cargs, 0, s));
    CHECK(cudaStreamSynchronize(s));
    print_ints("cudaLaunchCooperativeKernel", out, 4);
    cudaError_t e = cudaLaunchCooperativeKernel((const void*)coop, dim3(1000000), dim3(1024), cargs, 0, s);
    printf("cooperative launch too large: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    // cudaLaunchKernelExC with cooperative + priority attributes.
    int least, greatest;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CHECK(cudaMemset(out, 0, n * sizeof(int)));
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDim = dim3(8);
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = s;
    cudaLaunchAttribute attrs[2];
    memset(attrs, 0, sizeof(attrs));
    attrs[0].id = cudaLaunchAttributeCooperative;
    attrs[0].val.cooperative = 1;
    attrs[1].id = cudaLaunchAttributePriority;
    attrs[1].val.priority = greatest;
    cfg.attrs = attrs;
    cfg.numAttrs = 2;
    CHECK(cudaLaunchKernelExC(&cfg, (const void*)coop, cargs));
    CHECK(cudaStreamSynchronize(s));
    print_ints("cudaLaunchKernelExC(cooperative, priority)", out, 4);

    // No attributes, plain stream launch via the C++ template wrapper.
    cfg.numAttrs = 0;
    cfg.attrs = nullptr;
    cfg.gridDim = dim3(n / 256);
    cfg.blockDim = dim3(256);
    CHECK(cudaLaunchKernelEx(&cfg, axpy, y, (const float*)x, -1.0f, n));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(hy, y, sizeof(hy), cudaMemcpyDeviceToHost));
    printf("cudaLaunchKernelEx: %.2f %.2f %.2f\n", hy[0], hy[1], hy[9]);

    // Thread block clusters (sm_90): launch attribute and compile-time dims.
    int* cl;
    CHECK(cudaMalloc(&cl, 16 * sizeof(int)));
    CHECK(cudaMemset(cl, 0, 16 * sizeof(int)));
    cudaLaunchAttribute cattr;
    memset(&cattr, 0, sizeof(cattr));
    cattr.id = cudaLaunchAttributeClusterDimension;
    cattr.val.clusterDim.x = 4;
    cattr.val.clusterDim.y = 1;
    cattr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(8);
    cfg.blockDim = dim3(32);
    cfg.attrs = &cattr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, cluster_info, cl));
    CHECK(cudaStreamSynchronize(s));
    print_ints("cluster dim 4", cl, 8);
    cluster_fixed<<<8, 32, 0, s>>>(cl);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    print_ints("__cluster_dims__(2)", cl, 8);
    cattr.val.clusterDim.x = 3;  // grid 8 is not a multiple of 3
    e = cudaLaunchKernelEx(&cfg, cluster_info, cl);
    printf("cluster dim 3 with grid 8: %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    // Driver entry points.
    typedef int (*GetErrStr)(int, const char**);
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q = (cudaDriverEntryPointQueryResult)-1;
    e = cudaGetDriverEntryPointByVersion("cuGetErrorString", &fn, 13000, cudaEnableDefault, &q);
    printf("ByVersion(cuGetErrorString, 13000): %s non-null=%s status=%d\n", cudaGetErrorName(e), fn ? "yes" : "no",
           (int)q);
    if (e == cudaSuccess && fn) {
        const char* str = nullptr;
        int r = ((GetErrStr)fn)(1, &str);
        printf("  cuGetErrorString(1) -> %d '%s'\n", r, str ? str : "(null)");
    }
    fn = nullptr;
    q = (cudaDriverEntryPointQueryResult)-1;
    e = cudaGetDriverEntryPointByVersion("cuDoesNotExist", &fn, 13000, cudaEnableDefault, &q);
    printf("ByVersion(cuDoesNotExist, 13000): %s non-null=%s status=%d\n", cudaGetErrorName(e), fn ? "yes" : "no",
           (int)q);
    cudaGetLastError();
    fn = nullptr;
    q = (cudaDriverEntryPointQueryResult)-1;
    e = cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault, &q);
    printf("ByVersion(cuMemAlloc, 12000): %s non-null=%s status=%d\n", cudaGetErrorName(e), fn ? "yes" : "no", (int)q);
    cudaGetLastError();
    fn = nullptr;
    q = (cudaDriverEntryPointQueryResult)-1;
    e = old_entry_point("cuGetErrorString", &fn, &q);
    printf("cudaGetDriverEntryPoint(cuGetErrorString): %s non-null=%s status=%d\n", cudaGetErrorName(e),
           fn ? "yes" : "no", (int)q);
    fn = nullptr;
    q = (cudaDriverEntryPointQueryResult)-1;
    e = old_entry_point("cuDoesNotExist", &fn, &q);
    printf("cudaGetDriverEntryPoint(cuDoesNotExist): %s non-null=%s status=%d\n", cudaGetErrorName(e),
           fn ? "yes" : "no", (int)q);
    cudaGetLastError();

    CHECK(cudaFree(cl));
    CHECK(cudaFree(data));
    CHECK(cudaFree(out));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaStreamDestroy(s));
    printf("done\n");
    return 0;
}
