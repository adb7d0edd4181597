use super::*;

/// A GPU of `room` GiB for the policy's decisions: a resume needs its VM's size free,
/// a suspend frees it; every act runs at once.
struct Gpu {
    room: u64,
    size: HashMap<String, u64>,
    resident: Vec<String>,
    ran: Vec<String>,
}

impl Gpu {
    fn run(&mut self, vm: &str, act: Act) -> Done {
        self.ran.push(format!("{} {vm}", act.command()));
        let used: u64 = self.resident.iter().map(|v| self.size[v]).sum();
        let result = match act {
            Act::Resume if used + self.size[vm] > self.room => Err("out of memory".into()),
            Act::Resume => {
                self.resident.push(vm.into());
                Ok(format!("resumed VM {vm}"))
            }
            Act::Suspend => {
                self.resident.retain(|v| v != vm);
                Ok(format!("suspended VM {vm}"))
            }
        };
        Done {
            vm: vm.into(),
            act,
            result,
        }
    }
}

fn census(vms: &[(&str, u64, bool)]) -> Census {
    vms.iter()
        .map(|(vm, begun, quiet)| (vm.to_string(), (BTreeMap::from([(1, *begun)]), *quiet)))
        .collect()
}

#[test]
fn idle_vms_are_suspended_side_by_side_and_resumed_when_their_guests_call() {
    let mut gpu = Gpu {
        room: 100,
        size: [("a", 1), ("b", 1), ("c", 1)]
            .map(|(v, n)| (v.to_string(), n))
            .into(),
        resident: vec!["a".into(), "b".into(), "c".into()],
        ran: Vec::new(),
    };
    let mut d = Decide {
        idle_after: Duration::from_millis(400),
        seen: HashMap::new(),
        keep_free: 0,
        free: None,
    };
    let t0 = Instant::now();
    let all = census(&[("a", 5, true), ("b", 5, true), ("c", 5, true)]);
    assert!(d.step(vec![], &all, t0, AT_ONCE).is_empty());
    // Idle long enough: all three at once, however long each takes.
    let acts = d.step(vec![], &all, t0 + Duration::from_millis(500), AT_ONCE);
    assert_eq!(acts.len(), 3);
    // At most as many as there is room for.
    let mut d2 = Decide {
        idle_after: Duration::from_millis(400),
        seen: HashMap::new(),
        keep_free: 0,
        free: None,
    };
    d2.step(vec![], &all, t0, AT_ONCE);
    assert_eq!(
        d2.step(vec![], &all, t0 + Duration::from_millis(500), 2)
            .len(),
        2
    );
    let done = acts.iter().map(|(vm, act)| gpu.run(vm, *act)).collect();
    assert!(d
        .step(done, &all, t0 + Duration::from_millis(600), AT_ONCE)
        .is_empty());
    assert!(gpu.resident.is_empty());
    // b's guest calls: b alone is resumed.
    let called = census(&[("a", 5, true), ("b", 6, false), ("c", 5, true)]);
    let acts = d.step(vec![], &called, t0 + Duration::from_millis(700), AT_ONCE);
    assert_eq!(acts, vec![("b".to_string(), Act::Resume)]);
    let done = vec![gpu.run("b", Act::Resume)];
    assert!(d
        .step(done, &called, t0 + Duration::from_millis(800), AT_ONCE)
        .is_empty());
    assert!(matches!(d.seen["b"], Seen::Running { .. }));
    assert_eq!(gpu.resident, ["b"]);
}

#[test]
fn a_resume_without_room_makes_the_vm_idle_longest_give_way_and_no_busy_one() {
    let mut gpu = Gpu {
        room: 10,
        size: [("a", 4), ("b", 4), ("busy", 2), ("x", 6)]
            .map(|(v, n)| (v.to_string(), n))
            .into(),
        resident: vec!["a".into(), "b".into(), "busy".into()],
        ran: Vec::new(),
    };
    let mut d = Decide {
        idle_after: Duration::from_secs(10),
        seen: HashMap::new(),
        keep_free: 0,
        free: None,
    };
    let t0 = Instant::now();
    let ms = |n| t0 + Duration::from_millis(n);
    // x suspended earlier; b quiet since t0, a since 1 s, busy always working.
    d.seen.insert(
        "x".into(),
        Seen::Suspended {
            started: BTreeMap::from([(1, 5)]),
            at: t0,
            retry: None,
        },
    );
    d.step(
        vec![],
        &census(&[
            ("a", 1, true),
            ("b", 1, true),
            ("busy", 1, false),
            ("x", 5, true),
        ]),
        t0,
        AT_ONCE,
    );
    d.step(
        vec![],
        &census(&[
            ("a", 2, true),
            ("b", 1, true),
            ("busy", 2, false),
            ("x", 5, true),
        ]),
        ms(1000),
        AT_ONCE,
    );
    let mut c = census(&[
        ("a", 2, true),
        ("b", 1, true),
        ("busy", 3, false),
        ("x", 6, false),
    ]);
    let mut now = 3000;
    let mut acts = d.step(vec![], &c, ms(now), AT_ONCE);
    assert_eq!(acts, vec![("x".to_string(), Act::Resume)]);
    // Run what is decided until x is back.
    for _ in 0..10 {
        let done = acts.iter().map(|(vm, act)| gpu.run(vm, *act)).collect();
        now += 150;
        c.get_mut("busy").unwrap().0.insert(1, now);
        acts = d.step(done, &c, ms(now), AT_ONCE);
        if gpu.resident.contains(&"x".to_string()) {
            break;
        }
    }
    assert!(gpu.resident.contains(&"x".to_string()), "{:?}", gpu.ran);
    // b (quiet longest) gave way first, then a; busy never did.
    assert_eq!(
        gpu.ran
            .iter()
            .filter(|r| r.starts_with("suspend"))
            .collect::<Vec<_>>(),
        ["suspend b", "suspend a"],
        "{:?}",
        gpu.ran
    );
    assert!(gpu.resident.contains(&"busy".to_string()));
}

#[test]
fn a_resume_that_finds_no_room_waits_and_is_tried_again_later() {
    let mut gpu = Gpu {
        room: 4,
        size: [("busy", 4), ("x", 4)]
            .map(|(v, n)| (v.to_string(), n))
            .into(),
        resident: vec!["busy".into()],
        ran: Vec::new(),
    };
    let mut d = Decide {
        idle_after: Duration::from_secs(10),
        seen: HashMap::new(),
        keep_free: 0,
        free: None,
    };
    let t0 = Instant::now();
    d.seen.insert(
        "x".into(),
        Seen::Suspended {
            started: BTreeMap::from([(1, 5)]),
            at: t0,
            retry: None,
        },
    );
    let c = census(&[("busy", 1, false), ("x", 6, false)]);
    let acts = d.step(vec![], &c, t0, AT_ONCE);
    let done = acts.iter().map(|(vm, act)| gpu.run(vm, *act)).collect();
    // No VM may give way: nothing is started, and x waits for its retry time.
    assert!(d
        .step(done, &c, t0 + Duration::from_millis(10), AT_ONCE)
        .is_empty());
    assert!(d
        .step(vec![], &c, t0 + Duration::from_millis(50), AT_ONCE)
        .is_empty());
    let again = d.step(
        vec![],
        &c,
        t0 + RETRY_EVERY + Duration::from_millis(20),
        AT_ONCE,
    );
    assert_eq!(again, vec![("x".to_string(), Act::Resume)]);
    assert_eq!(gpu.ran, ["resume x"]);
}

#[test]
fn a_waiting_guests_resume_goes_before_suspends_and_keeps_a_place() {
    let mut d = Decide {
        idle_after: Duration::from_millis(400),
        seen: HashMap::new(),
        keep_free: 0,
        free: None,
    };
    let t0 = Instant::now();
    d.seen.insert(
        "x".into(),
        Seen::Suspended {
            started: BTreeMap::from([(1, 5)]),
            at: t0,
            retry: None,
        },
    );
    let idle = census(&[
        ("a", 1, true),
        ("b", 1, true),
        ("c", 1, true),
        ("x", 5, true),
    ]);
    d.step(vec![], &idle, t0, 2);
    // a, b and c are idle long enough, and x's guest calls: x goes first, and the
    // last place is left for another guest's resume.
    let called = census(&[
        ("a", 1, true),
        ("b", 1, true),
        ("c", 1, true),
        ("x", 6, false),
    ]);
    let acts = d.step(vec![], &called, t0 + Duration::from_millis(500), 2);
    assert_eq!(acts, vec![("x".to_string(), Act::Resume)]);
    // While x's resume is under way, suspends leave a place: two of three.
    let more = d.step(vec![], &called, t0 + Duration::from_millis(520), 3);
    assert_eq!(more.len(), 2, "{more:?}");
    assert!(more.iter().all(|(_, act)| *act == Act::Suspend));
}

#[test]
fn while_less_than_keep_free_is_free_the_vm_idle_longest_gives_way_one_at_a_time() {
    let mut d = Decide {
        idle_after: Duration::from_secs(10),
        seen: HashMap::new(),
        keep_free: 6,
        free: Some(10),
    };
    let t0 = Instant::now();
    let c = census(&[("a", 1, true), ("b", 1, true), ("busy", 1, false)]);
    d.step(vec![], &c, t0, AT_ONCE);
    d.step(
        vec![],
        &census(&[("a", 2, true), ("b", 1, true), ("busy", 2, false)]),
        t0 + Duration::from_millis(100),
        AT_ONCE,
    );
    let c = census(&[("a", 2, true), ("b", 1, true), ("busy", 3, false)]);
    // Enough free: nobody gives way, however long idle (less than idle_after).
    assert!(d
        .step(vec![], &c, t0 + Duration::from_secs(3), AT_ONCE)
        .is_empty());
    d.free = Some(5);
    let acts = d.step(vec![], &c, t0 + Duration::from_secs(4), AT_ONCE);
    assert_eq!(acts, vec![("b".to_string(), Act::Suspend)]);
    // Still short while b's suspend runs: no second one until it is over.
    assert!(d
        .step(vec![], &c, t0 + Duration::from_millis(4100), AT_ONCE)
        .is_empty());
    let done = vec![Done {
        vm: "b".into(),
        act: Act::Suspend,
        result: Ok("suspended VM b".into()),
    }];
    let acts = d.step(done, &c, t0 + Duration::from_millis(4200), AT_ONCE);
    assert_eq!(acts, vec![("a".to_string(), Act::Suspend)]);
}
