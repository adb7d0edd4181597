//! `vmcuda-vhost-vsock` as QEMU sees it. This test plays the VMM (a vhost-user frontend
//! with file-backed, shared guest memory, negotiating as QEMU's `vhost-user-vsock-pci`
//! does), the guest driver (split virtqueues in that memory) and, through a shell
//! script, `vmcuda-host worker` (it echoes its stdin back). It checks the negotiation and
//! config space, a connection from request to reset, that the worker is started with the
//! right arguments and reaped after the connection ends, and that the binary exits with
//! status 0 when the frontend disconnects.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::VhostUserConfigFlags;
use vhost::vhost_user::{
    Frontend, VhostUserFrontend, VhostUserProtocolFeatures, VhostUserVirtioFeatures,
};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vm_memory::{Address, Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmcuda_vmm_glue::packet::*;
use vmm_sys_util::eventfd::EventFd;

const GUEST_CID: u64 = 3;
const PORT: u32 = 7731;
const QSIZE: u16 = 64;
const RAM: usize = 4 << 20;
const TIMEOUT: Duration = Duration::from_secs(20);

/// One split virtqueue as the guest driver sees it.
struct Ring {
    desc: u64,
    avail: u64,
    used: u64,
    next_desc: u16,
    used_seen: u16,
    kick: EventFd,
    call: EventFd,
}

impl Ring {
    fn at(base: u64) -> Ring {
        let avail = base + 16 * u64::from(QSIZE);
        let used = (avail + 6 + 2 * u64::from(QSIZE)).next_multiple_of(4);
        Ring {
            desc: base,
            avail,
            used,
            next_desc: 0,
            used_seen: 0,
            kick: EventFd::new(0).unwrap(),
            call: EventFd::new(0).unwrap(),
        }
    }

    fn add(&mut self, mem: &GuestMemoryMmap, descs: &[(u64, u32, u16)]) {
        let head = self.next_desc;
        for (i, &(addr, len, flags)) in descs.iter().enumerate() {
            let idx = self.next_desc;
            self.next_desc = (self.next_desc + 1) % QSIZE;
            let last = i + 1 == descs.len();
            let flags = if last { flags } else { flags | 1 }; // VRING_DESC_F_NEXT
            let at = GuestAddress(self.desc + 16 * u64::from(idx));
            mem.write_obj(addr, at).unwrap();
            mem.write_obj(len, at.unchecked_add(8)).unwrap();
            mem.write_obj(flags, at.unchecked_add(12)).unwrap();
            mem.write_obj(self.next_desc, at.unchecked_add(14)).unwrap();
        }
        let idx: u16 = mem.read_obj(GuestAddress(self.avail + 2)).unwrap();
        let slot = self.avail + 4 + 2 * u64::from(idx % QSIZE);
        mem.write_obj(head, GuestAddress(slot)).unwrap();
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        mem.write_obj(idx.wrapping_add(1), GuestAddress(self.avail + 2))
            .unwrap();
        self.kick.write(1).unwrap();
    }

    /// Next used entry (descriptor head, length), waiting for it.
    fn next_used(&mut self, mem: &GuestMemoryMmap) -> (u16, u32) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let idx: u16 = mem.read_obj(GuestAddress(self.used + 2)).unwrap();
            if idx != self.used_seen {
                let at = self.used + 4 + 8 * u64::from(self.used_seen % QSIZE);
                let id: u32 = mem.read_obj(GuestAddress(at)).unwrap();
                let len: u32 = mem.read_obj(GuestAddress(at + 4)).unwrap();
                self.used_seen = self.used_seen.wrapping_add(1);
                return (id as u16, len);
            }
            assert!(Instant::now() < deadline, "device never used a buffer");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

struct Vm {
    mem: GuestMemoryMmap,
    /// Held for the connection; dropping it is the VMM going away.
    _frontend: Frontend,
    rx: Ring,
    tx: Ring,
    next_buf: u64,
}

impl Vm {
    fn alloc(&mut self, len: u64) -> u64 {
        let a = self.next_buf;
        self.next_buf += len.next_multiple_of(64);
        assert!(self.next_buf < RAM as u64);
        a
    }

    fn give_rx(&mut self, n: usize) {
        for _ in 0..n {
            let a = self.alloc(4096);
            self.rx.add(&self.mem, &[(a, 4096, 2)]); // VRING_DESC_F_WRITE
        }
    }

    fn send(&mut self, hdr: Header, payload: &[u8]) {
        let h = self.alloc(HEADER_SIZE as u64);
        self.mem
            .write_slice(&hdr.to_bytes(), GuestAddress(h))
            .unwrap();
        if payload.is_empty() {
            self.tx.add(&self.mem, &[(h, HEADER_SIZE as u32, 0)]);
        } else {
            let p = self.alloc(payload.len() as u64);
            self.mem.write_slice(payload, GuestAddress(p)).unwrap();
            self.tx.add(
                &self.mem,
                &[(h, HEADER_SIZE as u32, 0), (p, payload.len() as u32, 0)],
            );
        }
    }

    fn recv(&mut self) -> (Header, Vec<u8>) {
        let (head, len) = self.rx.next_used(&self.mem);
        let addr: u64 = self
            .mem
            .read_obj(GuestAddress(self.rx.desc + 16 * u64::from(head)))
            .unwrap();
        let mut bytes = vec![0u8; len as usize];
        self.mem.read_slice(&mut bytes, GuestAddress(addr)).unwrap();
        let hdr = Header::from_bytes(bytes[..HEADER_SIZE].try_into().unwrap());
        assert_eq!(hdr.len as usize, bytes.len() - HEADER_SIZE);
        (hdr, bytes[HEADER_SIZE..].to_vec())
    }
}

fn guest(op: u16, src_port: u32, dst_port: u32, len: u32) -> Header {
    Header {
        src_cid: GUEST_CID,
        dst_cid: HOST_CID,
        src_port,
        dst_port,
        len,
        type_: TYPE_STREAM,
        op,
        flags: 0,
        buf_alloc: 256 * 1024,
        fwd_cnt: 0,
    }
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn fake_host(dir: &Path) -> PathBuf {
    let script = dir.join("fake-vmcuda-host");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$@\" >> {d}/args\necho $$ >> {d}/pids\nexec cat >&0\n",
            d = dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

#[test]
fn qemu_like_frontend_drives_a_connection_end_to_end() {
    let dir = std::env::temp_dir().join(format!("vmcuda-vhost-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("vhost.sock");
    let script = fake_host(&dir);

    let mut dev = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_vmcuda-vhost-vsock"))
            .arg("--socket")
            .arg(&sock)
            .args([
                "--guest-cid",
                "3",
                "--vm-name",
                "e2e",
                "--executor",
                "host-memory",
            ])
            .arg("--host-bin")
            .arg(&script)
            // Its stderr is the test run's: it logs at its default (info) unless the
            // run sets VMCUDA_LOG, which it inherits.
            .spawn()
            .unwrap(),
    );
    wait_for("the vhost-user socket", || sock.exists());

    // Negotiation, in QEMU's order.
    let mut fe = Frontend::connect(&sock, 3).unwrap();
    fe.set_owner().unwrap();
    let features = fe.get_features().unwrap();
    let version_1 = 1u64 << 32;
    let event_idx = 1u64 << 29;
    let protocol = VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
    assert_eq!(
        features & (version_1 | event_idx | protocol),
        version_1 | event_idx | protocol
    );
    fe.set_features(version_1 | event_idx | protocol).unwrap();
    let pf = fe.get_protocol_features().unwrap();
    let wanted = VhostUserProtocolFeatures::CONFIG | VhostUserProtocolFeatures::MQ;
    assert!(pf.contains(wanted));
    fe.set_protocol_features(wanted).unwrap();
    assert_eq!(fe.get_queue_num().unwrap(), 3);
    let (_, config) = fe
        .get_config(0, 8, VhostUserConfigFlags::empty(), &[0u8; 8])
        .unwrap();
    assert_eq!(
        config,
        GUEST_CID.to_le_bytes(),
        "config space is le64 guest_cid"
    );

    // Guest RAM: a shared file, mapped here and by the device.
    let ram = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("guest-ram"))
        .unwrap();
    ram.set_len(RAM as u64).unwrap();
    let mem = GuestMemoryMmap::<()>::from_ranges_with_files([(
        GuestAddress(0),
        RAM,
        Some(FileOffset::new(ram.try_clone().unwrap(), 0)),
    )])
    .unwrap();
    let host_base = mem.get_host_address(GuestAddress(0)).unwrap() as u64;
    fe.set_mem_table(&[VhostUserMemoryRegionInfo {
        guest_phys_addr: 0,
        memory_size: RAM as u64,
        userspace_addr: host_base,
        mmap_offset: 0,
        mmap_handle: ram.as_raw_fd(),
    }])
    .unwrap();

    // Rings 0 (rx) and 1 (tx); QEMU keeps the event queue to itself.
    let rx = Ring::at(0x1_0000);
    let tx = Ring::at(0x2_0000);
    for (i, r) in [&rx, &tx].into_iter().enumerate() {
        fe.set_vring_num(i, QSIZE).unwrap();
        fe.set_vring_base(i, 0).unwrap();
        fe.set_vring_addr(
            i,
            &VringConfigData {
                queue_max_size: QSIZE,
                queue_size: QSIZE,
                flags: 0,
                desc_table_addr: host_base + r.desc,
                used_ring_addr: host_base + r.used,
                avail_ring_addr: host_base + r.avail,
                log_addr: None,
            },
        )
        .unwrap();
        fe.set_vring_kick(i, &r.kick).unwrap();
        fe.set_vring_call(i, &r.call).unwrap();
        fe.set_vring_enable(i, true).unwrap();
    }
    let mut vm = Vm {
        mem,
        _frontend: fe,
        rx,
        tx,
        next_buf: 0x10_0000,
    };
    vm.give_rx(16);

    // A request to another port is refused.
    vm.send(guest(OP_REQUEST, 1001, 9, 0), &[]);
    let (h, _) = vm.recv();
    assert_eq!((h.op, h.dst_port, h.src_port), (OP_RST, 1001, 9));

    // A request to the vmcuda port is accepted and starts a worker.
    vm.send(guest(OP_REQUEST, 1000, PORT, 0), &[]);
    let (h, _) = vm.recv();
    assert_eq!(h.op, OP_RESPONSE);
    assert_eq!(
        (h.src_cid, h.dst_cid, h.src_port, h.dst_port),
        (HOST_CID, GUEST_CID, PORT, 1000)
    );

    // Bytes go to the worker and its answer (an echo) comes back.
    vm.send(guest(OP_RW, 1000, PORT, 11), b"hello vsock");
    let mut echoed = Vec::new();
    while echoed.len() < 11 {
        let (h, payload) = vm.recv();
        if h.op == OP_CREDIT_UPDATE {
            continue;
        }
        assert_eq!(h.op, OP_RW);
        echoed.extend(payload);
    }
    assert_eq!(echoed, b"hello vsock");
    let args = std::fs::read_to_string(dir.join("args")).unwrap();
    // Port 1000 is a reserved guest port (a privileged guest process): the worker is
    // given the guest RAM from SET_MEM_TABLE (one 4 MiB region), as descriptor 3, and
    // its socket to the VM's CUDA IPC registry after it, as descriptor 4.
    assert_eq!(
        args.trim(),
        "worker --executor host-memory --transport unix --connection-id 1 --caller vm:e2e \
         --guest-memory 3:0x0:0x400000:0x0 --ipc-registry 4"
    );
    let pid: u32 = std::fs::read_to_string(dir.join("pids"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(Path::new(&format!("/proc/{pid}")).exists());

    // The guest closes: a reset answers, the worker exits and is reaped (no zombie).
    let mut h = guest(OP_SHUTDOWN, 1000, PORT, 0);
    h.flags = SHUTDOWN_BOTH;
    vm.send(h, &[]);
    let (h, _) = vm.recv();
    assert_eq!((h.op, h.dst_port), (OP_RST, 1000));
    wait_for("the worker to exit and be reaped", || {
        !Path::new(&format!("/proc/{pid}")).exists()
    });
    assert!(vm.tx.next_desc > 0);

    // The VMM goes away: the device exits cleanly.
    drop(vm);
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(s) = dev.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "device did not exit after the VMM left"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status}");
    assert!(!sock.exists(), "socket file removed");
    let _ = std::fs::remove_dir_all(&dir);
}
