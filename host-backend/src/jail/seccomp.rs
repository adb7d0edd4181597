//! The worker's system call filter: what serving a session takes, and nothing else.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::{JailError, OnDenied};

fn target_arch() -> TargetArch {
    #[cfg(target_arch = "aarch64")]
    return TargetArch::aarch64;
    #[cfg(not(target_arch = "aarch64"))]
    TargetArch::x86_64
}

/// The system calls a jailed worker makes, with the arguments some are held to.
/// `pid`: the worker's own, the only process it may signal.
pub fn allowed_syscalls(pid: u32) -> Result<BTreeMap<i64, Vec<SeccompRule>>, JailError> {
    let arg = |index: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value)
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut allow = |calls: &[libc::c_long]| {
        for &call in calls {
            rules.insert(call, Vec::new());
        }
    };
    // Frames on the connection (already open: no socket, bind, connect or accept),
    // descriptors the guest passes (SCM_RIGHTS), the ledger and figures files, the
    // driver's device files (opened lazily, so openat stays; what it reaches is bounded
    // by the user and the namespace).
    allow(&[
        libc::SYS_read,
        libc::SYS_write,
        libc::SYS_readv,
        libc::SYS_writev,
        libc::SYS_pread64,
        libc::SYS_pwrite64,
        libc::SYS_preadv,
        libc::SYS_pwritev,
        libc::SYS_preadv2,
        libc::SYS_pwritev2,
        libc::SYS_recvfrom,
        libc::SYS_recvmsg,
        libc::SYS_recvmmsg,
        libc::SYS_sendto,
        libc::SYS_sendmsg,
        libc::SYS_sendmmsg,
        libc::SYS_shutdown,
        libc::SYS_getsockopt,
        libc::SYS_setsockopt,
        libc::SYS_getsockname,
        libc::SYS_getpeername,
        libc::SYS_openat,
        libc::SYS_close,
        libc::SYS_close_range,
        libc::SYS_lseek,
        libc::SYS_fcntl,
        libc::SYS_flock,
        libc::SYS_fsync,
        libc::SYS_fdatasync,
        libc::SYS_ftruncate,
        libc::SYS_fstat,
        libc::SYS_newfstatat,
        libc::SYS_statx,
        libc::SYS_fstatfs,
        libc::SYS_statfs,
        libc::SYS_getdents64,
        libc::SYS_readlinkat,
        libc::SYS_faccessat,
        libc::SYS_faccessat2,
        libc::SYS_dup,
        libc::SYS_dup3,
        libc::SYS_pipe2,
        libc::SYS_memfd_create,
        // Memory: the heap, mappings of guest memory and of the GPU, pinned buffers.
        libc::SYS_mmap,
        libc::SYS_munmap,
        libc::SYS_mprotect,
        libc::SYS_madvise,
        libc::SYS_mremap,
        libc::SYS_brk,
        libc::SYS_mlock,
        libc::SYS_mlock2,
        libc::SYS_munlock,
        libc::SYS_msync,
        libc::SYS_mincore,
        libc::SYS_get_mempolicy,
        libc::SYS_mbind,
        libc::SYS_membarrier,
        // Threads (the driver's), waiting, time.
        libc::SYS_futex,
        libc::SYS_set_robust_list,
        libc::SYS_rseq,
        libc::SYS_set_tid_address,
        libc::SYS_sched_yield,
        libc::SYS_sched_getaffinity,
        libc::SYS_sched_getparam,
        libc::SYS_sched_getscheduler,
        libc::SYS_sched_get_priority_max,
        libc::SYS_sched_get_priority_min,
        libc::SYS_nanosleep,
        libc::SYS_clock_nanosleep,
        libc::SYS_clock_gettime,
        libc::SYS_clock_getres,
        libc::SYS_gettimeofday,
        libc::SYS_ppoll,
        libc::SYS_pselect6,
        libc::SYS_epoll_create1,
        libc::SYS_epoll_ctl,
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
        libc::SYS_eventfd2,
        libc::SYS_timerfd_create,
        libc::SYS_timerfd_settime,
        libc::SYS_timerfd_gettime,
        // Signals to itself, and ending.
        libc::SYS_rt_sigaction,
        libc::SYS_rt_sigprocmask,
        libc::SYS_rt_sigreturn,
        libc::SYS_rt_sigtimedwait,
        libc::SYS_sigaltstack,
        libc::SYS_restart_syscall,
        libc::SYS_exit,
        libc::SYS_exit_group,
        // Questions about itself.
        libc::SYS_getpid,
        libc::SYS_gettid,
        libc::SYS_getppid,
        libc::SYS_getuid,
        libc::SYS_geteuid,
        libc::SYS_getgid,
        libc::SYS_getegid,
        libc::SYS_getresuid,
        libc::SYS_getresgid,
        libc::SYS_getgroups,
        libc::SYS_getrusage,
        libc::SYS_uname,
        libc::SYS_sysinfo,
        libc::SYS_getcwd,
        libc::SYS_getrandom,
    ]);
    #[cfg(target_arch = "x86_64")]
    allow(&[
        libc::SYS_open,
        libc::SYS_stat,
        libc::SYS_lstat,
        libc::SYS_access,
        libc::SYS_readlink,
        libc::SYS_poll,
        libc::SYS_select,
        libc::SYS_pipe,
        libc::SYS_dup2,
        libc::SYS_eventfd,
        libc::SYS_epoll_wait,
        libc::SYS_epoll_create,
        libc::SYS_getrlimit,
        libc::SYS_arch_prctl,
        libc::SYS_time,
    ]);
    let rule = |conditions| SeccompRule::new(conditions).map_err(seccompiler::Error::from);
    // Threads only: a clone without CLONE_THREAD would be a new process.
    let thread = CLONE_THREAD_FLAG;
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(thread),
            thread,
        )?])?],
    );
    // clone3's flags are in memory the filter cannot read: allowed here, and answered
    // ENOSYS by the front of the filter ([`filter`]).
    rules.insert(libc::SYS_clone3, Vec::new());
    // Signals to itself only (abort, the driver's own).
    rules.insert(
        libc::SYS_tgkill,
        vec![rule(vec![arg(0, SeccompCmpOp::Eq, pid.into())?])?],
    );
    rules.insert(
        libc::SYS_kill,
        vec![rule(vec![arg(0, SeccompCmpOp::Eq, pid.into())?])?],
    );
    // Its own limits, read (and lowered); never another process's.
    rules.insert(
        libc::SYS_prlimit64,
        vec![rule(vec![arg(0, SeccompCmpOp::Eq, 0)?])?],
    );
    rules.insert(
        libc::SYS_sched_setaffinity,
        vec![rule(vec![arg(0, SeccompCmpOp::Eq, 0)?])?],
    );
    // Thread names and anonymous mapping names only.
    let prctl_ops = [
        libc::PR_SET_NAME as u64,
        libc::PR_GET_NAME as u64,
        libc::PR_GET_DUMPABLE as u64,
        libc::PR_GET_NO_NEW_PRIVS as u64,
        PR_SET_VMA,
    ];
    let mut prctl = Vec::new();
    for op in prctl_ops {
        prctl.push(rule(vec![arg(0, SeccompCmpOp::Eq, op)?])?);
    }
    rules.insert(libc::SYS_prctl, prctl);
    // Any device request (the GPU driver's are many and private), except pushing input
    // into a terminal the daemon's log may be.
    let mut ioctl = Vec::new();
    for request in IOCTL_DENIED {
        ioctl.push(arg(1, SeccompCmpOp::Ne, request)?);
    }
    rules.insert(libc::SYS_ioctl, vec![rule(ioctl)?]);
    // Connections on the session's resume point only (see `resume`): a returning
    // guest's, handed over by the worker that admitted it.
    if let Some(fd) = crate::resume::listener_fd() {
        rules.insert(
            libc::SYS_accept4,
            vec![rule(vec![arg(0, SeccompCmpOp::Eq, fd as u64)?])?],
        );
    }
    Ok(rules)
}

const CLONE_THREAD_FLAG: u64 = libc::CLONE_THREAD as u64;
/// PR_SET_VMA (naming anonymous mappings; newer C libraries name their arenas).
const PR_SET_VMA: u64 = 0x5356_4d41;

/// The device requests no worker may make: they push input into a terminal (the
/// daemon's log may be one). The kernel reads the request as 32 bits, and so do the
/// checks.
const IOCTL_DENIED: [u64; 2] = [libc::TIOCSTI, libc::TIOCLINUX];

/// The calls a round trip makes most (the request loop, the driver's threads): tested
/// first, on kernels that run the program for every call (see [`filter`]). Each must be
/// allowed with no condition in [`allowed_syscalls`]; one that is not is left out.
const HOT: &[libc::c_long] = &[
    libc::SYS_futex,
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_ppoll,
    libc::SYS_epoll_pwait,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_poll,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_epoll_wait,
    libc::SYS_sched_yield,
    libc::SYS_mmap,
    libc::SYS_munmap,
];

fn denied_action(on_denied: OnDenied) -> SeccompAction {
    match on_denied {
        OnDenied::Eperm => SeccompAction::Errno(libc::EPERM as u32),
        OnDenied::Kill => SeccompAction::KillProcess,
        OnDenied::Log => SeccompAction::Log,
    }
}

/// The worker's filter: [`allowed_syscalls`], everything else `on_denied`.
///
/// What it costs a call. Since Linux 5.11 the kernel keeps, per call number, a verdict
/// that reads no argument, so a call allowed with no condition runs no program at all
/// (the filter's whole cost is then the slower system call entry of any filtered
/// process). A call with conditions runs the program every time, and seccompiler's
/// program compares the number with each allowed one in numeric order before it gets
/// to that call's conditions. Of those calls only `ioctl` is frequent (the NVIDIA
/// driver's requests), so a short program put in front answers it, and, for kernels
/// without that cache, the calls in `HOT`, before seccompiler's program answers the
/// rest. The front also answers `clone3`, which took a second filter before, so a call
/// that runs the program runs one, not two. The policy is the same either way (the
/// tests compare the verdicts).
pub fn filter(on_denied: OnDenied, pid: u32) -> Result<BpfProgram, JailError> {
    let rules = allowed_syscalls(pid)?;
    let hot: Vec<libc::c_long> = HOT
        .iter()
        .copied()
        .filter(|nr| rules.get(nr).is_some_and(Vec::is_empty))
        .collect();
    let mut program = front(on_denied, &hot);
    program.extend(rules_program(rules, on_denied)?);
    Ok(program)
}

/// [`allowed_syscalls`] as seccompiler compiles it (the whole filter before the
/// front part was put in; kept for the tests and the cost measurement).
pub(super) fn rules_program(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    on_denied: OnDenied,
) -> Result<BpfProgram, JailError> {
    let f = SeccompFilter::new(
        rules,
        denied_action(on_denied),
        SeccompAction::Allow,
        target_arch(),
    )
    .map_err(seccompiler::Error::from)?;
    Ok(f.try_into()?)
}

// `struct seccomp_data`: the call's number, its architecture, then six 64-bit
// arguments (both architectures here are little-endian: the low half comes first).
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const DATA_ARG1_LOW: u32 = 16 + 8;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000;
#[cfg(not(target_arch = "aarch64"))]
const AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000;

fn stmt(code: u32, k: u32) -> sock_filter {
    jump(code, k, 0, 0)
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The front of the worker's filter: `clone3` answered `ENOSYS` (its flags are in
/// memory a filter cannot read; the C library then uses `clone`, whose flags the rules
/// check), `ioctl` with its argument checks, then `hot` allowed; anything else (another
/// architecture included) goes on to the program after.
fn front(on_denied: OnDenied, hot: &[libc::c_long]) -> BpfProgram {
    use libc::{BPF_ABS, BPF_JA, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let load = |offset| stmt(BPF_LD | BPF_W | BPF_ABS, offset);
    // Jumps are given as targets here, and become offsets from the next instruction
    // (which fit in a byte: the front is short).
    let eq = |at: usize, k: u64, jt: usize, jf: usize| {
        jump(
            BPF_JMP | BPF_JEQ | BPF_K,
            k as u32,
            (jt - at - 1) as u8,
            (jf - at - 1) as u8,
        )
    };
    let denied = IOCTL_DENIED.len();
    // 0 load arch; 1 arch?; 2 load nr; 3 clone3?; 4 ioctl?; 5 load request; one test
    // per denied request; one per hot call; a jump to the rest; allow; deny; ENOSYS.
    let hot_at = 6 + denied;
    let rest_jump = hot_at + hot.len();
    let (allow, deny, enosys) = (rest_jump + 1, rest_jump + 2, rest_jump + 3);
    let len = rest_jump + 4;
    let mut p = vec![
        load(DATA_ARCH),
        eq(1, AUDIT_ARCH.into(), 2, rest_jump),
        load(DATA_NR),
        eq(3, libc::SYS_clone3 as u64, enosys, 4),
        eq(4, libc::SYS_ioctl as u64, 5, hot_at),
        load(DATA_ARG1_LOW),
    ];
    for (i, request) in IOCTL_DENIED.iter().enumerate() {
        let at = p.len();
        let otherwise = if i + 1 == denied { allow } else { at + 1 };
        p.push(eq(at, *request, deny, otherwise));
    }
    for nr in hot {
        let at = p.len();
        p.push(eq(at, *nr as u64, allow, at + 1));
    }
    p.push(stmt(BPF_JMP | BPF_JA, (len - rest_jump - 1) as u32));
    p.push(stmt(BPF_RET | BPF_K, SeccompAction::Allow.into()));
    p.push(stmt(BPF_RET | BPF_K, denied_action(on_denied).into()));
    p.push(stmt(
        BPF_RET | BPF_K,
        SeccompAction::Errno(libc::ENOSYS as u32).into(),
    ));
    debug_assert_eq!(p.len(), len);
    p
}

/// What answered `clone3` before the front part did: a second filter, whose stricter
/// verdict the kernel took (kept for the tests and the cost measurement).
#[cfg(test)]
pub(super) fn clone3_filter() -> Result<BpfProgram, JailError> {
    let f = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        target_arch(),
    )
    .map_err(seccompiler::Error::from)?;
    Ok(f.try_into()?)
}
