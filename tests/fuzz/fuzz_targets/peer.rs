//! The daemon's peer-link broker, fed workers' messages (raw bytes and well-formed
//! requests naming the tickets it handed out) and other daemons' connections after
//! their TLS handshake (transfer headers, damaged or whole, and bytes), in the action
//! format of `vmcuda_fuzz::peer`. Every answer must be a well-formed message and the one
//! the request calls for; a ticket is delivered once, to the worker that registered it,
//! with its sender's bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    vmcuda_fuzz::peer::run(input);
});
