//! Collapse races under shuttle's random schedules: a shmem range
//! collapsed while the processes that share it write and a thread migrates
//! its pages.

use foliomm::internals::folio::thp::{ShmemHuge, ThpMode};
use foliomm::internals::machine::VmaLockDesign;
use foliomm::internals::mm::Advice;
use foliomm::{Config, Errno, Machine, MmapFlags, Prot};
use shuttle::thread;

use super::{assert_bytes, assert_clean, schedules, write_and_check, K};

/// A shared memfd range that a parent writes half of and a child shares:
/// the parent collapses it into a THP (`collapse_file`: pages unmapped
/// everywhere, copied, their tables retracted; by MADV_COLLAPSE, or by a
/// khugepaged pass, which maps nothing) while the child writes the other
/// half and a third thread moves the first pages to node 1. Every byte
/// either process wrote reads back through both mappings, whatever
/// succeeded, and the checker agrees.
fn shmem_collapse_race(khugepaged: bool) {
    let config = Config { memory: 16 << 20, nodes: 2, vma_lock: VmaLockDesign::VmaRefcount, ..Config::default() };
    let m = Machine::new(config).expect("a small machine");
    m.thp.set_enabled(ThpMode::Never).unwrap();
    let file = m.memfd_create(2 << 20).unwrap();
    let parent = m.new_mm().unwrap();
    let at = 0x7f00_0000_0000;
    let flags = MmapFlags { shared: true, fixed: true, ..MmapFlags::default() };
    parent.mmap_file(at, 2 << 20, Prot::RW, flags, Some((&file, 0))).expect("mmap");
    let mut cpu = m.new_cpu();
    cpu.write_byte_per_page(&parent, at, 64 * K, 0x11).expect("write");
    let child = parent.fork().unwrap();
    m.thp.set_shmem_enabled(ShmemHuge::Advise);
    parent.madvise(at, 2 << 20, Advice::HugePage).unwrap();
    parent.khugepaged.store(true, std::sync::atomic::Ordering::Relaxed);
    let collapser = {
        let (m, parent) = (m.clone(), parent.clone());
        thread::spawn(move || match khugepaged {
            true => _ = foliomm::internals::mm::khugepaged::khugepaged_scan(&m.kernel, &m.mms, 1),
            false => {
                let r = parent.madvise(at, 2 << 20, Advice::Collapse);
                assert!(matches!(r, Ok(()) | Err(Errno::EAGAIN) | Err(Errno::EINVAL)), "{r:?}");
            }
        })
    };
    let mover = {
        let parent = parent.clone();
        thread::spawn(move || {
            let pages: Vec<u64> = (at..at + 16 * K).step_by(4 * K as usize).collect();
            let r = parent.move_pages(&pages, Some(&vec![1; pages.len()]), true);
            assert!(matches!(r.result, Ok(_) | Err(Errno::ENOMEM)), "{r:?}");
        })
    };
    let writer = {
        let (m, child) = (m.clone(), child.clone());
        thread::spawn(move || {
            let mut cpu = m.new_cpu();
            write_and_check(&mut cpu, &child, at + 64 * K, 64 * K, 0x33);
        })
    };
    collapser.join().unwrap();
    mover.join().unwrap();
    writer.join().unwrap();
    assert_clean(&m);
    let want: Vec<u8> = (0..32).map(|p| if p < 16 { 0x11 } else { 0x33 }).collect();
    assert_bytes(&mut cpu, [&parent, &child], at, &want);
    drop((parent, child));
}

#[test]
fn shuttle_shmem_collapse_races_writes_and_migration() {
    for khugepaged in [false, true] {
        shuttle::check_random(move || shmem_collapse_race(khugepaged), schedules());
        shuttle::check_pct(move || shmem_collapse_race(khugepaged), schedules(), 3);
    }
}
