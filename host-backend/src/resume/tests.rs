use super::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

fn reply(id: u64, len: usize) -> Kept {
    Kept::Reply(vec![id as u8; len])
}

#[test]
fn a_returning_guest_gets_again_only_the_replies_it_lacks() {
    let mut r = Replay::default();
    for id in 1..=5 {
        r.took(id);
        r.keep(id, reply(id, 10));
    }
    // Posted requests are taken without replies.
    r.took(6);
    assert_eq!(r.last_request, 6);
    let owed = r.owed(3).unwrap();
    let ids: Vec<u8> = owed
        .iter()
        .map(|k| match k {
            Kept::Reply(f) => f[0],
            _ => panic!("a kept reply"),
        })
        .collect();
    assert_eq!(ids, vec![4, 5]);
    assert!(r.owed(6).unwrap().is_empty());
}

#[test]
fn a_reply_no_longer_kept_or_too_large_to_keep_refuses_the_return() {
    let mut r = Replay::default();
    for id in 1..=(KEPT_REPLIES as u64 + 10) {
        r.keep(id, reply(id, 1));
    }
    // The first ten were dropped: a guest that lacks them cannot come back...
    assert!(r.owed(5).is_none());
    // ...one that read them can.
    assert_eq!(r.owed(10).unwrap().len(), KEPT_REPLIES);
    // The bytes bound holds too.
    let mut r = Replay::default();
    r.keep(1, reply(1, KEPT_BYTES / 2 + 1));
    r.keep(2, reply(2, KEPT_BYTES / 2 + 1));
    assert!(r.owed(0).is_none());
    assert_eq!(r.owed(1).unwrap().len(), 1);
    // A large reply that is not a read is lost for a return.
    let mut r = Replay::default();
    r.keep(1, Kept::Lost);
    r.keep(2, reply(2, 1));
    assert!(r.owed(0).is_none());
    assert_eq!(r.owed(1).unwrap().len(), 1);
}

#[test]
fn only_device_to_host_reads_run_again() {
    use vmcuda_wire::op::Op;
    assert!(Replay::rerun_ok(Op::MemcpyDtoH.code()));
    assert!(Replay::rerun_ok(Op::Memcpy2DDtoH.code()));
    for op in [Op::MemcpyHtoD, Op::MemAlloc, Op::LaunchKernel, Op::MemFree] {
        assert!(!Replay::rerun_ok(op.code()), "{op:?}");
    }
}

fn handoff(ticket: &SessionTicket, secret: [u8; TICKET_SECRET_LEN], vm: &str) -> Handoff {
    Handoff {
        vm: vm.into(),
        session: ticket.session,
        secret,
        last_reply: 7,
        request_id: 0,
        transport: TransportKind::Unix,
        grant: None,
        peer_pid: None,
    }
}

#[test]
fn the_resume_point_takes_its_own_guest_back_and_no_one_else() {
    let dir = std::env::temp_dir().join(format!("vmcuda-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut point = ResumePoint::open(&dir, "vm1", Duration::from_secs(5), None).unwrap();
    let first = point.ticket().unwrap();
    let (mut guest, conn) = UnixStream::pair().unwrap();
    let bad = |h: &Handoff| hand_over(&dir, h, conn.as_fd());
    let mut forged = first.secret;
    forged[31] ^= 0x80;
    assert!(matches!(
        bad(&handoff(&first, forged, "vm1")),
        Err(HandoffError::Refused)
    ));
    // The right ticket, but admitted as another VM.
    assert!(matches!(
        bad(&handoff(&first, first.secret, "vm2")),
        Err(HandoffError::Refused)
    ));
    let nobody = SessionTicket {
        session: first.session.wrapping_add(1),
        ..first.clone()
    };
    assert!(matches!(
        bad(&handoff(&nobody, first.secret, "vm1")),
        Err(HandoffError::NoSession)
    ));
    // The guest's own: its connection arrives, the same socket.
    hand_over(&dir, &handoff(&first, first.secret, "vm1"), conn.as_fd()).unwrap();
    let arrival = point.wait().expect("the guest came back");
    assert_eq!(
        (arrival.last_reply, arrival.transport),
        (7, TransportKind::Unix)
    );
    let mut taken = UnixStream::from(arrival.conn);
    taken.write_all(b"hi").unwrap();
    let mut got = [0u8; 2];
    guest.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hi");
    // Its next ticket; until the guest shows it holds it, the old one still works (its
    // answer may have been lost with a connection that dropped at once).
    let second = point.ticket().unwrap();
    hand_over(&dir, &handoff(&first, first.secret, "vm1"), conn.as_fd()).unwrap();
    point.wait().expect("the retry");
    point.confirm();
    assert!(matches!(
        hand_over(&dir, &handoff(&first, first.secret, "vm1"), conn.as_fd()),
        Err(HandoffError::Refused)
    ));
    hand_over(&dir, &handoff(&second, second.secret, "vm1"), conn.as_fd()).unwrap();
    point.wait().expect("the new ticket");
    // A guest that left is never taken back.
    point.close();
    assert!(matches!(
        hand_over(&dir, &handoff(&second, second.secret, "vm1"), conn.as_fd()),
        Err(HandoffError::Refused)
    ));
    assert!(point.wait().is_none(), "nothing held after the guest left");
    drop(point);
    assert!(!point_path(&dir, first.session).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_session_whose_local_program_has_ended_is_not_held() {
    let dir = std::env::temp_dir().join(format!("vmcuda-resume-ended-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut program = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = program.id() as i32;
    let mut point = ResumePoint::open(&dir, "vm1", Duration::from_secs(2), Some(pid)).unwrap();
    point.ticket().unwrap();
    program.kill().unwrap();
    // A zombie until reaped: already ended for the session.
    let t = std::time::Instant::now();
    assert!(point.wait().is_none());
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "held for {:?}",
        t.elapsed()
    );
    program.wait().unwrap();
    assert!(ended(pid));
    assert!(!ended(std::process::id() as i32));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A session slow to see its connections drop offers tickets in answers that never
/// reach the guest; the ticket the guest came back with stays good through all of
/// them, until it shows it read a newer one.
#[test]
fn tickets_lost_on_the_way_never_lock_the_guest_out() {
    let dir = std::env::temp_dir().join(format!("vmcuda-resume-lost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut point = ResumePoint::open(&dir, "vm1", Duration::from_secs(5), None).unwrap();
    let held = point.ticket().unwrap();
    let (_guest, conn) = UnixStream::pair().unwrap();
    let back = |secret| hand_over(&dir, &handoff(&held, secret, "vm1"), conn.as_fd());
    // Each return's answer is lost: written (the guest may or may not have read it),
    // or not written at all (withdrawn).
    let mut offered = Vec::new();
    for round in 0..9 {
        back(held.secret).unwrap_or_else(|e| panic!("return {round} refused: {e}"));
        point.wait().expect("taken back");
        let t = point.ticket().unwrap();
        if round % 3 == 0 {
            point.withdraw(&t);
            assert!(matches!(back(t.secret), Err(HandoffError::Refused)));
        } else {
            offered.push(t);
        }
    }
    // The guest read the last ticket after all: it comes back with it, then shows it
    // holds it; every other is spent.
    back(held.secret).unwrap();
    point.wait().unwrap();
    let last = point.ticket().unwrap();
    point.confirm();
    assert!(matches!(back(held.secret), Err(HandoffError::Refused)));
    for t in &offered {
        assert!(matches!(back(t.secret), Err(HandoffError::Refused)));
    }
    back(last.secret).unwrap();
    point.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A local program's dropped session first watches for the program's end; a return
/// that arrives meanwhile shows it alive and is taken at once, not after the watch
/// (whose whole window used to pass first, long enough for the connection the guest
/// came back on to be cut again).
#[test]
fn a_local_guest_that_comes_back_during_the_exit_watch_is_taken_at_once() {
    let dir = std::env::temp_dir().join(format!("vmcuda-resume-watch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // This process is the "program": alive throughout.
    let me = Some(std::process::id() as i32);
    let mut point = ResumePoint::open(&dir, "vm1", Duration::from_secs(5), me).unwrap();
    let ticket = point.ticket().unwrap();
    let (_guest, conn) = UnixStream::pair().unwrap();
    hand_over(&dir, &handoff(&ticket, ticket.secret, "vm1"), conn.as_fd()).unwrap();
    let started = std::time::Instant::now();
    point.wait().expect("taken back");
    // The watch's window is EXIT_SEEN_WITHIN; a queued return ends it at its first look.
    assert!(
        started.elapsed() < EXIT_SEEN_WITHIN / 2,
        "{:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
