// memcpy_kinds: every cudaMemcpyKind, pinned / portable / registered host memory,
// host flags, async copies, memset, pitched 2D copies and memset, peer copies,
// odd sizes, offsets and one large (64 MiB + 13 B) copy. All round trips self-checked.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

static void fill(unsigned char* p, size_t n, unsigned seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) { x = x * 1664525u + 1013904223u; p[i] = (unsigned char)(x >> 24); }
}
static bool all_eq(const unsigned char* p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++) if (p[i] != v) return false;
    return true;
}

int main() {
    const size_t N = 1 << 20;
    std::vector<unsigned char> h1(N), h2(N), h3(N);
    fill(h1.data(), N, 1);
    unsigned char *d1, *d2;
    CHECK(cudaMalloc(&d1, N));
    CHECK(cudaMalloc(&d2, N));

    // Explicit kinds.
    CHECK(cudaMemcpy(d1, h1.data(), N, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d2, d1, N, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(h2.data(), d2, N, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(h1.data(), h2.data(), N) == 0);
    CHECK(cudaMemcpy(h3.data(), h2.data(), N, cudaMemcpyHostToHost));
    EXPECT(memcmp(h1.data(), h3.data(), N) == 0);
    printf("explicit kinds: ok\n");

    // cudaMemcpyDefault with every pointer combination.
    fill(h1.data(), N, 2);
    CHECK(cudaMemcpy(d1, h1.data(), N, cudaMemcpyDefault));
    CHECK(cudaMemcpy(d2, d1, N, cudaMemcpyDefault));
    memset(h2.data(), 0, N);
    CHECK(cudaMemcpy(h2.data(), d2, N, cudaMemcpyDefault));
    EXPECT(memcmp(h1.data(), h2.data(), N) == 0);
    memset(h3.data(), 0, N);
    CHECK(cudaMemcpy(h3.data(), h2.data(), N, cudaMemcpyDefault));
    EXPECT(memcmp(h1.data(), h3.data(), N) == 0);
    printf("default kind: ok\n");

    // Pinned memory and flags.
    unsigned char *pin, *hdef, *hport;
    CHECK(cudaMallocHost(&pin, N));
    CHECK(cudaHostAlloc(&hdef, N, cudaHostAllocDefault));
    CHECK(cudaHostAlloc(&hport, N, cudaHostAllocPortable));
    unsigned fl = 0xdead;
    CHECK(cudaHostGetFlags(&fl, pin));
    printf("cudaHostGetFlags(cudaMallocHost): 0x%x\n", fl);
    CHECK(cudaHostGetFlags(&fl, hdef));
    printf("cudaHostGetFlags(default): 0x%x\n", fl);
    CHECK(cudaHostGetFlags(&fl, hport));
    printf("cudaHostGetFlags(portable): 0x%x\n", fl);
    fl = 0xdead;
    cudaError_t e = cudaHostGetFlags(&fl, hport + 100);
    printf("cudaHostGetFlags(portable+100): %s 0x%x\n", cudaGetErrorName(e), e == cudaSuccess ? fl : 0u);
    cudaGetLastError();
    e = cudaHostGetFlags(&fl, h1.data());
    printf("cudaHostGetFlags(pageable): %s\n", cudaGetErrorName(e));
    cudaGetLastError();

    // Async copies on a stream through pinned memory.
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    fill(pin, N, 3);
    memset(hdef, 0, N);
    CHECK(cudaMemcpyAsync(d1, pin, N, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(d2, d1, N, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaMemcpyAsync(hdef, d2, N, cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(hport, hdef, N, cudaMemcpyDefault, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(memcmp(pin, hdef, N) == 0);
    EXPECT(memcmp(pin, hport, N) == 0);
    printf("async pinned copies: ok\n");

    // Registered (malloc'd) host memory.
    unsigned char* reg = (unsigned char*)malloc(N);
    fill(reg, N, 4);
    CHECK(cudaHostRegister(reg, N, cudaHostRegisterDefault));
    CHECK(cudaHostGetFlags(&fl, reg));
    printf("cudaHostGetFlags(registered): 0x%x\n", fl);
    CHECK(cudaMemcpyAsync(d1, reg, N, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(pin, d1, N, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(memcmp(pin, reg, N) == 0);
    memset(reg, 0, N);
    CHECK(cudaMemcpyAsync(reg, d1, N, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(memcmp(pin, reg, N) == 0);
    CHECK(cudaHostUnregister(reg));
    e = cudaHostUnregister(reg);
    printf("cudaHostUnregister twice: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    free(reg);
    // Async copy with pageable memory.
    fill(h1.data(), N, 5);
    CHECK(cudaMemcpyAsync(d2, h1.data(), N, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(h2.data(), d2, N, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(memcmp(h1.data(), h2.data(), N) == 0);
    printf("registered/pageable async: ok\n");

    // Memset / MemsetAsync, including an offset region.
    CHECK(cudaMemset(d1, 0xAB, N));
    CHECK(cudaMemsetAsync(d1 + 1001, 0x5C, 4097, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h2.data(), d1, N, cudaMemcpyDeviceToHost));
    EXPECT(all_eq(h2.data(), 1001, 0xAB));
    EXPECT(all_eq(h2.data() + 1001, 4097, 0x5C));
    EXPECT(all_eq(h2.data() + 1001 + 4097, N - 1001 - 4097, 0xAB));
    printf("memset: ok\n");

    // Pitched 2D.
    const size_t W = 333 * sizeof(float), H = 17;
    unsigned char *dp, *dp2;
    size_t pitch = 0, pitch2 = 0;
    CHECK(cudaMallocPitch((void**)&dp, &pitch, W, H));
    CHECK(cudaMallocPitch((void**)&dp2, &pitch2, W + 64, H + 3));
    printf("pitch(%zu x %zu): %zu\n", W, H, pitch);
    printf("pitch(%zu x %zu): %zu\n", W + 64, H + 3, pitch2);
    std::vector<unsigned char> img(W * H), img2(W * H);
    fill(img.data(), img.size(), 6);
    CHECK(cudaMemcpy2D(dp, pitch, img.data(), W, W, H, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2D(img2.data(), W, dp, pitch, W, H, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(img.data(), img2.data(), img.size()) == 0);
    // Device-to-device 2D into an offset sub-rectangle, async.
    CHECK(cudaMemset2DAsync(dp2, pitch2, 0x11, W + 64, H + 3, s));
    CHECK(cudaMemcpy2DAsync(dp2 + 2 * pitch2 + 32, pitch2, dp, pitch, W, H, cudaMemcpyDeviceToDevice, s));
    std::vector<unsigned char> big((W + 64) * (H + 3));
    CHECK(cudaMemcpy2DAsync(big.data(), W + 64, dp2, pitch2, W + 64, H + 3, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (size_t r = 0; r < H + 3; r++)
        for (size_t c = 0; c < W + 64; c++) {
            unsigned char want = 0x11;
            if (r >= 2 && r < 2 + H && c >= 32 && c < 32 + W) want = img[(r - 2) * W + (c - 32)];
            EXPECT(big[r * (W + 64) + c] == want);
        }
    CHECK(cudaMemset2D(dp, pitch, 0x7E, W - 5, H - 2));
    CHECK(cudaMemcpy2D(img2.data(), W, dp, pitch, W, H, cudaMemcpyDeviceToHost));
    for (size_t r = 0; r < H; r++)
        for (size_t c = 0; c < W; c++)
            EXPECT(img2[r * W + c] == ((r < H - 2 && c < W - 5) ? 0x7E : img[r * W + c]));
    printf("2D copies and memset: ok\n");

    // Peer copies on the same device.
    fill(h1.data(), N, 7);
    CHECK(cudaMemcpy(d1, h1.data(), N, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d2, 0, N));
    CHECK(cudaMemcpyPeer(d2, 0, d1, 0, N / 2));
    CHECK(cudaMemcpyPeerAsync(d2 + N / 2, 0, d1 + N / 2, 0, N / 2, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h2.data(), d2, N, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(h1.data(), h2.data(), N) == 0);
    printf("peer copies: ok\n");

    // Odd sizes at odd offsets.
    const size_t sizes[] = {1, 3, 4097};
    const size_t offs[] = {0, 1, 5, 4095, 777};
    for (size_t sz : sizes)
        for (size_t off : offs) {
            CHECK(cudaMemset(d1, 0, N));
            fill(h1.data(), sz, (unsigned)(sz * 31 + off));
            CHECK(cudaMemcpy(d1 + off, h1.data() + 3, sz, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(d2 + off + 1, d1 + off, sz, cudaMemcpyDeviceToDevice));
            memset(h2.data(), 0xFF, sz + 2);
            CHECK(cudaMemcpy(h2.data() + 1, d2 + off + 1, sz, cudaMemcpyDeviceToHost));
            EXPECT(memcmp(h2.data() + 1, h1.data() + 3, sz) == 0);
            EXPECT(h2[0] == 0xFF && h2[sz + 1] == 0xFF);
            CHECK(cudaMemcpy(h3.data(), d1, off + sz + 1, cudaMemcpyDeviceToHost));
            EXPECT(all_eq(h3.data(), off, 0));
            EXPECT(h3[off + sz] == 0);
        }
    printf("odd sizes and offsets: ok\n");

    // Large copy: 64 MiB + 13 bytes, through pageable and pinned memory.
    const size_t L = (64u << 20) + 13;
    unsigned char *dl1, *dl2, *pl;
    std::vector<unsigned char> hl(L), hl2(L);
    fill(hl.data(), L, 8);
    CHECK(cudaMalloc(&dl1, L));
    CHECK(cudaMalloc(&dl2, L));
    CHECK(cudaMallocHost(&pl, L));
    CHECK(cudaMemcpy(dl1, hl.data(), L, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dl2, dl1, L, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(hl2.data(), dl2, L, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(hl.data(), hl2.data(), L) == 0);
    memset(pl, 0, L);
    CHECK(cudaMemcpyAsync(pl, dl2, L, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(memcmp(hl.data(), pl, L) == 0);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < L; i += 4093) h = (h ^ pl[i]) * 1099511628211ull;
    printf("large copy (%zu bytes): ok sample-hash=%016llx\n", L, (unsigned long long)h);

    CHECK(cudaFree(dl1));
    CHECK(cudaFree(dl2));
    CHECK(cudaFreeHost(pl));
    CHECK(cudaFree(dp));
    CHECK(cudaFree(dp2));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFreeHost(pin));
    CHECK(cudaFreeHost(hdef));
    CHECK(cudaFreeHost(hport));
    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    printf("done\n");
    return 0;
}
