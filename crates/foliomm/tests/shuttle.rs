//! Whole threaded workloads under randomized schedules
//! ([shuttle](https://docs.rs/shuttle)), under every VMA-lock design: three
//! threads of one process fault, write, munmap, mprotect, mremap and fork
//! at once, and after every schedule the bytes each thread wrote read back,
//! and the invariant checker finds nothing. A failing schedule is printed
//! by shuttle and can be replayed with `shuttle::replay`.
//!
//! Needs `--cfg shuttle` (every lock and atomic of the library then comes
//! from shuttle; see `foliomm::internals::sync`):
//! `RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target/shuttle cargo test --release -p foliomm --test shuttle`.
//! `FOLIOMM_SHUTTLE_SCHEDULES` sets the schedules per design (default 500;
//! the long run is 100000).
#![cfg(shuttle)]

use std::sync::Arc;

use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::machine::{HugeSize, HugetlbSync, VmaLockDesign};
use foliomm::{Config, Cpu, Errno, Machine, Mm, MmapFlags, Prot};
use shuttle::thread;

/// The collapse races (shmem ranges by MADV_COLLAPSE and khugepaged).
#[path = "shuttle/collapse.rs"]
mod collapse;
/// Seed 003's race (compound mapcounts without the compound lock).
#[path = "shuttle/compound_lock.rs"]
mod compound_lock;
/// Seed 002's unsharing by a hugetlb migration's rmap walk against a fault.
#[path = "shuttle/hugetlb_migrate.rs"]
mod hugetlb_migrate;

#[path = "shuttle/hugetlb_truncate.rs"]
mod hugetlb_truncate;
/// KSM's races (ksmd against writes, fork and zap).
#[path = "shuttle/ksm.rs"]
mod ksm;
/// MADV_FREE and reclaim against writes and a child.
#[path = "shuttle/lazyfree.rs"]
mod lazyfree;
/// A pagemap reader against MADV_DONTNEED and munmap.
#[path = "shuttle/pagemap.rs"]
mod pagemap;
/// A write fault's PMD split against MADV_DONTNEED.
#[path = "shuttle/pmd_split.rs"]
mod pmd_split;
/// The shmem swap races (pageout against writes and reads).
#[path = "shuttle/shmem_swap.rs"]
mod shmem_swap;
/// A swap-cache read racing a large swap-in of its mTHP block.
#[path = "shuttle/swapin.rs"]
mod swapin;
/// Seed 004's `vma_refcount_put` against a VMA freed and reused.
#[path = "shuttle/vma_put.rs"]
mod vma_put;

const K: u64 = 1024;

fn schedules() -> usize {
    std::env::var("FOLIOMM_SHUTTLE_SCHEDULES").ok().and_then(|s| s.parse().ok()).unwrap_or(500)
}

fn machine(design: VmaLockDesign, no_revalidate: bool) -> Arc<Machine> {
    let mut config = Config { memory: 8 << 20, vma_lock: design, ..Config::default() };
    config.debug.no_vma_revalidate = no_revalidate;
    let m = Machine::new(config).expect("a small machine");
    m.thp.set_enabled(ThpMode::Never).unwrap();
    m
}

fn map(mm: &Mm, len: u64) -> u64 {
    mm.mmap(0, len, Prot::RW, MmapFlags::default()).expect("mmap")
}

/// Asserts that the invariant checker finds nothing on `m`.
fn assert_clean(m: &Machine) {
    let bad: Vec<String> = m.check().iter().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Asserts that each of `mms` reads `want`, a byte per page, from `at`.
fn assert_bytes(cpu: &mut Cpu, mms: [&Mm; 2], at: u64, want: &[u8]) {
    for mm in mms {
        let got = cpu.read_byte_per_page(mm, at, want.len() as u64 * 4 * K).unwrap();
        assert_eq!(got, want, "the bytes of mm {}", mm.id);
    }
}

/// Writes `val` to the first byte of every page of `[at, at+len)` and
/// reads it back.
fn write_and_check(cpu: &mut Cpu, mm: &Mm, at: u64, len: u64, val: u8) {
    cpu.write_byte_per_page(mm, at, len, val).expect("write");
    let got = cpu.read_byte_per_page(mm, at, len).expect("read back");
    assert!(got.iter().all(|&b| b == val), "a thread read {got:?} where it wrote {val:#x}");
}

/// The workload: see the module documentation.
fn workload(design: VmaLockDesign) {
    let m = machine(design, false);
    let mm = m.new_mm().unwrap();
    let (a, b, c, d) = (map(&mm, 16 * K), map(&mm, 16 * K), map(&mm, 16 * K), map(&mm, 16 * K));
    let faulter = {
        let (m, mm) = (m.clone(), mm.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            write_and_check(&mut cpu, &mm, a, 16 * K, 0x11);
            // B may be read-only for a while: a write either lands or fails EACCES.
            match cpu.write_byte_per_page(&mm, b, 4 * K, 0x22) {
                Ok(()) | Err(Errno::EACCES) => {}
                Err(e) => panic!("write to B: {e}"),
            }
        })
    };
    let changer = {
        let (m, mm) = (m.clone(), mm.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            mm.mprotect(b + 8 * K, 8 * K, Prot(Prot::READ)).unwrap();
            mm.munmap(c, 16 * K).unwrap();
            let e = map(&mm, 8 * K);
            write_and_check(&mut cpu, &mm, e, 8 * K, 0x33);
            mm.mprotect(b + 8 * K, 8 * K, Prot::RW).unwrap();
            e
        })
    };
    let mover = {
        let (m, mm) = (m.clone(), mm.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            write_and_check(&mut cpu, &mm, d, 16 * K, 0x44);
            let moved = mm.mremap(d, 16 * K, 32 * K, true, None).unwrap();
            write_and_check(&mut cpu, &mm, moved + 16 * K, 16 * K, 0x45);
            let child = mm.fork().unwrap();
            // The child sees what this thread wrote before the fork; A is
            // being written meanwhile: each page is old or new.
            let mut ccpu = m.new_cpu();
            let got = ccpu.read_byte_per_page(&child, moved, 32 * K).unwrap();
            assert!(got[..4].iter().all(|&x| x == 0x44) && got[4..].iter().all(|&x| x == 0x45), "child read {got:?}");
            let got = ccpu.read_byte_per_page(&child, a, 16 * K).unwrap();
            assert!(got.iter().all(|&x| x == 0 || x == 0x11), "child read {got:?} in A");
            child.exit();
            moved
        })
    };
    faulter.join().unwrap();
    let (e, moved) = (changer.join().unwrap(), mover.join().unwrap());
    let mut cpu = m.new_cpu();
    let expect = [(a, 16 * K, 0x11), (e, 8 * K, 0x33), (moved, 16 * K, 0x44), (moved + 16 * K, 16 * K, 0x45)];
    for (at, len, val) in expect {
        let got = cpu.read_byte_per_page(&mm, at, len).unwrap();
        assert!(got.iter().all(|&x| x == val), "{at:#x} reads {got:?} after the threads, expected {val:#x}");
    }
    let bad = m.check();
    assert!(bad.is_empty(), "the checker after a schedule: {bad:?}");
    mm.exit();
    let bad = m.check();
    assert!(bad.is_empty(), "the checker after exit: {bad:?}");
}

#[test]
fn shuttle_threads_fault_munmap_mprotect_mremap_and_fork_under_every_design() {
    for (design, _) in VmaLockDesign::ALL {
        shuttle::check_random(move || workload(design), schedules());
        shuttle::check_pct(move || workload(design), schedules(), 3);
    }
}

/// One thread writes X again and again while another unmaps X and maps a
/// new region, which under `vma-refcount` reuses X's VMA object at once.
/// With `no_revalidate` the writer can fault X's address in through the
/// reused VMA: a page lands outside any VMA, and the checker says so.
fn reuse_race(no_revalidate: bool) {
    let m = machine(VmaLockDesign::VmaRefcount, no_revalidate);
    let mm = m.new_mm().unwrap();
    let x = map(&mm, 8 * K);
    let writer = {
        let (m, mm) = (m.clone(), mm.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            for _ in 0..2 {
                match cpu.write_byte_per_page(&mm, x, 8 * K, 0x55) {
                    Ok(()) | Err(Errno::EFAULT) => {}
                    Err(e) => panic!("write to X: {e}"),
                }
            }
        })
    };
    mm.munmap(x, 8 * K).unwrap();
    let y = mm.mmap(x + (1 << 30), 8 * K, Prot::RW, MmapFlags::default()).unwrap();
    assert_ne!(y, x);
    writer.join().unwrap();
    let bad = m.check();
    assert!(bad.is_empty(), "the checker found: {bad:?}");
}

// The race needs the writer preempted once, between its lookup and its
// read lock, for as long as the unmap and the new map take: a few
// preemptions with long runs between them, which PCT schedules find and
// uniformly random ones almost never do.

#[test]
fn shuttle_lookup_with_revalidation_survives_vma_reuse() {
    shuttle::check_pct(|| reuse_race(false), schedules(), 3);
    shuttle::check_random(|| reuse_race(false), schedules());
}

#[test]
#[should_panic(expected = "the checker found")]
fn shuttle_lookup_without_revalidation_is_caught() {
    shuttle::check_pct(|| reuse_race(true), schedules().max(2000), 3);
}

/// Truncation and hole punches race faults (issue #12): one thread writes
/// a shared mapping of a memfd and reads a private one, a thread of another
/// process maps the file, mremaps the mapping and forks, while a third
/// truncates the file to nothing, grows it back and punches a hole. Each
/// read is the byte written, zero (a page refaulted after the truncation)
/// or SIGBUS (the size was 0); afterwards the checker finds no PTE left on
/// a page that left the cache and every i_mmap record matches its VMA.
fn truncate_race(design: VmaLockDesign) {
    let m = machine(design, false);
    let f = m.memfd_create(16 * K).unwrap();
    let (p, q) = (m.new_mm().unwrap(), m.new_mm().unwrap());
    let shared = MmapFlags { shared: true, ..MmapFlags::default() };
    let a = p.mmap_file(0, 16 * K, Prot::RW, shared, Some((&f, 0))).unwrap();
    let b = p.mmap_file(0, 16 * K, Prot::RW, MmapFlags::default(), Some((&f, 0))).unwrap();
    let writer = {
        let (m, p) = (m.clone(), p.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            for (at, val) in [(a, 0x61u8), (b, 0x62)] {
                match cpu.write_byte_per_page(&p, at, 16 * K, val) {
                    Ok(()) | Err(Errno::SIGBUS) => {}
                    Err(e) => panic!("write at {at:#x}: {e}"),
                }
            }
            match cpu.read_byte_per_page(&p, b, 16 * K) {
                Ok(got) => assert!(got.iter().all(|&x| [0, 0x61, 0x62].contains(&x)), "private read {got:?}"),
                Err(e) => assert_eq!(e, Errno::SIGBUS),
            }
        })
    };
    let mapper = {
        let (m, q, f) = (m.clone(), q.clone(), f.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            let c = q.mmap_file(0, 16 * K, Prot::RW, shared, Some((&f, 0))).unwrap();
            match cpu.read_byte_per_page(&q, c, 16 * K) {
                Ok(got) => assert!(got.iter().all(|&x| x == 0 || x == 0x61), "shared read {got:?}"),
                Err(e) => assert_eq!(e, Errno::SIGBUS),
            }
            let moved = q.mremap(c, 16 * K, 16 * K, true, Some(c + (1 << 30))).unwrap();
            let child = q.fork().unwrap();
            match cpu.read_byte_per_page(&child, moved, 16 * K) {
                Ok(_) | Err(Errno::SIGBUS) => {}
                Err(e) => panic!("child read: {e}"),
            }
            child.exit();
        })
    };
    m.ftruncate(&f, 0).unwrap();
    m.ftruncate(&f, 16 * K).unwrap();
    m.punch_hole(&f, 4 * K, 8 * K).unwrap();
    writer.join().unwrap();
    mapper.join().unwrap();
    let bad = m.check();
    assert!(bad.is_empty(), "the checker after a schedule: {bad:?}");
    drop((p, q));
    let bad = m.check();
    assert!(bad.is_empty(), "the checker after exit: {bad:?}");
}

#[test]
fn shuttle_truncate_and_punch_race_faults_mremap_and_fork() {
    for (design, _) in VmaLockDesign::ALL {
        shuttle::check_random(move || truncate_race(design), schedules());
        shuttle::check_pct(move || truncate_race(design), schedules(), 3);
    }
}

/// Seed 002's race: a thread of MM A faults a page of a shared hugetlb
/// mapping whose PMD table it shares with MM B, while the file is
/// truncated, which unshares A's table. Under `no-lock` the fault can keep
/// its pointer into the table after A stopped using it and write through
/// it; the fault's last check records that as a use after free, and the
/// checker reports it. The safe designs hold the table for the fault.
fn hugetlb_unshare_race(sync: HugetlbSync) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let config = Config { memory: 16 << 20, hugetlb_sync: sync, ..Config::default() };
    let m = Machine::new(config).expect("a small machine");
    assert_eq!(m.kernel.set_nr_hugepages(HugeSize::Pmd, 4), 4);
    let f = m.hugetlbfs_create(1 << 30, HugeSize::Pmd).unwrap();
    let (a, b) = (m.new_mm().unwrap(), m.new_mm().unwrap());
    let flags = MmapFlags { shared: true, hugetlb: Some(HugeSize::Pmd), noreserve: true, ..MmapFlags::default() };
    let xa = a.mmap_file(1 << 30, 1 << 30, Prot::RW, flags, Some((&f, 0))).unwrap();
    let xb = b.mmap_file(2 << 30, 1 << 30, Prot::RW, flags, Some((&f, 0))).unwrap();
    m.new_cpu().write_byte_per_page(&b, xb, 4 * K, 0x0b).unwrap();
    let faulter = {
        let (m, a) = (m.clone(), a.clone());
        thread::spawn(move || match m.new_cpu().write_byte_per_page(&a, xa + (2 << 20), 4 * K, 0x0a) {
            Ok(()) | Err(Errno::SIGBUS) => {}
            Err(e) => panic!("fault in A: {e}"),
        })
    };
    m.ftruncate(&f, 0).unwrap();
    faulter.join().unwrap();
    let bad = m.check();
    assert!(bad.is_empty(), "the checker found (schedule {run} of this process): {bad:?}");
    drop((a, b, f));
    let bad = m.check();
    assert!(bad.is_empty(), "the checker found after exit: {bad:?}");
}

#[test]
fn shuttle_hugetlb_unshare_race_is_safe_under_i_mmap_rwsem_and_vma_lock() {
    for sync in [HugetlbSync::IMmapRwsem, HugetlbSync::VmaLock] {
        shuttle::check_random(move || hugetlb_unshare_race(sync), schedules());
        shuttle::check_pct(move || hugetlb_unshare_race(sync), schedules(), 3);
    }
}

#[test]
#[should_panic(expected = "the checker found")]
fn shuttle_hugetlb_unshare_race_is_found_under_no_lock() {
    shuttle::check_pct(|| hugetlb_unshare_race(HugetlbSync::NoLock), schedules().max(6000), 3);
}

/// Readers that met a writer inside the rmap-id seqcount, over all
/// schedules of [`shuttle_a_reader_racing_rmap_updates_answers_shared`].
static BUSY_READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Seed 000's reader against its writers (rmap-id, the last stage's
/// seqcount): a 64K folio is mapped half by a parent and half by its child,
/// so that its 16 mappings do not make it obviously shared and a reader
/// must read the rmap sums. One thread forks the parent again, and the new
/// child writes its copy and exits, while the first child asks pagemap
/// about the folio. Two MMs map it throughout, so every answer must be
/// "maybe shared" (given up as busy or not), and the child must read its
/// own bytes, never the new child's.
fn rmap_reader_race() {
    let config =
        Config { memory: 8 << 20, mapcount: foliomm::internals::mapcount::Design::RmapId, ..Config::default() };
    let m = Machine::new(config).expect("a small machine");
    m.thp.set_order(4, ThpMode::Always).unwrap();
    let parent = m.new_mm().unwrap();
    let a = map(&parent, 64 * K);
    let mut cpu = m.new_cpu();
    write_and_check(&mut cpu, &parent, a, 64 * K, 0x33);
    assert_eq!(parent.page_info(a).folio_order, 4, "a 64K folio");
    let child = parent.fork().unwrap();
    parent.munmap(a + 32 * K, 32 * K).unwrap();
    child.munmap(a, 32 * K).unwrap();
    let probe = a + 48 * K;
    assert_eq!(child.page_info(probe).folio_order, 4, "still one 64K folio");
    let forker = {
        let (m, parent) = (m.clone(), parent.clone());
        thread::spawn(move || {
            let other = parent.fork().unwrap();
            write_and_check(&mut m.new_cpu(), &other, a, 32 * K, 0x44);
            other.exit();
        })
    };
    for _ in 0..3 {
        assert!(child.page_info(probe).maybe_shared, "a folio two MMs map answered exclusive");
    }
    let got = cpu.read_byte_per_page(&child, a + 32 * K, 32 * K).unwrap();
    assert!(got.iter().all(|&b| b == 0x33), "the child read {got:?}");
    forker.join().unwrap();
    BUSY_READS.fetch_add(
        m.stats.precision_reader_busy.load(std::sync::atomic::Ordering::Relaxed),
        std::sync::atomic::Ordering::Relaxed,
    );
    let bad = m.check();
    assert!(bad.is_empty(), "the checker found: {bad:?}");
}

#[test]
fn shuttle_a_reader_racing_rmap_updates_answers_shared() {
    shuttle::check_random(rmap_reader_race, schedules());
    shuttle::check_pct(rmap_reader_race, schedules(), 3);
    // Some schedule put the reader inside a writer's section: the busy
    // answer is reachable, not only in unit tests.
    assert!(BUSY_READS.load(std::sync::atomic::Ordering::Relaxed) > 0, "no reader ever met a writer");
}

/// A parent with a 64K mTHP of 0x11 bytes at the returned address, its
/// forked child sharing it, and the CPU that wrote it.
fn forked_mthp(m: &Arc<Machine>) -> (Arc<Mm>, Arc<Mm>, u64, Cpu) {
    m.thp.set_order(4, ThpMode::Always).unwrap();
    let parent = m.new_mm().unwrap();
    let a = parent.mmap(0, 128 * K, Prot::RW, MmapFlags::default()).expect("mmap");
    let a = a.next_multiple_of(64 * K);
    let mut cpu = m.new_cpu();
    cpu.write_byte_per_page(&parent, a, 64 * K, 0x11).expect("write");
    let child = parent.fork().unwrap();
    (parent, child, a, cpu)
}

/// Reclaim's deferred split (`deferred_split_scan`, as a faulting task's
/// direct reclaim runs it) splits a partially mapped 64K folio while the
/// parent breaks COW on its pages and the child zaps its half: after
/// every schedule the checker finds nothing and each side reads its bytes.
fn deferred_split_race() {
    let m = machine(VmaLockDesign::VmaRefcount, false);
    let (parent, child, a, mut cpu) = forked_mthp(&m);
    child.madvise(a + 32 * K, 32 * K, foliomm::internals::mm::Advice::DontNeed).unwrap();
    let splitter = {
        let m = m.clone();
        thread::spawn(move || {
            for _ in 0..2 {
                foliomm::internals::memory::split::deferred_split_scan(&m.kernel, &m.mms, 16);
            }
        })
    };
    let zapper = {
        let (m, child) = (m.clone(), child.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            write_and_check(&mut cpu, &child, a, 8 * K, 0x33);
            child.madvise(a, 16 * K, foliomm::internals::mm::Advice::DontNeed).unwrap();
        })
    };
    write_and_check(&mut cpu, &parent, a, 64 * K, 0x22);
    splitter.join().unwrap();
    zapper.join().unwrap();
    assert_clean(&m);
    let got = cpu.read_byte_per_page(&child, a + 16 * K, 16 * K).unwrap();
    assert!(got.iter().all(|&b| b == 0x11), "the child reads {got:?}");
    drop((parent, child));
}

#[test]
fn shuttle_deferred_split_races_cow_and_zap() {
    shuttle::check_random(deferred_split_race, schedules());
    shuttle::check_pct(deferred_split_race, schedules(), 3);
}

/// `move_pages` of a 64K mTHP that a child shares, to node 1 and back,
/// while the parent writes it (COW faults, then writes through its TLB)
/// and the child writes and zaps its half: every byte a thread wrote reads
/// back, the child keeps what it did not write, and the checker agrees
/// (the tables' locks taken in frame order, a fault that meets a cleared
/// entry retrying).
fn migration_race() {
    let mut config = Config { memory: 8 << 20, nodes: 2, ..Config::default() };
    config.vma_lock = VmaLockDesign::VmaRefcount;
    let m = Machine::new(config).expect("a small machine");
    m.thp.set_enabled(ThpMode::Never).unwrap();
    let (parent, child, a, mut cpu) = forked_mthp(&m);
    let pages: Vec<u64> = (a..a + 64 * K).step_by(4 * K as usize).collect();
    let migrator = {
        let (parent, pages) = (parent.clone(), pages.clone());
        thread::spawn(move || {
            for node in [1, 0] {
                let r = parent.move_pages(&pages, Some(&vec![node; pages.len()]), true);
                assert!(matches!(r.result, Ok(_) | Err(Errno::ENOMEM)), "{r:?}");
            }
        })
    };
    let zapper = {
        let (m, child) = (m.clone(), child.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            write_and_check(&mut cpu, &child, a + 32 * K, 8 * K, 0x33);
            child.madvise(a + 48 * K, 16 * K, foliomm::internals::mm::Advice::DontNeed).unwrap();
        })
    };
    write_and_check(&mut cpu, &parent, a, 16 * K, 0x22);
    write_and_check(&mut cpu, &parent, a, 16 * K, 0x23);
    migrator.join().unwrap();
    zapper.join().unwrap();
    assert_clean(&m);
    let got = cpu.read_byte_per_page(&parent, a, 64 * K).unwrap();
    let want: Vec<u8> = (0..16).map(|p| if p < 4 { 0x23 } else { 0x11 }).collect();
    assert_eq!(got, want, "the parent's bytes");
    let got = cpu.read_byte_per_page(&child, a, 48 * K).unwrap();
    let want: Vec<u8> = (0..12).map(|p| if (8..10).contains(&p) { 0x33 } else { 0x11 }).collect();
    assert_eq!(got, want, "the child's bytes");
    drop((parent, child));
}

#[test]
fn shuttle_migration_races_cow_writes_and_zap() {
    shuttle::check_random(migration_race, schedules());
    shuttle::check_pct(migration_race, schedules(), 3);
}
