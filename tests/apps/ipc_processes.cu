// ipc_processes: CUDA IPC between two processes, as NVIDIA's simpleIPC does it. The
// program forks before touching CUDA; the parent exports a device allocation and an
// interprocess event, passes both handles to the child over a pipe, and the child
// opens them, reads the parent's bytes, writes its own and runs a kernel on them,
// waits on the parent's event, and closes; the parent then sees the child's bytes.
// Then the parent frees its allocation and the child tries the stale handle again.
//
// Kernel results are printed, never checked (a test double runs no kernel); copies
// and error behaviour are checked. Error codes whose exact value is not the point go
// to stderr with IPC_SHOW_CODES=1; stdout says only whether the call was refused.
//
// Hostile modes for the vmcuda tests (natively they do nothing different):
//   IPC_IMPORTER_SERVER=S   the child connects to S (VMCUDA_SERVER), another VM's
//                           socket: the child must be refused with cudaErrorInvalidValue
//   IPC_FLOOD=N             the parent exports N allocations and says how many it got
#include <vector>

#include "ipc_common.h"

static const int N = 1 << 20;  // ints: 4 MiB

static int pattern(int i) { return i * 3 + 1; }

static int importer(int from_parent, int to_parent) {
    if (const char* s = getenv("IPC_IMPORTER_SERVER")) setenv("VMCUDA_SERVER", s, 1);
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    get(from_parent, &mh, sizeof mh);
    get(from_parent, &eh, sizeof eh);
    CHECK(cudaSetDevice(0));
    void* p = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess);
    if (getenv("IPC_IMPORTER_SERVER")) {
        // Another VM's process: refused as a forged handle is, and so is the event.
        // (Any other answer is named, so a failure says what came instead.)
        printf("child: another VM's memory handle refused with cudaErrorInvalidValue: %s\n",
               e == cudaErrorInvalidValue ? "yes" : cudaGetErrorName(e));
        cudaGetLastError();
        cudaEvent_t ev;
        e = cudaIpcOpenEventHandle(&ev, eh);
        printf("child: another VM's event handle refused with cudaErrorInvalidValue: %s\n",
               e == cudaErrorInvalidValue ? "yes" : cudaGetErrorName(e));
        done_then_wait_for_free(to_parent, from_parent);
        return 0;
    }
    CHECK(e);
    int* d = (int*)p;
    // Opened again in this process: the same mapping.
    void* again = nullptr;
    CHECK(cudaIpcOpenMemHandle(&again, mh, cudaIpcMemLazyEnablePeerAccess));
    printf("child: a second open gives the same pointer: %s\n", again == p ? "yes" : "no");
    CHECK(cudaIpcCloseMemHandle(again));
    cudaEvent_t ev;
    CHECK(cudaIpcOpenEventHandle(&ev, eh));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamWaitEvent(s, ev, 0));
    CHECK(cudaEventSynchronize(ev));
    EXPECT(cudaEventQuery(ev) == cudaSuccess);
    printf("child: the parent's event is complete: yes\n");
    child_reads_and_writes(d, N, s, pattern, 0x0b000000, 7);
    // A forged handle, and one of the wrong kind.
    cudaIpcMemHandle_t forged = mh;
    for (size_t i = 0; i < sizeof forged.reserved; i++) forged.reserved[i] ^= 0x5a;
    void* q = nullptr;
    printf("child: a forged handle is refused: %s\n",
           refused("forged handle", cudaIpcOpenMemHandle(&q, forged, cudaIpcMemLazyEnablePeerAccess)) ? "yes" : "no");
    printf("child: an unknown open flag is refused with cudaErrorInvalidValue: %s\n",
           cudaIpcOpenMemHandle(&q, mh, 0x80) == cudaErrorInvalidValue ? "yes" : "no");
    cudaGetLastError();
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaIpcCloseMemHandle(p));
    printf("child: closing an address twice is refused: %s\n",
           refused("second close", cudaIpcCloseMemHandle(p)) ? "yes" : "no");
    // The parent frees its allocation: the handle opens no more.
    done_then_wait_for_free(to_parent, from_parent);
    printf("child: the handle after the parent freed the memory is refused: %s\n",
           refused("stale handle", cudaIpcOpenMemHandle(&q, mh, cudaIpcMemLazyEnablePeerAccess)) ? "yes" : "no");
    return 0;
}

static void flood(int n) {
    std::vector<void*> bufs(n, nullptr);
    int got = 0;
    cudaError_t last = cudaSuccess;
    for (int i = 0; i < n; i++) {
        CHECK(cudaMalloc(&bufs[i], 4096));
        cudaIpcMemHandle_t h;
        last = cudaIpcGetMemHandle(&h, bufs[i]);
        if (last != cudaSuccess) break;
        got++;
    }
    printf("flood: %d of %d exports, then %s\n", got, n, last == cudaSuccess ? "none refused" : cudaGetErrorName(last));
    cudaGetLastError();
    for (void* b : bufs) if (b) CHECK(cudaFree(b));
}

int main() {
    Child child = fork_importer(false, [](int, int from_parent, int to_parent) {
        return importer(from_parent, to_parent);
    });
    CHECK(cudaSetDevice(0));
    int* d;
    CHECK(cudaMalloc(&d, (size_t)N * sizeof(int)));
    std::vector<int> h(N);
    for (int i = 0; i < N; i++) h[i] = pattern(i);
    CHECK(cudaMemcpy(d, h.data(), (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    add<<<(N / 2 + 255) / 256, 256, 0, s>>>(d + N / 2, N / 2, 1000);
    CHECK(cudaGetLastError());

    cudaIpcMemHandle_t mh, mh2;
    CHECK(cudaIpcGetMemHandle(&mh, d));
    CHECK(cudaIpcGetMemHandle(&mh2, d));
    printf("parent: the same allocation's handle is stable: %s\n",
           memcmp(&mh, &mh2, sizeof mh) == 0 ? "yes" : "no");
    cudaEvent_t plain, ev;
    CHECK(cudaEventCreate(&plain));
    cudaIpcEventHandle_t eh;
    printf("parent: an event without cudaEventInterprocess has no handle: %s\n",
           refused("plain event", cudaIpcGetEventHandle(&eh, plain)) ? "yes" : "no");
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
    CHECK(cudaEventRecord(ev, s));
    CHECK(cudaIpcGetEventHandle(&eh, ev));
    void* own = nullptr;
    printf("parent: opening its own handle is refused: %s\n",
           refused("own handle", cudaIpcOpenMemHandle(&own, mh, cudaIpcMemLazyEnablePeerAccess)) ? "yes" : "no");

    put(child.to_child, &mh, sizeof mh);
    put(child.to_child, &eh, sizeof eh);
    wait_for_done(child);
    if (!getenv("IPC_IMPORTER_SERVER")) {
        parent_sees_child(d, N, pattern, 0x0b000000, 7);
    }
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaEventDestroy(plain));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    say_freed(child);
    printf("parent: the child exited with %d\n", wait_for_exit(child));
    if (const char* n = getenv("IPC_FLOOD")) flood(atoi(n));
    printf("PASS ipc_processes\n");
    return 0;
}
