// pool_processes: a memory pool and an allocation from it shared between two processes,
// as NVIDIA's streamOrderedAllocationIPC does it. The program forks before touching
// CUDA; the parent makes a pool with POSIX descriptor handles, allocates from it,
// fills the allocation, exports the pool to a descriptor (passed to the child over a
// Unix socket, SCM_RIGHTS) and the allocation with cudaMemPoolExportPointer (its 64
// bytes over a pipe), and an interprocess event recorded after its work. The child
// imports the pool and the pointer, waits on the event, reads the parent's bytes,
// writes its own and runs a kernel on them, and frees its imported pointer; the parent
// then sees the child's bytes and frees the allocation.
//
// Kernel results are printed, never checked (a test double runs no kernel); copies
// and error behaviour are checked. Error codes whose exact value is not the point go
// to stderr with IPC_SHOW_CODES=1; stdout says only whether the call was refused.
//
// Hostile mode for the vmcuda tests (natively it does nothing different):
//   POOL_IMPORTER_SERVER=S   the child connects to S (VMCUDA_SERVER), another VM's
//                            socket: its import of the pool must be refused with
//                            cudaErrorInvalidValue
//   POOL_STALE_IMPORT=1      the child tries the export data again after the parent
//                            freed the allocation: refused with cudaErrorInvalidValue
//                            by vmcuda (the H200's driver accepts it, an import of
//                            memory that is gone, so this is no native comparison)
#include <vector>

#include "ipc_common.h"
#include "../c/scm_rights.h"

static const int N = 1 << 18;  // ints: 1 MiB

static int pattern(int i) { return i * 5 + 3; }

static int importer(int sock, int from_parent, int to_parent) {
    if (const char* s = getenv("POOL_IMPORTER_SERVER")) setenv("VMCUDA_SERVER", s, 1);
    int fd = receive_fd(sock);
    EXPECT(fd >= 0);
    cudaMemPoolPtrExportData data;
    cudaIpcEventHandle_t eh;
    get(from_parent, &data, sizeof data);
    get(from_parent, &eh, sizeof eh);
    CHECK(cudaSetDevice(0));
    cudaMemPool_t pool;
    cudaError_t e = cudaMemPoolImportFromShareableHandle(&pool, (void*)(long)fd,
                                                         cudaMemHandleTypePosixFileDescriptor, 0);
    if (getenv("POOL_IMPORTER_SERVER")) {
        // Another VM's process: refused as a forged export is.
        printf("child: another VM's pool refused with cudaErrorInvalidValue: %s\n",
               e == cudaErrorInvalidValue ? "yes" : "no");
        cudaGetLastError();
        done_then_wait_for_free(to_parent, from_parent);
        return 0;
    }
    CHECK(e);
    printf("child: imports the parent's pool: yes\n");
    // The pool's device reads and writes it, as the sample makes sure.
    cudaMemLocation location = {};
    location.type = cudaMemLocationTypeDevice;
    location.id = 0;
    cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
    CHECK(cudaMemPoolGetAccess(&flags, pool, &location));
    if (flags != cudaMemAccessFlagsProtReadWrite) {
        cudaMemAccessDesc desc = {};
        desc.location = location;
        desc.flags = cudaMemAccessFlagsProtReadWrite;
        CHECK(cudaMemPoolSetAccess(pool, &desc, 1));
    }
    // Export data no export wrote.
    cudaMemPoolPtrExportData forged = data;
    for (size_t i = 0; i < sizeof forged.reserved; i++) forged.reserved[i] ^= 0x5a;
    void* q = nullptr;
    printf("child: forged pointer data is refused: %s\n",
           refused("forged pointer", cudaMemPoolImportPointer(&q, pool, &forged)) ? "yes" : "no");
    void* p = nullptr;
    CHECK(cudaMemPoolImportPointer(&p, pool, &data));
    printf("child: imports the parent's pointer: yes\n");
    int* d = (int*)p;
    cudaEvent_t ev;
    CHECK(cudaIpcOpenEventHandle(&ev, eh));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamWaitEvent(s, ev, 0));
    child_reads_and_writes(d, N, s, pattern, 0x0c000000, 9);
    // An imported pool makes no allocations of its own (CUDA's rule).
    void* own = nullptr;
    printf("child: the imported pool makes no allocations: %s\n",
           refused("allocation from an imported pool",
                   cudaMallocFromPoolAsync(&own, 4096, pool, s)) ? "yes" : "no");
    // Freed before the parent frees the allocation, as CUDA requires.
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaEventDestroy(ev));
    // The parent frees its allocation: the export data imports no more.
    done_then_wait_for_free(to_parent, from_parent);
    if (getenv("POOL_STALE_IMPORT"))
        printf("child: the pointer data after the parent freed it is refused: %s\n",
               refused("stale pointer", cudaMemPoolImportPointer(&q, pool, &data)) ? "yes" : "no");
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaMemPoolDestroy(pool));
    close(fd);
    return 0;
}

int main() {
    Child child = fork_importer(true, importer);
    CHECK(cudaSetDevice(0));
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int* d = nullptr;
    CHECK(cudaMallocFromPoolAsync((void**)&d, (size_t)N * sizeof(int), pool, s));
    std::vector<int> h(N);
    for (int i = 0; i < N; i++) h[i] = pattern(i);
    CHECK(cudaMemcpyAsync(d, h.data(), (size_t)N * sizeof(int), cudaMemcpyHostToDevice, s));
    add<<<(N / 2 + 255) / 256, 256, 0, s>>>(d + N / 2, N / 2, 1000);
    CHECK(cudaGetLastError());
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
    CHECK(cudaEventRecord(ev, s));
    cudaIpcEventHandle_t eh;
    CHECK(cudaIpcGetEventHandle(&eh, ev));

    int fd = -1;
    CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    printf("parent: exports the pool as a descriptor: %s\n", fd >= 0 ? "yes" : "no");
    cudaMemPoolPtrExportData data;
    CHECK(cudaMemPoolExportPointer(&data, d));
    EXPECT(send_fd(child.sock, fd) == 0);
    put(child.to_child, &data, sizeof data);
    put(child.to_child, &eh, sizeof eh);
    wait_for_done(child);
    if (!getenv("POOL_IMPORTER_SERVER")) {
        parent_sees_child(d, N, pattern, 0x0c000000, 9);
    }
    // The child freed its import: the allocation is the parent's to free.
    CHECK(cudaFreeAsync(d, s));
    CHECK(cudaStreamSynchronize(s));
    say_freed(child);
    printf("parent: the child exited with %d\n", wait_for_exit(child));
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaMemPoolDestroy(pool));
    close(fd);
    printf("PASS pool_processes\n");
    return 0;
}
