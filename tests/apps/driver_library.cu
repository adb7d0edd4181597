// The driver's library and kernel calls (what NVIDIA's runtime loads kernels with),
// on a cubin NVRTC compiles at run time: cuLibraryLoadData, kernels by name and by
// enumeration, their names and parameter layouts, CUkernel <-> CUfunction, module
// function enumeration, occupancy, cuLaunchKernelEx, and a few context queries.
// Prints only what is the same on every run; kernel results are checked and printed
// where they ran (CHECK lines).
#include <cuda.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

static const char *name_of(CUresult r) {
    const char *n = "?";
    cuGetErrorName(r, &n);
    return n;
}

static void check(const char *what, CUresult r, CUresult want = CUDA_SUCCESS) {
    if (r == want) {
        printf("PASS %s: %s\n", what, name_of(r));
    } else {
        printf("FAIL %s: %s (want %s)\n", what, name_of(r), name_of(want));
        failures++;
    }
}

static const char *source =
    "extern \"C\" __global__ void axpy(float a, const float *x, float *y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n"
    "extern \"C\" __global__ void fill(int *p, int v, char tag, double scale) {\n"
    "  p[threadIdx.x] = v + (int)(tag * scale);\n"
    "}\n";

int main() {
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, source, "lib.cu", 0, NULL, NULL) != NVRTC_SUCCESS) {
        printf("FAIL nvrtcCreateProgram\n");
        return 1;
    }
    const char *opts[] = {"-arch=sm_90"};
    if (nvrtcCompileProgram(prog, 1, opts) != NVRTC_SUCCESS) {
        printf("FAIL nvrtcCompileProgram\n");
        return 1;
    }
    size_t cubin_len = 0;
    nvrtcGetCUBINSize(prog, &cubin_len);
    char *cubin = (char *)malloc(cubin_len);
    nvrtcGetCUBIN(prog, cubin);
    nvrtcDestroyProgram(&prog);

    check("cuInit", cuInit(0));
    CUdevice dev;
    check("cuDeviceGet", cuDeviceGet(&dev, 0));
    CUcontext ctx;
    check("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
    check("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
    unsigned long long ctx_id = 0;
    check("cuCtxGetId", cuCtxGetId(ctx, &ctx_id));
    printf("context id is nonzero: %s\n", ctx_id ? "yes" : "no");

    CUlibrary lib;
    check("cuLibraryLoadData", cuLibraryLoadData(&lib, cubin, NULL, NULL, 0, NULL, NULL, 0));
    unsigned count = 0;
    check("cuLibraryGetKernelCount", cuLibraryGetKernelCount(&count, lib));
    printf("kernels in the library: %u\n", count);
    CUkernel kernels[4] = {};
    check("cuLibraryEnumerateKernels", cuLibraryEnumerateKernels(kernels, count < 4 ? count : 4, lib));
    for (unsigned i = 0; i < count && i < 4; i++) {
        const char *name = NULL;
        check("cuKernelGetName", cuKernelGetName(&name, kernels[i]));
        printf("kernel %u: %s\n", i, name ? name : "(null)");
    }
    CUkernel fill, axpy;
    check("cuLibraryGetKernel(fill)", cuLibraryGetKernel(&fill, lib, "fill"));
    check("cuLibraryGetKernel(axpy)", cuLibraryGetKernel(&axpy, lib, "axpy"));
    CUkernel missing;
    check("cuLibraryGetKernel(missing)", cuLibraryGetKernel(&missing, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    for (size_t i = 0; i < 5; i++) {
        size_t offset = 0, size = 0;
        CUresult r = cuKernelGetParamInfo(fill, i, &offset, &size);
        if (r == CUDA_SUCCESS) {
            printf("fill param %zu: offset %zu size %zu\n", i, offset, size);
        } else {
            printf("fill param %zu: %s\n", i, name_of(r));
        }
    }
    CUfunction f_fill;
    check("cuKernelGetFunction", cuKernelGetFunction(&f_fill, fill));
    const char *fname = NULL;
    check("cuFuncGetName", cuFuncGetName(&fname, f_fill));
    printf("function name: %s\n", fname ? fname : "(null)");
    CUlibrary owner;
    check("cuKernelGetLibrary", cuKernelGetLibrary(&owner, fill));
    printf("kernel's library is the one loaded: %s\n", owner == lib ? "yes" : "no");
    CUmodule mod;
    check("cuLibraryGetModule", cuLibraryGetModule(&mod, lib));
    unsigned fcount = 0;
    check("cuModuleGetFunctionCount", cuModuleGetFunctionCount(&fcount, mod));
    printf("functions in the module: %u\n", fcount);
    int max_threads = 0;
    check("cuKernelGetAttribute(MAX_THREADS_PER_BLOCK)",
          cuKernelGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, axpy, dev));
    int min_grid = 0, block = 0;
    check("cuOccupancyMaxPotentialBlockSize",
          cuOccupancyMaxPotentialBlockSize(&min_grid, &block, (CUfunction)axpy, NULL, 0, 0));
    printf("potential block size within the kernel's limit: %s\n",
           block > 0 && block <= max_threads && block % 32 == 0 ? "yes" : "no");

    CUstream stream;
    check("cuStreamCreate", cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUcontext sctx = NULL;
    check("cuStreamGetCtx", cuStreamGetCtx(stream, &sctx));
    printf("stream's context is the current one: %s\n", sctx == ctx ? "yes" : "no");

    // A launch through cuLaunchKernelEx with a CUkernel where a CUfunction goes.
    CUdeviceptr p;
    check("cuMemAlloc", cuMemAlloc(&p, 32 * sizeof(int)));
    int v = 40;
    char tag = 2;
    double scale = 1.0;
    void *args[] = {&p, &v, &tag, &scale};
    CUlaunchConfig cfg = {};
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 32;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = stream;
    check("cuLaunchKernelEx(CUkernel)", cuLaunchKernelEx(&cfg, (CUfunction)fill, args, NULL));
    check("cuStreamSynchronize", cuStreamSynchronize(stream));
    int host[32] = {};
    check("cuMemcpyDtoH", cuMemcpyDtoH(host, p, sizeof host));
    bool ran = true;
    for (int i = 0; i < 32; i++) ran &= host[i] == 42;
    printf("CHECK fill wrote 42 everywhere: %s\n", ran ? "yes" : "no");

    check("cuMemFree", cuMemFree(p));
    check("cuStreamDestroy", cuStreamDestroy(stream));
    check("cuLibraryUnload", cuLibraryUnload(lib));
    free(cubin);
    printf("%s driver_library: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
