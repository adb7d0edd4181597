//! Frame decoding: any byte stream read as back-to-back frames. Reading must end in a
//! clean error, never a panic, and whatever decodes must encode back to itself, alone
//! and batched.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmcuda_wire::frame::{self, FrameBatch, FrameHeader};

fuzz_target!(|input: &[u8]| {
    let mut r = input;
    let mut frames: Vec<(FrameHeader, Vec<u8>, Vec<u8>)> = Vec::new();
    // Where the last whole frame ended (a failed read may consume what is left).
    let mut whole = 0;
    while let Ok((header, meta)) = frame::read_head(&mut r) {
        assert!(
            header.validate().is_ok(),
            "read_head returned an invalid header"
        );
        assert_eq!(meta.len() as u64, u64::from(header.meta_len.get()));
        let len = header.data_len.get();
        // Read the data section when the input holds it; otherwise skipping must fail.
        let data = if len <= r.len() as u64 {
            frame::read_data(&mut r, &header).expect("the bytes are there")
        } else {
            assert!(frame::skip_data(&mut r, len).is_err());
            break;
        };
        frames.push((header, meta, data));
        whole = input.len() - r.len();
    }
    if frames.is_empty() {
        return;
    }

    // Everything read comes out byte for byte the same, frame by frame and in one batch.
    let consumed = &input[..whole];
    let mut single = Vec::new();
    let mut batch = FrameBatch::default();
    for (h, meta, data) in &frames {
        frame::write_frame(&mut single, h, meta, data).unwrap();
        batch.push(h, meta, data);
    }
    assert_eq!(single, consumed);
    assert_eq!(batch.len(), frames.len());
    assert_eq!(batch.bytes(), consumed.len());
    let mut batched = Vec::new();
    batch.flush_to(&mut batched).unwrap();
    assert!(batch.is_empty());
    assert_eq!(batched, consumed);
});
