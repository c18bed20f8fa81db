//! Two swap-in faults of one process in one mTHP block. Page 0's slot is
//! shared with a child, so its fault reads it into the swap cache; page 1's
//! slot is this process's alone, so its fault may swap the whole block in
//! as one large folio (`alloc_swap_folio`), page 0 included. When the large
//! swap-in wins, page 0's fault finds its entry gone and leaves the page it
//! read in the swap cache, unmapped and not yet anon, as Linux leaves a
//! readahead folio; the child's fault (a read, or a write) maps that page,
//! meanwhile or after, but never before its bytes are read from the device. Every byte
//! stays each process's own, and the checker agrees after each step.

use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::mm::Advice;
use foliomm::{Config, Machine, MmapFlags, Prot};
use shuttle::thread;

use super::{assert_clean, schedules, K};

const AT: u64 = 0x4000_0000;

/// The race, the child reading page 0 meanwhile, or writing it if
/// `child_writes` (a write fault may let the folio leave the swap cache
/// before it is mapped: `folio_free_swap`).
fn swapin_race(child_writes: bool) {
    let m = Machine::new(Config { memory: 8 << 20, swap: 4 << 20, poison: true, ..Config::default() })
        .expect("a small machine");
    m.thp.set_enabled(ThpMode::Never).unwrap();
    m.thp.set_order(2, ThpMode::Always).unwrap();
    let parent = m.new_mm().unwrap();
    parent.mmap(AT, 16 * K, Prot::RW, MmapFlags { fixed: true, ..Default::default() }).expect("mmap");
    let mut cpu = m.new_cpu();
    cpu.write_byte_per_page(&parent, AT, 16 * K, 0x11).expect("write");
    parent.madvise(AT, 16 * K, Advice::PageOut).expect("MADV_PAGEOUT");
    assert!(!parent.page_info(AT).present, "the block is swapped out");
    let child = parent.fork().unwrap();
    // The child lets pages 1 to 3 go: their slots are the parent's alone.
    child.madvise(AT + 4 * K, 12 * K, Advice::DontNeed).expect("MADV_DONTNEED");
    let mut faults: Vec<_> = [(0, 0x22), (4 * K, 0x33)]
        .into_iter()
        .map(|(off, val)| {
            let (m, parent) = (m.clone(), parent.clone());
            thread::spawn(move || m.new_cpu().write_byte_per_page(&parent, AT + off, 4 * K, val).expect("write"))
        })
        .collect();
    // The child's read of page 0 may find the parent's page in the swap
    // cache before its read from the device is done: it waits on the lock.
    let (m2, child2) = (m.clone(), child.clone());
    faults.push(thread::spawn(move || {
        let mut cpu = m2.new_cpu();
        if child_writes {
            cpu.write_byte_per_page(&child2, AT, 4 * K, 0x44).expect("write");
        }
        let got = cpu.read_byte_per_page(&child2, AT, 4 * K).expect("read");
        assert_eq!(got, [if child_writes { 0x44 } else { 0x11 }], "the child's page 0 while the parent faults");
    }));
    faults.into_iter().for_each(|t| t.join().unwrap());
    assert_clean(&m);
    let got = cpu.read_byte_per_page(&parent, AT, 16 * K).unwrap();
    assert_eq!(got, [0x22, 0x33, 0x11, 0x11], "the parent's bytes");
    let got = cpu.read_byte_per_page(&child, AT, 16 * K).unwrap();
    assert_eq!(got, [if child_writes { 0x44 } else { 0x11 }, 0, 0, 0], "the child's bytes");
    assert_clean(&m);
    drop((parent, child));
    assert_clean(&m);
}

#[test]
fn shuttle_a_large_swapin_races_a_swap_cache_read_of_its_block() {
    for child_writes in [false, true] {
        shuttle::check_random(move || swapin_race(child_writes), schedules());
        shuttle::check_pct(move || swapin_race(child_writes), schedules(), 3);
    }
}
