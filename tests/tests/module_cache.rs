//! The module cache through the guest library: a program that loads a module image
//! with `cuModuleLoadData` runs twice as processes of one VM, and the second one's
//! image does not cross the connection (the host's figures say so); a process of
//! another VM sends it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vmcuda_tests::{free_tcp_addr, guest_lib_dir, root, run_command_with, text, Daemon};

const TOKEN: &str = "module-cache-e2e-token-0123456789";

/// tests/c/module_cache.c against vmcuda's `libcuda.so.1` alone (it makes driver calls
/// only), in `dir`.
fn build(dir: &Path) -> PathBuf {
    let exe = dir.join("module_cache");
    let out = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(root().join("tests/c/module_cache.c"))
        .arg(format!("-L{}", guest_lib_dir().display()))
        .arg("-l:libcuda.so.1")
        .output()
        .expect("cc");
    assert!(out.status.success(), "{}", text(&out.stderr));
    exe
}

/// A cubin larger than the images that travel with their hash at once.
fn large_cubin(dir: &Path, len: usize) -> PathBuf {
    let elf = std::fs::read(root().join("wire/testdata/params.cubin")).unwrap();
    let path = dir.join("large.cubin");
    std::fs::write(&path, vmcuda_wire::cubin::grown(&elf, len)).unwrap();
    path
}

/// Run the program against `server`: its line.
fn run(exe: &Path, image: &Path, server: &str, env: &[(&str, &str)]) -> String {
    // The guest's library path is vmcuda's driver alone (no runtime needed).
    let lib = guest_lib_dir().display().to_string();
    let mut env = env.to_vec();
    env.push(("LD_LIBRARY_PATH", lib.as_str()));
    let mut cmd = Command::new(exe);
    cmd.arg(image).arg("_Z8noparamsv");
    let out = run_command_with(cmd, server, &env);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    stdout
}

/// Where the daemon serves its metrics, from its log (it was asked for port 0).
fn metrics_addr(d: &Daemon) -> String {
    let log = d.log_with("serving metrics at http://");
    let at = log
        .find("serving metrics at http://")
        .expect("a metrics endpoint");
    let rest = &log[at + "serving metrics at http://".len()..];
    rest[..rest.find("/metrics").unwrap()].to_string()
}

/// `series` on the metrics endpoint, once it is `want` (within 20 s).
fn wait_for(addr: &str, series: &str, want: u64) {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        let value = body
            .lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse::<u64>().ok());
        if value == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} is {value:?}, not {want}:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn a_second_process_of_the_vm_loads_the_image_without_sending_it() {
    let tcp = free_tcp_addr();
    let d = Daemon::start_with_config(
        "module-cache",
        Some(&format!(
            "[[vm]]\nname = \"remote\"\ntcp = true\ntoken = \"{TOKEN}\"\n"
        )),
        &[
            "--executor",
            "host-memory",
            "--tcp",
            &tcp,
            "--metrics",
            "127.0.0.1:0",
        ],
    );
    let exe = build(&d.dir);
    let image = large_cubin(&d.dir, 1 << 20);
    let len = std::fs::metadata(&image).unwrap().len();
    let m = metrics_addr(&d);
    let images = |vm: &str, outcome: &str| {
        format!("vmcuda_vm_module_images_total{{vm=\"{vm}\",outcome=\"{outcome}\"}}")
    };
    let bytes = |vm: &str, path: &str| {
        format!("vmcuda_vm_module_image_bytes_total{{vm=\"{vm}\",path=\"{path}\"}}")
    };
    let ok = "init 0 device 0 context 0 0 load 0 function 0";

    // The first process: a miss, and the image crosses once.
    assert!(run(&exe, &image, &d.server(), &[]).contains(ok));
    wait_for(&m, &images("local", "miss"), 1);
    wait_for(&m, &bytes("local", "received"), len);

    // The second: the hash is enough.
    assert!(run(&exe, &image, &d.server(), &[]).contains(ok));
    wait_for(&m, &images("local", "hit"), 1);
    wait_for(&m, &bytes("local", "cached"), len);
    wait_for(&m, &bytes("local", "received"), len);

    // Another VM, over TCP with its token: the local VM's image is not its.
    let server = format!("tcp:{tcp}");
    assert!(run(&exe, &image, &server, &[("VMCUDA_TOKEN", TOKEN)]).contains(ok));
    wait_for(&m, &images("remote", "miss"), 1);
    wait_for(&m, &images("remote", "hit"), 0);
    wait_for(&m, &bytes("remote", "received"), len);

    // And a guest that turns the cache off sends the image whole.
    assert!(run(&exe, &image, &d.server(), &[("VMCUDA_MODULE_CACHE", "0")]).contains(ok));
    wait_for(&m, &bytes("local", "received"), 2 * len);
    wait_for(&m, &images("local", "hit"), 1);
}
