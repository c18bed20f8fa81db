//! The TLB and mmu_gather rules, proven by breaking them on purpose: each
//! debug switch must be caught by a check of bytes, and with the switches off
//! the same workloads read only what they wrote.

use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use foliomm::internals::check::{Subject, Violation, ViolationKind};
use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::machine::{DebugSwitches, ZapStrategy};
use foliomm::internals::phys::POISON;
use foliomm::{Config, Errno, Machine, MmapFlags, Prot};

fn machine(debug: DebugSwitches) -> Arc<Machine> {
    Machine::new(Config { memory: 64 << 20, poison: true, debug, ..Config::default() }).unwrap()
}

/// The parent writes a page (its TLB caches a writable entry), forks, and
/// writes again. Returns the byte the child then reads.
fn parent_write_after_fork(debug: DebugSwitches) -> (u8, Vec<Violation>) {
    let m = machine(debug);
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = p.mmap(0, 4096, Prot::RW, MmapFlags::default()).unwrap();
    cpu.write(&p, a, &[1]).unwrap();
    let c = p.fork().unwrap();
    cpu.write(&p, a, &[2]).unwrap();
    let mut b = [0];
    m.new_cpu().read(&c, a, &mut b).unwrap();
    (b[0], m.check())
}

#[test]
fn fork_flush_keeps_the_childs_bytes() {
    let (byte, bad) = parent_write_after_fork(DebugSwitches::default());
    assert_eq!(byte, 1, "the child must see the byte from before fork");
    assert!(bad.is_empty(), "{bad:?}");
}

#[test]
fn skipping_the_fork_flush_is_caught_by_bytes() {
    let (byte, bad) = parent_write_after_fork(DebugSwitches { skip_fork_flush: true, ..Default::default() });
    assert_eq!(byte, 2, "without the flush the parent writes through its stale writable entry into the shared page");
    // The page tables stay consistent (the PTEs are read-only, as fork left
    // them); only a CPU's TLB is stale, so only the bytes can tell.
    assert!(bad.is_empty(), "{bad:?}");
}

/// CPU A keeps reading a page of P while another thread munmaps it. Returns
/// whether A ever read a byte P never wrote, and the checker's report.
fn read_while_unmapped(debug: DebugSwitches) -> (bool, Vec<Violation>) {
    let m = machine(debug);
    let p = m.new_mm().unwrap();
    let a = p.mmap(0, 64 << 10, Prot::RW, MmapFlags::default()).unwrap();
    m.new_cpu().fill(&p, a, 64 << 10, 0x5c).unwrap();
    // The new folios join the LRU now, so that the munmap frees them (from
    // 6.14 a folio still waiting in a CPU's LRU batch outlives its unmap).
    m.kernel.lru_add_drain_all();
    let started = AtomicBool::new(false);
    let mut foreign = false;
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut cpu = m.new_cpu();
            let mut seen_foreign = false;
            loop {
                let mut b = [0];
                match cpu.read(&p, a + 8192, &mut b) {
                    Ok(()) if b[0] != 0x5c => seen_foreign = true,
                    Ok(()) => {}
                    Err(e) => {
                        assert_eq!(e, Errno::EFAULT);
                        return seen_foreign;
                    }
                }
                started.store(true, Release);
            }
        });
        while !started.load(Acquire) {
            std::hint::spin_loop();
        }
        p.munmap(a, 64 << 10).unwrap();
        foreign = reader.join().unwrap();
    });
    (foreign, m.check())
}

#[test]
fn flush_before_free_keeps_stale_translations_away() {
    let (foreign, bad) = read_while_unmapped(DebugSwitches::default());
    assert!(!foreign, "a CPU read bytes of a freed page");
    assert!(bad.is_empty(), "{bad:?}");
}

#[test]
fn freeing_before_the_flush_is_caught_by_bytes() {
    let debug = DebugSwitches { free_before_flush: Some(Duration::from_millis(50)), ..Default::default() };
    let (foreign, bad) = read_while_unmapped(debug);
    assert!(
        foreign,
        "the reader must see the poisoned bytes ({POISON:#x}) of the freed page through its stale TLB entry"
    );
    let uaf = |v: &Violation| v.kind == ViolationKind::UseAfterFree && matches!(v.subject, Subject::Mm { .. });
    assert!(bad.iter().any(|v| uaf(v) && v.to_string().starts_with("use after free: ")), "{bad:?}");
}

#[test]
fn zap_strategies_differ_in_batches_not_in_results() {
    for (zap, batches) in [(ZapStrategy::Batched, 16), (ZapStrategy::PerPage, 256)] {
        let m = Machine::new(Config { memory: 64 << 20, zap, ..Config::default() }).unwrap();
        m.thp.set_order(4, ThpMode::Always).unwrap();
        let p = m.new_mm().unwrap();
        let a = p.mmap(0, 1 << 20, Prot::RW, MmapFlags::default()).unwrap();
        m.new_cpu().write_byte_per_page(&p, a, 1 << 20, 3).unwrap();
        let before = m.stats.zap_batches.load(Relaxed);
        p.munmap(a, 1 << 20).unwrap();
        assert_eq!(m.stats.zap_batches.load(Relaxed) - before, batches, "{zap:?}");
        assert_eq!(m.stats.rmap_remove.load(Relaxed), batches, "one rmap call per batch ({zap:?})");
        assert!(m.check().is_empty());
    }
}

#[test]
fn tlb_hits_after_the_first_touch_and_can_be_turned_off() {
    for (entries, hits) in [(2048, true), (0, false)] {
        let m = Machine::new(Config { memory: 16 << 20, tlb_entries: entries, ..Config::default() }).unwrap();
        let p = m.new_mm().unwrap();
        let a = p.mmap(0, 4096, Prot::RW, MmapFlags::default()).unwrap();
        let mut cpu = m.new_cpu();
        for i in 0..10u8 {
            cpu.write(&p, a, &[i]).unwrap();
        }
        assert_eq!(cpu.hits > 0, hits, "{entries} entries: {} hits", cpu.hits);
    }
}
