//! The checker over what a step changed (`Machine::check_changed`) finds
//! what the full check finds in what the step touched, and re-walks only
//! the MMs the step touched.

use foliomm::internals::check::{Subject, ViolationKind};
use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::machine::DebugSwitches;
use foliomm::{Config, Machine, MmapFlags, Prot};

const K: u64 = 1024;
const M: u64 = 1024 * K;

/// A COW fault that wrongly reuses a folio a fork child still maps (the
/// `reuse_shared` switch): the check after that one write finds the wrong
/// "exclusive" answer and the AnonExclusive page, as the full check does,
/// with fifty other processes holding memory the write did not touch.
#[test]
fn the_check_after_a_step_finds_the_wrong_reuse_the_full_check_finds() {
    let debug = DebugSwitches { reuse_shared: true, ..Default::default() };
    let m = Machine::new(Config { memory: 64 * M, precision: true, debug, ..Config::default() }).unwrap();
    m.thp.set_order(4, ThpMode::Always).unwrap();
    let mut cpu = m.new_cpu();
    let bystanders: Vec<_> = (0..50).map(|_| m.new_mm().unwrap()).collect();
    for b in &bystanders {
        let a = b.mmap(0, 64 * K, Prot::RW, MmapFlags::default()).unwrap();
        cpu.write(b, a, &[9]).unwrap();
    }
    let p = m.new_mm().unwrap();
    let a = p.mmap(0, 256 * K, Prot::RW, MmapFlags::default()).unwrap();
    cpu.write(&p, a, &[1]).unwrap();
    let _c = p.fork().unwrap();
    assert_eq!(m.check_all(), Vec::new());
    assert_eq!(m.check_changed(), Vec::new(), "nothing changed since the full check");
    let head = p.page_info(a).pfn;
    cpu.write(&p, a, &[2]).unwrap();
    let changed = m.check_changed();
    let found = |kind, subject| changed.iter().any(|v| v.kind == kind && v.subject == subject);
    assert!(found(ViolationKind::Exclusive, Subject::Folio(head)), "the COW decision: {changed:#?}");
    assert!(found(ViolationKind::Exclusive, Subject::Frame(head)), "the AnonExclusive page: {changed:#?}");
    let mut full: Vec<String> = m.check().iter().map(ToString::to_string).collect();
    let mut seen: Vec<String> = changed.iter().map(ToString::to_string).collect();
    full.sort();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, full, "the step's check and the full one agree");
}

/// Unmaps in a child and then in its parent, each followed by the check
/// of what it changed (the MMs whose tables it wrote, the blocks it
/// freed): no false alarm, and the full check agrees at the end.
#[test]
fn a_munmap_is_checked_through_the_blocks_it_frees() {
    let m = Machine::new(Config { memory: 64 * M, ..Config::default() }).unwrap();
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = p.mmap(0, M, Prot::RW, MmapFlags::default()).unwrap();
    cpu.write(&p, a, &[1; 4096]).unwrap();
    assert_eq!(m.check_all(), Vec::new());
    let c = p.fork().unwrap();
    cpu.write(&c, a, &[2]).unwrap();
    c.munmap(a, M).unwrap();
    assert_eq!(m.check_changed(), Vec::new());
    p.munmap(a, M).unwrap();
    assert_eq!(m.check_changed(), Vec::new());
    assert_eq!(m.check(), Vec::new());
}
