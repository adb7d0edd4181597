// pointer_mem: cudaPointerGetAttributes on device, pinned, mapped, registered and
// plain host pointers (and interior pointers), cudaHostGetDevicePointer,
// cudaMemGetInfo (only relations printed), cudaMallocHost / cudaFreeHost,
// cudaDeviceSynchronize and cudaDeviceReset followed by fresh work.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

static const char* type_name(cudaMemoryType t) {
    switch (t) {
    case cudaMemoryTypeUnregistered: return "Unregistered";
    case cudaMemoryTypeHost: return "Host";
    case cudaMemoryTypeDevice: return "Device";
    case cudaMemoryTypeManaged: return "Managed";
    default: return "?";
    }
}

static void show(const char* what, const void* p) {
    cudaPointerAttributes a;
    memset(&a, 0, sizeof(a));
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        printf("%-22s %s\n", what, cudaGetErrorName(e));
        cudaGetLastError();
        return;
    }
    printf("%-22s type=%s device=%d devicePointer==ptr:%s hostPointer==ptr:%s devicePointer null:%s "
           "hostPointer null:%s\n",
           what, type_name(a.type), a.device, a.devicePointer == p ? "yes" : "no", a.hostPointer == p ? "yes" : "no",
           a.devicePointer ? "no" : "yes", a.hostPointer ? "no" : "yes");
}

__global__ void touch(int* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 3 * i;
}

int main() {
    const size_t N = 1 << 20;
    char *dev, *pin, *mapped, *reg, *plain;
    CHECK(cudaMalloc(&dev, N));
    CHECK(cudaMallocHost(&pin, N));
    CHECK(cudaHostAlloc(&mapped, N, cudaHostAllocMapped | cudaHostAllocPortable));
    reg = (char*)malloc(N);
    plain = (char*)malloc(N);
    memset(reg, 1, N);
    memset(plain, 2, N);
    CHECK(cudaHostRegister(reg, N, cudaHostRegisterDefault));

    show("device", dev);
    show("device+4096", dev + 4096);
    show("pinned", pin);
    show("pinned+100", pin + 100);
    show("mapped", mapped);
    show("registered", reg);
    show("registered+7", reg + 7);
    show("plain host", plain);
    int stack_var = 0;
    show("stack", &stack_var);
    show("nullptr", nullptr);

    void* dptr = nullptr;
    cudaError_t e = cudaHostGetDevicePointer(&dptr, mapped, 0);
    printf("cudaHostGetDevicePointer(mapped): %s same-as-host:%s\n", cudaGetErrorName(e), dptr == mapped ? "yes" : "no");
    dptr = nullptr;
    e = cudaHostGetDevicePointer(&dptr, reg, 0);
    printf("cudaHostGetDevicePointer(registered): %s same-as-host:%s\n", cudaGetErrorName(e), dptr == reg ? "yes" : "no");
    e = cudaHostGetDevicePointer(&dptr, plain, 0);
    printf("cudaHostGetDevicePointer(plain): %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    size_t freeb = 0, total = 0;
    CHECK(cudaMemGetInfo(&freeb, &total));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("cudaMemGetInfo: total>0:%s free<=total:%s total==totalGlobalMem:%s\n", total > 0 ? "yes" : "no",
           freeb <= total ? "yes" : "no", total == prop.totalGlobalMem ? "yes" : "no");

    // Copies through every kind of host memory.
    memset(pin, 0x5A, N);
    CHECK(cudaMemcpy(dev, pin, N, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(reg, dev, N, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(mapped, reg, N, cudaMemcpyDefault));
    CHECK(cudaMemcpy(plain, mapped, N, cudaMemcpyHostToHost));
    for (size_t i = 0; i < N; i += 4099) EXPECT(plain[i] == 0x5A && reg[i] == 0x5A && mapped[i] == 0x5A);
    printf("copies through pinned/registered/mapped/plain: ok\n");

    touch<<<4, 256>>>((int*)dev, 1024);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    int h[3];
    CHECK(cudaMemcpy(h, dev + 4, sizeof(h), cudaMemcpyDeviceToHost));
    printf("kernel result: %d %d %d\n", h[0], h[1], h[2]);

    CHECK(cudaHostUnregister(reg));
    show("unregistered again", reg);
    // Pinned buffers of one size freed and made again, as frameworks do every step:
    // each works as a new one does, whatever memory it reuses.
    int* d_round;
    CHECK(cudaMalloc(&d_round, 4096));
    int rounds_ok = 0;
    for (int r = 0; r < 20; r++) {
        int* staging;
        CHECK(cudaHostAlloc(&staging, 4096, r % 2 ? cudaHostAllocDefault : cudaHostAllocMapped));
        for (int i = 0; i < 1024; i++) staging[i] = r * 1000 + i;
        CHECK(cudaMemcpy(d_round, staging, 4096, cudaMemcpyHostToDevice));
        for (int i = 0; i < 1024; i++) staging[i] = -1;
        CHECK(cudaMemcpy(staging, d_round, 4096, cudaMemcpyDeviceToHost));
        int good = 1;
        for (int i = 0; i < 1024; i++) good &= staging[i] == r * 1000 + i;
        cudaPointerAttributes a;
        CHECK(cudaPointerGetAttributes(&a, staging));
        good &= a.type == cudaMemoryTypeHost && a.hostPointer == staging;
        rounds_ok += good;
        CHECK(cudaFreeHost(staging));
    }
    printf("pinned buffers made again: %d of 20 work\n", rounds_ok);
    EXPECT(rounds_ok == 20);
    CHECK(cudaFree(d_round));
    CHECK(cudaFreeHost(pin));
    CHECK(cudaFreeHost(mapped));
    CHECK(cudaFree(dev));
    free(reg);
    free(plain);
    CHECK(cudaDeviceSynchronize());

    CHECK(cudaDeviceReset());
    printf("cudaDeviceReset: ok\n");
    // The runtime transparently creates a fresh context afterwards.
    int* d2;
    CHECK(cudaMalloc(&d2, 64));
    CHECK(cudaMemset(d2, 0x7F, 64));
    unsigned char back[64];
    CHECK(cudaMemcpy(back, d2, 64, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) EXPECT(back[i] == 0x7F);
    show("device after reset", d2);
    CHECK(cudaFree(d2));
    CHECK(cudaDeviceReset());
    printf("done\n");
    return 0;
}
