// managed_vars: __managed__ variables (a scalar, arrays, a struct, initialised and
// not) read and written by kernels and by host code: the very first statement reads
// one from the host (which is what initialises the runtime there),
// cudaMemcpyTo/FromSymbol (+offsets, +Async) on them, cudaGetSymbolAddress and
// cudaGetSymbolSize of one and that pointer used by kernels and copies,
// cudaPointerGetAttributes, advice on a variable, a kernel on another stream and a
// prefetch to the host. The host touches the variables only after a synchronizing call, so the
// program is correct whether or not the device has concurrent managed access.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

struct Config {
    int n;
    float scale;
    double offset;
    char tag[8];
};

const int NARR = 1000;
const int NBIG = 1 << 16;  // 512 KiB of doubles: many pages

__managed__ int m_counter = 5;
__managed__ int m_init[8] = {1, 2, 3, 4, 5, 6, 7, 8};
__managed__ Config m_cfg = {NARR, 1.5f, -2.25, "cfg"};
__managed__ float m_arr[NARR];
__managed__ double m_big[NBIG];
__managed__ unsigned long long m_total;

__global__ void apply_config() {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < m_cfg.n) m_arr[i] = m_init[i % 8] * m_cfg.scale + (float)m_cfg.offset;
    if (threadIdx.x == 0) atomicAdd(&m_counter, 1);
}

__global__ void double_counter() { m_counter *= 2; }

// Through a pointer (cudaGetSymbolAddress) rather than by name.
__global__ void fill(double* p, int n, double base) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = base + i * 0.5;
}

// By name: the total of m_big's integer parts.
__global__ void total_big() {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < NBIG) atomicAdd(&m_total, (unsigned long long)m_big[i]);
}

static double arr_sum() {
    double s = 0;
    for (int i = 0; i < NARR; i++) s += m_arr[i];
    return s;
}

int main() {
    // Host code reading __managed__ variables before any other CUDA call.
    printf("initial: counter=%d init[7]=%d cfg={%d, %.2f, %.2f, %s}\n", m_counter, m_init[7], m_cfg.n, m_cfg.scale,
           m_cfg.offset, m_cfg.tag);

    apply_config<<<(NARR + 255) / 256, 256>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("after a kernel: counter=%d arr[0]=%.2f arr[7]=%.2f arr[999]=%.2f sum=%.2f\n", m_counter, m_arr[0], m_arr[7],
           m_arr[NARR - 1], arr_sum());

    // The host writes single fields and elements; kernels see them.
    m_cfg.scale = 2.0f;
    m_init[0] = 100;
    m_counter += 10;
    apply_config<<<(NARR + 255) / 256, 256>>>();
    CHECK(cudaGetLastError());
    double_counter<<<1, 1>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    EXPECT(m_arr[8] == 100 * 2.0f - 2.25f);
    printf("after host writes: counter=%d arr[0]=%.2f arr[1]=%.2f sum=%.2f\n", m_counter, m_arr[0], m_arr[1], arr_sum());
    for (int round = 0; round < 3; round++) {
        m_counter += round;
        double_counter<<<1, 1>>>();
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        printf("round %d: counter=%d\n", round, m_counter);
    }

    // cudaMemcpyToSymbol / FromSymbol, whole and with offsets.
    int vals[8] = {10, 20, 30, 40, 50, 60, 70, 80};
    CHECK(cudaMemcpyToSymbol(m_init, vals, sizeof vals));
    int two[2] = {-1, -2};
    CHECK(cudaMemcpyToSymbol(m_init, two, sizeof two, 4 * sizeof(int)));
    CHECK(cudaDeviceSynchronize());
    printf("to symbol: init = %d %d %d %d %d %d %d %d\n", m_init[0], m_init[1], m_init[2], m_init[3], m_init[4],
           m_init[5], m_init[6], m_init[7]);
    Config c = {NARR / 2, 1.0f, 0.5, "copied"};
    CHECK(cudaMemcpyToSymbol(m_cfg, &c, sizeof c));
    apply_config<<<(NARR + 255) / 256, 256>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    float back[NARR];
    CHECK(cudaMemcpyFromSymbol(back, m_arr, sizeof back));
    EXPECT(memcmp(back, m_arr, sizeof back) == 0);
    printf("from symbol: cfg.tag=%s arr[0]=%.2f arr[4]=%.2f arr[499]=%.2f arr[500]=%.2f\n", m_cfg.tag, back[0],
           back[4], back[NARR / 2 - 1], back[NARR / 2]);
    int part[3];
    CHECK(cudaMemcpyFromSymbol(part, m_init, sizeof part, 3 * sizeof(int)));
    printf("from symbol with offset: %d %d %d\n", part[0], part[1], part[2]);

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int counter_in = 1000, counter_out = 0;
    CHECK(cudaMemcpyToSymbolAsync(m_counter, &counter_in, sizeof(int), 0, cudaMemcpyHostToDevice, s));
    double_counter<<<1, 1, 0, s>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyFromSymbolAsync(&counter_out, m_counter, sizeof(int), 0, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(counter_out == 2000 && m_counter == 2000);
    printf("async symbol copies: counter=%d\n", counter_out);

    // The symbol's address: the variable itself, managed memory.
    double* big = nullptr;
    CHECK(cudaGetSymbolAddress((void**)&big, m_big));
    size_t size = 0;
    CHECK(cudaGetSymbolSize(&size, m_big));
    cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    CHECK(cudaPointerGetAttributes(&a, big));
    printf("m_big: address==&m_big:%s size=%zu type managed:%s devicePointer==address:%s hostPointer==address:%s\n",
           (void*)big == (void*)m_big ? "yes" : "no", size, a.type == cudaMemoryTypeManaged ? "yes" : "no",
           a.devicePointer == big ? "yes" : "no", a.hostPointer == big ? "yes" : "no");
    fill<<<NBIG / 256, 256>>>(big, NBIG, 1.0);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("fill through the address: m_big[0]=%.1f m_big[12345]=%.1f m_big[65535]=%.1f\n", m_big[0], m_big[12345],
           m_big[NBIG - 1]);
    // Host writes to a few pages, a memset and a copy through the address, then a
    // kernel that uses the variable by name.
    for (int i = 0; i < NBIG; i += 4096) m_big[i] = 1000.0;
    CHECK(cudaMemset(big + 100, 0, 50 * sizeof(double)));
    double ones[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK(cudaMemcpy(big + 200, ones, sizeof ones, cudaMemcpyDefault));
    CHECK(cudaDeviceSynchronize());  // the memset may still run: no host access before this
    m_total = 0;
    total_big<<<NBIG / 256, 256>>>();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    unsigned long long expect = 0;
    for (int i = 0; i < NBIG; i++) expect += (unsigned long long)m_big[i];
    EXPECT(m_total == expect && m_big[100] == 0.0 && m_big[200] == 1.0);
    printf("total of m_big: %llu\n", m_total);

    // Advice on a variable; a kernel on another stream, and a prefetch, through the address.
    CHECK(cudaMemAdvise(m_init, sizeof m_init, cudaMemAdviseSetReadMostly, cudaMemLocation{cudaMemLocationTypeHost, 0}));
    int rm = -1;
    CHECK(cudaMemRangeGetAttribute(&rm, sizeof rm, cudaMemRangeAttributeReadMostly, m_init, sizeof m_init));
    printf("m_init read-mostly=%d\n", rm);
    big[1] = 42.0;
    fill<<<1, 64, 0, s>>>(big + 2, 64, -1.0);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    printf("on another stream: m_big[1]=%.1f m_big[2]=%.1f m_big[65]=%.1f m_big[66]=%.1f\n", m_big[1], m_big[2],
           m_big[65], m_big[66]);
    CHECK(cudaMemPrefetchAsync(big, NBIG * sizeof(double), cudaMemLocation{cudaMemLocationTypeHost, 0}, 0, s));
    CHECK(cudaStreamSynchronize(s));
    printf("after a prefetch to the host: m_big[3]=%.1f\n", m_big[3]);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaDeviceSynchronize());
    printf("done\n");
    return 0;
}
