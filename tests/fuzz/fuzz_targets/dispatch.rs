//! Request dispatch on the host: a host-memory session served by the worker's frame
//! loop, as one guest connection that has already said a valid hello.
//!
//! The first input byte picks the format. Even: the rest is the raw byte stream after
//! the hello, framing and all. Odd: the rest is a run of requests in the structured
//! format of `vmcuda_fuzz::requests`, whose frames are always well formed; then the
//! session must serve them all and answer exactly those that want an answer, in order.
//! Either way every byte the host writes back must be a well-formed frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmcuda_fuzz::{hello_frame, requests, serve_host_memory};
use vmcuda_wire::frame::{self, FrameError, FLAG_EVENT, FLAG_REPLY};

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    let mut stream = hello_frame();
    let answered = if mode & 1 == 0 {
        stream.extend_from_slice(rest);
        None
    } else {
        let (frames, answered) = requests::decode(rest);
        stream.extend(frames);
        Some(answered)
    };

    let mut out = Vec::new();
    let served = serve_host_memory(&stream, &mut out);

    let mut replies = &out[..];
    let mut ids = Vec::new();
    loop {
        match frame::read_head(&mut replies) {
            Ok((h, _)) => {
                assert!(
                    h.has(FLAG_REPLY) || h.has(FLAG_EVENT),
                    "host wrote a frame that is neither reply nor event"
                );
                if h.has(FLAG_REPLY) {
                    ids.push(h.request_id.get());
                }
                frame::skip_data(&mut replies, h.data_len.get()).expect("reply data is all there");
            }
            Err(FrameError::Closed) => break,
            Err(e) => panic!("host wrote a malformed frame: {e}"),
        }
    }
    assert_eq!(ids.first(), Some(&1), "the hello was not answered first");
    if let Some(answered) = answered {
        served.expect("well-formed requests close the connection");
        assert_eq!(
            &ids[1..],
            &answered[..],
            "answers missing, extra or out of order"
        );
    }
});
