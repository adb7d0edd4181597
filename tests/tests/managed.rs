//! Managed memory against a host-memory daemon (tests/c/managed_pages.c): the page
//! model's moves (dirty pages before device work, fetches after it, prefetches both
//! ways), advice, pointer and range attributes, threads with their own streams, the
//! driver API, and the quota.

use vmcuda_tests::{build_c_program, run_program_with, text, Daemon};

#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn managed_pages_move_as_cuda_promises_and_count_against_the_quota() {
    let exe = build_c_program("managed_pages", &["libcudart.so.13", "libcuda.so.1"]);
    let d = Daemon::start_with_config(
        "managed-quota",
        Some("[local]\nmemory_quota = \"64MiB\"\n"),
        &["--executor", "host-memory"],
    );
    let out = run_program_with(&exe, &d.server(), &[("QUOTA_MIB", "64")]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.ends_with("PASSED\n"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    // Everything the program held came back: the daemon carries on for the next.
    let again = run_program_with(&exe, &d.server(), &[("QUOTA_MIB", "64")]);
    assert!(again.status.success(), "{}", text(&again.stdout));
}
