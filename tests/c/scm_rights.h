/* scm_rights.h: one byte over a Unix socket with a descriptor riding along
 * (SCM_RIGHTS), as programs pass CUDA's shareable handles between processes. Used by
 * tests/c/cumem_share.c and tests/apps/pool_processes.cu. */
#ifndef VMCUDA_SCM_RIGHTS_H
#define VMCUDA_SCM_RIGHTS_H
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* A message of the one byte at `byte`, with room in `control` for one descriptor. */
static struct msghdr scm_message(struct iovec* iov, char* control, size_t control_len) {
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = control_len;
    return msg;
}

/* Send `fd` to the other end of `sock`: 0 when sent, -1 when not. */
static int send_fd(int sock, int fd) {
    char byte = 'F';
    struct iovec iov = {&byte, 1};
    char control[CMSG_SPACE(sizeof(int))];
    memset(control, 0, sizeof control);
    struct msghdr msg = scm_message(&iov, control, sizeof control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

/* The descriptor the other end of `sock` sent, or -1. */
static int receive_fd(int sock) {
    char byte;
    struct iovec iov = {&byte, 1};
    char control[CMSG_SPACE(sizeof(int))];
    memset(control, 0, sizeof control);
    struct msghdr msg = scm_message(&iov, control, sizeof control);
    if (recvmsg(sock, &msg, 0) != 1) return -1;
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    int fd = -1;
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}
#endif
