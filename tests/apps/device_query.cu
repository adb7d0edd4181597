// device_query: device enumeration, properties, attributes, versions, limits,
// PCI bus ids, device selection and peer-access queries.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

int main() {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    printf("device count: %d\n", count);
    EXPECT(count > 0);

    cudaDeviceProp p;
    memset(&p, 0, sizeof(p));
    CHECK(cudaGetDeviceProperties(&p, 0));
    printf("name: %s\n", p.name);
    printf("compute capability: %d.%d\n", p.major, p.minor);
    printf("multiProcessorCount: %d\n", p.multiProcessorCount);
    printf("totalGlobalMem: %zu MiB\n", p.totalGlobalMem >> 20);
    printf("warpSize: %d\n", p.warpSize);
    printf("maxThreadsPerBlock: %d\n", p.maxThreadsPerBlock);
    printf("maxThreadsDim: %d %d %d\n", p.maxThreadsDim[0], p.maxThreadsDim[1], p.maxThreadsDim[2]);
    printf("maxGridSize: %d %d %d\n", p.maxGridSize[0], p.maxGridSize[1], p.maxGridSize[2]);
    printf("sharedMemPerBlock: %zu\n", p.sharedMemPerBlock);
    printf("sharedMemPerBlockOptin: %zu\n", p.sharedMemPerBlockOptin);
    printf("regsPerBlock: %d\n", p.regsPerBlock);
    printf("l2CacheSize: %d\n", p.l2CacheSize);
    printf("memoryBusWidth: %d\n", p.memoryBusWidth);
    printf("concurrentKernels: %d\n", p.concurrentKernels);
    printf("unifiedAddressing: %d\n", p.unifiedAddressing);
    printf("pciBusID: %d\n", p.pciBusID);
    printf("totalConstMem: %zu\n", p.totalConstMem);
    printf("maxThreadsPerMultiProcessor: %d\n", p.maxThreadsPerMultiProcessor);
    printf("cooperativeLaunch: %d\n", p.cooperativeLaunch);

    cudaError_t e = cudaGetDeviceProperties(&p, 99);
    printf("cudaGetDeviceProperties(99): %s\n", cudaGetErrorName(e));
    printf("  cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));

    struct { cudaDeviceAttr a; const char* n; } attrs[] = {
        {cudaDevAttrMaxThreadsPerBlock, "MaxThreadsPerBlock"},
        {cudaDevAttrMaxBlockDimX, "MaxBlockDimX"},
        {cudaDevAttrMaxGridDimY, "MaxGridDimY"},
        {cudaDevAttrMaxSharedMemoryPerBlock, "MaxSharedMemoryPerBlock"},
        {cudaDevAttrMaxSharedMemoryPerBlockOptin, "MaxSharedMemoryPerBlockOptin"},
        {cudaDevAttrWarpSize, "WarpSize"},
        {cudaDevAttrMultiProcessorCount, "MultiProcessorCount"},
        {cudaDevAttrComputeCapabilityMajor, "ComputeCapabilityMajor"},
        {cudaDevAttrComputeCapabilityMinor, "ComputeCapabilityMinor"},
        {cudaDevAttrL2CacheSize, "L2CacheSize"},
        {cudaDevAttrMaxRegistersPerBlock, "MaxRegistersPerBlock"},
        {cudaDevAttrConcurrentKernels, "ConcurrentKernels"},
        {cudaDevAttrCooperativeLaunch, "CooperativeLaunch"},
        {cudaDevAttrUnifiedAddressing, "UnifiedAddressing"},
        {cudaDevAttrPciBusId, "PciBusId"},
        {cudaDevAttrClusterLaunch, "ClusterLaunch"},
    };
    for (auto& a : attrs) {
        int v = -1;
        CHECK(cudaDeviceGetAttribute(&v, a.a, 0));
        printf("attr %s: %d\n", a.n, v);
    }
    int v = -1;
    e = cudaDeviceGetAttribute(&v, (cudaDeviceAttr)99999, 0);
    printf("cudaDeviceGetAttribute(bad attr): %s\n", cudaGetErrorName(e));
    e = cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 99);
    printf("cudaDeviceGetAttribute(dev 99): %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    int rt = 0, drv = 0;
    CHECK(cudaRuntimeGetVersion(&rt));
    CHECK(cudaDriverGetVersion(&drv));
    printf("runtime version: %d\n", rt);
    printf("driver version: %d\n", drv);
    EXPECT(rt / 1000 == 13);
    printf("driver >= runtime: %s\n", drv >= rt ? "yes" : "no");

    int dev = -1;
    CHECK(cudaGetDevice(&dev));
    printf("cudaGetDevice: %d\n", dev);
    CHECK(cudaSetDevice(0));
    e = cudaSetDevice(99);
    printf("cudaSetDevice(99): %s\n", cudaGetErrorName(e));
    printf("  cudaPeekAtLastError: %s\n", cudaGetErrorName(cudaPeekAtLastError()));
    printf("  cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
    printf("  cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));
    CHECK(cudaGetDevice(&dev));
    printf("cudaGetDevice after bad set: %d\n", dev);

    int least = 0, greatest = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    printf("stream priority range: least=%d greatest=%d\n", least, greatest);

    size_t lim = 0;
    CHECK(cudaDeviceGetLimit(&lim, cudaLimitStackSize));
    printf("limit stack size: %zu\n", lim);
    CHECK(cudaDeviceGetLimit(&lim, cudaLimitPrintfFifoSize));
    printf("limit printf fifo: %zu\n", lim);
    CHECK(cudaDeviceGetLimit(&lim, cudaLimitMallocHeapSize));
    printf("limit malloc heap: %zu\n", lim);
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
    CHECK(cudaDeviceGetLimit(&lim, cudaLimitStackSize));
    printf("limit stack size after set 4096: %zu\n", lim);
    CHECK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 4 << 20));
    CHECK(cudaDeviceGetLimit(&lim, cudaLimitPrintfFifoSize));
    printf("limit printf fifo after set 4 MiB: %zu\n", lim);
    e = cudaDeviceGetLimit(&lim, (cudaLimit)4242);
    printf("cudaDeviceGetLimit(bad): %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    char bus[64];
    memset(bus, 0, sizeof(bus));
    CHECK(cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), 0));
    printf("PCI bus id: %s\n", bus);
    int bydev = -1;
    CHECK(cudaDeviceGetByPCIBusId(&bydev, bus));
    printf("cudaDeviceGetByPCIBusId: %d\n", bydev);

    cudaDeviceProp want;
    memset(&want, 0, sizeof(want));
    want.major = 9;
    want.minor = 0;
    int chosen = -1;
    CHECK(cudaChooseDevice(&chosen, &want));
    printf("cudaChooseDevice(9.0): %d\n", chosen);

    int can = -1;
    e = cudaDeviceCanAccessPeer(&can, 0, 0);
    printf("cudaDeviceCanAccessPeer(0,0): %s can=%d\n", cudaGetErrorName(e), can);
    cudaGetLastError();

    int p2p = -1;
    e = cudaDeviceGetP2PAttribute(&p2p, cudaDevP2PAttrAccessSupported, 0, 0);
    printf("cudaDeviceGetP2PAttribute(0,0): %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    unsigned flags = 0;
    CHECK(cudaGetDeviceFlags(&flags));
    printf("device flags: 0x%x\n", flags);

    CHECK(cudaDeviceSynchronize());
    printf("done\n");
    return 0;
}
