/* cumem_share: a physical allocation (cuMemCreate with a POSIX descriptor handle type)
   passed to another process as NCCL passes its buffers: exported as a descriptor, sent
   over a Unix socket (SCM_RIGHTS), imported, mapped and written by the child, whose
   bytes the parent then reads. Driver API only. Prints one line per check and the
   codes; exits 0 when every check holds.
   The child synchronizes after its write before it tells the parent: a pageable
   cuMemcpyHtoD may return before its bytes land, and without the wait the parent's
   read raced the copy natively too (the H200: 1 of 3 native runs lost the write, its
   context then failing with 719 at the unmap). CUMEM_CHILD_KEEP=1 makes the child tell
   the parent before it unmaps and releases, and wait for the parent's read first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scm_rights.h"

typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
struct prop {
    int type, handle_types, location_type, location_id;
    void* win32;
    unsigned char compression, rdma;
    unsigned short usage;
    unsigned char reserved[4];
};
struct access {
    int location_type, location_id;
    int flags;
};
int cuInit(unsigned);
int cuDeviceGet(int*, int);
int cuDevicePrimaryCtxRetain(void**, int);
int cuCtxSetCurrent(void*);
int cuMemGetAllocationGranularity(size_t*, const struct prop*, int);
int cuMemCreate(CUmemGenericAllocationHandle*, size_t, const struct prop*, unsigned long long);
int cuMemRelease(CUmemGenericAllocationHandle);
int cuMemAddressReserve(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
int cuMemAddressFree(CUdeviceptr, size_t);
int cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
int cuMemUnmap(CUdeviceptr, size_t);
int cuMemSetAccess(CUdeviceptr, size_t, const struct access*, size_t);
int cuMemcpyHtoD_v2(CUdeviceptr, const void*, size_t);
int cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
int cuCtxSynchronize(void);
int cuMemExportToShareableHandle(void*, CUmemGenericAllocationHandle, int, unsigned long long);
int cuMemImportFromShareableHandle(CUmemGenericAllocationHandle*, void*, int);

#define POSIX_FD 1
static int failures;
static void check(const char* what, int ok) {
    printf("%s: %s\n", what, ok ? "yes" : "no");
    failures += !ok;
}

static void start(void) {
    int dev;
    void* ctx;
    cuInit(0);
    cuDeviceGet(&dev, 0);
    cuDevicePrimaryCtxRetain(&ctx, dev);
    cuCtxSetCurrent(ctx);
}

static struct prop exportable(void) {
    struct prop p;
    memset(&p, 0, sizeof p);
    p.type = 1;          /* pinned */
    p.handle_types = POSIX_FD;
    p.location_type = 1; /* device */
    return p;
}

/* Reserve, map and open `h` of `size` bytes for this device: its address. */
static CUdeviceptr map(CUmemGenericAllocationHandle h, size_t size) {
    CUdeviceptr at = 0;
    struct access a = {1, 0, 3};
    if (cuMemAddressReserve(&at, size, 0, 0, 0) || cuMemMap(at, size, 0, h, 0) ||
        cuMemSetAccess(at, size, &a, 1))
        return 0;
    return at;
}

static int child(int sock) {
    start();
    int fd = receive_fd(sock);
    size_t size = 0;
    read(sock, &size, sizeof size);
    CUmemGenericAllocationHandle h = 0;
    int r = cuMemImportFromShareableHandle(&h, (void*)(long)fd, POSIX_FD);
    printf("child: import %d\n", r);
    check("child: imports the parent's descriptor", r == 0);
    close(fd);
    CUdeviceptr at = map(h, size);
    check("child: maps the imported allocation", at != 0);
    unsigned char buf[4096];
    cuMemcpyDtoH_v2(buf, at, sizeof buf);
    int same = 1;
    for (size_t i = 0; i < sizeof buf; i++) same &= buf[i] == (unsigned char)(i * 7);
    check("child: reads the parent's bytes", same);
    memset(buf, 0xc4, sizeof buf);
    r = cuMemcpyHtoD_v2(at + 4096, buf, sizeof buf);
    printf("child: write %d\n", r);
    printf("child: synchronize %d\n", cuCtxSynchronize());
    unsigned char back[4096];
    memset(back, 0, sizeof back);
    cuMemcpyDtoH_v2(back, at + 4096, sizeof back);
    check("child: reads back its own bytes", memcmp(back, buf, sizeof buf) == 0);
    char done = 'D';
    int keep = getenv("CUMEM_CHILD_KEEP") != NULL;
    if (keep) {
        write(sock, &done, 1);
        read(sock, &done, 1);
    }
    /* A descriptor that is no export of the driver's. */
    int other = dup(1);
    CUmemGenericAllocationHandle h2 = 0;
    r = cuMemImportFromShareableHandle(&h2, (void*)(long)other, POSIX_FD);
    printf("child: foreign descriptor %d\n", r);
    check("child: a descriptor that is not an export is refused", r != 0);
    close(other);
    cuMemUnmap(at, size);
    cuMemAddressFree(at, size);
    cuMemRelease(h);
    printf("child: synchronize at the end %d\n", cuCtxSynchronize());
    if (!keep) write(sock, &done, 1);
    return failures != 0;
}

int main(void) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 2;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        int rc = child(sv[1]);
        fflush(stdout);
        _exit(rc);
    }
    close(sv[1]);
    start();
    struct prop p = exportable();
    size_t size = 0;
    cuMemGetAllocationGranularity(&size, &p, 0);
    CUmemGenericAllocationHandle h = 0;
    check("parent: creates an exportable allocation", cuMemCreate(&h, size, &p, 0) == 0);
    CUdeviceptr at = map(h, size);
    check("parent: maps it", at != 0);
    unsigned char buf[4096];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 7);
    cuMemcpyHtoD_v2(at, buf, sizeof buf);
    int fd = -1;
    int r = cuMemExportToShareableHandle(&fd, h, POSIX_FD, 0);
    printf("parent: export %d\n", r);
    check("parent: exports it as a descriptor", r == 0 && fd >= 0);
    int fabric = 0;
    r = cuMemExportToShareableHandle(&fabric, h, 8 /* fabric */, 0);
    printf("parent: fabric export %d\n", r);
    check("parent: a fabric handle is refused", r != 0);
    if (send_fd(sv[0], fd) != 0) perror("sendmsg");
    write(sv[0], &size, sizeof size);
    close(fd);
    char done = 0;
    read(sv[0], &done, 1);
    cuMemcpyDtoH_v2(buf, at + 4096, sizeof buf);
    int theirs = 1;
    for (size_t i = 0; i < sizeof buf; i++) theirs &= buf[i] == 0xc4;
    check("parent: sees the child's bytes", theirs);
    if (getenv("CUMEM_CHILD_KEEP")) write(sv[0], &done, 1);
    int status = 0;
    waitpid(pid, &status, 0);
    check("parent: the child's checks held", WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cuMemUnmap(at, size);
    cuMemAddressFree(at, size);
    cuMemRelease(h);
    printf("%s cumem_share\n", failures ? "FAIL" : "PASS");
    return failures != 0;
}
