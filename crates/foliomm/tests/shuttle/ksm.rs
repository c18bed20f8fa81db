//! KSM's races: ksmd merges the pages of two processes while one of them
//! writes its pages (write faults against `write_protect_page` and
//! `replace_page`) and the other forks, its child writes, and it zaps a
//! page (`copy_present_pte` and `zap_pte_range` against the merge's
//! refcount check). After every schedule each process reads its own
//! bytes, and the checker finds nothing (rmap walks through the stable
//! nodes reach every KSM mapping).

use super::{assert_clean, machine, map, write_and_check, K};
use foliomm::internals::machine::VmaLockDesign;
use foliomm::internals::mm::ksm::ksmd_scan;
use foliomm::internals::mm::Advice;
use shuttle::thread;

fn ksm_race() {
    let m = machine(VmaLockDesign::VmaRefcount, false);
    let (p, q) = (m.new_mm().unwrap(), m.new_mm().unwrap());
    let (a, b) = (map(&p, 16 * K), map(&q, 16 * K));
    let mut cpu = m.new_cpu();
    cpu.write_byte_per_page(&p, a, 16 * K, 0x11).unwrap();
    cpu.write_byte_per_page(&q, b, 16 * K, 0x11).unwrap();
    p.madvise(a, 16 * K, Advice::Mergeable).unwrap();
    q.madvise(b, 16 * K, Advice::Mergeable).unwrap();
    // The checksums recorded: the next scan merges.
    ksmd_scan(&m.kernel, &m.mms, 1);
    let ksmd = {
        let m = m.clone();
        thread::spawn(move || ksmd_scan(&m.kernel, &m.mms, 2))
    };
    let writer = {
        let (m, p) = (m.clone(), p.clone());
        thread::spawn(move || write_and_check(&mut m.new_cpu(), &p, a, 8 * K, 0x22))
    };
    let child = q.fork().unwrap();
    write_and_check(&mut cpu, &child, b + 4 * K, 4 * K, 0x33);
    q.madvise(b + 12 * K, 4 * K, Advice::DontNeed).unwrap();
    ksmd.join().unwrap();
    writer.join().unwrap();
    assert_clean(&m);
    let read = |cpu: &mut foliomm::Cpu, mm: &foliomm::Mm, at: u64| cpu.read_byte_per_page(mm, at, 16 * K).unwrap();
    assert_eq!(read(&mut cpu, &p, a), [0x22, 0x22, 0x11, 0x11], "P's bytes");
    assert_eq!(read(&mut cpu, &q, b), [0x11, 0x11, 0x11, 0], "Q's bytes");
    assert_eq!(read(&mut cpu, &child, b), [0x11, 0x33, 0x11, 0x11], "the child's bytes");
    ksmd_scan(&m.kernel, &m.mms, 2);
    assert_clean(&m);
    write_and_check(&mut cpu, &q, b, 16 * K, 0x44);
    assert_eq!(read(&mut cpu, &child, b), [0x11, 0x33, 0x11, 0x11], "the child's bytes after Q wrote");
    assert_clean(&m);
}

#[test]
fn shuttle_ksmd_races_writes_fork_and_zap() {
    shuttle::check_random(ksm_race, super::schedules());
    shuttle::check_pct(ksm_race, super::schedules(), 3);
}
