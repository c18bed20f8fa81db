//! The host kernel's side of a race the model's shuttle test finds
//! (`shuttle_hugetlb_truncation_racing_a_fault_undercounts_reservations_only_under_the_vma_lock`):
//! a hugetlbfs truncation that meets a fault which read the old size
//! gives back the reservation the fault has just used. Since 6.1
//! `hugetlb_vmdelete_list` skips a VMA whose hugetlb VMA lock a fault
//! holds, and `remove_inode_hugepages` takes the fault mutex only of pages
//! it finds in the cache, which the fault's page is not yet in while it is
//! zeroed; `hugetlb_unreserve_pages` then counts its promise as unused.
//! `HugePages_Rsvd` is one short until the file goes.
//!
//! Needs root (the pool is set to 4 pages and put back), two CPUs, and a
//! 6.1 or later kernel; skips with a message otherwise.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use foliomm::internals::machine::HugeSize;
use foliomm_host::sys::{memfd, Advice, Map};
use foliomm_host::sysfs;

const HPAGE: usize = 2 << 20;

/// Tries the race up to `tries` times; returns (tries made, undercounts).
/// Each try: a 4-page file mapped shared (4 promised), its last page
/// populated for writing while another thread cuts the file to 2 pages.
/// Afterwards 2 promises must be left (pages 0 and 1), or 1 after an
/// undercount; once the file is closed, none.
fn race(tries: u32) -> (u32, u32) {
    let resv = || sysfs::huge_counts(HugeSize::Pmd).resv;
    let mut undercounts = 0;
    for i in 0..tries {
        let fd = memfd(c"foliomm-race", 4 * HPAGE as u64, true).expect("a hugetlb memfd");
        let map = Map::file(Some((fd.as_fd(), 0))).shared(true).map(4 * HPAGE).expect("a shared mapping");
        let (ready, go) = (AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|s| {
            let cutter = s.spawn(|| {
                ready.store(true, Relaxed);
                while !go.load(Relaxed) {
                    std::hint::spin_loop();
                }
                // A delay that varies across tries, so that some land while
                // the fault zeroes its page.
                std::thread::sleep(std::time::Duration::from_micros(u64::from(i % 50)));
                rustix::fs::ftruncate(&fd, 2 * HPAGE as u64).expect("ftruncate");
            });
            while !ready.load(Relaxed) {
                std::hint::spin_loop();
            }
            go.store(true, Relaxed);
            // Err(EFAULT) when the fault found the file already cut.
            let _ = map.advise(3 * HPAGE..4 * HPAGE, Advice::PopulateWrite);
            cutter.join().unwrap();
        });
        match resv() {
            2 => {}
            1 => undercounts += 1,
            n => panic!("try {i}: {n} huge pages reserved after the race, not 2 or 1"),
        }
        drop(map);
        drop(fd);
        assert_eq!(resv(), 0, "try {i}: reservations left after the file went");
        if undercounts >= 3 {
            return (i + 1, undercounts);
        }
    }
    (tries, undercounts)
}

#[test]
fn a_hugetlb_truncation_racing_a_fault_gives_back_the_used_reservation() {
    let nr = sysfs::hugetlb_path(HugeSize::Pmd, "nr_hugepages");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let era = release.split(['.', '-']).take(2).map(|n| n.parse().unwrap_or(0)).collect::<Vec<u32>>();
    if !rustix::process::geteuid().is_root() || cpus < 2 || era < vec![6, 1] {
        return eprintln!("skipped: needs root, 2 CPUs and Linux 6.1+ (uid, {cpus} CPUs, {release})");
    }
    if let Err(e) = sysfs::set(&nr, "4") {
        return eprintln!("skipped: cannot set {nr}: {e}");
    }
    let got = std::panic::catch_unwind(|| race(5000));
    sysfs::restore_all();
    let (tries, undercounts) = got.unwrap_or_else(|p| std::panic::resume_unwind(p));
    eprintln!("{undercounts} undercounts in {tries} tries on Linux {release}");
    assert!(
        undercounts > 0,
        "Linux {release} never gave back a used reservation in {tries} tries: if it has been fixed, \
         the model's vma-lock era needs the fix from that release"
    );
}
