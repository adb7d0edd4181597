// runtime_rest: the runtime's remaining families. cudaLibrary* on a cubin NVRTC
// compiles at run time (kernels by name and by enumeration, a global, a launch of a
// library kernel through cudaLaunchKernel); cudaGetKernel, cudaGetFuncBySymbol and
// cudaKernelSetAttributeForDevice; user objects held by a graph and its executable
// graph, their destructor run once the last reference goes; cudaLogs* (a failed call
// logged, a callback registered, dumps to memory and to a file); async-notification
// registration; cudaGraphExecGetFlags; cudaSetValidDevices; cudaMemcpyBatchAsync; the
// persisting L2 reset, the widest linear 1D texture, the GPUDirect RDMA flush and
// atomic capabilities.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <thread>
#include <chrono>
#include <vector>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

__global__ void scale(float* a, float f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] *= f;
}

static const char* source = R"(
extern "C" __device__ int offset = 7;
extern "C" __global__ void add_offset(int* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += offset + i;
}
extern "C" __global__ void nothing() {}
)";

static std::atomic<int> destroyed{0};
static void CUDART_CB on_destroy(void*) { destroyed++; }

static void on_log(void*, cudaLogLevel, char*, size_t) {}

static void on_notification(cudaAsyncNotificationInfo_t*, void*, cudaAsyncCallbackHandle_t) {}

int main() {
    // ---- a library compiled at run time ----
    nvrtcProgram prog;
    nvrtcCreateProgram(&prog, source, "lib.cu", 0, nullptr, nullptr);
    const char* opts[] = {"-arch=sm_90"};
    if (nvrtcCompileProgram(prog, 1, opts) != NVRTC_SUCCESS) { printf("FAIL nvrtc\n"); return 1; }
    size_t size;
    nvrtcGetCUBINSize(prog, &size);
    std::vector<char> cubin(size);
    nvrtcGetCUBIN(prog, cubin.data());
    nvrtcDestroyProgram(&prog);
    cudaLibrary_t lib;
    CHECK(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    unsigned int count = 0;
    CHECK(cudaLibraryGetKernelCount(&count, lib));
    EXPECT(count == 2);
    std::vector<cudaKernel_t> kernels(count);
    CHECK(cudaLibraryEnumerateKernels(kernels.data(), count, lib));
    cudaKernel_t add;
    CHECK(cudaLibraryGetKernel(&add, lib, "add_offset"));
    int* offset_ptr;
    size_t offset_size;
    CHECK(cudaLibraryGetGlobal((void**)&offset_ptr, &offset_size, lib, "offset"));
    EXPECT(offset_size == sizeof(int));
    int offset = 0;
    CHECK(cudaMemcpy(&offset, offset_ptr, sizeof offset, cudaMemcpyDeviceToHost));
    EXPECT(offset == 7);
    const int n = 256;
    int* d_a;
    CHECK(cudaMalloc(&d_a, n * sizeof(int)));
    CHECK(cudaMemset(d_a, 0, n * sizeof(int)));
    int nn = n;
    void* args[] = {&d_a, &nn};
    CHECK(cudaLaunchKernel((const void*)add, dim3(1), dim3(n), args, 0, 0));
    std::vector<int> a(n);
    CHECK(cudaMemcpy(a.data(), d_a, n * sizeof(int), cudaMemcpyDeviceToHost));
    long sum = 0;
    for (int v : a) sum += v;
    printf("library kernel: sum %ld\n", sum);
    cudaError_t missing = cudaLibraryGetKernel(&add, lib, "no_such_kernel");
    printf("a kernel the library lacks: %s\n", cudaGetErrorName(missing));
    (void)cudaGetLastError();

    // ---- kernels of the program ----
    cudaKernel_t k;
    CHECK(cudaGetKernel(&k, scale));
    CHECK(cudaKernelSetAttributeForDevice(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024, 0));
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, scale));
    EXPECT(fa.maxDynamicSharedSizeBytes == 64 * 1024);
    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, (const void*)scale));
    int regs = -1;
    EXPECT(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUfunction)f) == CUDA_SUCCESS);
    EXPECT(regs == fa.numRegs);
    float* d_f;
    CHECK(cudaMalloc(&d_f, n * sizeof(float)));
    std::vector<float> ones(n, 1.0f);
    CHECK(cudaMemcpy(d_f, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    float three = 3.0f;
    void* fargs[] = {&d_f, &three, &nn};
    EXPECT(cuLaunchKernel((CUfunction)f, 1, 1, 1, n, 1, 1, 0, 0, fargs, nullptr) == CUDA_SUCCESS);
    std::vector<float> fout(n);
    CHECK(cudaMemcpy(fout.data(), d_f, n * sizeof(float), cudaMemcpyDeviceToHost));
    printf("cuLaunchKernel of cudaGetFuncBySymbol's function: %.1f\n", fout[5]);

    // ---- user objects held by graphs ----
    cudaUserObject_t obj;
    CHECK(cudaUserObjectCreate(&obj, nullptr, on_destroy, 1, cudaUserObjectNoDestructorSync));
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t empty;
    CHECK(cudaGraphAddEmptyNode(&empty, g, nullptr, 0));
    CHECK(cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove));
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiateWithFlags(&e, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    unsigned long long flags = 0;
    CHECK(cudaGraphExecGetFlags(e, &flags));
    EXPECT(flags == cudaGraphInstantiateFlagAutoFreeOnLaunch);
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphLaunch(e, 0));
    CHECK(cudaDeviceSynchronize());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int before = destroyed.load();
    CHECK(cudaGraphExecDestroy(e));
    for (int i = 0; i < 100 && destroyed.load() == 0; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    printf("user object destroyed: %d before the executable graph went, %d after\n", before,
           destroyed.load());

    // ---- logs ----
    cudaLogsCallbackHandle cb;
    CHECK(cudaLogsRegisterCallback(on_log, nullptr, &cb));
    cudaLogIterator it;
    CHECK(cudaLogsCurrent(&it, 0));
    cudaError_t bad = cudaMemcpy(nullptr, d_a, 4, cudaMemcpyDeviceToHost);
    (void)cudaGetLastError();
    char buffer[4096];
    size_t buffer_size = sizeof buffer;
    CHECK(cudaLogsDumpToMemory(&it, buffer, &buffer_size, 0));
    // What a log entry says is the driver's own; that the calls work is checked here.
    printf("a failed copy: %s; the log dumped\n", cudaGetErrorName(bad));
    size_t again = sizeof buffer;
    CHECK(cudaLogsDumpToMemory(&it, buffer, &again, 0));
    EXPECT(again == 0);
    char path[] = "/tmp/runtime_rest_logXXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    CHECK(cudaLogsDumpToFile(nullptr, path, 0));
    remove(path);
    CHECK(cudaLogsUnregisterCallback(cb));

    // ---- notifications, valid devices, batched copies ----
    cudaAsyncCallbackHandle_t nh;
    CHECK(cudaDeviceRegisterAsyncNotification(0, on_notification, nullptr, &nh));
    CHECK(cudaDeviceUnregisterAsyncNotification(0, nh));
    int valid[] = {0};
    CHECK(cudaSetValidDevices(valid, 1));
    int wrong[] = {99};
    printf("an invalid device in the list: %s\n", cudaGetErrorName(cudaSetValidDevices(wrong, 1)));
    (void)cudaGetLastError();
    std::vector<int> h1(n, 1), h2(n, 2), back1(n), back2(n);
    int *d1, *d2;
    CHECK(cudaMalloc(&d1, n * sizeof(int)));
    CHECK(cudaMalloc(&d2, n * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void* dsts[] = {d1, d2};
    const void* srcs[] = {h1.data(), h2.data()};
    size_t sizes[] = {n * sizeof(int), n * sizeof(int)};
    cudaMemcpyAttributes attr = {};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t idx = 0;
    CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(back1.data(), d1, n * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(back2.data(), d2, n * sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(back1 == h1 && back2 == h2);

    // Device-wide calls that are the GPU's own: the persisting L2 reset, the widest 1D
    // texture over linear memory (runtime and driver), a GPUDirect RDMA flush.
    printf("persisting L2 reset: %s\n", cudaGetErrorName(cudaCtxResetPersistingL2Cache()));
    cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float4>();
    cudaChannelFormatDesc u1 = cudaCreateChannelDesc<unsigned char>();
    size_t w_f4 = 0, w_u1 = 0, w_drv = 0;
    CHECK(cudaDeviceGetTexture1DLinearMaxWidth(&w_f4, &f4, 0));
    CHECK(cudaDeviceGetTexture1DLinearMaxWidth(&w_u1, &u1, 0));
    EXPECT(cuDeviceGetTexture1DLinearMaxWidth(&w_drv, CU_AD_FORMAT_FLOAT, 4, 0) == CUDA_SUCCESS);
    EXPECT(w_f4 > 0 && w_u1 > 0 && w_drv == w_f4);
    printf("widest linear 1D texture: float4 %zu, uchar %zu\n", w_f4, w_u1);
    printf("on device 99: %s\n", cudaGetErrorName(cudaDeviceGetTexture1DLinearMaxWidth(&w_f4, &f4, 99)));
    (void)cudaGetLastError();
    printf("GPUDirect RDMA flush: %s\n", cudaGetErrorName(cudaDeviceFlushGPUDirectRDMAWrites(
        cudaFlushGPUDirectRDMAWritesTargetCurrentDevice, cudaFlushGPUDirectRDMAWritesToOwner)));
    (void)cudaGetLastError();
    cudaAtomicOperation ops[] = {cudaAtomicOperationIntegerAdd, cudaAtomicOperationCAS,
                                 cudaAtomicOperationFloatAdd};
    unsigned int caps[3] = {0, 0, 0};
    CHECK(cudaDeviceGetHostAtomicCapabilities(caps, ops, 3, 0));
    printf("atomics to host memory: add %#x, cas %#x, float add %#x\n", caps[0], caps[1], caps[2]);
    printf("atomics to itself as a peer: %s\n",
           cudaGetErrorName(cudaDeviceGetP2PAtomicCapabilities(caps, ops, 3, 0, 0)));
    (void)cudaGetLastError();

    CHECK(cudaLibraryUnload(lib));
    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    CHECK(cudaFree(d_f));
    CHECK(cudaFree(d_a));
    printf("runtime_rest: done\n");
    return 0;
}
