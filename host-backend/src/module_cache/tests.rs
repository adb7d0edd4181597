use super::*;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmcuda-modcache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl ModuleCache {
    /// A lookup that takes any length.
    fn look(&self, hash: &ImageHash) -> std::io::Result<Lookup> {
        self.get(hash, |_| true)
    }
}

fn image(seed: u8, len: usize) -> (ImageHash, Vec<u8>) {
    let bytes: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
    (Sha256::digest(&bytes).into(), bytes)
}

#[test]
fn an_image_put_by_one_worker_is_found_by_another_of_the_same_vm() {
    let d = scratch("shared");
    let first = ModuleCache::open(&d, &Scope::vm("vm1"), 1 << 20).unwrap();
    let (hash, bytes) = image(1, 5000);
    assert_eq!(first.look(&hash).unwrap(), Lookup::Miss);
    assert!(first.put(&hash, &bytes, None).unwrap());
    // Another worker: its own open of the same directory.
    let second = ModuleCache::open(&d, &Scope::vm("vm1"), 1 << 20).unwrap();
    assert_eq!(second.look(&hash).unwrap(), Lookup::Hit(bytes));
    assert_eq!(second.usage().unwrap(), (5000, 1));
}

#[test]
fn another_vm_never_sees_it() {
    let d = scratch("scoped");
    let (hash, bytes) = image(2, 100);
    let vm1 = ModuleCache::open(&d, &Scope::vm("vm1"), 1 << 20).unwrap();
    assert!(vm1.put(&hash, &bytes, None).unwrap());
    let vm2 = ModuleCache::open(&d, &Scope::vm("vm2"), 1 << 20).unwrap();
    assert_eq!(vm2.look(&hash).unwrap(), Lookup::Miss);
    assert_ne!(vm1.dir(), vm2.dir());
    // Names that would collide as paths do not share a directory.
    let dir = |vm: &str| dir_for(&d, &Scope::vm(vm));
    assert_ne!(dir("a/b"), dir("a%2Fb"));
    assert_ne!(dir(".."), d.join(".."));
    // Nor do local users, with each other or with any VM's name.
    let local = |uid| {
        dir_for(
            &d,
            &Scope {
                vm: "local".into(),
                local_uid: Some(uid),
            },
        )
    };
    assert_ne!(local(1000), local(1001));
    assert_ne!(local(1000), dir("local"));
    assert_ne!(local(1000), dir("local.uid-1000"));
    // And vm2's own copy does not reveal vm1's either way.
    assert!(vm2.put(&hash, &bytes, None).unwrap());
    assert_eq!(vm1.usage().unwrap(), (100, 1));
    assert_eq!(vm2.usage().unwrap(), (100, 1));
}

#[test]
fn the_least_recently_used_go_first_when_the_bytes_would_exceed_the_limit() {
    let d = scratch("lru");
    let c = ModuleCache::open(&d, &Scope::vm("vm1"), 3000).unwrap();
    let (a, ab) = image(3, 1000);
    let (b, bb) = image(4, 1000);
    let (x, xb) = image(5, 1000);
    let (y, yb) = image(6, 1500);
    for (h, bytes) in [(&a, &ab), (&b, &bb), (&x, &xb)] {
        assert!(c.put(h, bytes, None).unwrap());
    }
    // `a` used again: `b` is now the oldest.
    assert!(matches!(c.look(&a).unwrap(), Lookup::Hit(_)));
    assert!(c.put(&y, &yb, None).unwrap());
    assert_eq!(c.look(&b).unwrap(), Lookup::Miss);
    assert_eq!(
        c.look(&x).unwrap(),
        Lookup::Miss,
        "1500 more needed two to go"
    );
    assert_eq!(c.look(&a).unwrap(), Lookup::Hit(ab));
    assert_eq!(c.look(&y).unwrap(), Lookup::Hit(yb));
    assert_eq!(c.usage().unwrap(), (2500, 2));
    // The evicted slots hold nothing on disk.
    let on_disk: u64 = std::fs::read_dir(c.dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert_eq!(on_disk, 2500);
}

#[test]
fn the_count_of_images_is_bounded_too() {
    let d = scratch("count");
    let c = ModuleCache::open_with(&d, &Scope::vm("vm1"), 1 << 20, 3).unwrap();
    let images: Vec<_> = (0..5).map(|i| image(10 + i, 10)).collect();
    for (h, bytes) in &images {
        assert!(c.put(h, bytes, None).unwrap());
    }
    assert_eq!(c.usage().unwrap(), (30, 3));
    assert_eq!(c.look(&images[0].0).unwrap(), Lookup::Miss);
    assert_eq!(c.look(&images[1].0).unwrap(), Lookup::Miss);
    assert!(matches!(c.look(&images[4].0).unwrap(), Lookup::Hit(_)));
    let slots = std::fs::read_dir(c.dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
        .count();
    assert_eq!(slots, 3, "slot files are reused, never more than the bound");
}

#[test]
fn an_image_larger_than_the_cache_is_not_kept() {
    let d = scratch("large");
    let c = ModuleCache::open(&d, &Scope::vm("vm1"), 1000).unwrap();
    let (small, sb) = image(7, 600);
    assert!(c.put(&small, &sb, None).unwrap());
    let (big, bb) = image(8, 1001);
    assert!(!c.put(&big, &bb, None).unwrap());
    assert_eq!(c.look(&big).unwrap(), Lookup::Miss);
    // Nothing was evicted for it.
    assert!(matches!(c.look(&small).unwrap(), Lookup::Hit(_)));
}

#[test]
fn bytes_that_do_not_match_their_hash_are_never_served() {
    let d = scratch("tampered");
    let c = ModuleCache::open(&d, &Scope::vm("vm1"), 1 << 20).unwrap();
    let (hash, bytes) = image(9, 4096);
    assert!(c.put(&hash, &bytes, None).unwrap());
    // Another process of the VM (or a crash mid-write) changes the slot's bytes.
    let slot = std::fs::read_dir(c.dir())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".img"))
        .unwrap()
        .path();
    let mut changed = bytes.clone();
    changed[100] ^= 1;
    std::fs::write(&slot, &changed).unwrap();
    assert_eq!(c.look(&hash).unwrap(), Lookup::Miss);
    // Forgotten, and its slot emptied: the next put stores it again.
    assert_eq!(c.usage().unwrap(), (0, 0));
    assert_eq!(std::fs::metadata(&slot).unwrap().len(), 0);
    assert!(c.put(&hash, &bytes, None).unwrap());
    assert_eq!(c.look(&hash).unwrap(), Lookup::Hit(bytes));
}

#[test]
fn a_cut_short_image_and_a_garbled_index_read_as_misses() {
    let d = scratch("garbled");
    let c = ModuleCache::open(&d, &Scope::vm("vm1"), 1 << 20).unwrap();
    let (hash, bytes) = image(11, 2048);
    assert!(c.put(&hash, &bytes, None).unwrap());
    let slot = c.dir().join("0.img");
    std::fs::write(&slot, &bytes[..1000]).unwrap();
    assert_eq!(c.look(&hash).unwrap(), Lookup::Miss);
    std::fs::write(
        c.dir().join("index"),
        "junk\n99999 00 1\n5 zz 3\n1 0123 7\n",
    )
    .unwrap();
    assert_eq!(c.usage().unwrap(), (0, 0));
    assert!(c.put(&hash, &bytes, None).unwrap());
    assert_eq!(c.look(&hash).unwrap(), Lookup::Hit(bytes));
}

#[test]
fn an_image_the_reader_cannot_hold_is_not_read() {
    let d = scratch("admit");
    let c = ModuleCache::open(&d, &Scope::vm("vm1"), 1 << 20).unwrap();
    let (hash, bytes) = image(12, 3000);
    assert!(c.put(&hash, &bytes, None).unwrap());
    assert_eq!(
        c.get(&hash, |len| len <= 2999).unwrap(),
        Lookup::Refused(3000)
    );
    // Still there for a reader with room.
    assert_eq!(c.get(&hash, |len| len <= 3000).unwrap(), Lookup::Hit(bytes));
}

#[test]
fn an_index_line_no_put_wrote_is_dropped_before_anything_is_read() {
    let d = scratch("tampered-index");
    let c = ModuleCache::open(&d, &Scope::vm("vm1"), 1 << 20).unwrap();
    let (hash, bytes) = image(13, 100);
    assert!(c.put(&hash, &bytes, None).unwrap());
    // A length beyond the cache: never allocated for.
    let index = c.dir().join("index");
    let line = std::fs::read_to_string(&index).unwrap();
    std::fs::write(&index, line.replace(" 100\n", " 99999999999\n")).unwrap();
    let mut asked = None;
    assert_eq!(
        c.get(&hash, |len| {
            asked = Some(len);
            true
        })
        .unwrap(),
        Lookup::Miss
    );
    assert_eq!(asked, None);
    // A length that is not the file's: a miss without reading.
    std::fs::write(&index, line.replace(" 100\n", " 50\n")).unwrap();
    assert_eq!(c.look(&hash).unwrap(), Lookup::Miss);
}

#[test]
fn facts_are_kept_per_architecture_and_old_index_lines_still_read() {
    let d = scratch("facts");
    let c = ModuleCache::open(&d, &Scope::vm("vm1"), 1 << 20).unwrap();
    let (a, b) = (vec![1u8; 100], vec![2u8; 100]);
    let (ha, hb): (ImageHash, ImageHash) = (Sha256::digest(&a).into(), Sha256::digest(&b).into());
    let facts = KeptFacts {
        arch: 90,
        data_len: 4096,
        prints: true,
    };
    assert!(c.put(&ha, &a, Some(facts)).unwrap());
    assert!(c.put(&hb, &b, None).unwrap());
    assert_eq!(c.facts(&ha, 90).unwrap(), Some(facts));
    assert_eq!(c.facts(&ha, 100).unwrap(), None, "another architecture");
    assert_eq!(c.facts(&hb, 90).unwrap(), None, "none measured");
    // Measured later: kept on the entry; putting it again without facts keeps them.
    assert!(c
        .put(
            &hb,
            &b,
            Some(KeptFacts {
                prints: false,
                ..facts
            })
        )
        .unwrap());
    assert!(c.put(&hb, &b, None).unwrap());
    assert_eq!(c.facts(&hb, 90).unwrap().map(|f| f.prints), Some(false));
    // An index line of an older daemon (no facts) still names its image.
    let index = dir_for(&d, &Scope::vm("vm1")).join("index");
    let text = std::fs::read_to_string(&index).unwrap();
    let old: String = text
        .lines()
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    std::fs::write(&index, old).unwrap();
    assert!(matches!(c.get(&ha, |_| true).unwrap(), Lookup::Hit(_)));
    assert_eq!(c.facts(&ha, 90).unwrap(), None);
    let _ = std::fs::remove_dir_all(&d);
}
