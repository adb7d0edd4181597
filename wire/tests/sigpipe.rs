//! A write to a connection whose peer has gone fails with `EPIPE` and does not raise
//! `SIGPIPE`: the guest library runs inside programs that keep the signal's default
//! action, which would kill them when their host goes away (seen as a load test whose
//! guest died silently when its worker was killed). This binary has one test because it
//! puts `SIGPIPE` back to its default action for the whole process.

use std::io::{ErrorKind, IoSlice, Write};
use std::os::unix::net::UnixStream;

use vmcuda_wire::no_sigpipe::NoSigPipe;
use vmcuda_wire::transport::Stream;

#[test]
fn writes_to_a_gone_peer_fail_with_epipe_instead_of_killing_the_program() {
    // SAFETY: SIG_DFL is a valid disposition; no other test runs in this binary.
    let previous = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    assert_ne!(previous, libc::SIG_ERR);
    let (a, b) = UnixStream::pair().unwrap();
    drop(b);
    let mut stream = Stream::Unix(a.try_clone().unwrap());
    let e = stream.write_all(b"a frame").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BrokenPipe);
    let e = stream
        .write_vectored(&[IoSlice::new(b"head"), IoSlice::new(b"data")])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BrokenPipe);
    let e = NoSigPipe(a).write_all(b"as TLS writes").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BrokenPipe);
}
