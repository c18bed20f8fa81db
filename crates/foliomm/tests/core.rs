//! End-to-end behaviour of the core model through the library API, each test
//! checking bytes and running the invariant checker.

use std::sync::Arc;

use foliomm::internals::check::{Subject, ViolationKind};
use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::machine::DebugSwitches;
use foliomm::internals::mm::Advice;
use foliomm::{Config, Cpu, Errno, Machine, Mm, MmapFlags, Prot};

const K: u64 = 1024;
const M: u64 = 1024 * K;

fn machine(mem: u64) -> Arc<Machine> {
    Machine::new(Config { memory: mem, ..Config::default() }).unwrap()
}

fn assert_clean(m: &Machine) {
    let bad: Vec<String> = m.check().iter().map(ToString::to_string).collect();
    assert!(bad.is_empty(), "invariant violations:\n{}", bad.join("\n"));
}

fn anon(mm: &Mm, len: u64) -> u64 {
    mm.mmap(0, len, Prot::RW, MmapFlags::default()).unwrap()
}

#[test]
fn write_fault_4k_then_fork_and_child_write_copies() {
    let m = machine(64 * M);
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = anon(&p, 64 * K);
    cpu.write(&p, a + 100, b"parent").unwrap();
    assert_eq!(p.page_info(a).folio_order, 0);
    assert_clean(&m);
    let c = p.fork().unwrap();
    assert_clean(&m);
    let before = c.page_info(a);
    assert!(!before.exclusive, "a page mapped by two MMs is not exclusive");
    cpu.write(&c, a + 100, b"child!").unwrap();
    let after = c.page_info(a);
    assert_ne!(after.pfn, before.pfn, "the child's write must copy");
    let mut buf = [0u8; 6];
    cpu.read(&p, a + 100, &mut buf).unwrap();
    assert_eq!(&buf, b"parent", "the parent must not see the child's write");
    cpu.read(&c, a + 100, &mut buf).unwrap();
    assert_eq!(&buf, b"child!");
    assert_clean(&m);
    c.exit();
    // The parent's page is now exclusive again: its write reuses it.
    let pb = p.page_info(a);
    cpu.write(&p, a, b"x").unwrap();
    assert_eq!(p.page_info(a).pfn, pb.pfn, "small folio with refcount 1 is reused");
    assert_clean(&m);
    drop(c);
    assert_clean(&m);
}

#[test]
fn pmd_thp_fault_split_by_mprotect_and_reuse_after_child_exit() {
    let m = machine(64 * M);
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = anon(&p, 4 * M);
    assert_eq!(a % (2 * M), 0, "a 2 MiB-multiple mapping is PMD-aligned");
    p.madvise(a, 4 * M, Advice::HugePage).unwrap();
    cpu.write_byte_per_page(&p, a, 4 * M, 7).unwrap();
    let i = p.page_info(a + 20 * K);
    assert!(i.pmd_mapped && i.folio_order == 9 && i.exclusive);
    assert_eq!(p.range_info(a, a + 4 * M).anon_huge_kb, 4096);
    assert_clean(&m);
    p.mprotect(a, 4 * K, Prot(Prot::READ)).unwrap();
    assert_clean(&m);
    p.mprotect(a, 4 * K, Prot::RW).unwrap();
    assert_clean(&m);
    let i = p.page_info(a + 20 * K);
    assert!(!i.pmd_mapped && i.folio_order == 9, "split PMD leaves a PTE-mapped THP");
    assert_eq!(m.stats.thp_split_pmd.load(std::sync::atomic::Ordering::Relaxed), 1);
    let c = p.fork().unwrap();
    assert_clean(&m);
    c.exit();
    drop(c);
    assert_clean(&m);
    let before = p.page_info(a + 20 * K);
    cpu.write(&p, a + 20 * K, &[9]).unwrap();
    let after = p.page_info(a + 20 * K);
    assert_eq!(after.pfn, before.pfn, "PTE-mapped THP reused after the child exited");
    assert_eq!(after.folio_order, 9);
    assert_clean(&m);
}

#[test]
fn mthp_64k_cow_reuse_and_copy() {
    let m = machine(64 * M);
    m.thp.set_order(4, ThpMode::Always).unwrap();
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = anon(&p, 256 * K);
    cpu.write(&p, a, &[1]).unwrap();
    assert_eq!(p.page_info(a + 60 * K).folio_order, 4, "one write faults a whole 64K folio");
    let c = p.fork().unwrap();
    let before = p.page_info(a);
    cpu.write(&p, a, &[2]).unwrap();
    assert_ne!(p.page_info(a).pfn, before.pfn, "the parent copies while the child shares");
    let mut b = [0];
    cpu.read(&c, a, &mut b).unwrap();
    assert_eq!(b[0], 1, "the child still sees the old byte");
    assert_clean(&m);
    drop(c);
    let before = p.page_info(a + 4 * K);
    cpu.write(&p, a + 4 * K, &[3]).unwrap();
    assert_eq!(p.page_info(a + 4 * K).pfn, before.pfn, "reuse once the child is gone");
    assert_clean(&m);
}

/// The typed report: reusing a folio another MM maps is an Exclusive
/// violation of that folio and of its written page.
#[test]
fn a_reused_shared_folio_is_reported_as_exclusive_violations_of_it() {
    let debug = DebugSwitches { reuse_shared: true, ..Default::default() };
    let m = Machine::new(Config { memory: 64 * M, precision: true, debug, ..Config::default() }).unwrap();
    m.thp.set_order(4, ThpMode::Always).unwrap();
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = anon(&p, 256 * K);
    assert_eq!(a % (64 * K), 0);
    cpu.write(&p, a, &[1]).unwrap();
    let _c = p.fork().unwrap();
    let head = p.page_info(a).pfn;
    cpu.write(&p, a, &[2]).unwrap();
    assert_eq!(p.page_info(a).pfn, head, "the switch reuses the folio the child still maps");
    let bad = m.check();
    let found = |kind, subject| bad.iter().any(|v| v.kind == kind && v.subject == subject);
    assert!(found(ViolationKind::Exclusive, Subject::Folio(head)), "the COW decision: {bad:#?}");
    assert!(found(ViolationKind::Exclusive, Subject::Frame(head)), "the AnonExclusive page: {bad:#?}");
    assert!(bad.iter().all(|v| v.kind == ViolationKind::Exclusive), "{bad:#?}");
}

#[test]
fn munmap_partial_large_folio_and_dontneed() {
    let m = machine(64 * M);
    m.thp.set_order(4, ThpMode::Always).unwrap();
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = anon(&p, 128 * K);
    cpu.fill(&p, a, 128 * K, 0xaa).unwrap();
    p.munmap(a + 8 * K, 4 * K).unwrap();
    assert_eq!(cpu.read(&p, a + 8 * K, &mut [0]), Err(Errno::EFAULT));
    p.madvise(a + 16 * K, 4 * K, Advice::DontNeed).unwrap();
    let mut b = [0xffu8];
    cpu.read(&p, a + 16 * K, &mut b).unwrap();
    assert_eq!(b[0], 0, "DONTNEED drops the data");
    cpu.read(&p, a + 20 * K, &mut b).unwrap();
    assert_eq!(b[0], 0xaa);
    assert_clean(&m);
    p.munmap(a, 128 * K).unwrap();
    assert_clean(&m);
}

#[test]
fn mremap_moves_part_of_a_large_folio() {
    let m = machine(64 * M);
    m.thp.set_order(4, ThpMode::Always).unwrap();
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = anon(&p, 128 * K);
    cpu.fill(&p, a, 128 * K, 0x11).unwrap();
    cpu.write(&p, a + 8 * K, b"moved").unwrap();
    let folio_pfn = p.page_info(a + 8 * K).pfn;
    assert_eq!(p.mremap(a + 8 * K, 8 * K, 8 * K, true, None), Ok(a + 8 * K), "same size stays in place");
    let dst = anon(&p, 8 * K);
    let n = p.mremap(a + 8 * K, 8 * K, 8 * K, true, Some(dst)).unwrap();
    assert_eq!(n, dst);
    assert_eq!(cpu.read(&p, a + 8 * K, &mut [0]), Err(Errno::EFAULT), "the old range is gone");
    assert_eq!(p.page_info(n).pfn, folio_pfn, "mremap moves the mapping, not the page");
    let mut buf = [0u8; 5];
    cpu.read(&p, n, &mut buf).unwrap();
    assert_eq!(&buf, b"moved");
    assert_clean(&m);
    let c = p.fork().unwrap();
    assert_clean(&m);
    drop(c);
    assert_clean(&m);
}

#[test]
fn out_of_memory_is_enomem() {
    let m = machine(8 * M);
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = anon(&p, 16 * M);
    assert_eq!(cpu.write_byte_per_page(&p, a, 16 * M, 1), Err(Errno::ENOMEM));
    assert_clean(&m);
    drop(p);
    assert_clean(&m);
}

/// An mremap move that runs out of page tables midway (or at once) fails
/// with ENOMEM and loses nothing: the source keeps its VMA, its pages and
/// its bytes, nothing is mapped at the destination, and the checker finds
/// no page outside a VMA (#15: the source VMA used to be lost). Every
/// number of free frames from none to a few is tried, so that the failure
/// comes at each level of the destination's tables.
#[test]
fn mremap_move_out_of_page_tables_loses_nothing() {
    for spare in 0..6 {
        let m = machine(8 * M);
        m.thp.set_enabled(ThpMode::Never).unwrap();
        let mut cpu = m.new_cpu();
        let p = m.new_mm().unwrap();
        let a = anon(&p, 4 * M);
        cpu.write_byte_per_page(&p, a, 4 * M, 0x5a).unwrap();
        // Fill memory, then give back `spare` pages.
        let fill = anon(&p, 64 * M);
        let filled = (0..64 * M / 4096)
            .take_while(|i| cpu.write_byte_per_page(&p, fill + i * 4096, 4096, 1).is_ok())
            .count() as u64;
        if spare > 0 {
            p.munmap(fill + (filled - spare) * 4096, spare * 4096).unwrap();
        }
        let far = 0x7e00_0000_0000;
        match p.mremap(a, 4 * M, 4 * M, true, Some(far)) {
            Ok(to) => assert_eq!(to, far, "spare {spare}"),
            Err(e) => {
                assert_eq!(e, Errno::ENOMEM, "spare {spare}");
                assert!(cpu.read_byte_per_page(&p, a, 4 * M).unwrap().iter().all(|&b| b == 0x5a), "spare {spare}");
                assert_eq!(cpu.read_byte_per_page(&p, far, 4096), Err(Errno::EFAULT), "spare {spare}");
            }
        }
        assert_clean(&m);
    }
}

/// Each design's MM ID space (rmap-id's 16M, mm-id's MM_ID_MAX), and fork
/// failing cleanly with ENOMEM once a lower limit is reached.
#[test]
fn mm_ids_run_out_with_enomem_and_come_back_on_free() {
    let design = |name: &str| foliomm::internals::mapcount::Design::parse(name).unwrap().implementation().max_mm_id();
    assert_eq!(design("rmap-id"), (1 << 24) - 1);
    assert_eq!(design("rmap-id-powersum"), (1 << 24) - 1);
    assert_eq!(design("mm-id"), (1 << 31) - 1);
    let m = Machine::new(Config { memory: 16 * M, max_mm_id: Some(2), ..Config::default() }).unwrap();
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = anon(&p, 64 * K);
    cpu.fill(&p, a, 64 * K, 5).unwrap();
    let c = p.fork().unwrap();
    assert_eq!(p.fork().err(), Some(Errno::ENOMEM));
    assert_clean(&m);
    cpu.fill(&c, a, 4 * K, 6).unwrap();
    drop(c);
    let d = p.fork().unwrap();
    assert_eq!(d.id, 2, "the freed ID is handed out again");
    let mut byte = [0u8; 1];
    cpu.read(&d, a, &mut byte).unwrap();
    assert_eq!(byte[0], 5, "the child sees the parent's bytes, not the dead child's");
    drop(d);
    drop(p);
    assert_clean(&m);
}

#[test]
fn protection_errors() {
    let m = machine(8 * M);
    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = p.mmap(0, 8 * K, Prot(Prot::READ), MmapFlags::default()).unwrap();
    let mut b = [1u8];
    cpu.read(&p, a, &mut b).unwrap();
    assert_eq!(b[0], 0, "read fault maps the zero page");
    assert!(p.page_info(a).zero_page);
    assert_eq!(cpu.write(&p, a, &[1]), Err(Errno::EACCES));
    p.mprotect(a, 8 * K, Prot::NONE).unwrap();
    assert_eq!(cpu.read(&p, a, &mut b), Err(Errno::EACCES));
    assert_eq!(cpu.read(&p, 0x1000, &mut b), Err(Errno::EFAULT));
    assert_eq!(p.munmap(a + 1, 4 * K), Err(Errno::EINVAL));
    assert_clean(&m);
}

#[test]
fn two_threads_fault_disjoint_ranges_of_one_mm() {
    let m = machine(256 * M);
    m.thp.set_order(4, ThpMode::Always).unwrap();
    let p = m.new_mm().unwrap();
    let a = anon(&p, 32 * M);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (m, p) = (&m, &p);
            s.spawn(move || {
                let mut cpu = m.new_cpu();
                let base = a + t * 16 * M;
                for off in (0..16 * M).step_by(4096) {
                    cpu.write(p, base + off, &(off ^ t).to_le_bytes()).unwrap();
                }
            });
        }
    });
    let mut cpu = m.new_cpu();
    for t in 0..2u64 {
        for off in (0..16 * M).step_by(4096) {
            let mut b = [0u8; 8];
            cpu.read(&p, a + t * 16 * M + off, &mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), off ^ t);
        }
    }
    assert_clean(&m);
}

#[test]
fn model_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Machine>();
    assert_send_sync::<Mm>();
    fn assert_send<T: Send>() {}
    assert_send::<Cpu>();
}

#[test]
fn mprotect_round_trip_merges_vmas_back() {
    let m = machine(16 * M);
    let p = m.new_mm().unwrap();
    let a = anon(&p, 64 * K);
    p.mprotect(a + 16 * K, 8 * K, Prot(Prot::READ)).unwrap();
    assert_eq!(p.vmas().len(), 3, "a protection change in the middle splits into three VMAs");
    p.mprotect(a + 16 * K, 8 * K, Prot::RW).unwrap();
    assert_eq!(p.vmas().len(), 1, "restoring the protection merges them again");
    assert_eq!(p.mprotect(a + 60 * K, 8 * K, Prot::RW), Err(Errno::ENOMEM), "a hole in the range");
    assert_clean(&m);
}

#[test]
fn mmap_placement_fixed_hint_noreplace_and_populate() {
    let m = machine(16 * M);
    let p = m.new_mm().unwrap();
    let hint = 0x5000_0000;
    assert_eq!(p.mmap(hint, 8 * K, Prot::RW, MmapFlags::default()), Ok(hint), "a free hint is taken");
    let other = p.mmap(hint, 8 * K, Prot::RW, MmapFlags::default()).unwrap();
    assert_ne!(other, hint, "a taken hint is not");
    let noreplace = MmapFlags { noreplace: true, ..Default::default() };
    assert_eq!(p.mmap(hint, 4 * K, Prot::RW, noreplace), Err(Errno::EEXIST));
    let fixed = MmapFlags { fixed: true, ..Default::default() };
    let mut cpu = m.new_cpu();
    cpu.write(&p, hint, &[7]).unwrap();
    assert_eq!(p.mmap(hint, 4 * K, Prot::RW, fixed), Ok(hint), "MAP_FIXED replaces");
    let mut b = [1];
    cpu.read(&p, hint, &mut b).unwrap();
    assert_eq!(b[0], 0, "the replaced page reads as a fresh zero page");
    assert_eq!(p.mmap(hint + 1, 4 * K, Prot::RW, fixed), Err(Errno::EINVAL));
    assert_eq!(p.mmap(0, 0, Prot::RW, MmapFlags::default()), Err(Errno::EINVAL));
    let populate = MmapFlags { populate: true, ..Default::default() };
    let a = p.mmap(0, 32 * K, Prot::RW, populate).unwrap();
    assert_eq!(p.range_info(a, a + 32 * K).rss_kb, 32, "MAP_POPULATE faults every page in");
    let big = anon(&p, 4 * M);
    assert_eq!(big % (2 * M), 0);
    let odd = anon(&p, 3 * M);
    assert_eq!(odd % 4096, 0);
    assert_clean(&m);
}

#[test]
fn fork_and_munmap_race_with_faults_in_other_threads() {
    // One thread keeps writing its own range of P while another forks P,
    // munmaps and remaps a different range, and lets children exit. The
    // writer's bytes must survive and every invariant hold afterwards.
    let m = machine(128 * M);
    m.thp.set_order(4, ThpMode::Always).unwrap();
    let p = m.new_mm().unwrap();
    let stable = anon(&p, 4 * M);
    let churn = anon(&p, 4 * M);
    std::thread::scope(|s| {
        let (m1, p1) = (&m, &p);
        s.spawn(move || {
            let mut cpu = m1.new_cpu();
            for round in 0..20u8 {
                for off in (0..4 * M).step_by(16 * 1024) {
                    cpu.write(p1, stable + off, &[round, (off >> 14) as u8]).unwrap();
                }
            }
        });
        let (m2, p2) = (&m, &p);
        s.spawn(move || {
            let mut cpu = m2.new_cpu();
            for i in 0..20u64 {
                cpu.write_byte_per_page(p2, churn, 4 * M, i as u8).unwrap();
                let child = p2.fork().unwrap();
                cpu.write(&child, churn, &[0xcc]).unwrap();
                p2.munmap(churn + (i % 4) * M, M).unwrap();
                let fixed = MmapFlags { fixed: true, ..Default::default() };
                p2.mmap(churn + (i % 4) * M, M, Prot::RW, fixed).unwrap();
                drop(child);
            }
        });
    });
    let mut cpu = m.new_cpu();
    for off in (0..4 * M).step_by(16 * 1024) {
        let mut b = [0u8; 2];
        cpu.read(&p, stable + off, &mut b).unwrap();
        assert_eq!(b, [19, (off >> 14) as u8]);
    }
    assert_clean(&m);
}

/// The checker's frame walk skips free blocks whole, and still finds a
/// block taken off the free lists and never used (a leak) and a frame
/// freed while a page table still maps it.
#[test]
fn the_frame_walk_finds_a_leaked_block_and_a_mapped_free_frame() {
    let m = Machine::new(Config { memory: 64 * M, ..Config::default() }).unwrap();
    let phys = &m.kernel.phys;
    let leaked = phys.alloc_pages(2).unwrap();
    let found = |bad: &[foliomm::internals::check::Violation], kind, subject| {
        bad.iter().any(|v| v.kind == kind && v.subject == subject)
    };
    let bad = m.check();
    assert!(found(&bad, ViolationKind::Leak, Subject::Folio(leaked)), "{bad:#?}");
    phys.free_pages(leaked, 2);
    assert_clean(&m);

    let mut cpu = m.new_cpu();
    let p = m.new_mm().unwrap();
    let a = anon(&p, 4 * K);
    cpu.write(&p, a, &[1]).unwrap();
    let mapped = p.page_info(a).pfn;
    phys.free_pages(mapped, 0);
    let bad = m.check();
    assert!(found(&bad, ViolationKind::Allocator, Subject::Frame(mapped)), "{bad:#?}");
}
