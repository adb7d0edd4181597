// struct_params: kernel parameter marshalling. By-value structs of odd sizes and
// alignments, a 200-byte array struct, a 16-byte-aligned struct, mixed struct +
// scalar lists, 24 mixed scalar params and a 4 KiB by-value struct. Each kernel
// writes a hash of its parameters (field by field, never padding) which is printed
// next to the host-side expectation.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)

typedef unsigned long long u64;
__host__ __device__ inline void mix(u64& h, u64 v) { h = (h ^ v) * 1099511628211ull; h ^= h >> 29; }
__host__ __device__ inline u64 dbits(double d) { u64 u; memcpy(&u, &d, 8); return u; }
__host__ __device__ inline u64 fbits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
#define H0 1469598103934665603ull
__host__ __device__ inline u64 hv(int v) { return (u64)(long long)v; }
__host__ __device__ inline u64 hv(char v) { return (u64)(unsigned char)v; }
__host__ __device__ inline u64 hv(short v) { return (u64)(unsigned short)v; }
__host__ __device__ inline u64 hv(float v) { return fbits(v); }
__host__ __device__ inline u64 hv(double v) { return dbits(v); }

struct S1 { char a; };
struct S3 { char a[3]; };
struct S7 { char a[7]; };
struct S13 { unsigned char a[13]; };
struct S24 { int a; double b; short c; };          // 24 bytes, 8-aligned, padding inside
struct CD { char c; double d; };                    // 16 bytes
struct Arr200 { unsigned char data[200]; };
struct alignas(16) A16 { float x, y, z, w; int tag; };  // 32 bytes, 16-aligned
struct Big4K { unsigned v[1024]; };                // 4096 bytes

__host__ __device__ u64 h_s1(S1 s) { u64 h = H0; mix(h, s.a); return h; }
__host__ __device__ u64 h_s3(S3 s) { u64 h = H0; for (int i = 0; i < 3; i++) mix(h, s.a[i]); return h; }
__host__ __device__ u64 h_s7(S7 s) { u64 h = H0; for (int i = 0; i < 7; i++) mix(h, s.a[i]); return h; }
__host__ __device__ u64 h_s13(S13 s) { u64 h = H0; for (int i = 0; i < 13; i++) mix(h, s.a[i]); return h; }
__host__ __device__ u64 h_s24(S24 s) { u64 h = H0; mix(h, s.a); mix(h, dbits(s.b)); mix(h, s.c); return h; }
__host__ __device__ u64 h_cd(CD s) { u64 h = H0; mix(h, s.c); mix(h, dbits(s.d)); return h; }
__host__ __device__ u64 h_arr(const Arr200& s) { u64 h = H0; for (int i = 0; i < 200; i++) mix(h, s.data[i]); return h; }
__host__ __device__ u64 h_a16(A16 s) {
    u64 h = H0; mix(h, fbits(s.x)); mix(h, fbits(s.y)); mix(h, fbits(s.z)); mix(h, fbits(s.w)); mix(h, s.tag); return h;
}
__host__ __device__ u64 h_big(const Big4K& s) { u64 h = H0; for (int i = 0; i < 1024; i++) mix(h, s.v[i]); return h; }

__global__ void k_small(u64* out, S1 a, S3 b, S7 c, S13 d) {
    out[0] = h_s1(a); out[1] = h_s3(b); out[2] = h_s7(c); out[3] = h_s13(d);
}
__global__ void k_aligned(u64* out, char pre, S24 a, char mid, CD b, short post, A16 c, char last) {
    u64 h = H0; mix(h, hv(pre)); mix(h, h_s24(a)); mix(h, hv(mid)); mix(h, h_cd(b));
    mix(h, hv(post)); mix(h, h_a16(c)); mix(h, hv(last));
    out[0] = h;
}
__global__ void k_arr(u64* out, int before, Arr200 a, int after) {
    u64 h = H0; mix(h, hv(before)); mix(h, h_arr(a)); mix(h, hv(after)); out[0] = h;
}
// 24 scalar parameters of mixed types and alignments.
__host__ __device__ u64 h24(int a0, char a1, short a2, float a3, double a4, int a5, char a6, double a7,
                            short a8, float a9, int a10, char a11, double a12, float a13, short a14, int a15,
                            char a16, float a17, double a18, int a19, short a20, char a21, float a22, double a23) {
    u64 h = H0;
    mix(h, hv(a0)); mix(h, hv(a1)); mix(h, hv(a2)); mix(h, hv(a3)); mix(h, hv(a4)); mix(h, hv(a5)); mix(h, hv(a6)); mix(h, hv(a7));
    mix(h, hv(a8)); mix(h, hv(a9)); mix(h, hv(a10)); mix(h, hv(a11)); mix(h, hv(a12)); mix(h, hv(a13)); mix(h, hv(a14)); mix(h, hv(a15));
    mix(h, hv(a16)); mix(h, hv(a17)); mix(h, hv(a18)); mix(h, hv(a19)); mix(h, hv(a20)); mix(h, hv(a21)); mix(h, hv(a22)); mix(h, hv(a23));
    return h;
}
__global__ void k_many(u64* out, int a0, char a1, short a2, float a3, double a4, int a5, char a6, double a7,
                       short a8, float a9, int a10, char a11, double a12, float a13, short a14, int a15,
                       char a16, float a17, double a18, int a19, short a20, char a21, float a22, double a23) {
    out[0] = h24(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23);
}
#define ARGS24 \
    -7, (char)29, (short)27778, 3.375f, -4.0625e4, -5007, \
    (char)46, -7.0625e7, (short)21112, 9.375f, -10007, (char)63, \
    -12.0625e12, 13.375f, (short)14446, -15007, (char)80, 17.375f, \
    -18.0625e18, -19007, (short)7780, (char)97, 22.375f, -23.0625e23

__global__ void k_big(u64* out, Big4K b, int tail) { u64 h = H0; mix(h, h_big(b)); mix(h, hv(tail)); out[0] = h; }

int main() {
    u64* d;
    CHECK(cudaMalloc(&d, 16 * sizeof(u64)));
    CHECK(cudaMemset(d, 0, 16 * sizeof(u64)));
    u64 got[16];

    S1 s1 = {'x'}; S3 s3 = {{1, 2, 3}}; S7 s7 = {{'a', 'b', 'c', 'd', 'e', 'f', 'g'}};
    S13 s13; for (int i = 0; i < 13; i++) s13.a[i] = (unsigned char)(200 + i);
    k_small<<<1, 1>>>(d, s1, s3, s7, s13);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got, d, 4 * sizeof(u64), cudaMemcpyDeviceToHost));
    printf("S1  dev=%016llx host=%016llx\n", got[0], h_s1(s1));
    printf("S3  dev=%016llx host=%016llx\n", got[1], h_s3(s3));
    printf("S7  dev=%016llx host=%016llx\n", got[2], h_s7(s7));
    printf("S13 dev=%016llx host=%016llx\n", got[3], h_s13(s13));

    S24 s24; memset(&s24, 0, sizeof(s24)); s24.a = -123456; s24.b = 3.141592653589793; s24.c = -7;
    CD cd; memset(&cd, 0, sizeof(cd)); cd.c = 'Q'; cd.d = -2.5e100;
    A16 a16; memset(&a16, 0, sizeof(a16)); a16.x = 1.5f; a16.y = -2.25f; a16.z = 1e-30f; a16.w = 7.0f; a16.tag = 0x5eed;
    k_aligned<<<1, 1>>>(d, 'p', s24, 'm', cd, (short)-300, a16, 'z');
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got, d, sizeof(u64), cudaMemcpyDeviceToHost));
    {
        u64 h = H0; mix(h, hv('p')); mix(h, h_s24(s24)); mix(h, hv('m')); mix(h, h_cd(cd));
        mix(h, hv((short)-300)); mix(h, h_a16(a16)); mix(h, hv('z'));
        printf("sizes S24=%zu CD=%zu A16=%zu(align %zu)\n", sizeof(S24), sizeof(CD), sizeof(A16), alignof(A16));
        printf("aligned mix dev=%016llx host=%016llx\n", got[0], h);
    }

    Arr200 arr; for (int i = 0; i < 200; i++) arr.data[i] = (unsigned char)(i * 37 + 11);
    k_arr<<<1, 1>>>(d, 17, arr, -17);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got, d, sizeof(u64), cudaMemcpyDeviceToHost));
    {
        u64 h = H0; mix(h, hv(17)); mix(h, h_arr(arr)); mix(h, hv(-17));
        printf("Arr200 dev=%016llx host=%016llx\n", got[0], h);
    }

    k_many<<<1, 1>>>(d, ARGS24);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got, d, sizeof(u64), cudaMemcpyDeviceToHost));
    printf("24 params dev=%016llx host=%016llx\n", got[0], h24(ARGS24));

    static Big4K big;
    for (int i = 0; i < 1024; i++) big.v[i] = 0x9e3779b9u * (unsigned)(i + 1);
    k_big<<<1, 1>>>(d, big, 4242);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got, d, sizeof(u64), cudaMemcpyDeviceToHost));
    {
        u64 h = H0; mix(h, h_big(big)); mix(h, hv(4242));
        printf("Big4K(%zu bytes) dev=%016llx host=%016llx\n", sizeof(Big4K), got[0], h);
    }

    CHECK(cudaFree(d));
    printf("done\n");
    return 0;
}
