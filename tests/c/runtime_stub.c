/* runtime_stub: a runtime function vmcuda does not implement yet
   (__cudaRegisterUnifiedTable, an internal registration call whose meaning is unknown),
   and one that cannot cross the VM boundary (cudaGLSetGLDevice), called twice each:
   each answers cudaErrorNotSupported (801), leaves it as the last error, and names
   itself on stderr once. Prints the codes. Also __cudaGetProcAddress, which the real
   runtime answers with NULL whatever it is asked, as vmcuda's does. */
#include <stdio.h>

int __cudaRegisterUnifiedTable(void *);
int cudaGLSetGLDevice(int);
int cudaGetLastError(void);
int cudaGetDeviceCount(int*);
void *__cudaGetProcAddress(const char *, int, unsigned long long);

int main(void) {
    int n = 0;
    int count = cudaGetDeviceCount(&n);
    int a = __cudaRegisterUnifiedTable(0);
    int a_last = cudaGetLastError();
    int b = __cudaRegisterUnifiedTable(0);
    int c = cudaGLSetGLDevice(0);
    int c_last = cudaGetLastError();
    printf("devices %d (%d); unified table %d last %d, again %d; gl %d last %d; last now %d\n",
           n, count, a, a_last, b, c, c_last, cudaGetLastError());
    printf("__cudaGetProcAddress: %s\n",
           __cudaGetProcAddress("cudaMalloc", 13000, 0) ? "an address" : "NULL");
    return 0;
}
