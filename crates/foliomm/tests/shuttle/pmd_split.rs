//! A write fault's PMD split against `MADV_DONTNEED` of the other half of
//! the same THP. The parent's THP is shared with a child, so the parent's
//! write fault splits the PMD to copy one page (`do_huge_pmd_wp_page`),
//! while another thread zaps the second MiB, which splits the PMD too
//! (`zap_pmd_range`). A walker without the lock must see the PMD being
//! split as huge, never as none (`pmdp_invalidate` keeps it so): a zap
//! that took it for none would skip the range, and the zapped half would
//! keep its bytes.

use std::sync::Arc;

use super::{assert_clean, K};
use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::mm::Advice;
use foliomm::{Config, Machine, MmapFlags, Prot};
use shuttle::thread;

const M: u64 = 1 << 20;

fn split_race() {
    let m = Machine::new(Config { memory: 16 * M, ..Config::default() }).expect("a small machine");
    m.thp.set_enabled(ThpMode::Madvise).unwrap();
    let parent = m.new_mm().unwrap();
    let a = parent.mmap(0, 2 * M, Prot::RW, MmapFlags::default()).expect("mmap");
    parent.madvise(a, 2 * M, Advice::HugePage).unwrap();
    let mut cpu = m.new_cpu();
    cpu.write_byte_per_page(&parent, a, 2 * M, 0x5a).unwrap();
    assert!(parent.page_info(a).pmd_mapped, "a PMD-mapped THP");
    let child = parent.fork().unwrap();
    let writer = {
        let (m, parent) = (m.clone(), Arc::clone(&parent));
        thread::spawn(move || m.new_cpu().write_byte_per_page(&parent, a, 16 * K, 0x11).unwrap())
    };
    parent.madvise(a + M, M, Advice::DontNeed).unwrap();
    writer.join().unwrap();
    let read =
        |cpu: &mut foliomm::Cpu, mm: &foliomm::Mm, at: u64, len: u64| cpu.read_byte_per_page(mm, at, len).unwrap();
    assert!(read(&mut cpu, &parent, a + M, M).iter().all(|&b| b == 0), "the zapped half reads zero");
    assert_eq!(read(&mut cpu, &parent, a, 16 * K), [0x11; 4], "the writer's pages");
    assert!(read(&mut cpu, &child, a, 2 * M).iter().all(|&b| b == 0x5a), "the child's bytes");
    assert_clean(&m);
}

#[test]
fn shuttle_a_write_fault_s_pmd_split_races_dontneed_of_the_other_half() {
    shuttle::check_random(split_race, super::schedules());
    shuttle::check_pct(split_race, super::schedules(), 3);
}
