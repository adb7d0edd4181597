//! The packages installed and run: the host package (`images/host-deb/build.sh`) and
//! the guest package and tarball (`images/guest-deb/build.sh`), installed with apt from
//! their local repository (`images/build-repo.sh`), in a container-like root by
//! `tests/install/packages.sh`, which prints one `ok`/`not ok` line per check. The
//! guest package inside a QEMU guest is in `vm.rs`. The static-runtime program
//! (`static_apps_dir`) checks that vmcuda's `libcuda.so.1` is the system's driver.

use std::process::Command;

use vmcuda_tests::{apps_dir, nvidia_cudart_dir, package, root, static_apps_dir};

#[test]
#[ignore = "needs root and the built packages: run tests/run.sh"]
fn the_packages_install_run_and_go_away_cleanly_in_a_container_root() {
    let v = env!("CARGO_PKG_VERSION");
    let host = package("VMCUDA_HOST_DEB", &format!("vmcuda-host_{v}_amd64.deb"));
    let guest = package("VMCUDA_GUEST_DEB", &format!("vmcuda-guest_{v}_amd64.deb"));
    let tarball = package("VMCUDA_GUEST_TARBALL", &format!("vmcuda-guest-{v}.tar.gz"));
    // The local apt repository (images/build-repo.sh) the packages are installed from,
    // as a user does; tests/run.sh builds it. Without one, dpkg -i.
    let repo = std::env::var_os("VMCUDA_PKG_REPO")
        .map_or_else(|| root().join("build/repo"), std::path::PathBuf::from);
    let repo = repo.join("Packages").is_file().then_some(repo);
    assert!(
        repo.is_some() || std::env::var_os("VMCUDA_REQUIRE_INSTALL_TESTS").is_none(),
        "no apt repository (VMCUDA_PKG_REPO, build/repo) but VMCUDA_REQUIRE_INSTALL_TESTS is set"
    );
    let mut cmd = Command::new("bash");
    if let Some(repo) = &repo {
        cmd.arg(root().join("tests/install/packages.sh"))
            .arg("--repo")
            .arg(repo);
    } else {
        cmd.arg(root().join("tests/install/packages.sh"));
    }
    let out = cmd
        .arg("--host-deb")
        .arg(&host)
        .arg("--guest-deb")
        .arg(&guest)
        .arg("--guest-tarball")
        .arg(&tarball)
        .arg("--app")
        .arg(apps_dir().join("vector_add"))
        .arg("--static-app")
        .arg(static_apps_dir().join("vector_add"))
        .arg("--cudart")
        .arg(nvidia_cudart_dir())
        .output()
        .expect("run tests/install/packages.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    if out.status.code() == Some(77) {
        // Not root, or no overlayfs here. CI sets VMCUDA_REQUIRE_INSTALL_TESTS=1.
        assert!(
            std::env::var_os("VMCUDA_REQUIRE_INSTALL_TESTS").is_none(),
            "the install checks were skipped but VMCUDA_REQUIRE_INSTALL_TESTS is set: {stderr}"
        );
        return;
    }
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("not ok")).collect();
    assert!(
        out.status.success() && failed.is_empty(),
        "install checks failed: {failed:#?}"
    );
    let passed = stdout.lines().filter(|l| l.starts_with("ok - ")).count();
    // The script's own summary agrees, and it got through every section.
    assert!(
        stdout.contains(&format!("install checks: {passed} passed, 0 failed")),
        "{stdout}"
    );
    for section in [
        "# host package",
        "# the units' commands, as their user",
        "# guest tarball",
        "# reload and stop",
        "# vmcuda-vhost@vm1",
        "# reinstall, disable, remove, purge",
        "# guest package",
        "# another libcuda.so.1 (a stand-in for NVIDIA's driver)",
    ] {
        assert!(stdout.contains(section), "no {section:?} in\n{stdout}");
    }
    assert!(passed >= 60, "only {passed} checks ran:\n{stdout}");
    if repo.is_some() {
        // Both packages came from the repository through apt.
        for line in [
            "# the apt repository",
            "ok - SHA256SUMS of the repository match (sha256sum -c)",
            "ok - apt-get install --no-install-recommends vmcuda-host (from the repository) (postinst ran in the root)",
            "ok - apt-get install --no-install-recommends vmcuda-guest (from the repository)",
        ] {
            assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
        }
    }
    // vmcuda's libcuda.so.1 is the system's driver from both: a program with NVIDIA's
    // static runtime (which loads libcuda.so.1 itself) runs without vmcuda-run.
    for how in ["(tarball)", "(package)"] {
        let line = format!(
            "ok - the static-runtime program runs without vmcuda-run or LD_LIBRARY_PATH {how}"
        );
        assert!(stdout.contains(&line), "no {line:?} in\n{stdout}");
    }
    for line in [
        "ok - remove: /etc/ld.so.conf.d/zz-vmcuda-driver.conf is gone",
        "ok - ... and no /etc/ld.so.conf.d/zz-vmcuda-driver.conf: the loader keeps the other one",
    ] {
        assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
    }
    // Once the tree has vmcuda-run, the local programs start through it, from the
    // tarball's installation and from the package.
    if root().join("guest-lib/vmcuda-run").exists() {
        for how in ["(/usr/local/bin/vmcuda-run)", "(/usr/bin/vmcuda-run)"] {
            assert!(stdout.contains(how), "no program ran {how}:\n{stdout}");
        }
    }
}
