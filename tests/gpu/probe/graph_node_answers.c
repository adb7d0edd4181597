// tests/gpu/probe/graph_node_answers.c: how the driver answers graph memset and copy
// nodes that name memory it does not know (cuDNN's graphs, inside XLA's command
// buffers, are built with such addresses and updated before they run). Prints one line
// per call, natively and bridged alike, then whether an updated node did its work.
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#define SHOW(name, call) do { CUresult r_ = (call); printf("%-58s %d\n", name, (int)r_); } while (0)

static CUDA_MEMSET_NODE_PARAMS memset_params(CUdeviceptr dst, size_t n, unsigned v) {
  CUDA_MEMSET_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.dst = dst; p.elementSize = 1; p.width = n; p.height = 1; p.pitch = 0; p.value = v;
  return p;
}

static CUDA_MEMCPY3D copy_params(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CUDA_MEMCPY3D p;
  memset(&p, 0, sizeof p);
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE; p.srcDevice = src;
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE; p.dstDevice = dst;
  p.WidthInBytes = n; p.Height = 1; p.Depth = 1;
  return p;
}

int main(void) {
  CUdevice d; CUcontext c;
  if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c)) {
    printf("FAIL no device\n");
    return 1;
  }
  const size_t n = 4 << 20;
  CUdeviceptr a, b;
  cuMemAlloc(&a, n); cuMemAlloc(&b, n);
  cuMemsetD8(a, 7, n); cuMemsetD8(b, 0, n);
  const CUdeviceptr unknown = 0x80;
  CUgraph g; cuGraphCreate(&g, 0);
  CUgraphNode ms_bad = 0, cp_bad = 0, ms_ok = 0, generic = 0;
  CUDA_MEMSET_NODE_PARAMS mp = memset_params(unknown, n, 1);
  SHOW("cuGraphAddMemsetNode(unknown dst)", cuGraphAddMemsetNode(&ms_bad, g, NULL, 0, &mp, c));
  CUDA_MEMCPY3D cp = copy_params(unknown, unknown + n, n);
  SHOW("cuGraphAddMemcpyNode(unknown dst and src)", cuGraphAddMemcpyNode(&cp_bad, g, NULL, 0, &cp, c));
  CUgraphNodeParams gp;
  memset(&gp, 0, sizeof gp);
  gp.type = CU_GRAPH_NODE_TYPE_MEMSET;
  gp.memset.dst = unknown; gp.memset.elementSize = 1; gp.memset.width = n; gp.memset.height = 1;
  gp.memset.value = 1; gp.memset.ctx = c;
  SHOW("cuGraphAddNode(memset, unknown dst)", cuGraphAddNode(&generic, g, NULL, NULL, 0, &gp));
  CUDA_MEMSET_NODE_PARAMS good = memset_params(b, n, 3);
  SHOW("cuGraphAddMemsetNode(known dst)", cuGraphAddMemsetNode(&ms_ok, g, NULL, 0, &good, c));
  CUDA_MEMSET_NODE_PARAMS back;
  if (ms_bad) {
    memset(&back, 0, sizeof back);
    SHOW("cuGraphMemsetNodeGetParams(unknown dst node)", cuGraphMemsetNodeGetParams(ms_bad, &back));
    printf("  read back dst %#llx\n", (unsigned long long)back.dst);
    CUDA_MEMSET_NODE_PARAMS to_a = memset_params(a, n, 5);
    SHOW("cuGraphMemsetNodeSetParams(unknown -> known)", cuGraphMemsetNodeSetParams(ms_bad, &to_a));
  }
  if (cp_bad) {
    CUDA_MEMCPY3D fix = copy_params(b, a, n);
    SHOW("cuGraphMemcpyNodeSetParams(unknown -> known)", cuGraphMemcpyNodeSetParams(cp_bad, &fix));
  }
  if (generic) SHOW("cuGraphDestroyNode(generic unknown memset)", cuGraphDestroyNode(generic));
  CUgraphExec e = 0;
  SHOW("cuGraphInstantiate", cuGraphInstantiate(&e, g, 0));
  if (e) {
    SHOW("cuGraphLaunch", cuGraphLaunch(e, 0));
    SHOW("cuCtxSynchronize", cuCtxSynchronize());
    unsigned char x = 0;
    cuMemcpyDtoH(&x, a + n - 1, 1);
    printf("after launch a[n-1]=%d (5: the updated memset node ran)\n", x);
  }
  // Updates of the executable graph to unknown memory (never launched after).
  if (e && ms_ok) {
    CUDA_MEMSET_NODE_PARAMS bad = memset_params(unknown, n, 9);
    SHOW("cuGraphExecMemsetNodeSetParams(known -> unknown)", cuGraphExecMemsetNodeSetParams(e, ms_ok, &bad, c));
  }
  if (e && cp_bad) {
    CUDA_MEMCPY3D badc = copy_params(unknown, unknown + n, n);
    SHOW("cuGraphExecMemcpyNodeSetParams(known -> unknown)", cuGraphExecMemcpyNodeSetParams(e, cp_bad, &badc, c));
  }
  // A graph with an unknown memset alone: does instantiate or launch refuse it?
  CUgraph g2; cuGraphCreate(&g2, 0);
  CUgraphNode lone = 0;
  SHOW("cuGraphAddMemsetNode(unknown dst, lone graph)", cuGraphAddMemsetNode(&lone, g2, NULL, 0, &mp, c));
  CUgraphExec e2 = 0;
  if (lone) SHOW("cuGraphInstantiate(lone unknown memset)", cuGraphInstantiate(&e2, g2, 0));
  // The same through stream capture, as a library's memset or copy on a capturing
  // stream makes such nodes, and outside capture for comparison.
  CUstream st; cuStreamCreate(&st, CU_STREAM_NON_BLOCKING);
  SHOW("cuMemsetD8Async(unknown, not capturing)", cuMemsetD8Async(unknown, 1, n, st));
  SHOW("cuStreamSynchronize", cuStreamSynchronize(st));
  SHOW("cuStreamBeginCapture", cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_RELAXED));
  SHOW("cuMemsetD8Async(unknown, capturing)", cuMemsetD8Async(unknown, 1, n, st));
  SHOW("cuMemsetD2D8Async(unknown, capturing)", cuMemsetD2D8Async(unknown, 256, 1, 128, 4, st));
  SHOW("cuMemcpyDtoDAsync(unknown, capturing)", cuMemcpyDtoDAsync(unknown, unknown + n, n, st));
  CUgraph g3 = 0;
  SHOW("cuStreamEndCapture", cuStreamEndCapture(st, &g3));
  size_t count = 0;
  if (g3) {
    cuGraphGetNodes(g3, NULL, &count);
    printf("  captured graph nodes: %zu\n", count);
    CUgraphExec e3 = 0;
    SHOW("cuGraphInstantiate(captured unknown)", cuGraphInstantiate(&e3, g3, 0));
  }
  printf("DONE graph_node_answers\n");
  return 0;
}
