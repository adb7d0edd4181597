/* module_cache: loads one module image from a file with cuModuleLoadData and finds a
   kernel in it, driver calls only (the test runs it twice, and from another VM, to see
   what the host's module cache spares). Prints the codes. */
#include <stdio.h>
#include <stdlib.h>

typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;

int cuInit(unsigned);
int cuDeviceGet(CUdevice*, int);
int cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
int cuCtxSetCurrent(CUcontext);
int cuModuleLoadData(CUmodule*, const void*);
int cuModuleGetFunction(CUfunction*, CUmodule, const char*);

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: module_cache IMAGE KERNEL\n");
        return 2;
    }
    FILE* f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* image = malloc(len);
    if (!image || fread(image, 1, len, f) != (size_t)len) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    fclose(f);
    CUdevice dev = 0;
    CUcontext ctx = 0;
    CUmodule module = 0;
    CUfunction fn = 0;
    int init = cuInit(0);
    int got = cuDeviceGet(&dev, 0);
    int retained = cuDevicePrimaryCtxRetain(&ctx, dev);
    int current = cuCtxSetCurrent(ctx);
    int loaded = cuModuleLoadData(&module, image);
    int found = cuModuleGetFunction(&fn, module, argv[2]);
    printf("init %d device %d context %d %d load %d function %d\n", init, got, retained, current,
           loaded, found);
    return 0;
}
