//! Kernel console output the host sends, written where the native driver writes it.

extern "C" {
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// Write console text through C stdio, as the driver does natively, so it interleaves
/// with the program's own `printf` output in the same order.
pub(crate) fn write_console(fd: u8, text: &[u8]) {
    // SAFETY: glibc's `stdout`/`stderr` are valid FILE pointers for the whole process;
    // reading the pointer values does not race with anything that changes them.
    let file = unsafe {
        if fd == 2 {
            stderr
        } else {
            stdout
        }
    };
    // SAFETY: `text` is a valid buffer of `text.len()` bytes; `file` is a valid stream.
    unsafe {
        libc::fwrite(text.as_ptr().cast(), 1, text.len(), file);
        libc::fflush(file);
    }
}
