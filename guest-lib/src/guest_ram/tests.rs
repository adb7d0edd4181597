use super::*;
use std::io::Read;

/// Whether this process can read guest-physical (here: physical) addresses.
fn sees_frames() -> bool {
    use std::os::unix::fs::FileExt;
    let v = vec![1u8; 8192];
    let va = (v.as_ptr() as usize).next_multiple_of(4096);
    let mut e = [0u8; 8];
    std::fs::File::open("/proc/self/pagemap")
        .and_then(|f| f.read_exact_at(&mut e, (va / 4096 * 8) as u64))
        .is_ok_and(|()| u64::from_le_bytes(e) & ((1 << 55) - 1) != 0)
}

/// A broker on ordinary pages (this machine may have no huge pages), whose host
/// connections are Unix socket pairs standing in for vsock: the host's ends come out
/// of the returned channel.
fn broker(name: &str) -> (std::path::PathBuf, std::sync::mpsc::Receiver<OwnedFd>) {
    broker_on(name, false)
}

fn broker_on(
    name: &str,
    huge_pages: bool,
) -> (std::path::PathBuf, std::sync::mpsc::Receiver<OwnedFd>) {
    let dir = std::env::temp_dir().join(format!("vmcuda-broker-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("broker.sock");
    let listener = seqpacket().unwrap();
    sock::bind(listener.as_raw_fd(), &sock::UnixAddr::new(&path).unwrap()).unwrap();
    sock::listen(&listener, sock::Backlog::new(8).unwrap()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    let connect: Box<HostConnector> = Box::new(move || {
        let (broker_end, host_end) = std::os::unix::net::UnixStream::pair()?;
        tx.lock().unwrap().send(OwnedFd::from(host_end)).unwrap();
        Ok(OwnedFd::from(broker_end))
    });
    let config = BrokerConfig {
        host: (2, 7731),
        huge_pages,
        max_area: 64 << 20,
        max_per_user: 2,
    };
    std::thread::spawn(move || serve(listener, config, connect));
    (path, rx)
}

fn client_socket(path: &std::path::Path) -> OwnedFd {
    let s = seqpacket().unwrap();
    sock::connect(s.as_raw_fd(), &sock::UnixAddr::new(path).unwrap()).unwrap();
    s
}

/// A new process asking `path`'s broker for `bytes` of guest RAM: its socket and the
/// broker's first answer.
fn ask(path: &std::path::Path, bytes: u64) -> (OwnedFd, Option<(Reply, Option<OwnedFd>)>) {
    let s = client_socket(path);
    let area = Request::Area {
        bytes,
        cid: 2,
        port: 7731,
    };
    send(s.as_fd(), &area, None).unwrap();
    let answer = receive::<Reply>(s.as_fd()).unwrap();
    (s, answer)
}

/// `from_broker` through the broker at `path`. The broker's address is the process's
/// environment ([`BROKER_ENV`]), which the tests share: one at a time sets and uses it.
fn from_broker_at(
    path: &std::path::Path,
    cid: u32,
    port: u32,
) -> Result<(OwnedFd, GuestArea), String> {
    static ENV: Mutex<()> = Mutex::new(());
    let _one = ENV.lock().unwrap_or_else(|p| p.into_inner());
    std::env::set_var(BROKER_ENV, path);
    from_broker(cid, port)
}

/// A process connected through a new broker (`name`): the broker's socket, the
/// connection, the area, the host's end of the connection with the grant read off it,
/// and the grant. `None` (said) where physical addresses are hidden here.
fn connected(
    name: &str,
) -> Option<(
    std::path::PathBuf,
    OwnedFd,
    GuestArea,
    std::os::unix::net::UnixStream,
    GuestPagesGrant,
)> {
    if !sees_frames() {
        eprintln!("skipped: physical addresses are hidden here (not root)");
        return None;
    }
    let (path, hosts) = broker(name);
    let (conn, area) = from_broker_at(&path, 2, 7731).unwrap();
    let mut host = std::os::unix::net::UnixStream::from(hosts.recv().unwrap());
    let (h, meta) = frame::read_head(&mut host).unwrap();
    assert_eq!(h.op.get(), Op::GuestPagesGrant.code());
    let grant: GuestPagesGrant = postcard::from_bytes(&meta).unwrap();
    Some((path, conn, area, host, grant))
}

/// The host's end of a connection whose process lives: nothing to read, no end.
fn assert_open(host: &mut std::os::unix::net::UnixStream) {
    host.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 8];
    assert!(
        host.read(&mut buf).is_err(),
        "the connection ended while its process lived"
    );
}

/// The host's end of a connection whose process went: the broker half-closes it.
fn assert_ends(host: &mut std::os::unix::net::UnixStream) {
    host.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(host.read(&mut buf).unwrap(), 0);
}

/// The whole exchange: the process gets a writable area, the host gets the grant for
/// exactly its pages as the connection's first frame, pieces of the area never
/// overlap, and the broker lets the connection go only after the process has gone,
/// waiting for the host to close it.
#[test]
fn a_process_gets_its_own_pages_and_the_host_the_grant_for_them() {
    let Some((path, conn, area, mut host, grant)) = connected("exchange") else {
        return;
    };
    // Someone else's host is refused.
    let e = from_broker_at(&path, 2, 9).err().unwrap();
    assert!(e.contains("not vsock:2:9"), "{e}");
    assert_eq!(grant.page_size, 4096);
    assert_eq!(grant.pages, area.pages);
    assert_eq!(area.len, area_len().next_multiple_of(4096));
    let (a, a_len, a_pages) = area.carve(100).unwrap();
    let (b, _, b_pages) = area.carve(8192).unwrap();
    assert_eq!(a_len, 4096);
    assert_eq!(b.as_ptr() as usize, a.as_ptr() as usize + a_len);
    assert_eq!(a_pages, grant.pages[..1]);
    assert_eq!(b_pages, grant.pages[1..3]);
    // SAFETY: the test's own piece of its area, mapped writable.
    unsafe { b.as_ptr().write(7) };
    assert!(area.carve(area.len).is_none());
    // The process's connection is still the broker's too: it has not gone.
    drop(conn);
    assert_open(&mut host);
    // The process goes: the broker half-closes the connection; the host sees the end.
    drop(area);
    assert_ends(&mut host);
}

/// Once the process has said it mapped the memory, no one can free its pages from
/// under the host: no hole can be punched, the file can neither shrink nor grow, and
/// the seals cannot be lifted. A user has only so many areas at once.
#[test]
fn granted_pages_cannot_be_cut_and_users_are_bounded() {
    if !sees_frames() {
        eprintln!("skipped: physical addresses are hidden here (not root)");
        return;
    }
    seals_hold(false);
}

/// The same with huge pages, the broker's own kind, where the machine has some free.
#[test]
fn granted_huge_pages_cannot_be_cut_either() {
    let free = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    if !sees_frames() || free < 4 {
        eprintln!("skipped: no free huge pages, or physical addresses are hidden here");
        return;
    }
    seals_hold(true);
}

fn seals_hold(huge: bool) {
    let page = if huge {
        crate::pages::HUGE_PAGE as u64
    } else {
        4096
    };
    let (path, _hosts) = broker_on(if huge { "seals-huge" } else { "seals" }, huge);
    let (s, answer) = ask(&path, 3 * page);
    let Some((Reply::Memory { len, .. }, Some(memfd))) = answer else {
        panic!("no memory");
    };
    assert_eq!(len, 3 * page);
    // Before it says it mapped, it still cannot change the size.
    assert!(nix::unistd::ftruncate(&memfd, page as i64).is_err());
    send(s.as_fd(), &Request::Mapped, None).unwrap();
    let Some((Reply::Connected { pages }, Some(_host))) = receive::<Reply>(s.as_fd()).unwrap()
    else {
        panic!("not connected");
    };
    assert_eq!(pages.len(), 3);
    let punch = nix::fcntl::fallocate(
        &memfd,
        nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
            | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
        0,
        page as i64,
    );
    assert_eq!(punch, Err(nix::errno::Errno::EPERM));
    assert!(nix::unistd::ftruncate(&memfd, 0).is_err());
    assert!(nix::unistd::ftruncate(&memfd, 64 << 20).is_err());
    let unseal = nix::fcntl::fcntl(
        &memfd,
        nix::fcntl::FcntlArg::F_ADD_SEALS(nix::fcntl::SealFlag::F_SEAL_WRITE),
    );
    assert!(unseal.is_err());
    // A second area for this user fits (two at once), a third does not.
    let (second, answer) = ask(&path, page);
    assert!(matches!(answer, Some((Reply::Memory { .. }, Some(_)))));
    let (_third, answer) = ask(&path, page);
    assert!(matches!(answer, Some((Reply::Refused(_), _))));
    // Too much, or nothing, is refused.
    drop(second);
    std::thread::sleep(Duration::from_millis(100));
    let (_greedy, answer) = ask(&path, 1 << 40);
    assert!(matches!(answer, Some((Reply::Refused(_), _))));
    std::thread::sleep(Duration::from_millis(100));
    let (_nothing, answer) = ask(&path, 0);
    assert!(matches!(answer, Some((Reply::Refused(_), _))));
}

/// More pages for a live connection: sealed under the key the host got in the grant
/// (and under no other), bounded by the process's limit beside what it has, and the
/// connection outlives the set-up's wait for as long as the process lives.
#[test]
fn more_pages_come_sealed_for_the_host_and_the_connection_lasts() {
    let Some((_, conn, area, mut host, grant)) = connected("more") else {
        return;
    };
    let more = area.more(3 * 4096 + 1).unwrap();
    assert_eq!((more.len, more.page_size), (4 * 4096, 4096));
    assert_eq!(more.pages.len(), 4);
    assert!(more.pages.iter().all(|p| !grant.pages.contains(p)));
    use vmcuda_wire::memory::{grant_key, grant_seal_holds};
    assert!(grant_seal_holds(&grant.key, 4096, &more.pages, &more.seal));
    let stranger = grant_key().unwrap();
    assert!(!grant_seal_holds(&stranger, 4096, &more.pages, &more.seal));
    // SAFETY: the test's own new pages, mapped writable.
    unsafe { more.at.as_ptr().add(more.len - 1).write(9) };
    // Over the limit beside what it has: refused, and the broker serves it still.
    let e = area.more(64 << 20).err().unwrap();
    assert!(e.contains("over the"), "{e}");
    assert!(area.more(4096).is_ok());
    // Past the set-up's wait, the connection is still the process's.
    std::thread::sleep(SETUP_WAIT + Duration::from_secs(1));
    assert_open(&mut host);
    assert!(area.more(4096).is_ok(), "the broker stopped serving");
    drop(conn);
    drop(area);
    assert_ends(&mut host);
}

/// A process whose connection dropped gets another from the broker: the host's end of
/// it gets the same grant (the same pages, under the same key) as its first frame, the
/// old connection ends so that the grant has one at a time, the new one carries the
/// process's bytes, and when the process goes the broker waits for the newest one.
#[test]
fn a_dropped_connection_comes_again_with_the_same_grant() {
    if !sees_frames() {
        eprintln!("skipped: physical addresses are hidden here (not root)");
        return;
    }
    let (path, hosts) = broker("again");
    let (conn, area) = from_broker_at(&path, 2, 7731).unwrap();
    let grant_on = |host: &mut std::os::unix::net::UnixStream| {
        let (h, meta) = frame::read_head(host).unwrap();
        assert_eq!(h.op.get(), Op::GuestPagesGrant.code());
        postcard::from_bytes::<GuestPagesGrant>(&meta).unwrap()
    };
    let mut first = std::os::unix::net::UnixStream::from(hosts.recv().unwrap());
    let grant = grant_on(&mut first);
    // Pages given later stay the process's across the return (the host keeps them).
    let more = area.more(4096).unwrap();
    assert_eq!(more.pages.len(), 1);
    drop(conn);
    let again = area.reconnect().unwrap();
    let mut second = std::os::unix::net::UnixStream::from(hosts.recv().unwrap());
    assert_eq!(grant_on(&mut second), grant);
    assert_ends(&mut first);
    let mut again = std::os::unix::net::UnixStream::from(again);
    std::io::Write::write_all(&mut again, b"resume").unwrap();
    let mut got = [0u8; 6];
    second.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"resume");
    // And again: each return is another connection with the same grant.
    drop(again);
    let third = area.reconnect().unwrap();
    let mut third_host = std::os::unix::net::UnixStream::from(hosts.recv().unwrap());
    assert_eq!(grant_on(&mut third_host), grant);
    assert_ends(&mut second);
    assert_open(&mut third_host);
    drop(third);
    drop(area);
    assert_ends(&mut third_host);
}
