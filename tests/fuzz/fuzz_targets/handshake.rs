//! The handshake: a `Hello` decoded from arbitrary bytes and judged by `check_hello`,
//! the same bytes read as a whole first frame, and that frame served to a fresh host
//! session, which must answer a hello it accepts and never serve anything before one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmcuda_fuzz::serve_host_memory;
use vmcuda_wire::frame::{self, FLAG_NO_REPLY, FLAG_REPLY};
use vmcuda_wire::handshake::{check_hello, PROTOCOL_VERSION};
use vmcuda_wire::op::{Hello, HelloReply, Op};
use vmcuda_wire::CudaStatus;

fn judge(hello: &Hello) -> bool {
    let verdict = check_hello(hello);
    match verdict {
        Ok(()) => assert_eq!(hello.protocol, PROTOCOL_VERSION),
        Err(status) => assert_eq!(status, CudaStatus::ErrorInsufficientDriver),
    }
    let bytes = postcard::to_stdvec(hello).expect("a decoded hello encodes");
    assert_eq!(
        &postcard::from_bytes::<Hello>(&bytes).expect("and decodes"),
        hello
    );
    verdict.is_ok()
}

fuzz_target!(|input: &[u8]| {
    if let Ok(hello) = postcard::from_bytes::<Hello>(input) {
        judge(&hello);
    }
    // The guest decodes the host's answer.
    let _ = postcard::from_bytes::<HelloReply>(input);

    // As the first frame of a connection: (accepted, answer expected).
    let mut r = input;
    let (accepted, answered) = match frame::read_head(&mut r) {
        Ok((header, meta)) if header.op.get() == Op::Hello.code() => {
            let whole = header.data_len.get() <= r.len() as u64;
            let ok = whole && postcard::from_bytes::<Hello>(&meta).is_ok_and(|h| judge(&h));
            (ok, whole && !header.has(FLAG_NO_REPLY))
        }
        _ => (false, false),
    };

    let mut out = Vec::new();
    let _ = serve_host_memory(input, &mut out);
    let mut replies = &out[..];
    let first = frame::read_head(&mut replies);
    if accepted {
        if answered {
            let (reply, _) = first.expect("an accepted hello is answered");
            assert!(reply.has(FLAG_REPLY) && reply.op.get() == Op::Hello.code());
            assert_eq!(reply.status.get(), 0);
        }
        return;
    }
    // Without a handshake nothing is served: at most one error answer, then the end.
    if let Ok((reply, _)) = first {
        assert!(reply.has(FLAG_REPLY));
        assert_ne!(
            reply.status.get(),
            0,
            "a request was served before the handshake"
        );
        let _ = frame::skip_data(&mut replies, reply.data_len.get());
        assert!(
            replies.is_empty(),
            "the connection went on after a refused handshake"
        );
    }
});
