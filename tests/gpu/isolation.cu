// What one guest can learn of another's GPU memory, and whether quotas hold; run
// natively and through vmcuda by tests/gpu/run-isolation.sh.
//
//   isolation fill BYTES        allocate, fill with 0xAB, print the pointer, wait for stdin to close
//   isolation probe BYTES       allocate fresh memory; count bytes that are not zero
//   isolation reuse BYTES       fill, free, allocate again in this process; count stale bytes
//   isolation peek PTR          copy 64 bytes from another process's pointer
//   isolation quota BYTES       the device as a guest with a quota of BYTES sees it
//
// Each of these takes the guest's quota Q (bytes) and tries one path by which device
// memory can be taken beyond it; natively there is no quota, so the line shows what
// the GPU spent (cudaMemGetInfo before and after):
//   isolation globals Q         load PTX whose .global takes 2Q, then one of Q/4
//   isolation limits Q          stack size 256 KiB (+ a launch), malloc heap 2Q, printf FIFO 2Q
//   isolation pool Q            threshold UINT64_MAX, cudaMallocAsync 3Q/4 and free, then cudaMalloc Q/2
//   isolation graph Q           capture cudaMallocAsync Q/2, launch, then cudaMalloc Q/2 and count stale bytes
//   isolation vmm Q             cuMemCreate, map, cuMemRelease three times, unmap: codes, then cudaMalloc 3Q/4
//   isolation reset Q           cudaMalloc Q/2 (on every device), cudaDeviceReset device 0, cudaMalloc 3Q/4
//   isolation tiny Q            one-byte cudaMallocs until 2Q/512 or the first refusal
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void nop() {}

static size_t count_nonzero(const unsigned char *dev, size_t bytes);

// Driver entry points through the runtime (no -lcuda: the bridged run's libcuda is the
// guest library's, the native run's the host driver).
template <typename F> static F driver(const char *name) {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        f == nullptr) {
        printf("%s: not found\n", name);
        exit(1);
    }
    return reinterpret_cast<F>(f);
}

static unsigned long long used_now() {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return total_b - free_b;
}

static const char *mib(long long bytes) {
    static char buf[8][32];
    static int i;
    char *b = buf[i++ % 8];
    snprintf(b, 32, "%+.1f MiB", bytes / 1048576.0);
    return b;
}

static int quota_path(const char *mode, unsigned long long q) {
    cudaFree(nullptr);
    long long before = (long long)used_now();
    if (!strcmp(mode, "globals")) {
        typedef CUresult (*Load)(CUmodule *, const void *);
        Load load = driver<Load>("cuModuleLoadData");
        auto ptx = [](unsigned long long bytes) {
            static char text[512];
            snprintf(text, sizeof text,
                     ".version 8.0\n.target sm_90\n.address_size 64\n"
                     ".visible .global .align 8 .b8 big[%llu];\n",
                     bytes);
            return text;
        };
        CUmodule m1 = nullptr, m2 = nullptr;
        CUresult r1 = load(&m1, ptx(2 * q));
        long long after1 = (long long)used_now();
        CUresult r2 = load(&m2, ptx(q / 4));
        long long after2 = (long long)used_now();
        printf("2Q global: %d (%s); Q/4 global: %d (%s)\n", (int)r1, mib(after1 - before), (int)r2,
               mib(after2 - after1));
        return 0;
    }
    if (!strcmp(mode, "limits")) {
        cudaError_t s = cudaDeviceSetLimit(cudaLimitStackSize, 256 << 10);
        cudaError_t l = cudaSuccess;
        if (s == cudaSuccess) {
            nop<<<1, 1>>>();
            l = cudaDeviceSynchronize();
        }
        long long after_stack = (long long)used_now();
        cudaError_t h = cudaDeviceSetLimit(cudaLimitMallocHeapSize, 2 * q);
        cudaError_t f = cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 2 * q);
        nop<<<1, 1>>>();
        cudaDeviceSynchronize();
        cudaGetLastError();
        size_t stack = 0;
        cudaDeviceGetLimit(&stack, cudaLimitStackSize);
        printf("stack 256 KiB: %s, launch %s (%s, stack now %zu); heap 2Q: %s; printf 2Q: %s (%s)\n",
               cudaGetErrorName(s), cudaGetErrorName(l), mib(after_stack - before), stack,
               cudaGetErrorName(h), cudaGetErrorName(f), mib((long long)used_now() - before));
        return 0;
    }
    if (!strcmp(mode, "pool")) {
        cudaMemPool_t pool;
        cudaDeviceGetDefaultMemPool(&pool, 0);
        unsigned long long want = UINT64_MAX, got = 0;
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &want);
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got);
        void *p = nullptr, *b = nullptr;
        cudaStream_t st;
        cudaStreamCreate(&st);
        cudaError_t a = cudaMallocAsync(&p, q / 4 * 3, st);
        cudaFreeAsync(p, st);
        cudaStreamSynchronize(st);
        long long kept = (long long)used_now() - before;
        cudaError_t m = cudaMalloc(&b, q / 2);
        cudaGetLastError();
        cudaMemPoolTrimTo(pool, 0);
        cudaError_t m2 = cudaMalloc(&b, q / 2);
        printf("threshold %s Q; 3Q/4 async: %s, freed, pool keeps %s; then Q/2: %s; after trim Q/2: %s\n",
               got <= q ? "<=" : ">", cudaGetErrorName(a), mib(kept), cudaGetErrorName(m),
               cudaGetErrorName(m2));
        return 0;
    }
    if (!strcmp(mode, "graph")) {
        cudaStream_t st;
        cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        unsigned char *g = nullptr;
        void *b = nullptr;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
        cudaError_t a = cudaMallocAsync(&g, q / 2, st);
        cudaStreamEndCapture(st, &graph);
        cudaError_t i = cudaGraphInstantiate(&exec, graph, 0);
        cudaError_t l = cudaGraphLaunch(exec, st);
        cudaStreamSynchronize(st);
        long long held = (long long)used_now() - before;
        size_t stale = a == cudaSuccess && l == cudaSuccess ? count_nonzero(g, 1 << 20) : 0;
        cudaError_t m = cudaMalloc(&b, q / 2 + (2 << 20));
        cudaGetLastError();
        printf("captured Q/2: %s, instantiate %s, launch %s (%s); %zu of 1 MiB not zero; then Q/2: %s\n",
               cudaGetErrorName(a), cudaGetErrorName(i), cudaGetErrorName(l), mib(held), stale,
               cudaGetErrorName(m));
        return 0;
    }
    if (!strcmp(mode, "vmm")) {
        typedef CUresult (*Gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
        typedef CUresult (*Create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                   unsigned long long);
        typedef CUresult (*Release)(CUmemGenericAllocationHandle);
        typedef CUresult (*Reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
        typedef CUresult (*Map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                unsigned long long);
        typedef CUresult (*Unmap)(CUdeviceptr, size_t);
        CUmemAllocationProp prop = {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        size_t gran = 0;
        driver<Gran>("cuMemGetAllocationGranularity")(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        size_t size = (q / 2 + gran - 1) / gran * gran;
        CUmemGenericAllocationHandle h = 0;
        CUdeviceptr va = 0;
        CUresult c = driver<Create>("cuMemCreate")(&h, size, &prop, 0);
        driver<Reserve>("cuMemAddressReserve")(&va, size, 0, 0, 0);
        CUresult mp = driver<Map>("cuMemMap")(va, size, 0, h, 0);
        Release release = driver<Release>("cuMemRelease");
        CUresult r1 = release(h), r2 = release(h), r3 = release(h);
        CUresult u = driver<Unmap>("cuMemUnmap")(va, size);
        void *b = nullptr;
        cudaError_t m = cudaMalloc(&b, q / 4 * 3);
        printf("create Q/2 %d, map %d, release x3: %d %d %d, unmap %d; then 3Q/4: %s (%s)\n", (int)c,
               (int)mp, (int)r1, (int)r2, (int)r3, (int)u, cudaGetErrorName(m),
               mib((long long)used_now() - before));
        return 0;
    }
    if (!strcmp(mode, "reset")) {
        int n = 0;
        cudaGetDeviceCount(&n);
        void *p = nullptr;
        for (int d = n - 1; d >= 0; d--) {
            cudaSetDevice(d);
            cudaMalloc(&p, q / 2);
        }
        cudaError_t r = cudaDeviceReset();
        cudaError_t m = cudaMalloc(&p, q / 4 * 3);
        cudaGetLastError();
        printf("%d device(s) with Q/2 each; reset device 0: %s; then 3Q/4 on it: %s (expected %s)\n", n,
               cudaGetErrorName(r), cudaGetErrorName(m),
               n > 1 ? "refused under a quota: the other devices' Q/2 is still held" : "success");
        return 0;
    }
    if (!strcmp(mode, "tiny")) {
        unsigned long long want = 2 * q / 512, made = 0;
        void *p = nullptr;
        cudaError_t e = cudaSuccess;
        while (made < want && (e = cudaMalloc(&p, 1)) == cudaSuccess) made++;
        cudaGetLastError();
        printf("%llu of %llu one-byte allocations (%s), stopped by %s\n", made, want,
               mib((long long)used_now() - before), cudaGetErrorName(e));
        return 0;
    }
    return -1;
}

static size_t count_nonzero(const unsigned char *dev, size_t bytes) {
    std::vector<unsigned char> host(bytes);
    cudaError_t e = cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        printf("copy back: %s\n", cudaGetErrorName(e));
        exit(1);
    }
    size_t n = 0;
    for (unsigned char b : host) n += b != 0;
    return n;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: isolation fill|probe|reuse|peek|quota ARG\n");
        return 2;
    }
    const char *mode = argv[1];
    unsigned long long arg = strtoull(argv[2], nullptr, 0);
    unsigned char *p = nullptr;
    if (!strcmp(mode, "fill")) {
        if (cudaMalloc(&p, arg) != cudaSuccess || cudaMemset(p, 0xAB, arg) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess) {
            printf("fill failed\n");
            return 1;
        }
        printf("filled %p\n", (void *)p);
        fflush(stdout);
        // Hold the memory until told to go, then leave without freeing it.
        char buf[16];
        while (fread(buf, 1, sizeof buf, stdin) > 0) {
        }
        _exit(0);
    }
    if (!strcmp(mode, "probe")) {
        if (cudaMalloc(&p, arg) != cudaSuccess) return 1;
        printf("fresh allocation: %zu of %llu bytes not zero\n", count_nonzero(p, arg), arg);
        return 0;
    }
    if (!strcmp(mode, "reuse")) {
        unsigned char *q = nullptr;
        cudaMalloc(&p, arg);
        cudaMemset(p, 0xCD, arg);
        cudaFree(p);
        cudaMalloc(&q, arg);
        printf("reallocated in-process (%s address): %zu of %llu bytes stale\n",
               p == q ? "same" : "other", count_nonzero(q, arg), arg);
        return 0;
    }
    if (!strcmp(mode, "peek")) {
        unsigned char buf[64];
        cudaError_t e = cudaMemcpy(buf, (void *)(uintptr_t)arg, sizeof buf, cudaMemcpyDeviceToHost);
        printf("copy from another process's pointer: %s\n", cudaGetErrorName(e));
        return 0;
    }
    if (!strcmp(mode, "quota")) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        printf("cudaMemGetInfo total %s quota\n", total_b == arg ? "==" : "!=");
        unsigned char *a = nullptr, *b = nullptr;
        cudaError_t e1 = cudaMalloc(&a, arg / 4 * 3);
        cudaError_t e2 = cudaMalloc(&b, arg / 2);
        cudaGetLastError();
        cudaError_t e3 = cudaFree(a);
        cudaError_t e4 = cudaMalloc(&b, arg / 2);
        printf("3/4 of quota: %s; then 1/2 more: %s; after freeing the first, 1/2: %s (free %s)\n",
               cudaGetErrorName(e1), cudaGetErrorName(e2), cudaGetErrorName(e4),
               cudaGetErrorName(e3));
        return 0;
    }
    int r = quota_path(mode, arg);
    if (r >= 0) return r;
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
