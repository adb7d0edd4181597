//! The runtime's exports that cannot cross the VM boundary (tests/c/runtime_stub.c):
//! each answers cudaErrorNotSupported, leaves it as the thread's last error, and names
//! itself on stderr once, saying why; and `__cudaRegisterUnifiedTable`, whose table
//! stays in the guest, said once.

use vmcuda_tests::{build_c_program, run_program_with, text, Daemon};

#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn unimplemented_runtime_functions_name_themselves_and_answer_not_supported() {
    let exe = build_c_program("runtime_stub", &["libcudart.so.13"]);
    let d = Daemon::host_memory("runtime-stub");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("devices 1 (0); unified table last 0; gl 801 last 801; last now 0"),
        "{stdout}"
    );
    assert!(stdout.contains("__cudaGetProcAddress: NULL"), "{stdout}");
    let table_lines = stderr
        .lines()
        .filter(|l| l.contains("__cudaRegisterUnifiedTable"))
        .count();
    assert_eq!(table_lines, 1, "said once: {stderr}");
    assert!(
        stderr.contains("cannot reach the host's driver; the module loads without it"),
        "{stderr}"
    );
    assert!(
        stderr.contains("cudaGLSetGLDevice (libcudart.so.13) is graphics interop, which cannot cross the VM boundary"),
        "{stderr}"
    );
}

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
