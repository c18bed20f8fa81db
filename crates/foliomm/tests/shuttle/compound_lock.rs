//! Seed 003's race: before `lock_compound_mapcounts`, the last PTE unmap
//! of a page asked the compound mapcount whether a PMD still maps the
//! folio, and the last PMD unmap scanned which pages PTEs still map, each
//! after changing its own counter, with nothing ordering the two. A parent
//! unmaps its PMD mapping of a THP while its child, which maps the THP by
//! PTEs, unmaps one of them: both may count that page as unmapped (or
//! neither), and `NR_ANON_MAPPED` drifts. The checker finds the drift under
//! `set compound_lock unlocked`, and nothing under the seed's bit spinlock
//! or the sleeping lock (its PREEMPT_RT alternative).

use std::sync::Arc;

use super::{assert_clean, K};
use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::mm::Advice;
use foliomm::{CompoundLock, Config, Design, Machine, MmapFlags, Prot};
use shuttle::thread;

const M: u64 = 1 << 20;

fn unmap_race(lock: CompoundLock) {
    let config = Config { memory: 16 * M, mapcount: Design::CompoundLocked, compound_lock: lock, ..Config::default() };
    let m = Machine::new(config).expect("a small machine");
    m.thp.set_enabled(ThpMode::Madvise).unwrap();
    let parent = m.new_mm().unwrap();
    // 6.1 aligns no anon mapping to 2 MiB: take the aligned half of 4 MiB.
    let a = parent.mmap(0, 4 * M, Prot::RW, MmapFlags::default()).expect("mmap").next_multiple_of(2 * M);
    parent.madvise(a, 2 * M, Advice::HugePage).unwrap();
    let mut cpu = m.new_cpu();
    cpu.write_byte_per_page(&parent, a, 2 * M, 0x5a).unwrap();
    assert!(parent.page_info(a).pmd_mapped, "a PMD-mapped THP");
    let child = parent.fork().unwrap();
    // The child's PMD split: it maps the THP's other pages by PTEs.
    child.munmap(a, 4 * K).unwrap();
    let unmapper = {
        let child = Arc::clone(&child);
        thread::spawn(move || child.munmap(a + 4 * K, 4 * K).unwrap())
    };
    parent.munmap(a, 2 * M).unwrap();
    unmapper.join().unwrap();
    let got = cpu.read_byte_per_page(&child, a + 8 * K, 8 * K).unwrap();
    assert_eq!(got, [0x5a, 0x5a], "the child's bytes");
    assert_clean(&m);
}

#[test]
fn shuttle_compound_lock_keeps_nr_anon_mapped_exact() {
    for lock in [CompoundLock::BitSpinlock, CompoundLock::Sleeping] {
        shuttle::check_random(move || unmap_race(lock), super::schedules() / 5);
    }
}

#[test]
#[should_panic(expected = "NR_ANON_MAPPED is")]
fn shuttle_unlocked_compound_mapcounts_miscount_nr_anon_mapped() {
    shuttle::check_pct(|| unmap_race(CompoundLock::Unlocked), super::schedules().max(2000), 3);
}
