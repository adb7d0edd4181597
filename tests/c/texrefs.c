/* texrefs: texture and surface references (the driver's deprecated API) on a module
   declaring a .texref and a .surfref (tests/c/texref.ptx, its cubin the first
   argument or $TEXREF_CUBIN): found by name, every cuTexRefSet* call read back through its Get (the
   guest keeps what was set), bindings to an array, a mipmapped array, linear and
   pitched memory, a reference of the program's own, a surface reference's array,
   cuParamSetTexRef, and the checks (a bad address mode dimension, a bad filter mode,
   memory outside the program's, a name the module lacks). Prints one line per group.
   Driver API only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUtexref;
typedef void* CUsurfref;
typedef void* CUarray;
typedef void* CUmipmappedArray;

typedef struct {
    size_t Width, Height;
    unsigned int Format, NumChannels;
} ArrayDesc;
typedef struct {
    size_t Width, Height, Depth;
    unsigned int Format, NumChannels, Flags;
} Array3DDesc;

enum { FLOAT = 0x20, UINT8 = 0x01 };

int cuInit(unsigned int);
int cuDeviceGet(int*, int);
int cuDevicePrimaryCtxRetain(CUcontext*, int);
int cuCtxSetCurrent(CUcontext);
int cuModuleLoadData(CUmodule*, const void*);
int cuModuleGetFunction(CUfunction*, CUmodule, const char*);
int cuModuleGetTexRef(CUtexref*, CUmodule, const char*);
int cuModuleGetSurfRef(CUsurfref*, CUmodule, const char*);
int cuMemAlloc_v2(CUdeviceptr*, size_t);
int cuArrayCreate_v2(CUarray*, const ArrayDesc*);
int cuArray3DCreate_v2(CUarray*, const Array3DDesc*);
int cuMipmappedArrayCreate(CUmipmappedArray*, const Array3DDesc*, unsigned int);
int cuTexRefCreate(CUtexref*);
int cuTexRefDestroy(CUtexref);
int cuTexRefSetArray(CUtexref, CUarray, unsigned int);
int cuTexRefSetMipmappedArray(CUtexref, CUmipmappedArray, unsigned int);
int cuTexRefSetAddress_v2(size_t*, CUtexref, CUdeviceptr, size_t);
int cuTexRefSetAddress2D_v3(CUtexref, const ArrayDesc*, CUdeviceptr, size_t);
int cuTexRefSetAddress2D_v2(CUtexref, const ArrayDesc*, CUdeviceptr, size_t);
int cuTexRefSetFormat(CUtexref, unsigned int, int);
int cuTexRefSetAddressMode(CUtexref, int, unsigned int);
int cuTexRefSetFilterMode(CUtexref, unsigned int);
int cuTexRefSetMipmapFilterMode(CUtexref, unsigned int);
int cuTexRefSetMipmapLevelBias(CUtexref, float);
int cuTexRefSetMipmapLevelClamp(CUtexref, float, float);
int cuTexRefSetMaxAnisotropy(CUtexref, unsigned int);
int cuTexRefSetBorderColor(CUtexref, float*);
int cuTexRefSetFlags(CUtexref, unsigned int);
int cuTexRefGetAddress_v2(CUdeviceptr*, CUtexref);
int cuTexRefGetArray(CUarray*, CUtexref);
int cuTexRefGetMipmappedArray(CUmipmappedArray*, CUtexref);
int cuTexRefGetAddressMode(unsigned int*, CUtexref, int);
int cuTexRefGetFilterMode(unsigned int*, CUtexref);
int cuTexRefGetMipmapFilterMode(unsigned int*, CUtexref);
int cuTexRefGetFormat(unsigned int*, int*, CUtexref);
int cuTexRefGetMipmapLevelBias(float*, CUtexref);
int cuTexRefGetMipmapLevelClamp(float*, float*, CUtexref);
int cuTexRefGetMaxAnisotropy(int*, CUtexref);
int cuTexRefGetBorderColor(float*, CUtexref);
int cuTexRefGetFlags(unsigned int*, CUtexref);
int cuSurfRefSetArray(CUsurfref, CUarray, unsigned int);
int cuSurfRefGetArray(CUarray*, CUsurfref);
int cuParamSetTexRef(CUfunction, int, CUtexref);
int cuGetProcAddress_v2(const char*, void**, int, unsigned long long, int*);

static void* read_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void* b = malloc(n);
    if (fread(b, 1, n, f) != (size_t)n) { free(b); b = 0; }
    fclose(f);
    return b;
}

int main(int argc, char** argv) {
    int dev = 0;
    CUcontext ctx = 0;
    CUmodule mod = 0;
    CUfunction fn = 0;
    CUtexref tex = 0, missing = 0;
    CUsurfref surf = 0;
    const char* path = argc > 1 ? argv[1] : getenv("TEXREF_CUBIN");
    void* image = path ? read_file(path) : 0;
    int setup = !image | cuInit(0) | cuDeviceGet(&dev, 0) | cuDevicePrimaryCtxRetain(&ctx, dev) |
                cuCtxSetCurrent(ctx) | cuModuleLoadData(&mod, image) |
                cuModuleGetFunction(&fn, mod, "readtex");
    int found = cuModuleGetTexRef(&tex, mod, "tex") | cuModuleGetSurfRef(&surf, mod, "surf");
    CUtexref again = 0;
    cuModuleGetTexRef(&again, mod, "tex");
    int lacks = cuModuleGetTexRef(&missing, mod, "nope");
    printf("setup %d found %d same %d missing %d\n", setup, found, again == tex, lacks);

    /* Every setting, read back. */
    float border[4] = {1, 2, 3, 4}, back[4] = {0};
    int sets = cuTexRefSetFormat(tex, FLOAT, 4) | cuTexRefSetAddressMode(tex, 0, 1) |
               cuTexRefSetAddressMode(tex, 1, 2) | cuTexRefSetAddressMode(tex, 2, 3) |
               cuTexRefSetFilterMode(tex, 1) | cuTexRefSetMipmapFilterMode(tex, 1) |
               cuTexRefSetMipmapLevelBias(tex, 0.5f) | cuTexRefSetMipmapLevelClamp(tex, 1, 7) |
               cuTexRefSetMaxAnisotropy(tex, 8) | cuTexRefSetBorderColor(tex, border) |
               cuTexRefSetFlags(tex, 2 /* NORMALIZED_COORDINATES */);
    unsigned int format = 0, m0 = 0, m1 = 0, m2 = 0, filter = 0, mfilter = 0, flags = 0;
    int channels = 0, aniso = 0;
    float bias = 0, lo = 0, hi = 0;
    int gets = cuTexRefGetFormat(&format, &channels, tex) | cuTexRefGetAddressMode(&m0, tex, 0) |
               cuTexRefGetAddressMode(&m1, tex, 1) | cuTexRefGetAddressMode(&m2, tex, 2) |
               cuTexRefGetFilterMode(&filter, tex) | cuTexRefGetMipmapFilterMode(&mfilter, tex) |
               cuTexRefGetMipmapLevelBias(&bias, tex) | cuTexRefGetMipmapLevelClamp(&lo, &hi, tex) |
               cuTexRefGetMaxAnisotropy(&aniso, tex) | cuTexRefGetBorderColor(back, tex) |
               cuTexRefGetFlags(&flags, tex);
    int same = format == FLOAT && channels == 4 && m0 == 1 && m1 == 2 && m2 == 3 && filter == 1 &&
               mfilter == 1 && bias == 0.5f && lo == 1 && hi == 7 && aniso == 8 &&
               memcmp(border, back, sizeof border) == 0 && flags == 2;
    printf("settings: set %d got %d same %d\n", sets, gets, same);

    /* Bindings: an array, a mipmapped array, linear and pitched memory. */
    CUarray arr = 0, got_arr = 0;
    CUmipmappedArray mip = 0, got_mip = 0;
    CUdeviceptr d = 0, got_d = 0;
    ArrayDesc ad = {64, 0, FLOAT, 4};
    Array3DDesc md = {64, 64, 0, FLOAT, 4, 0};
    int made = cuArrayCreate_v2(&arr, &ad) | cuMipmappedArrayCreate(&mip, &md, 3) |
               cuMemAlloc_v2(&d, 1 << 16);
    int unbound = cuTexRefGetAddress_v2(&got_d, tex);
    int to_array = cuTexRefSetArray(tex, arr, 1) | cuTexRefGetArray(&got_arr, tex);
    int not_linear = cuTexRefGetAddress_v2(&got_d, tex);
    int to_mip = cuTexRefSetMipmappedArray(tex, mip, 1) | cuTexRefGetMipmappedArray(&got_mip, tex);
    size_t offset = 99;
    int to_linear = cuTexRefSetAddress_v2(&offset, tex, d, 4096) | cuTexRefGetAddress_v2(&got_d, tex);
    int not_array = cuTexRefGetArray(&got_arr, tex);
    ArrayDesc pd = {16, 16, UINT8, 4};
    CUdeviceptr got_2d = 0;
    int to_2d = cuTexRefSetAddress2D_v3(tex, &pd, d + 256, 512) | cuTexRefGetAddress_v2(&got_2d, tex) |
                cuTexRefSetAddress2D_v2(tex, &pd, d, 512);
    cuTexRefGetFormat(&format, &channels, tex);
    printf("bindings: made %d unbound %d array %d %s not linear %d mipmapped %d %s linear %d offset "
           "%zu %s not array %d pitched %d %s format %u channels %d\n",
           made, unbound, to_array, got_arr == arr ? "same" : "WRONG", not_linear, to_mip,
           got_mip == mip ? "same" : "WRONG", to_linear, offset, got_d == d ? "same" : "WRONG",
           not_array, to_2d, got_2d == d + 256 ? "same" : "WRONG", format, channels);

    /* Checks: each refused, and the state as it was. */
    int bad_dim = cuTexRefSetAddressMode(tex, 3, 0);
    int bad_mode = cuTexRefSetAddressMode(tex, 0, 9);
    int bad_filter = cuTexRefSetFilterMode(tex, 5);
    int bad_flags = cuTexRefSetArray(tex, arr, 0);
    int outside = cuTexRefSetAddress_v2(0, tex, 0xdead0000ull, 4096);
    int too_long = cuTexRefSetAddress_v2(0, tex, d, (1 << 16) + 1);
    int bad_format = cuTexRefSetFormat(tex, 0x77, 4);
    cuTexRefGetAddressMode(&m0, tex, 0);
    printf("checks: dim %d mode %d filter %d flags %d outside %d too long %d format %d kept %u\n",
           bad_dim, bad_mode, bad_filter, bad_flags, outside, too_long, bad_format, m0);

    /* A reference of the program's own, a surface reference, cuParamSetTexRef. */
    CUtexref own = 0;
    unsigned int own_filter = 7;
    int own_made = cuTexRefCreate(&own) | cuTexRefSetFilterMode(own, 1) |
                   cuTexRefGetFilterMode(&own_filter, own);
    int module_destroy = cuTexRefDestroy(tex);
    int own_destroy = cuTexRefDestroy(own);
    int after = cuTexRefGetFilterMode(&own_filter, own);
    CUarray sarr = 0, got_sarr = 0;
    Array3DDesc sd = {32, 32, 0, FLOAT, 1, 2 /* SURFACE_LDST */};
    int surf_unbound = cuSurfRefGetArray(&got_sarr, surf);
    int surf_set = cuArray3DCreate_v2(&sarr, &sd) | cuSurfRefSetArray(surf, sarr, 0) |
                   cuSurfRefGetArray(&got_sarr, surf);
    int param = cuParamSetTexRef(fn, -1, tex);
    int param_unit = cuParamSetTexRef(fn, 0, tex);
    void* f = 0;
    int f_found = 0;
    int proc = cuGetProcAddress_v2("cuTexRefSetAddress", &f, 12000, 0, &f_found);
    printf("own %d filter %u, destroy module's %d own %d after %d, surface unbound %d set %d %s, "
           "param %d unit %d, proc address %d %s\n",
           own_made, own_filter, module_destroy, own_destroy, after, surf_unbound, surf_set,
           got_sarr == sarr ? "same" : "WRONG", param, param_unit, proc,
           f && f_found == 0 ? "found" : "missing");
    return 0;
}
