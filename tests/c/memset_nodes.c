/* memset_nodes: memset nodes made by hand (cuGraphAddMemsetNode) on each kind of the
   program's memory the driver takes: device memory, managed memory, pinned host
   memory; then the graph of the device and managed ones instantiated, launched and
   each buffer read back (the pinned one's node is in a graph of its own, only made:
   the host-memory test double does not run memsets on host memory). And one on memory
   the program does not have, which the driver refuses at once. Prints one line.
   Driver API only. */
#include <stdio.h>
#include <string.h>

typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUgraph;
typedef void* CUgraphNode;
typedef void* CUgraphExec;
typedef void* CUstream;
typedef int CUdevice;
typedef struct {
  CUdeviceptr dst;
  size_t pitch;
  unsigned int value;
  unsigned int elementSize;
  size_t width;
  size_t height;
} CUDA_MEMSET_NODE_PARAMS;

int cuInit(unsigned);
int cuDeviceGet(CUdevice*, int);
int cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
int cuCtxSetCurrent(CUcontext);
int cuMemAlloc_v2(CUdeviceptr*, size_t);
int cuMemAllocManaged(CUdeviceptr*, size_t, unsigned);
int cuMemAllocHost_v2(void**, size_t);
int cuMemsetD8_v2(CUdeviceptr, unsigned char, size_t);
int cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
int cuCtxSynchronize(void);
int cuGraphCreate(CUgraph*, unsigned);
int cuGraphAddMemsetNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const CUDA_MEMSET_NODE_PARAMS*, CUcontext);
int cuGraphInstantiateWithFlags(CUgraphExec*, CUgraph, unsigned long long);
int cuGraphLaunch(CUgraphExec, CUstream);

int main(void) {
  CUdevice d; CUcontext c;
  if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c)) {
    printf("FAIL no device\n");
    return 1;
  }
  const size_t n = 4096;
  CUdeviceptr dev = 0, managed = 0;
  void* pinned = 0;
  int r_dev = cuMemAlloc_v2(&dev, n);
  int r_man = cuMemAllocManaged(&managed, n, 1);
  int r_pin = cuMemAllocHost_v2(&pinned, n);
  CUgraph g, g_pinned; cuGraphCreate(&g, 0); cuGraphCreate(&g_pinned, 0);
  CUDA_MEMSET_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.elementSize = 1; p.width = n; p.height = 1;
  CUgraphNode node;
  CUdeviceptr dsts[3] = {dev, managed, (CUdeviceptr)pinned};
  int made[3];
  for (int i = 0; i < 3; i++) {
    p.dst = dsts[i]; p.value = 0x10 + i;
    made[i] = cuGraphAddMemsetNode(&node, i == 2 ? g_pinned : g, NULL, 0, &p, c);
  }
  p.dst = 0x80; p.value = 1;
  int unknown = cuGraphAddMemsetNode(&node, g, NULL, 0, &p, c);
  CUgraphExec e = 0;
  int inst = cuGraphInstantiateWithFlags(&e, g, 0);
  int launch = e ? cuGraphLaunch(e, 0) : -1;
  int sync = cuCtxSynchronize();
  unsigned char a = 0, b = 0;
  cuMemcpyDtoH_v2(&a, dev + n - 1, 1);
  b = ((unsigned char*)managed)[n - 1];
  printf("alloc %d %d %d made %d %d %d unknown %d instantiate %d launch %d sync %d read %x %x\n",
         r_dev, r_man, r_pin, made[0], made[1], made[2], unknown, inst, launch, sync, a, b);
  return 0;
}
