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

/// A 6M memfd on a 4M machine with swap, written by two threads at once:
/// one through a shared mapping, a page at a time, the other by `pwrite`
/// ([`foliomm::internals::mm_types::MmList::pwrite`], which reclaims when
/// the page cache cannot grow). Reclaim under pressure takes the file's
/// own folios from the LRU (`shrink_shmem_folio` through `i_mmap`) while
/// both write, each racing the other's faults and swap-ins. Every byte
/// reads back through the mapping and the file, and the checker agrees.
fn shmem_pressure_race() {
    let config = Config { memory: 4 << 20, swap: 8 << 20, vma_lock: VmaLockDesign::VmaRefcount, ..Config::default() };
    let m = Machine::new(config).expect("a small machine");
    m.thp.set_enabled(ThpMode::Never).unwrap();
    let len = 6 << 20;
    let file = m.memfd_create(len).unwrap();
    let mm = m.new_mm().unwrap();
    let flags = MmapFlags { shared: true, ..MmapFlags::default() };
    let at = mm.mmap_file(0, len, Prot::RW, flags, Some((&file, 0))).expect("mmap");
    let faulter = {
        let (m, mm) = (m.clone(), mm.clone());
        thread::spawn(move || m.new_cpu().write_byte_per_page(&mm, at, len / 2, 0x21).expect("write"))
    };
    let writer = {
        let (m, file) = (m.clone(), file.clone());
        thread::spawn(move || {
            for off in (len / 2..len).step_by(4 * K as usize) {
                assert_eq!(m.mms.pwrite(&file, off, &[0x42]), Ok(1), "pwrite at {off:#x}");
            }
        })
    };
    faulter.join().unwrap();
    writer.join().unwrap();
    assert_clean(&m);
    let got = m.new_cpu().read_byte_per_page(&mm, at, len).expect("read");
    let want = |p: u64| if p < len / 2 / (4 * K) { 0x21 } else { 0x42 };
    assert!(got.iter().zip(0..).all(|(&b, p)| b == want(p)), "the mapping's bytes");
    let mut byte = [0u8];
    for off in (0..len).step_by(4 * K as usize) {
        assert_eq!(m.mms.pread(&file, off, &mut byte), Ok(1));
        assert_eq!(byte[0], want(off / (4 * K)), "the file's byte at {off:#x}");
    }
    assert!(m.stats.pswpout.load(std::sync::atomic::Ordering::Relaxed) > 0, "reclaim wrote the file out");
    drop(mm);
}

#[test]
fn shuttle_shmem_reclaim_under_pressure_races_two_writers() {
    // Each schedule writes 6M through a 4M machine: a tenth of the others..
    let mut config = shuttle::Config::new();
    config.max_steps = shuttle::MaxSteps::FailAfter(100_000_000);
    let scheduler = shuttle::scheduler::RandomScheduler::new(schedules().div_ceil(10));
    shuttle::Runner::new(scheduler, config).run(shmem_pressure_race);
}
