//! C programs on NVIDIA's `libcudart.so.13` over vmcuda's `libcuda.so.1`: stream
//! attributes and exported memory pools, as the driver answers them.

use vmcuda_tests::{build_c_program, run_program_with, text, Daemon};

/// Stream attributes (tests/c/stream_attrs.c): an access policy window must lie in the
/// program's own memory, as every pointer range the host is handed; attributes a stream
/// does not have and streams the program does not hold are refused.
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn stream_attributes_keep_to_the_programs_memory_and_streams() {
    let exe = build_c_program("stream_attrs", &["libcudart.so.13"]);
    let d = Daemon::host_memory("stream-attrs");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("alloc 0 stream 0 own 0 beyond 1 wild 1 read 0 kept 1 not-a-stream-attribute 1 unknown-stream 400"),
        "{stdout}"
    );
    assert!(d
        .log()
        .contains("refused an access outside the guest's own memory"));
}

/// A pool exported again and again (tests/c/pool_exports.c): the guest keeps one
/// descriptor per exported pool, not one per export, and lets it go with the pool, so
/// a program that exports in a loop runs out of nothing.
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn a_pool_exported_again_holds_one_descriptor_until_it_goes() {
    let exe = build_c_program("pool_exports", &["libcudart.so.13"]);
    let d = Daemon::host_memory("pool-exports");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "made 0; 300 exports, failed 0, descriptors held beyond the program's: 1; \
             import from the last 0; destroyed 0; descriptors left after: 0"
        ),
        "{stdout}"
    );
}
