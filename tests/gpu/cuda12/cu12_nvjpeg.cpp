// tests/gpu/cuda12/cu12_nvjpeg.cpp: a CUDA 12 library (NVIDIA's nvJPEG 12) on NVIDIA's
// CUDA 12 runtime on a CUDA 13 driver: a generated image is encoded on the GPU and the
// JPEG decoded again on the GPU, and the decoded pixels must be close to the original
// (PSNR over 30 dB). Prints "cu12_nvjpeg: PASS" then.
#include <cuda_runtime.h>
#include <nvjpeg.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "../check_status.h"

static const char* jpeg_status(nvjpegStatus_t s) {
    static char text[32];
    std::snprintf(text, sizeof text, "nvJPEG status %d", (int)s);
    return text;
}
#define CHECK_JPEG(x) CHECK_STATUS(x, NVJPEG_STATUS_SUCCESS, jpeg_status)


int main() {
    int major = 0, minor = 0;
    CHECK_JPEG(nvjpegGetProperty(MAJOR_VERSION, &major));
    CHECK_JPEG(nvjpegGetProperty(MINOR_VERSION, &minor));
    std::printf("nvJPEG %d.%d\n", major, minor);
    const int w = 640, h = 480;
    std::vector<unsigned char> rgb((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            unsigned char* p = &rgb[((size_t)y * w + x) * 3];
            p[0] = (unsigned char)(x * 255 / (w - 1));
            p[1] = (unsigned char)(y * 255 / (h - 1));
            p[2] = (unsigned char)(127 + 120 * std::sin(x * 0.02) * std::cos(y * 0.03));
        }
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    nvjpegHandle_t handle;
    CHECK_JPEG(nvjpegCreateSimple(&handle));

    unsigned char* dIn = nullptr;
    CHECK(cudaMalloc(&dIn, rgb.size()));
    CHECK(cudaMemcpyAsync(dIn, rgb.data(), rgb.size(), cudaMemcpyHostToDevice, s));
    nvjpegImage_t in = {};
    in.channel[0] = dIn;
    in.pitch[0] = (size_t)w * 3;
    nvjpegEncoderState_t es;
    nvjpegEncoderParams_t ep;
    CHECK_JPEG(nvjpegEncoderStateCreate(handle, &es, s));
    CHECK_JPEG(nvjpegEncoderParamsCreate(handle, &ep, s));
    CHECK_JPEG(nvjpegEncoderParamsSetQuality(ep, 95, s));
    CHECK_JPEG(nvjpegEncoderParamsSetSamplingFactors(ep, NVJPEG_CSS_444, s));
    CHECK_JPEG(nvjpegEncodeImage(handle, es, ep, &in, NVJPEG_INPUT_RGBI, w, h, s));
    size_t len = 0;
    CHECK_JPEG(nvjpegEncodeRetrieveBitstream(handle, es, nullptr, &len, s));
    std::vector<unsigned char> jpeg(len);
    CHECK_JPEG(nvjpegEncodeRetrieveBitstream(handle, es, jpeg.data(), &len, s));
    CHECK(cudaStreamSynchronize(s));
    std::printf("encoded %dx%d into a JPEG (%s)\n", w, h,
                len > 1000 && jpeg[0] == 0xff && jpeg[1] == 0xd8 ? "SOI marker" : "no SOI");

    int comps = 0, ws[NVJPEG_MAX_COMPONENT], hs[NVJPEG_MAX_COMPONENT];
    nvjpegChromaSubsampling_t sub;
    CHECK_JPEG(nvjpegGetImageInfo(handle, jpeg.data(), len, &comps, &sub, ws, hs));
    if (comps != 3 || ws[0] != w || hs[0] != h) return std::printf("bad image info\n"), 1;
    nvjpegJpegState_t js;
    CHECK_JPEG(nvjpegJpegStateCreate(handle, &js));
    unsigned char* dOut = nullptr;
    CHECK(cudaMalloc(&dOut, rgb.size()));
    nvjpegImage_t out = {};
    out.channel[0] = dOut;
    out.pitch[0] = (size_t)w * 3;
    CHECK_JPEG(nvjpegDecode(handle, js, jpeg.data(), len, NVJPEG_OUTPUT_RGBI, &out, s));
    std::vector<unsigned char> back(rgb.size());
    CHECK(cudaMemcpyAsync(back.data(), dOut, back.size(), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    double se = 0;
    for (size_t i = 0; i < rgb.size(); i++) {
        double d = (double)rgb[i] - back[i];
        se += d * d;
    }
    double mse = se / rgb.size();
    double psnr = mse == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 / mse);
    std::printf("decoded again: PSNR %s 30 dB\n", psnr > 30 ? "over" : "UNDER");
    CHECK_JPEG(nvjpegJpegStateDestroy(js));
    CHECK_JPEG(nvjpegEncoderParamsDestroy(ep));
    CHECK_JPEG(nvjpegEncoderStateDestroy(es));
    CHECK_JPEG(nvjpegDestroy(handle));
    CHECK(cudaFree(dIn));
    CHECK(cudaFree(dOut));
    CHECK(cudaStreamDestroy(s));
    if (psnr <= 30) return std::printf("cu12_nvjpeg: FAIL\n"), 1;
    std::printf("cu12_nvjpeg: PASS\n");
    return 0;
}
