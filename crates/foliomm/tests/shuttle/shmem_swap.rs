//! Shmem swap races under shuttle's random schedules: a memfd range paged
//! out while a thread of another process writes it through its own mapping
//! and a third reads the file.

use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::machine::VmaLockDesign;
use foliomm::internals::mm::Advice;
use foliomm::{Config, Machine, MmapFlags, Prot};
use shuttle::thread;

use super::{assert_bytes, assert_clean, schedules, write_and_check, K};

/// A 32K memfd written by a parent and mapped by a child: the parent
/// pages its mapping out (`shrink_shmem_folio`: unmapped, written to a
/// slot, the cache naming the slot) while the child writes the upper half
/// through its mapping (refaults, swap-ins) and a third thread reads the
/// file (`shmem_swapin_folio`). Every byte the child wrote, and the parent's
/// elsewhere, reads back through both mappings and the file, whatever was
/// paged out, and the checker agrees.
fn shmem_pageout_race() {
    let config = Config { memory: 8 << 20, swap: 4 << 20, vma_lock: VmaLockDesign::VmaRefcount, ..Config::default() };
    let m = Machine::new(config).expect("a small machine");
    m.thp.set_enabled(ThpMode::Never).unwrap();
    let file = m.memfd_create(32 * K).unwrap();
    let parent = m.new_mm().unwrap();
    let flags = MmapFlags { shared: true, ..MmapFlags::default() };
    let at = parent.mmap_file(0, 32 * K, Prot::RW, flags, Some((&file, 0))).expect("mmap");
    let mut cpu = m.new_cpu();
    cpu.write_byte_per_page(&parent, at, 32 * K, 0x21).expect("write");
    let child = parent.fork().unwrap();
    let reclaimer = {
        let parent = parent.clone();
        thread::spawn(move || parent.madvise(at, 32 * K, Advice::PageOut).expect("pageout"))
    };
    let writer = {
        let (m, child) = (m.clone(), child.clone());
        thread::spawn(move || write_and_check(&mut m.new_cpu(), &child, at + 16 * K, 16 * K, 0x42))
    };
    let reader = {
        let file = file.clone();
        thread::spawn(move || {
            let mut buf = [0u8; 1];
            file.read(4 * K, &mut buf).expect("pread");
            assert_eq!(buf[0], 0x21, "the file's byte");
        })
    };
    reclaimer.join().unwrap();
    writer.join().unwrap();
    reader.join().unwrap();
    assert_clean(&m);
    let want: Vec<u8> = (0..8).map(|p| if p < 4 { 0x21 } else { 0x42 }).collect();
    assert_bytes(&mut cpu, [&parent, &child], at, &want);
    drop((parent, child));
}

#[test]
fn shuttle_shmem_pageout_races_writes_and_reads() {
    shuttle::check_random(shmem_pageout_race, schedules());
    shuttle::check_pct(shmem_pageout_race, schedules(), 3);
}
