//! Seed 002's rmap-side unsharing against a fault: MM A faults a new page
//! of a shared hugetlb mapping whose PMD table it shares with MM B, while
//! B moves another page of the same window to node 1. The migration's
//! rmap walk makes A let go of the shared table (`try_to_migrate_one`'s
//! `huge_pmd_unshare`). Under `no-lock` A's fault can keep its pointer into
//! the table after A stopped using it; its last check records that as a use
//! after free, which the checker reports. The safe designs keep the table
//! for the fault: `i_mmap_rwsem` makes the walk wait, and under `vma-lock`
//! the walk's trylock of A's VMA lock fails and the migration is retried.

use super::{schedules, K};
use foliomm::internals::machine::{HugeSize, HugetlbSync};
use foliomm::{Config, Errno, Machine, MmapFlags};
use shuttle::thread;

const G: u64 = 1 << 30;
const M: u64 = 1 << 20;

fn unshare_by_migration_race(sync: HugetlbSync) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let config = Config { memory: 32 * M, nodes: 2, hugetlb_sync: sync, ..Config::default() };
    let m = Machine::new(config).expect("a small machine");
    assert_eq!(m.kernel.set_nr_hugepages(HugeSize::Pmd, 4), 4);
    let f = m.hugetlbfs_create(G, HugeSize::Pmd).unwrap();
    let (a, b) = (m.new_mm().unwrap(), m.new_mm().unwrap());
    let flags = MmapFlags { shared: true, hugetlb: Some(HugeSize::Pmd), noreserve: true, ..MmapFlags::default() };
    let xa = a.mmap_file(G, G, foliomm::Prot::RW, flags, Some((&f, 0))).unwrap();
    let xb = b.mmap_file(2 * G, G, foliomm::Prot::RW, flags, Some((&f, 0))).unwrap();
    let mut cpu = m.new_cpu();
    cpu.write_byte_per_page(&b, xb, 4 * K, 0x0b).unwrap();
    cpu.read_byte_per_page(&a, xa, 4 * K).unwrap();
    assert!(a.page_info(xa).pmd_shared, "A shares B's PMD table");
    let faulter = {
        let (m, a) = (m.clone(), a.clone());
        thread::spawn(move || match m.new_cpu().write_byte_per_page(&a, xa + 2 * M, 4 * K, 0x0a) {
            Ok(()) | Err(Errno::SIGBUS) => {}
            Err(e) => panic!("fault in A: {e}"),
        })
    };
    let moved = b.move_pages(&[xb], Some(&[1]), true);
    assert!(matches!(moved.result, Ok(_)), "{moved:?}");
    faulter.join().unwrap();
    let bad = m.check();
    assert!(bad.is_empty(), "the checker found (schedule {run} of this process): {bad:?}");
    assert_eq!(cpu.read_byte_per_page(&a, xa, 4 * K).unwrap(), [0x0b], "A reads B's byte");
    assert_eq!(cpu.read_byte_per_page(&b, xb + 2 * M, 4 * K).unwrap(), [0x0a], "B reads A's byte");
    drop((a, b, f));
    let bad = m.check();
    assert!(bad.is_empty(), "the checker found after exit: {bad:?}");
}

#[test]
fn shuttle_hugetlb_migration_unsharing_is_safe_under_i_mmap_rwsem_and_vma_lock() {
    for sync in [HugetlbSync::IMmapRwsem, HugetlbSync::VmaLock] {
        shuttle::check_random(move || unshare_by_migration_race(sync), schedules());
        shuttle::check_pct(move || unshare_by_migration_race(sync), schedules(), 3);
    }
}

#[test]
#[should_panic(expected = "the checker found")]
fn shuttle_hugetlb_migration_unsharing_is_found_under_no_lock() {
    shuttle::check_pct(|| unshare_by_migration_race(HugetlbSync::NoLock), schedules().max(6000), 3);
}
