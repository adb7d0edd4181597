// pool_sharing: a memory pool made with POSIX descriptor handles, exported and imported
// by the same program (cudaMemPoolExportToShareableHandle /
// ImportFromShareableHandle), an allocation of it exported and mapped again through the
// imported pool (cudaMemPoolExportPointer / ImportPointer): the second address reaches
// the same memory both ways, outlives a free of the first, and is freed itself. Also
// the driver's refusals: a pool without shareable handles, the default pool, a default
// pool's allocation, an import through the wrong pool.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define SAY(call) printf("%-44s %s\n", #call, cudaGetErrorName(call))

__global__ void fill(int* p, int n, int base) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = base + i;
}

__global__ void add(const int* a, int* out, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + k;
}

int main() {
    const int n = 1 << 16;
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool, imported;
    CHECK(cudaMemPoolCreate(&pool, &props));
    int fd = -1;
    CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    printf("exported pool: a descriptor: %s\n", fd >= 0 ? "yes" : "no");
    CHECK(cudaMemPoolImportFromShareableHandle(&imported, (void*)(long)fd, cudaMemHandleTypePosixFileDescriptor, 0));
    printf("imported pool: %s\n", imported == pool ? "the same handle" : "another handle");

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int* p = nullptr;
    CHECK(cudaMallocFromPoolAsync((void**)&p, n * sizeof(int), pool, s));
    fill<<<n / 256, 256, 0, s>>>(p, n, 1000);
    CHECK(cudaStreamSynchronize(s));
    cudaMemPoolPtrExportData data;
    CHECK(cudaMemPoolExportPointer(&data, p));
    int* q = nullptr;
    cudaError_t imported_ptr = cudaMemPoolImportPointer((void**)&q, imported, &data);
    printf("cudaMemPoolImportPointer: %s\n", cudaGetErrorName(imported_ptr));
    if (imported_ptr == cudaSuccess) {
        printf("imported pointer: %s\n", q == p ? "the same address" : "another address");
        int *out;
        CHECK(cudaMalloc(&out, n * sizeof(int)));
        // Read through the second address what was written through the first.
        add<<<n / 256, 256, 0, s>>>(q, out, n, 1);
        // Write through the second, read through the first.
        fill<<<n / 256, 256, 0, s>>>(q, n, 7);
        int* h = (int*)malloc(n * sizeof(int));
        int* g = (int*)malloc(n * sizeof(int));
        CHECK(cudaMemcpyAsync(h, out, n * sizeof(int), cudaMemcpyDeviceToHost, s));
        CHECK(cudaMemcpyAsync(g, p, n * sizeof(int), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        bool read = true, wrote = true;
        for (int i = 0; i < n; i++) {
            read = read && h[i] == 1001 + i;
            wrote = wrote && g[i] == 7 + i;
        }
        printf("through the second address: reads the first's data: %s, its writes seen at the first: %s\n",
               read ? "yes" : "no", wrote ? "yes" : "no");
        // The first freed, the second still reaches the memory.
        CHECK(cudaFreeAsync(p, s));
        CHECK(cudaStreamSynchronize(s));
        add<<<n / 256, 256, 0, s>>>(q, out, n, 2);
        CHECK(cudaMemcpyAsync(h, out, n * sizeof(int), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        bool alive = true;
        for (int i = 0; i < n; i++) alive = alive && h[i] == 9 + i;
        printf("after the first is freed, the second still reads it: %s\n", alive ? "yes" : "no");
        CHECK(cudaFree(q));
        CHECK(cudaFree(out));
        free(h);
        free(g);
    } else {
        CHECK(cudaFreeAsync(p, s));
        CHECK(cudaStreamSynchronize(s));
    }

    // What the driver refuses.
    cudaMemPoolProps plain_props = props;
    plain_props.handleTypes = cudaMemHandleTypeNone;
    cudaMemPool_t plain, def;
    CHECK(cudaMemPoolCreate(&plain, &plain_props));
    int fd2 = -1;
    SAY(cudaMemPoolExportToShareableHandle(&fd2, plain, cudaMemHandleTypePosixFileDescriptor, 0));
    CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
    SAY(cudaMemPoolExportToShareableHandle(&fd2, def, cudaMemHandleTypePosixFileDescriptor, 0));
    int* r = nullptr;
    CHECK(cudaMallocAsync((void**)&r, 4096, s));
    CHECK(cudaStreamSynchronize(s));
    SAY(cudaMemPoolExportPointer(&data, r));
    int* t = nullptr;
    CHECK(cudaMallocFromPoolAsync((void**)&t, 4096, pool, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolExportPointer(&data, t));
    int* u = nullptr;
    SAY(cudaMemPoolImportPointer((void**)&u, plain, &data));
    CHECK(cudaFreeAsync(r, s));
    CHECK(cudaFreeAsync(t, s));
    CHECK(cudaStreamSynchronize(s));
    cudaGetLastError();

    CHECK(cudaMemPoolDestroy(imported));
    CHECK(cudaMemPoolDestroy(plain));
    CHECK(cudaMemPoolDestroy(pool));
    close(fd);
    CHECK(cudaStreamDestroy(s));
    printf("pool_sharing done\n");
    return 0;
}
