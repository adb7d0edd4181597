/* runtime_stub: a runtime function that cannot cross the VM boundary
   (cudaGLSetGLDevice), called twice: it answers cudaErrorNotSupported (801), leaves it
   as the last error, and names itself on stderr once. __cudaRegisterUnifiedTable (a
   module's host table for the driver's loader, which stays in the guest), called twice
   for a registered module: it returns nothing, sets no error, and says so once.
   Prints the codes. Also __cudaGetProcAddress, which the real runtime answers with
   NULL whatever it is asked, as vmcuda's does. */
#include <stdio.h>

void __cudaRegisterUnifiedTable(void **, void *, void *, void *, void *);
int cudaGLSetGLDevice(int);
int cudaGetLastError(void);
int cudaGetDeviceCount(int*);
void *__cudaGetProcAddress(const char *, int, unsigned long long);

int main(void) {
    int n = 0;
    int count = cudaGetDeviceCount(&n);
    void *module = 0;
    __cudaRegisterUnifiedTable(&module, 0, 0, 0, 0);
    __cudaRegisterUnifiedTable(&module, 0, 0, 0, 0);
    int a_last = cudaGetLastError();
    int c = cudaGLSetGLDevice(0);
    int c_last = cudaGetLastError();
    printf("devices %d (%d); unified table last %d; gl %d last %d; last now %d\n",
           n, count, a_last, c, c_last, cudaGetLastError());
    printf("__cudaGetProcAddress: %s\n",
           __cudaGetProcAddress("cudaMalloc", 13000, 0) ? "an address" : "NULL");
    return 0;
}
