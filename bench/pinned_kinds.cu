// pinned_kinds: how fast the GPU copies 1-16 MiB from pinned memory of each kind vmcuda
// can make, natively (no bridge): cudaMallocHost (the driver's own), an ordinary
// memfd mapped shared and registered (the same-host shared-memory data path), and a
// hugetlb memfd registered (guest RAM in a VM is huge pages). Best of 50 synchronous
// copies each way. Tells whether the bridge's remaining gap at 1 MiB is the transport
// or the memory's kind.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("FAIL %s: %s\n", #x, cudaGetErrorName(e_)); return -1; } } while (0)

static double best_gbps(char* host, char* dev, size_t bytes, bool h2d) {
    double best = 1e30;
    for (int i = 0; i < 51; i++) {
        auto s = std::chrono::steady_clock::now();
        if (h2d) cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
        else cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count();
        if (i > 0 && us < best) best = us;
    }
    return bytes / best / 1e3;
}

static char* memfd_region(size_t bytes, bool huge) {
    int fd = memfd_create("pinned-kinds", huge ? MFD_HUGETLB : 0);
    if (fd < 0) return nullptr;
    size_t len = huge ? (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20) : bytes;
    if (ftruncate(fd, len) != 0) { close(fd); return nullptr; }
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    return p == MAP_FAILED ? nullptr : (char*)p;
}

int main() {
    for (size_t mib = 1; mib <= 16; mib *= 4) {
        size_t bytes = mib << 20;
        char* dev;
        if (cudaMalloc(&dev, bytes) != cudaSuccess) return 1;
        const char* kinds[] = {"cudaMallocHost", "memfd+register", "hugetlb+register"};
        for (int k = 0; k < 3; k++) {
            char* host = nullptr;
            if (k == 0) { if (cudaMallocHost(&host, bytes) != cudaSuccess) host = nullptr; }
            else {
                host = memfd_region(bytes, k == 2);
                if (host && cudaHostRegister(host, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped) != cudaSuccess) host = nullptr;
            }
            if (!host) { printf("%-18s %2zu MiB: not available\n", kinds[k], mib); continue; }
            memset(host, 7, bytes);
            printf("%-18s %2zu MiB: h2d %6.2f GB/s  d2h %6.2f GB/s\n", kinds[k], mib,
                   best_gbps(host, dev, bytes, true), best_gbps(host, dev, bytes, false));
            if (k == 0) cudaFreeHost(host); else cudaHostUnregister(host);
        }
        cudaFree(dev);
    }
    return 0;
}
