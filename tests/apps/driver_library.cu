// The driver's library and kernel calls (what NVIDIA's runtime loads kernels with),
// on a cubin NVRTC compiles at run time: cuLibraryLoadData, kernels by name and by
// enumeration, their names and parameter layouts, CUkernel <-> CUfunction, module
// function enumeration, occupancy, cuLaunchKernelEx, a few context queries, and the
// driver's function-introspection table (slot 7 walks a module's functions: how cuFFT
// finds its kernels).
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

// Export table 6e163fbe..., slot 7: (context, module, visitor, value, module, data)
// calls the visitor with (value, function, name, 0, 0, module) for each function of
// the module and answers how many there were.
typedef void (*visitor_t)(void *, CUfunction, const char *, size_t, size_t, CUmodule);
typedef size_t (*walk_t)(CUcontext, CUmodule, visitor_t, void *, CUmodule, void *);
struct walked {
    int n;
    CUfunction f[4];
    char name[4][32];
};
static void visit(void *value, CUfunction f, const char *name, size_t, size_t, CUmodule) {
    walked *w = (walked *)value;
    if (w->n < 4) {
        w->f[w->n] = f;
        snprintf(w->name[w->n], sizeof w->name[0], "%s", name ? name : "(null)");
    }
    w->n++;
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
    const void *introspection = NULL;
    CUuuid introspection_id = {{0x6e, 0x16, 0x3f, (char)0xbe, (char)0xb9, 0x58, 0x44, 0x4d,
                                (char)0x83, 0x5c, (char)0xe1, (char)0x82, (char)0xaf, (char)0xf1,
                                (char)0x99, 0x1e}};
    check("cuGetExportTable(function introspection)", cuGetExportTable(&introspection, &introspection_id));
    walked w = {};
    CUfunction walked_fill = NULL;
    if (introspection) {
        walk_t walk = (walk_t)((void *const *)introspection)[7];
        size_t said = walk(ctx, mod, visit, &w, mod, NULL);
        printf("slot 7 visited %d functions and said %zu\n", w.n, said);
        // In name order: the order of a module's functions is the driver's own.
        for (int i = 0; i < w.n && i < 4; i++)
            for (int j = i + 1; j < w.n && j < 4; j++)
                if (strcmp(w.name[j], w.name[i]) < 0) {
                    walked t = w;
                    memcpy(w.name[i], t.name[j], 32);
                    memcpy(w.name[j], t.name[i], 32);
                    w.f[i] = t.f[j];
                    w.f[j] = t.f[i];
                }
        for (int i = 0; i < w.n && i < 4; i++) {
            printf("slot 7 function %d: %s\n", i, w.name[i]);
            if (strcmp(w.name[i], "fill") == 0) walked_fill = w.f[i];
        }
        if (walked_fill) {
            const char *walked_name = NULL;
            check("cuFuncGetName(walked fill)", cuFuncGetName(&walked_name, walked_fill));
            printf("walked function's name: %s\n", walked_name ? walked_name : "(null)");
            int regs = -1;
            check("cuFuncGetAttribute(walked fill)",
                  cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, walked_fill));
        }
    }
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
    if (walked_fill) {
        // The function slot 7 handed out is an ordinary CUfunction: cuLaunchKernel runs it.
        v = 50;
        check("cuLaunchKernel(walked fill)",
              cuLaunchKernel(walked_fill, 1, 1, 1, 32, 1, 1, 0, stream, args, NULL));
        check("cuStreamSynchronize", cuStreamSynchronize(stream));
        check("cuMemcpyDtoH", cuMemcpyDtoH(host, p, sizeof host));
        ran = true;
        for (int i = 0; i < 32; i++) ran &= host[i] == 52;
        printf("CHECK walked fill wrote 52 everywhere: %s\n", ran ? "yes" : "no");
    }

    check("cuMemFree", cuMemFree(p));
    check("cuStreamDestroy", cuStreamDestroy(stream));
    check("cuLibraryUnload", cuLibraryUnload(lib));
    free(cubin);
    printf("%s driver_library: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
