// textures: CUDA arrays (2D, layered, 3D, mipmapped), copies to, from and between
// them (2D, 1D in row order, 3D, async on a stream), cudaArrayGetInfo and the plane,
// sparse and memory-requirement queries; texture objects over arrays (point and
// linear filtering, normalized coordinates, wrap, clamp and border addressing), over
// pitched and linear device memory and a mipmap level; surface objects written by a
// kernel and read back; 3D memory (cudaMalloc3D, cudaMemset3D, cudaMemcpy3D between
// pitched memories). Every result is printed for the native comparison; what needs
// no kernel result is checked here.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

static const char* base_name(const char* p) { const char* s = strrchr(p, '/'); return s ? s + 1 : p; }
#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", base_name(__FILE__), __LINE__, cudaGetErrorName(e_)); exit(1); } } while (0)
#define EXPECT(cond) do { if (!(cond)) { \
    printf("MISMATCH %s:%d %s\n", base_name(__FILE__), __LINE__, #cond); exit(1); } } while (0)

const int W = 64, H = 32, D = 8, L = 3;

__global__ void sample_2d(cudaTextureObject_t t, float* out, int w, int h, float dx, float dy) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(t, (x + dx) / w, (y + dy) / h);
}
__global__ void sample_layered(cudaTextureObject_t t, float* out, int w, int h, int layers) {
    int x = threadIdx.x, y = blockIdx.x, l = blockIdx.y;
    if (x < w && y < h && l < layers) out[(l * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l);
}
__global__ void sample_3d(cudaTextureObject_t t, float* out, int w, int h, int d) {
    int x = threadIdx.x, y = blockIdx.x, z = blockIdx.y;
    if (x < w && y < h && z < d) out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.25f, y + 0.5f, z + 0.75f);
}
__global__ void sample_pitched(cudaTextureObject_t t, float* out, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f) * 2.0f;
}
__global__ void fetch_linear(cudaTextureObject_t t, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<float>(t, i) + 1.0f;
}
__global__ void sample_level(cudaTextureObject_t t, float* out, int w, int h, float level) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) out[y * w + x] = tex2DLod<float>(t, (x + 0.5f) / w, (y + 0.5f) / h, level);
}
__global__ void write_surface(cudaSurfaceObject_t s, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) surf2Dwrite<float>(x * 1000.0f + y, s, x * sizeof(float), y);
}

static double sum(const std::vector<float>& v) {
    double s = 0;
    for (size_t i = 0; i < v.size(); i++) s += v[i] * (1 + i % 7);
    return s;
}

static cudaTextureObject_t array_texture(cudaArray_t a, cudaTextureAddressMode mode, cudaTextureFilterMode filter,
                                         int normalized) {
    cudaResourceDesc res = {};
    res.resType = cudaResourceTypeArray;
    res.res.array.array = a;
    cudaTextureDesc td = {};
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = mode;
    td.filterMode = filter;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = normalized;
    td.borderColor[0] = -5.0f;
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, &res, &td, nullptr));
    return t;
}

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<float> img(W * H), back(W * H);
    for (int i = 0; i < W * H; i++) img[i] = (float)((i * 37) % 101) / 7.0f;
    float* d_out;
    CHECK(cudaMalloc(&d_out, W * H * D * sizeof(float)));
    std::vector<float> out(W * H * D);

    // ---- a 2D array: copies both ways, info, textures ----
    cudaChannelFormatDesc fdesc = cudaCreateChannelDesc<float>();
    cudaArray_t a2;
    CHECK(cudaMallocArray(&a2, &fdesc, W, H));
    CHECK(cudaMemcpy2DToArray(a2, 0, 0, img.data(), W * sizeof(float), W * sizeof(float), H,
                              cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), a2, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToHost));
    EXPECT(back == img);
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned int flags = 99;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, a2));
    EXPECT(got.x == 32 && got.y == 0 && got.f == cudaChannelFormatKindFloat);
    EXPECT(ext.width == (size_t)W && ext.height == (size_t)H && ext.depth == 0 && flags == 0);
    // A window of the array, 1D in row order across rows, async on a stream.
    std::vector<float> window(10 * 3, 0.0f);
    CHECK(cudaMemcpy2DFromArrayAsync(window.data(), 10 * sizeof(float), a2, 5 * sizeof(float), 4,
                                     10 * sizeof(float), 3, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 10; c++) EXPECT(window[r * 10 + c] == img[(4 + r) * W + 5 + c]);
    std::vector<float> span(W + 20, 0.0f);
    CHECK(cudaMemcpyFromArray(span.data(), a2, 10 * sizeof(float), 2, span.size() * sizeof(float),
                              cudaMemcpyDeviceToHost));
    EXPECT(memcmp(span.data(), &img[2 * W + 10], span.size() * sizeof(float)) == 0);
    cudaArray_t a2b;
    CHECK(cudaMallocArray(&a2b, &fdesc, W, H));
    CHECK(cudaMemcpy2DArrayToArray(a2b, 0, 0, a2, 0, 0, W * sizeof(float), H));
    std::fill(back.begin(), back.end(), 0.0f);
    CHECK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), a2b, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToHost));
    EXPECT(back == img);
    // Device memory to an array and back.
    float* d_img;
    CHECK(cudaMalloc(&d_img, W * H * sizeof(float)));
    CHECK(cudaMemcpy(d_img, img.data(), W * H * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DToArray(a2b, 0, 0, d_img, W * sizeof(float), W * sizeof(float), H,
                              cudaMemcpyDeviceToDevice));

    dim3 grid2((W + 31) / 32, H);
    struct Mode { cudaTextureAddressMode m; cudaTextureFilterMode f; int norm; const char* name; };
    Mode modes[] = {{cudaAddressModeWrap, cudaFilterModeLinear, 1, "wrap linear"},
                    {cudaAddressModeClamp, cudaFilterModePoint, 1, "clamp point"},
                    {cudaAddressModeBorder, cudaFilterModeLinear, 1, "border linear"},
                    {cudaAddressModeMirror, cudaFilterModeLinear, 1, "mirror linear"}};
    for (const Mode& m : modes) {
        cudaTextureObject_t t = array_texture(a2b, m.m, m.f, m.norm);
        cudaResourceDesc res_back;
        CHECK(cudaGetTextureObjectResourceDesc(&res_back, t));
        EXPECT(res_back.resType == cudaResourceTypeArray && res_back.res.array.array == a2b);
        sample_2d<<<grid2, 32>>>(t, d_out, W, H, 0.3f, -0.6f);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(out.data(), d_out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
        std::vector<float> o(out.begin(), out.begin() + W * H);
        printf("2D texture, %s: %.4f\n", m.name, sum(o));
        CHECK(cudaDestroyTextureObject(t));
    }

    // ---- a layered array: one copy per layer through cudaMemcpy3D ----
    cudaArray_t layered;
    CHECK(cudaMalloc3DArray(&layered, &fdesc, make_cudaExtent(W, H, L), cudaArrayLayered));
    std::vector<float> layers(W * H * L);
    for (size_t i = 0; i < layers.size(); i++) layers[i] = (float)(i % 53) - 20.0f;
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr(layers.data(), W * sizeof(float), W, H);
    p.dstArray = layered;
    p.extent = make_cudaExtent(W, H, L);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    std::vector<float> layers_back(W * H * L, 0.0f);
    cudaMemcpy3DParms q = {};
    q.srcArray = layered;
    q.dstPtr = make_cudaPitchedPtr(layers_back.data(), W * sizeof(float), W, H);
    q.extent = make_cudaExtent(W, H, L);
    q.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&q));
    EXPECT(layers_back == layers);
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, layered));
    EXPECT(ext.depth == (size_t)L && flags == cudaArrayLayered);
    cudaTextureObject_t tl = array_texture(layered, cudaAddressModeClamp, cudaFilterModePoint, 0);
    sample_layered<<<dim3(H, L), W>>>(tl, d_out, W, H, L);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out.data(), d_out, W * H * L * sizeof(float), cudaMemcpyDeviceToHost));
    printf("layered texture: %.4f\n", sum(std::vector<float>(out.begin(), out.begin() + W * H * L)));
    CHECK(cudaDestroyTextureObject(tl));

    // ---- a 3D array, copied from pitched device memory (cudaMalloc3D, cudaMemset3D) ----
    cudaPitchedPtr vol;
    CHECK(cudaMalloc3D(&vol, make_cudaExtent(W * sizeof(float), H, D)));
    EXPECT(vol.pitch >= W * sizeof(float) && vol.xsize == W * sizeof(float) && vol.ysize == (size_t)H);
    CHECK(cudaMemset3D(vol, 0, make_cudaExtent(W * sizeof(float), H, D)));
    std::vector<float> volume(W * H * D);
    for (size_t i = 0; i < volume.size(); i++) volume[i] = (float)((i * 13) % 97);
    cudaMemcpy3DParms up = {};
    up.srcPtr = make_cudaPitchedPtr(volume.data(), W * sizeof(float), W, H);
    up.dstPtr = vol;
    up.extent = make_cudaExtent(W * sizeof(float), H, D);
    up.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&up));
    cudaArray_t a3;
    CHECK(cudaMalloc3DArray(&a3, &fdesc, make_cudaExtent(W, H, D)));
    cudaMemcpy3DParms to3 = {};
    to3.srcPtr = vol;
    to3.dstArray = a3;
    to3.extent = make_cudaExtent(W, H, D);
    to3.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3DAsync(&to3, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<float> volume_back(W * H * D, 0.0f);
    cudaMemcpy3DParms from3 = {};
    from3.srcArray = a3;
    from3.srcPos = make_cudaPos(0, 0, 2);
    from3.dstPtr = make_cudaPitchedPtr(volume_back.data(), W * sizeof(float), W, H);
    from3.extent = make_cudaExtent(W, H, D - 2);
    from3.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&from3));
    EXPECT(memcmp(volume_back.data(), &volume[2 * W * H], (D - 2) * W * H * sizeof(float)) == 0);
    {
        // The same volume through batches of 3D copies: the host's packed volume into
        // an array (extents in the array's elements), then in one batch the array from
        // layer 1 into host rows 3 floats longer than the copy, and the pitched device
        // volume into packed host memory (extents in bytes between pointers).
        cudaArray_t ab;
        CHECK(cudaMalloc3DArray(&ab, &fdesc, make_cudaExtent(W, H, D)));
        cudaMemcpy3DBatchOp in = {};
        in.src.type = cudaMemcpyOperandTypePointer;
        in.src.op.ptr.ptr = volume.data();
        in.dst.type = cudaMemcpyOperandTypeArray;
        in.dst.op.array.array = ab;
        in.extent = make_cudaExtent(W, H, D);
        in.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        CHECK(cudaMemcpy3DBatchAsync(1, &in, 0, s));
        std::vector<float> wide((W + 3) * H * (D - 1), -1.0f), packed(W * H * D, 0.0f);
        cudaMemcpy3DBatchOp out2[2] = {};
        out2[0].src.type = cudaMemcpyOperandTypeArray;
        out2[0].src.op.array.array = ab;
        out2[0].src.op.array.offset = {0, 0, 1};
        out2[0].dst.type = cudaMemcpyOperandTypePointer;
        out2[0].dst.op.ptr.ptr = wide.data();
        out2[0].dst.op.ptr.rowLength = W + 3;
        out2[0].extent = make_cudaExtent(W, H, D - 1);
        out2[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        out2[1].src.type = cudaMemcpyOperandTypePointer;
        out2[1].src.op.ptr.ptr = vol.ptr;
        out2[1].src.op.ptr.rowLength = vol.pitch;
        out2[1].src.op.ptr.layerHeight = H;
        out2[1].dst.type = cudaMemcpyOperandTypePointer;
        out2[1].dst.op.ptr.ptr = packed.data();
        out2[1].extent = make_cudaExtent(W * sizeof(float), H, D);
        out2[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        CHECK(cudaMemcpy3DBatchAsync(2, out2, 0, s));
        CHECK(cudaStreamSynchronize(s));
        bool rows = true, pads = true;
        for (size_t r = 0; r < H * (D - 1); r++) {
            rows &= memcmp(&wide[r * (W + 3)], &volume[W * H + r * W], W * sizeof(float)) == 0;
            for (size_t k = W; k < W + 3; k++) pads &= wide[r * (W + 3) + k] == -1.0f;
        }
        EXPECT(rows && pads);
        EXPECT(packed == volume);
        // An empty extent, a source access order of 0, flags: refused.
        cudaMemcpy3DBatchOp empty = in;
        empty.extent.depth = 0;
        cudaMemcpy3DBatchOp unordered = in;
        unordered.srcAccessOrder = (cudaMemcpySrcAccessOrder)0;
        cudaError_t e1 = cudaMemcpy3DBatchAsync(1, &empty, 0, s);
        cudaError_t e2 = cudaMemcpy3DBatchAsync(1, &unordered, 0, s);
        cudaError_t e3 = cudaMemcpy3DBatchAsync(1, &in, 1, s);
        printf("3D copy batches: rows %s, padding kept %s, packed %s; refused: %s %s %s\n",
               rows ? "yes" : "no", pads ? "yes" : "no", packed == volume ? "yes" : "no",
               cudaGetErrorName(e1), cudaGetErrorName(e2), cudaGetErrorName(e3));
        cudaGetLastError();
        CHECK(cudaFreeArray(ab));
    }
    cudaTextureObject_t t3 = array_texture(a3, cudaAddressModeClamp, cudaFilterModeLinear, 0);
    sample_3d<<<dim3(H, D), W>>>(t3, d_out, W, H, D);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out.data(), d_out, W * H * D * sizeof(float), cudaMemcpyDeviceToHost));
    printf("3D texture: %.4f\n", sum(out));
    CHECK(cudaDestroyTextureObject(t3));

    // ---- textures over pitched and linear device memory ----
    float* pitched;
    size_t pitch;
    CHECK(cudaMallocPitch(&pitched, &pitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2D(pitched, pitch, img.data(), W * sizeof(float), W * sizeof(float), H,
                       cudaMemcpyHostToDevice));
    cudaResourceDesc pres = {};
    pres.resType = cudaResourceTypePitch2D;
    pres.res.pitch2D.devPtr = pitched;
    pres.res.pitch2D.desc = fdesc;
    pres.res.pitch2D.width = W;
    pres.res.pitch2D.height = H;
    pres.res.pitch2D.pitchInBytes = pitch;
    cudaTextureDesc ptd = {};
    ptd.filterMode = cudaFilterModePoint;
    ptd.readMode = cudaReadModeElementType;
    cudaTextureObject_t tp;
    CHECK(cudaCreateTextureObject(&tp, &pres, &ptd, nullptr));
    sample_pitched<<<H, W>>>(tp, d_out, W, H);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out.data(), d_out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    printf("pitched texture: %.4f\n", sum(std::vector<float>(out.begin(), out.begin() + W * H)));
    CHECK(cudaDestroyTextureObject(tp));
    cudaResourceDesc lres = {};
    lres.resType = cudaResourceTypeLinear;
    lres.res.linear.devPtr = d_img;
    lres.res.linear.desc = fdesc;
    lres.res.linear.sizeInBytes = W * H * sizeof(float);
    cudaTextureObject_t tlin;
    CHECK(cudaCreateTextureObject(&tlin, &lres, &ptd, nullptr));
    fetch_linear<<<(W * H + 255) / 256, 256>>>(tlin, d_out, W * H);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out.data(), d_out, W * H * sizeof(float), cudaMemcpyDeviceToHost));
    printf("linear texture: %.4f\n", sum(std::vector<float>(out.begin(), out.begin() + W * H)));
    CHECK(cudaDestroyTextureObject(tlin));
    // Memory outside the program's own is refused.
    lres.res.linear.sizeInBytes = (size_t)1 << 40;
    cudaTextureObject_t wild;
    cudaError_t e = cudaCreateTextureObject(&wild, &lres, &ptd, nullptr);
    printf("texture past its memory: %s\n", e == cudaSuccess ? "made" : "refused");
    (void)cudaGetLastError();
    if (e == cudaSuccess) CHECK(cudaDestroyTextureObject(wild));

    // ---- a mipmapped array and one of its levels ----
    cudaMipmappedArray_t mip;
    CHECK(cudaMallocMipmappedArray(&mip, &fdesc, make_cudaExtent(W, H, 0), 3));
    cudaArray_t level1;
    CHECK(cudaGetMipmappedArrayLevel(&level1, mip, 1));
    // What such arrays are made of: one plane, not sparse, no deferred mapping.
    {
        cudaArray_t plane = nullptr;
        cudaArraySparseProperties sp = {};
        cudaArrayMemoryRequirements mr = {};
        printf("a plane of a float array: %s\n", cudaGetErrorName(cudaArrayGetPlane(&plane, level1, 0)));
        printf("its sparse properties: %s; the mipmap's: %s\n",
               cudaGetErrorName(cudaArrayGetSparseProperties(&sp, level1)),
               cudaGetErrorName(cudaMipmappedArrayGetSparseProperties(&sp, mip)));
        printf("its memory requirements: %s; the mipmap's: %s\n",
               cudaGetErrorName(cudaArrayGetMemoryRequirements(&mr, level1, 0)),
               cudaGetErrorName(cudaMipmappedArrayGetMemoryRequirements(&mr, mip, 0)));
        (void)cudaGetLastError();
    }
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, level1));
    EXPECT(ext.width == (size_t)W / 2 && ext.height == (size_t)H / 2);
    std::vector<float> half(W / 2 * H / 2, 3.5f);
    CHECK(cudaMemcpy2DToArray(level1, 0, 0, half.data(), W / 2 * sizeof(float), W / 2 * sizeof(float),
                              H / 2, cudaMemcpyHostToDevice));
    cudaArray_t level0;
    CHECK(cudaGetMipmappedArrayLevel(&level0, mip, 0));
    CHECK(cudaMemcpy2DToArray(level0, 0, 0, img.data(), W * sizeof(float), W * sizeof(float), H,
                              cudaMemcpyHostToDevice));
    cudaResourceDesc mres = {};
    mres.resType = cudaResourceTypeMipmappedArray;
    mres.res.mipmap.mipmap = mip;
    cudaTextureDesc mtd = {};
    mtd.normalizedCoords = 1;
    mtd.filterMode = cudaFilterModePoint;
    mtd.mipmapFilterMode = cudaFilterModePoint;
    mtd.maxMipmapLevelClamp = 2;
    mtd.readMode = cudaReadModeElementType;
    cudaTextureObject_t tm;
    CHECK(cudaCreateTextureObject(&tm, &mres, &mtd, nullptr));
    sample_level<<<H / 2, W / 2>>>(tm, d_out, W / 2, H / 2, 1.0f);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out.data(), d_out, W / 2 * H / 2 * sizeof(float), cudaMemcpyDeviceToHost));
    printf("mipmap level 1: %.4f\n", sum(std::vector<float>(out.begin(), out.begin() + W / 2 * H / 2)));
    CHECK(cudaDestroyTextureObject(tm));
    e = cudaFreeArray(level1);
    printf("freeing a level: %s\n", e == cudaSuccess ? "freed" : "refused");
    (void)cudaGetLastError();

    // ---- a surface written by a kernel ----
    cudaArray_t surf_array;
    CHECK(cudaMallocArray(&surf_array, &fdesc, W, H, cudaArraySurfaceLoadStore));
    cudaResourceDesc sres = {};
    sres.resType = cudaResourceTypeArray;
    sres.res.array.array = surf_array;
    cudaSurfaceObject_t surf;
    CHECK(cudaCreateSurfaceObject(&surf, &sres));
    write_surface<<<H, W>>>(surf, W, H);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), surf_array, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToHost));
    printf("surface: %.1f %.1f %.1f\n", back[0], back[W + 1], back[W * H - 1]);
    CHECK(cudaDestroySurfaceObject(surf));

    // ---- a 3D copy between pitched memories, and the array-extent check ----
    cudaPitchedPtr vol2;
    CHECK(cudaMalloc3D(&vol2, make_cudaExtent(W * sizeof(float), H, D)));
    cudaMemcpy3DParms dd = {};
    dd.srcPtr = vol;
    dd.dstPtr = vol2;
    dd.extent = make_cudaExtent(W * sizeof(float), H, D);
    dd.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3D(&dd));
    std::fill(volume_back.begin(), volume_back.end(), 0.0f);
    cudaMemcpy3DParms down = {};
    down.srcPtr = vol2;
    down.dstPtr = make_cudaPitchedPtr(volume_back.data(), W * sizeof(float), W, H);
    down.extent = make_cudaExtent(W * sizeof(float), H, D);
    down.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&down));
    EXPECT(volume_back == volume);
    e = cudaMemcpy2DToArray(a2, W * sizeof(float) - 4, 0, img.data(), 8, 8, 1, cudaMemcpyHostToDevice);
    printf("a copy past an array's row: %s\n", e == cudaSuccess ? "done" : "refused");
    (void)cudaGetLastError();

    CHECK(cudaFree(vol2.ptr));
    CHECK(cudaFree(vol.ptr));
    CHECK(cudaFree(pitched));
    CHECK(cudaFree(d_img));
    CHECK(cudaFreeMipmappedArray(mip));
    for (cudaArray_t x : {surf_array, a3, layered, a2b, a2}) CHECK(cudaFreeArray(x));
    CHECK(cudaFree(d_out));
    printf("textures: done\n");
    return 0;
}
