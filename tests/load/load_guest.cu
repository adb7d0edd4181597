// load_guest: a self-checking CUDA guest for the load and fault tests
// (tests/src/load.rs drives many of these at once against one daemon).
//
// From a seed it runs a random mix of runtime calls for a bounded time or op count:
// cudaMalloc/cudaFree of sizes from one byte to tens of MiB, cudaMemcpy(Async)
// host-to-device, device-to-host and device-to-device from pageable and pinned
// (cudaMallocHost) memory, cudaMemset(Async), streams and events created, recorded,
// waited on and destroyed, cudaMemGetInfo, and launches of a kernel that writes a
// seed-derived pattern. Every device buffer has a host shadow of what this process
// wrote into it; every byte read back must equal the shadow. The written data derive
// from the seed, so bytes from another guest (cross-talk) or a stale allocation show
// up as a mismatch.
//
// Some launches first spin for up to 20 ms, so that kills also land mid-kernel.
// Kernels only run on a GPU: their output is checked with --verify-kernels. Without
// it a launch is followed by a stream-ordered memset of the same range, so the shadow
// stays right whether or not the kernel ran (the host-memory executor records
// launches without running them).
//
//   load_guest --seed N [--seconds S] [--ops N] [--threads T] [--max-mib M]
//              [--verify-kernels] [--crash] [--no-cleanup]
//
// --crash: a watchdog thread calls _exit at a seed-chosen moment inside the run,
//   wherever the worker threads are (typically inside a copy): a crash from inside.
// --no-cleanup: exit without freeing anything (the host must release it all).
// Output: "LOAD OK seed=<n> ops=<n> bytes=<n>" and exit 0; "LOAD FAIL ..." and exit 1
// on any mismatch or unexpected CUDA error; "LOAD CRASH ..." and exit 99 for --crash.
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>
#include <cuda_runtime.h>

static uint64_t g_seed = 1;
static std::atomic<unsigned long long> g_ops(0), g_bytes(0);
static std::mutex g_fail_lock;

static void fail(const char* fmt, ...) {
    std::lock_guard<std::mutex> g(g_fail_lock);
    va_list ap;
    va_start(ap, fmt);
    printf("LOAD FAIL seed=%llu ops=%llu: ", (unsigned long long)g_seed, g_ops.load());
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    _exit(1);
}

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    fail("line %d: %s -> %s", __LINE__, #call, cudaGetErrorName(e_)); } while (0)

// splitmix64's finalizer: the pattern generator on both host and device.
__host__ __device__ static inline uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Byte j of a pattern with key k is byte (j % 8) of mix64(k + j / 8), little-endian:
// exactly what pattern_kernel writes into 8-byte words.
static void fill_pattern(uint8_t* dst, size_t n, uint64_t key) {
    size_t w = 0;
    for (; (w + 1) * 8 <= n; w++) {
        uint64_t v = mix64(key + w);
        memcpy(dst + w * 8, &v, 8);
    }
    if (w * 8 < n) {
        uint64_t v = mix64(key + w);
        memcpy(dst + w * 8, &v, n - w * 8);
    }
}

__global__ void pattern_kernel(uint64_t* p, size_t words, uint64_t key) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = mix64(key + i);
}

// Busy for `ns` nanoseconds of GPU time, so that kills land inside a kernel too.
__global__ void spin_kernel(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(mix64(seed) | 1) {}
    uint64_t next() {  // xorshift64
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    uint64_t below(uint64_t n) { return n ? next() % n : 0; }
    uint64_t between(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }  // inclusive
    bool chance(unsigned percent) { return below(100) < percent; }
};

static double now_s() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

struct Options {
    double seconds = 0;
    unsigned long long max_ops = 0;
    int threads = 1;
    size_t max_live = 64u << 20;
    bool verify_kernels = false;
    bool crash = false;
    bool cleanup = true;
};

struct Buf {
    uint8_t* d;
    size_t size;
    std::vector<uint8_t> shadow;
};

struct Range {
    size_t off, len;
};

// One thread's private state: its buffers, streams and events are used by nobody else,
// so its shadows are exact.
class Worker {
public:
    Worker(const Options& o, int id) : o_(o), rng_(g_seed * 1000003ull + id), id_(id) {
        max_buf_ = o.max_live / 2;
        if (max_buf_ > (24u << 20)) max_buf_ = 24u << 20;
        if (max_buf_ < 4096) max_buf_ = 4096;
        CK(cudaMallocHost(&pin_, max_buf_));
        pageable_.resize(max_buf_);
        key_base_ = mix64(g_seed ^ ((uint64_t)id << 56));
        for (int i = 0; i < 2; i++) add_stream();
    }

    void run(double deadline) {
        while (!(o_.seconds > 0 && now_s() >= deadline) &&
               !(o_.max_ops && g_ops.load() >= o_.max_ops)) {
            step();
            g_ops++;
        }
        // Everything still held must read back exactly.
        for (auto& b : bufs_) check_range(b, {0, b.size}, rng_.chance(50));
        if (o_.cleanup) {
            for (auto& b : bufs_) CK(cudaFree(b.d));
            bufs_.clear();
            for (auto s : streams_) CK(cudaStreamDestroy(s));
            streams_.clear();
            CK(cudaFreeHost(pin_));
        }
    }

private:
    const Options& o_;
    Rng rng_;
    int id_;
    size_t max_buf_;
    uint8_t* pin_ = nullptr;
    std::vector<uint8_t> pageable_;
    uint64_t key_base_;
    uint64_t tag_ = 0;
    std::vector<Buf> bufs_;
    size_t live_ = 0;
    std::vector<cudaStream_t> streams_;

    uint64_t next_key() { return mix64(key_base_ + ++tag_); }
    uint8_t next_byte() { return (uint8_t)(next_key() >> 24); }

    size_t random_size() {
        unsigned r = rng_.below(100);
        size_t hi;
        if (r < 40) hi = 4096;
        else if (r < 75) hi = 256u << 10;
        else if (r < 95) hi = 4u << 20;
        else hi = max_buf_;
        if (hi > max_buf_) hi = max_buf_;
        return rng_.between(1, hi);
    }

    Range random_range(const Buf& b, size_t limit) {
        size_t cap = b.size < limit ? b.size : limit;
        if (rng_.chance(25) && b.size <= limit) return {0, b.size};
        size_t len = rng_.chance(50) ? rng_.between(1, cap < 512 ? cap : 512) : rng_.between(1, cap);
        size_t off = rng_.below(b.size - len + 1);
        return {off, len};
    }

    // Stream-ordered work on a buffer needs the caller to pick a buffer nobody else
    // touches until it synchronizes; these helpers pick by index.
    Buf& any_buf() { return bufs_[rng_.below(bufs_.size())]; }

    uint8_t* host_staging(bool pinned) { return pinned ? pin_ : pageable_.data(); }

    void add_stream() {
        cudaStream_t s;
        switch (rng_.below(3)) {
        case 0: CK(cudaStreamCreate(&s)); break;
        case 1: CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); break;
        default: {
            int least, greatest;
            CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
            CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, rng_.chance(50) ? least : greatest));
        }
        }
        streams_.push_back(s);
    }

    void count(size_t bytes) { g_bytes += bytes; }

    // cudaMemset, device-to-device cudaMemcpy and kernels on the legacy default stream
    // return before they finish, and streams made with cudaStreamNonBlocking do not wait
    // for that stream: make `s` wait for everything issued so far before it touches a
    // buffer (without this the program races with itself once the GPU is busy).
    void after_legacy(cudaStream_t s) {
        cudaEvent_t ev;
        CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
        CK(cudaEventRecord(ev, 0));
        CK(cudaStreamWaitEvent(s, ev, 0));
        CK(cudaEventDestroy(ev));
    }

    void compare(const Buf& b, Range r, const uint8_t* got, const char* how) {
        if (memcmp(got, b.shadow.data() + r.off, r.len) == 0) return;
        size_t i = 0;
        while (got[i] == b.shadow[r.off + i]) i++;
        size_t n = 0;
        for (size_t j = 0; j < r.len; j++) n += got[j] != b.shadow[r.off + j];
        fail("thread %d: %s of %zu bytes at offset %zu of a %zu-byte buffer: %zu bytes differ, "
             "first at +%zu (got 0x%02x, wrote 0x%02x)",
             id_, how, r.len, r.off, b.size, n, i, got[i], b.shadow[r.off + i]);
    }

    void check_range(const Buf& b, Range r, bool pinned) {
        uint8_t* h = host_staging(pinned);
        memset(h, 0xEE, r.len);  // stale staging bytes must not pass for the data
        CK(cudaMemcpy(h, b.d + r.off, r.len, rng_.chance(20) ? cudaMemcpyDefault : cudaMemcpyDeviceToHost));
        count(r.len);
        compare(b, r, h, pinned ? "D2H (pinned)" : "D2H (pageable)");
    }

    void op_alloc() {
        size_t size = random_size();
        if (bufs_.size() >= 24 || live_ + size > o_.max_live) {
            op_free();
            return;
        }
        Buf b;
        b.size = size;
        CK(cudaMalloc(&b.d, size));
        b.shadow.resize(size);
        // Fully written at once, so the shadow is exact from the start.
        if (rng_.chance(50)) {
            uint8_t v = next_byte();
            CK(cudaMemset(b.d, v, size));
            memset(b.shadow.data(), v, size);
        } else {
            bool pinned = rng_.chance(50);
            uint8_t* h = host_staging(pinned);
            fill_pattern(h, size, next_key());
            CK(cudaMemcpy(b.d, h, size, cudaMemcpyHostToDevice));
            memcpy(b.shadow.data(), h, size);
        }
        count(size);
        live_ += size;
        bufs_.push_back(std::move(b));
    }

    void op_free() {
        if (bufs_.empty()) return;
        size_t i = rng_.below(bufs_.size());
        // Freeing can come right after a read of the last bytes written.
        if (rng_.chance(30)) check_range(bufs_[i], random_range(bufs_[i], max_buf_), rng_.chance(50));
        CK(cudaFree(bufs_[i].d));
        live_ -= bufs_[i].size;
        bufs_.erase(bufs_.begin() + i);
    }

    void op_h2d() {
        Buf& b = any_buf();
        Range r = random_range(b, max_buf_);
        uint8_t* h = host_staging(rng_.chance(50));
        fill_pattern(h, r.len, next_key());
        CK(cudaMemcpy(b.d + r.off, h, r.len, rng_.chance(20) ? cudaMemcpyDefault : cudaMemcpyHostToDevice));
        memcpy(b.shadow.data() + r.off, h, r.len);
        count(r.len);
    }

    void op_d2h() {
        Buf& b = any_buf();
        check_range(b, random_range(b, max_buf_), rng_.chance(50));
    }

    void op_d2d() {
        if (bufs_.size() < 2) return op_h2d();
        size_t i = rng_.below(bufs_.size()), j = rng_.below(bufs_.size() - 1);
        if (j >= i) j++;
        Buf& src = bufs_[i];
        Buf& dst = bufs_[j];
        size_t cap = src.size < dst.size ? src.size : dst.size;
        size_t len = rng_.between(1, cap);
        size_t so = rng_.below(src.size - len + 1), dof = rng_.below(dst.size - len + 1);
        CK(cudaMemcpy(dst.d + dof, src.d + so, len, rng_.chance(20) ? cudaMemcpyDefault : cudaMemcpyDeviceToDevice));
        memcpy(dst.shadow.data() + dof, src.shadow.data() + so, len);
        count(len);
    }

    void op_memset() {
        Buf& b = any_buf();
        Range r = random_range(b, b.size);
        uint8_t v = next_byte();
        CK(cudaMemset(b.d + r.off, v, r.len));
        memset(b.shadow.data() + r.off, v, r.len);
        count(r.len);
    }

    // A kernel over an 8-byte-aligned range of `b`, ordered on `s`. The shadow follows
    // the kernel on a GPU; elsewhere a memset on the same stream overwrites the range.
    void launch_on(Buf& b, cudaStream_t s) {
        if (b.size < 8) return;
        size_t words = rng_.between(1, b.size / 8);
        size_t first = rng_.below(b.size / 8 - words + 1);
        uint64_t key = next_key();
        unsigned grid = (unsigned)((words + 255) / 256);
        if (grid > 1024) grid = 1024;
        pattern_kernel<<<grid, 256, 0, s>>>((uint64_t*)(b.d + first * 8), words, key);
        CK(cudaGetLastError());
        uint8_t* shadow = b.shadow.data() + first * 8;
        if (o_.verify_kernels) {
            fill_pattern(shadow, words * 8, key);
        } else {
            uint8_t v = next_byte();
            CK(cudaMemsetAsync(b.d + first * 8, v, words * 8, s));
            memset(shadow, v, words * 8);
        }
    }

    void op_kernel() {
        Buf& b = any_buf();
        if (rng_.chance(30)) {
            spin_kernel<<<1, 32>>>(rng_.between(1, 20) * 1000000ull);
            CK(cudaGetLastError());
        }
        launch_on(b, 0);
        CK(cudaDeviceSynchronize());
        if (rng_.chance(50)) check_range(b, random_range(b, max_buf_), rng_.chance(50));
    }

    // Up to three streams, each with its own buffer and its own slice of the staging
    // memory, each running a chain of async work; then one of several ways to wait.
    void op_async() {
        size_t k = rng_.between(1, 3);
        if (k > streams_.size()) k = streams_.size();
        if (k > bufs_.size()) k = bufs_.size();
        std::vector<size_t> picked;
        while (picked.size() < k) {
            size_t i = rng_.below(bufs_.size());
            bool dup = false;
            for (size_t p : picked) dup |= p == i;
            if (!dup) picked.push_back(i);
        }
        size_t first_stream = rng_.below(streams_.size());
        size_t slice = max_buf_ / k;
        bool pinned = rng_.chance(70);
        struct Pending { Buf* b; Range r; uint8_t* h; cudaEvent_t ev; cudaStream_t s; };
        std::vector<Pending> pend;
        for (size_t n = 0; n < k; n++) {
            Buf& b = bufs_[picked[n]];
            cudaStream_t s = streams_[(first_stream + n) % streams_.size()];
            after_legacy(s);
            uint8_t* h = host_staging(pinned) + n * slice;
            // Host to device from this stream's slice.
            Range r = random_range(b, slice);
            fill_pattern(h, r.len, next_key());
            CK(cudaMemcpyAsync(b.d + r.off, h, r.len, cudaMemcpyHostToDevice, s));
            memcpy(b.shadow.data() + r.off, h, r.len);
            count(r.len);
            if (rng_.chance(60)) {
                Range m = random_range(b, b.size);
                uint8_t v = next_byte();
                CK(cudaMemsetAsync(b.d + m.off, v, m.len, s));
                memset(b.shadow.data() + m.off, v, m.len);
                count(m.len);
            }
            if (rng_.chance(40) && b.size >= 2) {
                // Within the buffer, between non-overlapping halves.
                size_t half = b.size / 2;
                size_t len = rng_.between(1, half);
                size_t a = rng_.below(half - len + 1), c = half + rng_.below(b.size - half - len + 1);
                if (rng_.chance(50)) std::swap(a, c);
                CK(cudaMemcpyAsync(b.d + c, b.d + a, len, cudaMemcpyDeviceToDevice, s));
                memmove(b.shadow.data() + c, b.shadow.data() + a, len);
                count(len);
            }
            if (rng_.chance(25)) launch_on(b, s);
            // The staging slice was read by the H2D copy above, in stream order, before
            // this device-to-host copy overwrites it.
            Range back = random_range(b, slice);
            CK(cudaMemcpyAsync(h, b.d + back.off, back.len, cudaMemcpyDeviceToHost, s));
            count(back.len);
            cudaEvent_t ev;
            CK(cudaEventCreateWithFlags(&ev, rng_.chance(50) ? cudaEventDisableTiming : cudaEventDefault));
            CK(cudaEventRecord(ev, s));
            pend.push_back({&b, back, h, ev, s});
        }
        switch (rng_.below(5)) {
        case 0:
            for (auto& p : pend) CK(cudaStreamSynchronize(p.s));
            break;
        case 1:
            for (auto& p : pend) CK(cudaEventSynchronize(p.ev));
            break;
        case 2:
            CK(cudaDeviceSynchronize());
            break;
        case 3: {
            // Polling: cudaErrorNotReady is an answer, not an error.
            double give_up = now_s() + 120;
            for (auto& p : pend) {
                for (;;) {
                    cudaError_t e = rng_.chance(50) ? cudaStreamQuery(p.s) : cudaEventQuery(p.ev);
                    if (e == cudaSuccess) break;
                    if (e != cudaErrorNotReady) fail("line %d: query -> %s", __LINE__, cudaGetErrorName(e));
                    if (now_s() > give_up) fail("line %d: stream never finished", __LINE__);
                    usleep(100);
                }
            }
            cudaError_t last = cudaGetLastError();
            if (last != cudaSuccess && last != cudaErrorNotReady)
                fail("line %d: last error %s after polling", __LINE__, cudaGetErrorName(last));
            break;
        }
        default: {
            // Cross-stream: the first stream waits for every event, then is synchronized.
            for (auto& p : pend) CK(cudaStreamWaitEvent(pend[0].s, p.ev, 0));
            CK(cudaStreamSynchronize(pend[0].s));
            for (auto& p : pend) CK(cudaEventQuery(p.ev));
        }
        }
        for (auto& p : pend) {
            compare(*p.b, p.r, p.h, pinned ? "async D2H (pinned)" : "async D2H (pageable)");
            CK(cudaEventDestroy(p.ev));
        }
    }

    void op_streams() {
        if (streams_.size() > 1 && (streams_.size() >= 6 || rng_.chance(50))) {
            size_t i = rng_.below(streams_.size());
            cudaStream_t s = streams_[i];
            if (!bufs_.empty() && rng_.chance(50)) {
                // Destroyed with work still queued: CUDA finishes it first.
                Buf& b = any_buf();
                Range r = random_range(b, b.size);
                uint8_t v = next_byte();
                after_legacy(s);
                CK(cudaMemsetAsync(b.d + r.off, v, r.len, s));
                memset(b.shadow.data() + r.off, v, r.len);
                count(r.len);
                CK(cudaStreamDestroy(s));
                CK(cudaDeviceSynchronize());
            } else {
                CK(cudaStreamSynchronize(s));
                CK(cudaStreamDestroy(s));
            }
            streams_.erase(streams_.begin() + i);
        } else {
            add_stream();
        }
    }

    void op_events() {
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreateWithFlags(&b, rng_.chance(50) ? cudaEventBlockingSync : cudaEventDefault));
        cudaStream_t s = streams_[rng_.below(streams_.size())];
        after_legacy(s);
        CK(cudaEventRecord(a, s));
        if (!bufs_.empty()) {
            Buf& buf = any_buf();
            Range r = random_range(buf, buf.size);
            uint8_t v = next_byte();
            CK(cudaMemsetAsync(buf.d + r.off, v, r.len, s));
            memset(buf.shadow.data() + r.off, v, r.len);
            count(r.len);
        }
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventQuery(a));
        float ms = -1;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (!(ms >= 0)) fail("line %d: elapsed time %f ms", __LINE__, ms);
        CK(cudaEventDestroy(a));
        CK(cudaEventDestroy(b));
    }

    void op_meminfo() {
        size_t free_b = 0, total = 0;
        CK(cudaMemGetInfo(&free_b, &total));
        if (total == 0 || free_b > total) fail("line %d: cudaMemGetInfo free=%zu total=%zu", __LINE__, free_b, total);
    }

    // Short-lived pinned memory, written, copied in and freed.
    void op_pinned() {
        Buf& b = any_buf();
        Range r = random_range(b, 1u << 20);
        uint8_t* h;
        if (rng_.chance(50)) CK(cudaMallocHost(&h, r.len));
        else CK(cudaHostAlloc((void**)&h, r.len, cudaHostAllocDefault));
        fill_pattern(h, r.len, next_key());
        CK(cudaMemcpy(b.d + r.off, h, r.len, cudaMemcpyHostToDevice));
        memcpy(b.shadow.data() + r.off, h, r.len);
        count(r.len);
        memset(h, 0, r.len);
        CK(cudaMemcpy(h, b.d + r.off, r.len, cudaMemcpyDeviceToHost));
        count(r.len);
        compare(b, r, h, "D2H (short-lived pinned)");
        CK(cudaFreeHost(h));
    }

    void step() {
        if (bufs_.empty()) return op_alloc();
        unsigned r = rng_.below(100);
        if (r < 14) op_alloc();
        else if (r < 24) op_free();
        else if (r < 38) op_h2d();
        else if (r < 52) op_d2h();
        else if (r < 60) op_d2d();
        else if (r < 67) op_memset();
        else if (r < 72) op_kernel();
        else if (r < 86) op_async();
        else if (r < 90) op_streams();
        else if (r < 94) op_events();
        else if (r < 97) op_meminfo();
        else op_pinned();
    }
};

static void usage(const char* argv0) {
    fprintf(stderr, "usage: %s --seed N [--seconds S] [--ops N] [--threads T] [--max-mib M] "
                    "[--verify-kernels] [--crash] [--no-cleanup]\n", argv0);
    exit(2);
}

int main(int argc, char** argv) {
    Options o;
    bool have_seed = false;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> const char* { if (i + 1 >= argc) usage(argv[0]); return argv[++i]; };
        if (a == "--seed") { g_seed = strtoull(value(), nullptr, 0); have_seed = true; }
        else if (a == "--seconds") o.seconds = atof(value());
        else if (a == "--ops") o.max_ops = strtoull(value(), nullptr, 0);
        else if (a == "--threads") o.threads = atoi(value());
        else if (a == "--max-mib") o.max_live = (size_t)strtoull(value(), nullptr, 0) << 20;
        else if (a == "--verify-kernels") o.verify_kernels = true;
        else if (a == "--crash") o.crash = true;
        else if (a == "--no-cleanup") o.cleanup = false;
        else usage(argv[0]);
    }
    if (!have_seed || o.threads < 1 || o.threads > 16 || o.max_live < (1u << 20)) usage(argv[0]);
    if (o.seconds <= 0 && o.max_ops == 0) o.seconds = 5;

    // The clock starts once the device is up: creating a context takes a while when
    // many processes do it at once, and the time given is for work.
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    if (count < 1) fail("no device");
    CK(cudaSetDevice(0));
    CK(cudaFree(0));

    double start = now_s();
    double deadline = start + o.seconds;
    if (o.crash) {
        // Somewhere inside the run (or its first seconds when bounded by ops only).
        Rng r(g_seed ^ 0xC7A5);
        double span = o.seconds > 0 ? o.seconds : 2.0;
        double at = start + span * (double)r.between(5, 95) / 100.0;
        std::thread([at]() {
            while (now_s() < at) usleep(1000);
            char line[128];
            int n = snprintf(line, sizeof line, "LOAD CRASH seed=%llu ops=%llu\n",
                             (unsigned long long)g_seed, g_ops.load());
            // write(2), not stdio: another thread may hold stdout's lock.
            if (write(1, line, n) < 0) {}
            _exit(99);
        }).detach();
    }

    std::vector<std::thread> threads;
    for (int t = 1; t < o.threads; t++)
        threads.emplace_back([&o, t, deadline]() {
            CK(cudaSetDevice(0));
            Worker(o, t).run(deadline);
        });
    Worker(o, 0).run(deadline);
    for (auto& t : threads) t.join();
    if (o.cleanup) CK(cudaDeviceSynchronize());
    printf("LOAD OK seed=%llu ops=%llu bytes=%llu\n", (unsigned long long)g_seed, g_ops.load(), g_bytes.load());
    fflush(stdout);
    return 0;
}
