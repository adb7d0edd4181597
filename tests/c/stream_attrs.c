/* stream_attrs: what the host refuses of stream attributes: an access policy window
   over memory that is not the program's, an attribute streams do not have, a value for
   a stream the program does not hold; and what it keeps (a window over the program's
   own buffer, read back). Prints the codes. */
#include <stdio.h>
#include <string.h>

typedef void* cudaStream_t;
struct window { void* base; size_t bytes; float ratio; int hit, miss; };
union value { struct window w; int sync; int priority; char pad[64]; };

int cudaMalloc(void**, size_t);
int cudaStreamCreate(cudaStream_t*);
int cudaStreamSetAttribute(cudaStream_t, int, const union value*);
int cudaStreamGetAttribute(cudaStream_t, int, union value*);
int cudaGetLastError(void);

int main(void) {
    void* d = 0;
    cudaStream_t s = 0;
    int alloc = cudaMalloc(&d, 1 << 20), made = cudaStreamCreate(&s);
    union value v;
    memset(&v, 0, sizeof v);
    v.w.base = d;
    v.w.bytes = 1 << 20;
    v.w.ratio = 1.0f;
    int own = cudaStreamSetAttribute(s, 1, &v);
    v.w.base = (char*)d + (1 << 20);
    int beyond = cudaStreamSetAttribute(s, 1, &v);
    v.w.base = (void*)0x1000;
    int wild = cudaStreamSetAttribute(s, 1, &v);
    union value got;
    memset(&got, 0, sizeof got);
    int read = cudaStreamGetAttribute(s, 1, &got);
    int not_stream = cudaStreamSetAttribute(s, 2, &v);
    int no_stream = cudaStreamGetAttribute((cudaStream_t)0x7777000, 3, &got);
    cudaGetLastError();
    printf("alloc %d stream %d own %d beyond %d wild %d read %d kept %d not-a-stream-attribute %d unknown-stream %d\n",
           alloc, made, own, beyond, wild, read, got.w.base == d && got.w.bytes == (1 << 20), not_stream,
           no_stream);
    return 0;
}
