//! `MADV_FREE` races under shuttle's schedules: a parent lets its pages go
//! and reclaims them while another of its threads writes them (after the
//! MADV_FREE) and a forked child, which shares some of them, reads and
//! writes its copies. Reclaim may drop a page only while nothing wrote it
//! since: a write racing the drop either dirties the entry first, and the
//! page stays, or faults a new page in after it. The child's bytes are
//! never touched, and the checker agrees.

use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::machine::VmaLockDesign;
use foliomm::internals::mm::Advice;
use foliomm::{Config, Machine, MmapFlags, Prot};
use shuttle::thread;

use super::{assert_clean, schedules, K};

fn lazyfree_race() {
    let config = Config { memory: 8 << 20, vma_lock: VmaLockDesign::VmaRefcount, ..Config::default() };
    let m = Machine::new(config).expect("a small machine");
    m.thp.set_enabled(ThpMode::Never).unwrap();
    let parent = m.new_mm().unwrap();
    let at = parent.mmap(0, 16 * K, Prot::RW, MmapFlags::default()).expect("mmap");
    let mut cpu = m.new_cpu();
    cpu.write_byte_per_page(&parent, at, 16 * K, 0x11).expect("write");
    let child = parent.fork().unwrap();
    // The parent's own copies of the upper half: COW before the race.
    cpu.write_byte_per_page(&parent, at + 8 * K, 8 * K, 0x22).expect("write");
    // The writer writes once MADV_FREE is done, racing only the reclaim:
    // a write after MADV_FREE must never be dropped.
    let (freed, free_done) = shuttle::sync::mpsc::channel();
    let reclaimer = {
        let parent = parent.clone();
        thread::spawn(move || {
            parent.madvise(at, 16 * K, Advice::Free).expect("MADV_FREE");
            freed.send(()).unwrap();
            parent.madvise(at, 16 * K, Advice::PageOut).expect("MADV_PAGEOUT");
        })
    };
    let writer = {
        let (m, parent) = (m.clone(), parent.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            free_done.recv().unwrap();
            cpu.write_byte_per_page(&parent, at + 8 * K, 8 * K, 0x33).expect("write");
            let got = cpu.read_byte_per_page(&parent, at + 8 * K, 8 * K).expect("read");
            assert_eq!(got, [0x33, 0x33], "the parent's writer");
        })
    };
    let sibling = {
        let (m, child) = (m.clone(), child.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            let got = cpu.read_byte_per_page(&child, at, 16 * K).expect("read");
            assert!(got.iter().all(|&b| b == 0x11), "the child read {got:?}");
            cpu.write_byte_per_page(&child, at, 4 * K, 0x44).expect("write");
        })
    };
    reclaimer.join().unwrap();
    writer.join().unwrap();
    sibling.join().unwrap();
    assert_clean(&m);
    let got = cpu.read_byte_per_page(&child, at, 16 * K).unwrap();
    assert_eq!(got, [0x44, 0x11, 0x11, 0x11], "the child's bytes");
    let got = cpu.read_byte_per_page(&parent, at, 16 * K).unwrap();
    assert!(got[..2].iter().all(|&b| b == 0x11 || b == 0), "the parent's lower half: {got:?}");
    assert_eq!(got[2..], [0x33, 0x33], "the parent's upper half");
    drop((parent, child));
    assert_clean(&m);
}

#[test]
fn shuttle_lazyfree_races_writes_reclaim_and_a_child() {
    shuttle::check_random(lazyfree_race, schedules());
    shuttle::check_pct(lazyfree_race, schedules(), 3);
}
