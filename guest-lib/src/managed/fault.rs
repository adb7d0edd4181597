//! The SIGSEGV handler that moves a managed page to the host on its first touch, and
//! hands every other fault to the action installed before it.

use super::*;

/// The SIGSEGV action that was installed before ours, for faults not on managed pages.
pub(super) static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALL: Once = Once::new();

pub(super) fn install_fault_handler() {
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid value to fill; `on_fault` has the
        // SA_SIGINFO signature, and the previous action is kept to chain to.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fault as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGSEGV, &action, &mut previous) != 0 {
                eprintln!("vmcuda: managed memory: no SIGSEGV handler; the CPU cannot touch managed memory");
                return;
            }
            let _ = PREVIOUS.set(previous);
        }
    });
}

/// Whether a fault was a write, where the machine says so (x86-64's page-fault error
/// code); elsewhere every fault is taken as a write, which is only slower.
///
/// # Safety
/// `context` is the `ucontext_t` the kernel passed to a SA_SIGINFO handler.
unsafe fn write_fault(context: *mut c_void) -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let uc = context.cast::<libc::ucontext_t>();
        // SAFETY: as the caller promised, `uc` is the handler's context.
        let err = unsafe { (*uc).uc_mcontext.gregs[libc::REG_ERR as usize] };
        err & 2 != 0
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        let _ = context;
        true
    }
}

extern "C" fn on_fault(signal: i32, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    // SAFETY: `context` is this handler's context.
    let write = unsafe { write_fault(context) };
    let handled = std::panic::catch_unwind(|| handle_fault(addr, write)).unwrap_or(false);
    if !handled {
        chain(signal, info, context);
    }
}

/// Faults resolved, since the process started.
pub static FAULTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Resolve a fault on managed memory; false if it was not on managed memory, or the
/// pages could not be brought back (the program then gets the fault it would have).
fn handle_fault(addr: usize, write: bool) -> bool {
    FAULTS.fetch_add(1, Ordering::Relaxed);
    if BUSY.with(|b| b.get()) {
        // This thread was moving managed pages itself: a bug, reported as the fault.
        return false;
    }
    busy(|| match regions().fault(addr, write) {
        None => false,
        Some(Ok(())) => true,
        Some(Err(e)) => {
            eprintln!("vmcuda: managed memory at {addr:#x} could not be brought back from the device ({e}); the access faults");
            false
        }
    })
}

/// Hand a fault that is not ours to the action installed before: its handler, or the
/// default (the fault repeats once the handler returns, and kills the process).
fn chain(signal: i32, info: *mut libc::siginfo_t, context: *mut c_void) {
    let previous = PREVIOUS.get().copied();
    match previous {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous action's handler, with the SA_SIGINFO signature
                // its flags declare.
                let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                f(signal, info, context);
            } else {
                // SAFETY: the previous action's plain handler.
                let f: extern "C" fn(i32) = unsafe { std::mem::transmute(p.sa_sigaction) };
                f(signal);
            }
        }
        _ => {
            // SAFETY: a zeroed sigaction with SIG_DFL restores the default action.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
    }
}
