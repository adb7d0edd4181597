//! `.ci/apt-install.sh`, which the demo and the test scripts install Debian packages
//! with, against a scripted `apt-get` (and an `id` that says root): it installs without
//! recommended packages, prints what it will install before installing, and skips a
//! package whose installation would remove or downgrade an installed one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vmcuda_tests::root;

/// A scratch directory with `apt-get` and `id` stand-ins in `bin/`. The `apt-get`
/// appends its arguments to `calls`; simulating (`-s`), it prints a plan per package:
/// `fine` installs itself and a dependency, `harmful` removes an installed package,
/// `older` downgrades one.
fn fake_apt(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmcuda-apt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let apt = r#"#!/bin/sh
echo "$*" >>"$FAKE_APT_DIR/calls"
simulate=0
for a in "$@"; do [ "$a" = -s ] && simulate=1; done
[ "$1" = update ] && exit 0
if [ "$simulate" = 1 ]; then
  echo "Reading package lists..."
  for a in "$@"; do
    case "$a" in
      fine) echo "Inst fine-dep (2.0 Debian:12 [amd64])"; echo "Inst fine (1.0 Debian:12 [amd64])" ;;
      harmful) echo "Remv qemu-utils [1:10.0.2+ds-2~bpo12+1]"; echo "Inst harmful (1:7.2 Debian:12 [amd64])" ;;
      older) echo "Inst libolder [2.0-1] (1.0-1 Debian:12 [amd64])"; echo "Inst older (1.0 Debian:12 [amd64])" ;;
    esac
  done
fi
exit 0
"#;
    let id = "#!/bin/sh\n[ \"$1\" = -u ] && { echo 0; exit 0; }\nexec /usr/bin/id \"$@\"\n";
    for (file, text) in [("apt-get", apt), ("id", id)] {
        let path = dir.join("bin").join(file);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    dir
}

fn apt_install(dir: &Path, packages: &[&str], env: &[(&str, &str)]) -> Output {
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .arg(root().join(".ci/apt-install.sh"))
        .args(packages)
        .env("PATH", path)
        .env("FAKE_APT_DIR", dir)
        .env("VMCUDA_APT_LOG", dir.join("apt.log"))
        .envs(env.iter().copied())
        .output()
        .expect("run .ci/apt-install.sh")
}

/// The `apt-get install` calls that were not simulations.
fn installs(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("install") && !l.split(' ').any(|w| w == "-s"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_package_that_would_remove_or_downgrade_another_is_skipped_and_the_rest_installed() {
    let dir = fake_apt("skip");
    let out = apt_install(&dir, &["fine", "harmful", "older"], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["harmful", "older"],
        "{stderr}"
    );
    assert!(
        stderr.contains("skipping harmful: installing it removes qemu-utils 1:10.0.2+ds-2~bpo12+1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("skipping older: installing it downgrades libolder from 2.0-1 to 1.0-1"),
        "{stderr}"
    );
    // Only the harmless one, without recommended packages.
    assert_eq!(
        installs(&dir),
        ["install -y -q --no-install-recommends fine"],
        "{stderr}"
    );
    // The plan, every package with its version, comes before the installation.
    let plan = stderr
        .find("   fine-dep 2.0\n   fine 1.0\n")
        .expect("the plan");
    let installing = stderr
        .find("apt: installing fine")
        .expect("the install step");
    assert!(plan < installing, "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn harmless_packages_are_installed_without_recommends_and_every_plan_says_so_too() {
    let dir = fake_apt("fine");
    let out = apt_install(&dir, &["fine"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        installs(&dir),
        ["install -y -q --no-install-recommends fine"]
    );
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap();
    let simulated: Vec<&str> = calls
        .lines()
        .filter(|l| l.contains(" -s ") || l.starts_with("-s "))
        .collect();
    assert!(!simulated.is_empty(), "no plan was read first:\n{calls}");
    assert!(
        simulated
            .iter()
            .all(|l| l.contains("--no-install-recommends")),
        "{calls}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_dry_run_prints_the_plan_and_installs_nothing() {
    let dir = fake_apt("dry");
    let out = apt_install(&dir, &["fine"], &[("VMCUDA_APT_DRY_RUN", "1")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("   fine 1.0"), "{stderr}");
    assert!(installs(&dir).is_empty(), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
