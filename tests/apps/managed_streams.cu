// managed_streams: managed memory (cudaMallocManaged, attached globally and to the
// host) used the way a program must where the CPU and the GPU may not touch managed
// memory at the same time (cudaDevAttrConcurrentManagedAccess 0) as well as where they
// may (1): the CPU touches managed memory only after a synchronizing call, or memory
// attached to the host or to an idle stream while other streams run kernels.
// Covered: pointer attributes, kernels after partial-page CPU writes (and writes that
// straddle a page boundary), cudaMemcpy/cudaMemset with managed memory on either side
// (explicit kinds and cudaMemcpyDefault), a 64 MiB allocation touched sparsely,
// cudaMemAdvise and cudaMemRangeGetAttribute(s), cudaMemPrefetchAsync (device, host,
// part of a range, the batch variant), and four host threads, each with its own
// stream and allocations attached to it by cudaStreamAttachMemAsync.
// Prints only what is the same under both models: the prefetches and advice that CUDA
// documents for concurrentManagedAccess 1 alone (to a device location) are checked
// where they are accepted and print nothing.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

typedef unsigned int u32;
typedef unsigned long long u64;

// cudaDevAttrConcurrentManagedAccess: decides only which calls CUDA documents as
// valid (a device as prefetch target, preferred location or accessor); never printed.
static int g_concurrent = 0;

static cudaMemLocation host_loc() {
    cudaMemLocation l;
    l.type = cudaMemLocationTypeHost;
    l.id = 0;
    return l;
}
static cudaMemLocation dev_loc(int d) {
    cudaMemLocation l;
    l.type = cudaMemLocationTypeDevice;
    l.id = d;
    return l;
}

// A call CUDA documents only for concurrentManagedAccess 1 (a device location for a
// prefetch or advice): required to succeed there; elsewhere it may be refused with
// cudaErrorInvalidDevice or taken as a hint. Returns whether it was accepted.
#define DEVICE_ONLY(call) device_only((call), __LINE__)
static bool device_only(cudaError_t e, int line) {
    if (e == cudaSuccess) return true;
    if (!g_concurrent && e == cudaErrorInvalidDevice) {
        (void)cudaGetLastError();
        return false;
    }
    printf("FAIL managed_streams.cu:%d %s\n", line, cudaGetErrorName(e));
    exit(1);
}

__global__ void scale_add(u32* a, size_t n, u32 mul, u32 add) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        a[i] = a[i] * mul + add;
}

// b[i] = a[i] + k (a read only: the read-mostly buffer).
__global__ void copy_add(u32* b, const u32* a, size_t n, u32 k) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        b[i] = a[i] + k;
}

__global__ void sum_all(const u32* a, size_t n, u64* out) {
    u64 s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += a[i];
    atomicAdd(out, s);
}

// a[i * stride] += add for i < count.
__global__ void touch_sparse(u32* a, size_t stride, int count, u32 add) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) a[i * stride] += add;
}

static int blocks_for(size_t n) {
    size_t b = (n + 255) / 256;
    return (int)(b < 1024 ? b : 1024);
}

static u64 cpu_sum(const u32* a, size_t n) {
    u64 s = 0;
    for (size_t i = 0; i < n; i++) s += a[i];
    return s;
}

static void show_pointer(const char* what, const void* p) {
    cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    CHECK(cudaPointerGetAttributes(&a, p));
    printf("%s: type managed:%s device=%d devicePointer==ptr:%s hostPointer==ptr:%s\n", what,
           a.type == cudaMemoryTypeManaged ? "yes" : "no", a.device, a.devicePointer == p ? "yes" : "no",
           a.hostPointer == p ? "yes" : "no");
}

// Kernels after CPU writes of whole buffers, of single words inside pages the GPU wrote
// last, and of 8 bytes straddling a page boundary; `mirror` follows every change on the CPU.
static void partial_pages() {
    const size_t n = 5000;  // 20000 bytes: four pages and a part of a fifth
    u32* a;
    CHECK(cudaMallocManaged(&a, n * sizeof(u32)));
    std::vector<u32> mirror(n);
    for (size_t i = 0; i < n; i++) a[i] = mirror[i] = (u32)(i * 7 + 1);
    scale_add<<<blocks_for(n), 256>>>(a, n, 3, 1);
    CHECK(cudaGetLastError());
    for (size_t i = 0; i < n; i++) mirror[i] = mirror[i] * 3 + 1;
    CHECK(cudaDeviceSynchronize());
    EXPECT(memcmp(a, mirror.data(), n * sizeof(u32)) == 0);
    printf("partial pages: after one kernel sum=%llu a[4999]=%u\n", cpu_sum(a, n), a[n - 1]);

    for (int round = 0; round < 3; round++) {
        // Writes without a read first: the rest of each page must keep what the GPU wrote.
        size_t idx[] = {5, 1023, 1024, 2047 + (size_t)round, 4095, 4999};
        for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++) {
            u32 v = 1000000u * (round + 1) + (u32)k;
            a[idx[k]] = v;
            mirror[idx[k]] = v;
        }
        // 8 bytes across the boundary of the third page (byte 12288 = word 3072).
        unsigned long long straddle = 0x1122334455667788ull + round;
        memcpy((char*)a + 12284, &straddle, sizeof straddle);
        memcpy((char*)mirror.data() + 12284, &straddle, sizeof straddle);
        scale_add<<<blocks_for(n), 256>>>(a, n, 2, (u32)round);
        CHECK(cudaGetLastError());
        for (size_t i = 0; i < n; i++) mirror[i] = mirror[i] * 2 + (u32)round;
        CHECK(cudaDeviceSynchronize());
        // A read of one word only, then a kernel: the page comes back unchanged.
        printf("partial pages: round %d a[3071]=%u a[3072]=%u\n", round, a[3071], a[3072]);
        scale_add<<<blocks_for(n), 256>>>(a, n, 1, 1);
        CHECK(cudaGetLastError());
        for (size_t i = 0; i < n; i++) mirror[i] += 1;
        CHECK(cudaDeviceSynchronize());
        EXPECT(memcmp(a, mirror.data(), n * sizeof(u32)) == 0);
        printf("partial pages: round %d sum=%llu\n", round, cpu_sum(a, n));
    }
    CHECK(cudaFree(a));
}

// cudaMemcpy and cudaMemset with managed memory on either side. Each copy follows CPU
// writes to its managed source, and the CPU looks at a managed destination only after
// the device is synchronized (a copy between device locations returns early).
static void copies() {
    const size_t n = 3000, bytes = n * sizeof(u32);  // not a whole number of pages
    u32 *m1, *m2, *d;
    CHECK(cudaMallocManaged(&m1, bytes));
    CHECK(cudaMallocManaged(&m2, bytes));
    CHECK(cudaMalloc(&d, bytes));
    std::vector<u32> h(n), back(n);
    for (size_t i = 0; i < n; i++) h[i] = (u32)(i * 13 + 5);

    CHECK(cudaMemcpy(m1, h.data(), bytes, cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());
    EXPECT(memcmp(m1, h.data(), bytes) == 0);

    for (size_t i = 0; i < n; i += 100) m1[i] = (u32)i;  // CPU writes the copy must see
    CHECK(cudaMemcpy(back.data(), m1, bytes, cudaMemcpyDeviceToHost));
    EXPECT(back[100] == 100 && back[101] == h[101] && back[2900] == 2900);

    CHECK(cudaMemcpy(m2, m1, bytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(d, m2, bytes, cudaMemcpyDeviceToDevice));
    scale_add<<<blocks_for(n), 256>>>(d, n, 2, 0);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(m1, d, bytes, cudaMemcpyDefault));  // device -> managed
    CHECK(cudaDeviceSynchronize());
    EXPECT(m1[100] == 200 && m1[101] == 2 * h[101] && m2[101] == h[101]);
    printf("copies: explicit kinds m1[100]=%u m1[101]=%u m2[2999]=%u\n", m1[100], m1[101], m2[2999]);

    // cudaMemcpyDefault in every direction.
    for (size_t i = 0; i < n; i++) h[i] = (u32)(i ^ 0x5a5a);
    CHECK(cudaMemcpy(m2, h.data(), bytes, cudaMemcpyDefault));               // host -> managed
    CHECK(cudaMemcpy(m1 + 10, m2 + 20, 1000 * sizeof(u32), cudaMemcpyDefault));  // managed -> managed
    CHECK(cudaMemcpy(d, m1, bytes, cudaMemcpyDefault));                       // managed -> device
    CHECK(cudaMemcpy(back.data(), d, bytes, cudaMemcpyDefault));
    CHECK(cudaDeviceSynchronize());
    EXPECT(back[10] == h[20] && back[1009] == h[1019] && back[1010] == m1[1010]);
    CHECK(cudaMemcpy(back.data(), m1, bytes, cudaMemcpyDefault));            // managed -> host
    CHECK(cudaDeviceSynchronize());
    EXPECT(memcmp(back.data(), m1, bytes) == 0);
    printf("copies: default kind sum(m1)=%llu sum(m2)=%llu\n", cpu_sum(m1, n), cpu_sum(m2, n));

    // Memsets of unaligned parts; the rest of each page keeps its bytes.
    std::vector<u32> before(m1, m1 + n);
    CHECK(cudaMemset((char*)m1 + 102, 0xab, 5000));
    CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> expect((unsigned char*)before.data(), (unsigned char*)before.data() + bytes);
    memset(expect.data() + 102, 0xab, 5000);
    EXPECT(memcmp(m1, expect.data(), bytes) == 0);

    // The same on a stream: async copy and memset with managed memory, then a kernel.
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    m2[0] = 77;
    CHECK(cudaMemsetAsync(m1, 0, bytes, s));
    CHECK(cudaMemcpyAsync(m1 + 1, m2, 100 * sizeof(u32), cudaMemcpyDefault, s));
    CHECK(cudaMemcpyAsync(d, m1, bytes, cudaMemcpyDeviceToDevice, s));
    scale_add<<<blocks_for(n), 256, 0, s>>>(d, n, 1, 3);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(m2, d, bytes, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(m1[0] == 0 && m1[1] == 77 && m2[0] == 3 && m2[1] == 80 && m2[2999] == 3);
    printf("copies: on a stream m2[1]=%u m2[2]=%u sum(m2)=%llu\n", m2[1], m2[2], cpu_sum(m2, n));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFree(m1));
    CHECK(cudaFree(m2));
}

// 64 MiB, set by one memset, then touched by the CPU and the GPU at scattered words.
static void large_sparse() {
    const size_t bytes = (size_t)64 << 20, n = bytes / sizeof(u32), mib = (1 << 20) / sizeof(u32);
    u32* big;
    u64* total;
    CHECK(cudaMallocManaged(&big, bytes));
    CHECK(cudaMallocManaged(&total, sizeof(u64)));
    CHECK(cudaMemset(big, 0, bytes));
    CHECK(cudaDeviceSynchronize());
    for (size_t k = 0; k < 64; k++) big[k * mib + k] = (u32)(k + 1);
    big[n - 1] = 1000;
    *total = 0;
    sum_all<<<blocks_for(n), 256>>>(big, n, total);
    CHECK(cudaGetLastError());
    // The GPU adds 5 to one word in every 4 MiB (words the CPU did not write).
    touch_sparse<<<1, 32>>>(big + 3, 4 * mib, 16, 5);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    EXPECT(*total == 2080 + 1000);
    printf("large: 64 MiB sum=%llu big[3]=%u big[4*mib+3]=%u big[63*mib+63]=%u big[n-1]=%u\n", *total, big[3],
           big[4 * mib + 3], big[63 * mib + 63], big[n - 1]);
    u64 sparse = 0;
    for (size_t k = 0; k < 64; k++) sparse += big[k * mib + k] + big[k * mib + 3];
    printf("large: sparse CPU sum=%llu\n", sparse);
    CHECK(cudaFree(total));
    CHECK(cudaFree(big));
}

static int range_i32(cudaMemRangeAttribute attr, const void* p, size_t n) {
    int v = 12345;
    CHECK(cudaMemRangeGetAttribute(&v, sizeof v, attr, p, n));
    return v;
}

// cudaMemAdvise and the range attributes that both models define alike.
static void advice() {
    const size_t n = 16384, bytes = n * sizeof(u32);  // 64 KiB
    u32 *r, *out, *plain;
    CHECK(cudaMallocManaged(&r, bytes));
    CHECK(cudaMallocManaged(&out, bytes));
    CHECK(cudaMallocManaged(&plain, bytes));
    for (size_t i = 0; i < n; i++) r[i] = (u32)(i % 1000);

    printf("advice: fresh read-mostly=%d preferred=%d last-prefetch=%d\n",
           range_i32(cudaMemRangeAttributeReadMostly, r, bytes),
           range_i32(cudaMemRangeAttributePreferredLocation, r, bytes),
           range_i32(cudaMemRangeAttributeLastPrefetchLocation, r, bytes));
    CHECK(cudaMemAdvise(r, bytes, cudaMemAdviseSetReadMostly, host_loc()));
    CHECK(cudaMemAdvise(r, bytes, cudaMemAdviseSetPreferredLocation, host_loc()));
    cudaMemLocationType type = cudaMemLocationTypeInvalid;
    CHECK(cudaMemRangeGetAttribute(&type, sizeof type, cudaMemRangeAttributePreferredLocationType, r, bytes));
    printf("advice: after set read-mostly=%d preferred=%d preferred-type-host:%s\n",
           range_i32(cudaMemRangeAttributeReadMostly, r, bytes),
           range_i32(cudaMemRangeAttributePreferredLocation, r, bytes),
           type == cudaMemLocationTypeHost ? "yes" : "no");
    // A part of the range (whole pages inside it) answers the same.
    printf("advice: part of the range read-mostly=%d\n",
           range_i32(cudaMemRangeAttributeReadMostly, r + 1024, 4096 * 2));
    // The CPU as an accessor (documented under both models; the query's answer for it is not).
    cudaError_t set_by = cudaMemAdvise(r, bytes, cudaMemAdviseSetAccessedBy, host_loc());
    (void)cudaGetLastError();
    cudaError_t unset_by = cudaMemAdvise(r, bytes, cudaMemAdviseUnsetAccessedBy, host_loc());
    (void)cudaGetLastError();
    printf("advice: accessed-by the host: %s, unset: %s\n", cudaGetErrorName(set_by), cudaGetErrorName(unset_by));

    // Several at once, on memory with no advice: nobody is an accessor.
    int rm = -7, pref = -7, by[3] = {-7, -7, -7};
    void* data[] = {&rm, &pref, by};
    size_t sizes[] = {sizeof rm, sizeof pref, sizeof by};
    cudaMemRangeAttribute attrs[] = {cudaMemRangeAttributeReadMostly, cudaMemRangeAttributePreferredLocation,
                                     cudaMemRangeAttributeAccessedBy};
    CHECK(cudaMemRangeGetAttributes(data, sizes, attrs, 3, plain, bytes));
    printf("advice: no advice, several at once read-mostly=%d preferred=%d accessed-by=%d,%d,%d\n", rm, pref, by[0],
           by[1], by[2]);
    CHECK(cudaMemRangeGetAttributes(data, sizes, attrs, 2, r, bytes));
    printf("advice: advised, several at once read-mostly=%d preferred=%d\n", rm, pref);
    int small = 0;
    cudaError_t e = cudaMemRangeGetAttribute(&small, 2, cudaMemRangeAttributeReadMostly, r, bytes);
    printf("advice: read-mostly into 2 bytes: %s\n", cudaGetErrorName(e));
    (void)cudaGetLastError();

    // Read-mostly data read by kernels, then written by the CPU and read again.
    for (int round = 0; round < 2; round++) {
        copy_add<<<blocks_for(n), 256>>>(out, r, n, (u32)round + 1);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        u64 s = cpu_sum(out, n);
        r[7] = 5000 + round;
        r[n - 1] = 6000 + round;
        copy_add<<<blocks_for(n), 256>>>(out, r, n, 0);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        EXPECT(out[7] == 5000u + round && out[n - 1] == 6000u + round && out[8] == 8);
        printf("advice: read-mostly round %d sum=%llu then sum=%llu\n", round, s, cpu_sum(out, n));
    }

    // A prefetch to the host is valid under both models and sets the last prefetch location.
    CHECK(cudaMemPrefetchAsync(r, bytes, host_loc(), 0, 0));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemRangeGetAttribute(&type, sizeof type, cudaMemRangeAttributeLastPrefetchLocationType, r, bytes));
    printf("advice: after a prefetch to the host last-prefetch=%d type-host:%s r[7]=%u\n",
           range_i32(cudaMemRangeAttributeLastPrefetchLocation, r, bytes),
           type == cudaMemLocationTypeHost ? "yes" : "no", r[7]);

    CHECK(cudaMemAdvise(r, bytes, cudaMemAdviseUnsetReadMostly, host_loc()));
    CHECK(cudaMemAdvise(r, bytes, cudaMemAdviseUnsetPreferredLocation, host_loc()));
    printf("advice: after unset read-mostly=%d preferred=%d\n", range_i32(cudaMemRangeAttributeReadMostly, r, bytes),
           range_i32(cudaMemRangeAttributePreferredLocation, r, bytes));

    // The device as preferred location and accessor: where accepted, queries say so.
    if (DEVICE_ONLY(cudaMemAdvise(out, bytes, cudaMemAdviseSetPreferredLocation, dev_loc(0)))) {
        EXPECT(range_i32(cudaMemRangeAttributePreferredLocation, out, bytes) == 0);
        CHECK(cudaMemAdvise(out, bytes, cudaMemAdviseUnsetPreferredLocation, dev_loc(0)));
    }
    if (DEVICE_ONLY(cudaMemAdvise(out, bytes, cudaMemAdviseSetAccessedBy, dev_loc(0)))) {
        int dev_by[2] = {-7, -7};
        CHECK(cudaMemRangeGetAttribute(dev_by, sizeof dev_by, cudaMemRangeAttributeAccessedBy, out, bytes));
        EXPECT(dev_by[0] == 0 && dev_by[1] == cudaInvalidDeviceId);
        copy_add<<<blocks_for(n), 256>>>(out, r, n, 9);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        EXPECT(out[8] == 17);
        CHECK(cudaMemAdvise(out, bytes, cudaMemAdviseUnsetAccessedBy, dev_loc(0)));
    }
    EXPECT(range_i32(cudaMemRangeAttributePreferredLocation, out, bytes) == cudaInvalidDeviceId);
    CHECK(cudaFree(r));
    CHECK(cudaFree(out));
    CHECK(cudaFree(plain));
}

// cudaMemPrefetchAsync around kernels: the whole range, a part of it with an unaligned
// start, and the batch variant.
static void prefetches() {
    const size_t n = 1 << 18, bytes = n * sizeof(u32);  // 1 MiB
    u32 *p, *q;
    CHECK(cudaMallocManaged(&p, bytes));
    CHECK(cudaMallocManaged(&q, bytes));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (size_t i = 0; i < n; i++) p[i] = (u32)i;
    DEVICE_ONLY(cudaMemPrefetchAsync(p, bytes, dev_loc(0), 0, s));
    scale_add<<<blocks_for(n), 256, 0, s>>>(p, n, 2, 1);
    CHECK(cudaGetLastError());
    CHECK(cudaMemPrefetchAsync(p, bytes, host_loc(), 0, s));
    CHECK(cudaStreamSynchronize(s));
    printf("prefetch: whole range sum=%llu p[1]=%u\n", cpu_sum(p, n), p[1]);

    for (size_t i = 0; i < n; i += 1000) p[i] = 9;
    DEVICE_ONLY(cudaMemPrefetchAsync((char*)p + 1000, bytes / 2, dev_loc(0), 0, s));
    scale_add<<<blocks_for(n), 256, 0, s>>>(p, n, 1, 1);
    CHECK(cudaGetLastError());
    CHECK(cudaMemPrefetchAsync((char*)p + 4096 * 3, 4096 * 5, host_loc(), 0, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(p[0] == 10 && p[1] == 4 && p[1000] == 10 && p[n - 1] == 2 * (u32)(n - 1) + 2);
    printf("prefetch: parts sum=%llu\n", cpu_sum(p, n));

    // The batch variant (documented for concurrentManagedAccess 1 only; elsewhere it
    // may be refused with any error and must leave the data as it was).
    for (size_t i = 0; i < n; i++) q[i] = (u32)(n - i);
    void* ptrs[] = {p, q};
    size_t sizes[] = {bytes, bytes};
    cudaMemLocation locs[] = {dev_loc(0)};
    size_t loc_idx[] = {0};
    cudaError_t e = cudaMemPrefetchBatchAsync(ptrs, sizes, 2, locs, loc_idx, 1, 0, s);
    if (e != cudaSuccess) {
        if (g_concurrent) CHECK(e);
        (void)cudaGetLastError();
    }
    copy_add<<<blocks_for(n), 256, 0, s>>>(q, p, n / 2, 1);
    CHECK(cudaGetLastError());
    cudaMemLocation hosts[] = {host_loc()};
    e = cudaMemPrefetchBatchAsync(ptrs, sizes, 2, hosts, loc_idx, 1, 0, s);
    if (e != cudaSuccess) {
        if (g_concurrent) CHECK(e);
        (void)cudaGetLastError();
    }
    CHECK(cudaStreamSynchronize(s));
    EXPECT(q[0] == p[0] + 1 && q[n / 2] == (u32)(n / 2) && q[n - 1] == 1);
    printf("prefetch: batch sum(q)=%llu\n", cpu_sum(q, n));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(p));
    CHECK(cudaFree(q));
}

// Host threads, each with its own non-blocking stream, an allocation attached to that
// stream alone (the CPU may touch it whenever its stream is idle, whatever the other
// streams run) and one attached to the host (the CPU may touch it at any time; the
// thread keeps the expected values there while its kernels run).
const int NT = 4, ITERS = 6;

struct Worker {
    cudaStream_t s;
    u32* a;      // attached to s
    u32* h;      // allocated with cudaMemAttachHost
    size_t n;
    u64 sums[ITERS];
    u64 host_sum;
    int ok;
};

static void worker(int t, Worker* w) {
    CHECK(cudaSetDevice(0));
    const size_t n = w->n;
    u32 *a = w->a, *h = w->h;
    for (int it = 0; it < ITERS; it++) {
        // The CPU writes all of it at first, then single words (partial pages).
        if (it == 0) {
            for (size_t i = 0; i < n; i++) a[i] = h[i] = (u32)(i + t * 1000);
        } else {
            for (size_t i = (size_t)it * 37; i < n; i += 997) a[i] = h[i] = (u32)(it * 100000 + i);
        }
        if (it % 2 == 0) DEVICE_ONLY(cudaMemPrefetchAsync(a, n * sizeof(u32), dev_loc(0), 0, w->s));
        u32 mul = (u32)(t + 2), add = (u32)it;
        scale_add<<<blocks_for(n), 256, 0, w->s>>>(a, n, mul, add);
        CHECK(cudaGetLastError());
        // While the kernel runs: the expected values, in host-attached managed memory.
        for (size_t i = 0; i < n; i++) h[i] = h[i] * mul + add;
        if (it % 3 == 1) {
            // A memset and a copy inside the allocation, in stream order.
            CHECK(cudaMemsetAsync(a + 10, 0, 50 * sizeof(u32), w->s));
            CHECK(cudaMemcpyAsync(a + 200, a + 10, 60 * sizeof(u32), cudaMemcpyDefault, w->s));
            for (size_t i = 10; i < 60; i++) h[i] = 0;
            memmove(h + 200, h + 10, 60 * sizeof(u32));
        }
        if (it % 2 == 1) CHECK(cudaMemPrefetchAsync(a, n * sizeof(u32), host_loc(), 0, w->s));
        CHECK(cudaStreamSynchronize(w->s));
        EXPECT(memcmp(a, h, n * sizeof(u32)) == 0);
        w->sums[it] = cpu_sum(a, n);
    }
    // The host-attached allocation used by a kernel: attached to the stream first, to
    // the host again after.
    CHECK(cudaStreamAttachMemAsync(w->s, h, 0, cudaMemAttachSingle));
    copy_add<<<blocks_for(n), 256, 0, w->s>>>(h, a, n, 11);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(w->s));
    EXPECT(h[0] == a[0] + 11 && h[n - 1] == a[n - 1] + 11);
    w->host_sum = cpu_sum(h, n);
    CHECK(cudaStreamAttachMemAsync(w->s, h, 0, cudaMemAttachHost));
    CHECK(cudaStreamSynchronize(w->s));
    h[0] = 1;  // the host's again
    w->ok = 1;
}

static void threads() {
    static Worker w[NT];
    for (int t = 0; t < NT; t++) {
        w[t].n = 3 * 1024 + (size_t)t * 250;  // three pages and a part
        CHECK(cudaStreamCreateWithFlags(&w[t].s, cudaStreamNonBlocking));
        CHECK(cudaMallocManaged(&w[t].a, w[t].n * sizeof(u32)));
        CHECK(cudaMallocManaged(&w[t].h, w[t].n * sizeof(u32), cudaMemAttachHost));
        CHECK(cudaStreamAttachMemAsync(w[t].s, w[t].a, 0, cudaMemAttachSingle));
    }
    for (int t = 0; t < NT; t++) CHECK(cudaStreamSynchronize(w[t].s));
    std::vector<std::thread> th;
    for (int t = 0; t < NT; t++) th.emplace_back(worker, t, &w[t]);
    for (auto& x : th) x.join();
    CHECK(cudaDeviceSynchronize());
    u64* total;
    CHECK(cudaMallocManaged(&total, sizeof(u64)));
    for (int t = 0; t < NT; t++) {
        printf("thread %d ok=%d sums", t, w[t].ok);
        for (int it = 0; it < ITERS; it++) printf(" %llu", w[t].sums[it]);
        printf(" host-attached=%llu\n", w[t].host_sum);
        // Attached globally again: a kernel on the legacy stream reads it.
        CHECK(cudaStreamAttachMemAsync(w[t].s, w[t].a, 0, cudaMemAttachGlobal));
        CHECK(cudaStreamSynchronize(w[t].s));
        *total = 0;
        sum_all<<<blocks_for(w[t].n), 256>>>(w[t].a, w[t].n, total);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        EXPECT(*total == w[t].sums[ITERS - 1]);
        CHECK(cudaStreamDestroy(w[t].s));
        CHECK(cudaFree(w[t].a));
        CHECK(cudaFree(w[t].h));
    }
    // An allocation attached to a stream that is then destroyed goes back to its
    // default association (global).
    cudaStream_t tmp;
    CHECK(cudaStreamCreate(&tmp));
    u32* x;
    CHECK(cudaMallocManaged(&x, 4096));
    CHECK(cudaStreamAttachMemAsync(tmp, x, 0));
    CHECK(cudaStreamSynchronize(tmp));
    for (int i = 0; i < 1024; i++) x[i] = (u32)i;
    CHECK(cudaStreamDestroy(tmp));
    CHECK(cudaDeviceSynchronize());
    *total = 0;
    sum_all<<<4, 256>>>(x, 1024, total);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("stream destroyed while attached: sum=%llu\n", *total);
    CHECK(cudaFree(x));
    CHECK(cudaFree(total));
}

int main() {
    CHECK(cudaSetDevice(0));
    int managed = 0;
    CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
    CHECK(cudaDeviceGetAttribute(&g_concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    printf("managed memory supported: %d\n", managed);

    u32 *g, *h;
    CHECK(cudaMallocManaged(&g, 1 << 16));
    CHECK(cudaMallocManaged(&h, 1 << 16, cudaMemAttachHost));
    show_pointer("global", g);
    show_pointer("global+4100", (char*)g + 4100);
    show_pointer("host-attached", h);
    void* bad = nullptr;
    cudaError_t e = cudaMallocManaged(&bad, 0);
    printf("cudaMallocManaged(0 bytes): %s\n", cudaGetErrorName(e));
    (void)cudaGetLastError();
    e = cudaMallocManaged(&bad, 4096, cudaMemAttachSingle);
    printf("cudaMallocManaged(cudaMemAttachSingle): %s\n", cudaGetErrorName(e));
    (void)cudaGetLastError();
    CHECK(cudaFree(g));
    CHECK(cudaFree(h));

    partial_pages();
    copies();
    large_sparse();
    advice();
    prefetches();
    threads();
    CHECK(cudaDeviceSynchronize());
    printf("done\n");
    return 0;
}
