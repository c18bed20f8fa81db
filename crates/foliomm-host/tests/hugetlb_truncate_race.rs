//! The host kernel's side of a race the model's shuttle test finds
//! (`shuttle_hugetlb_truncation_racing_a_fault_undercounts_reservations_only_under_the_vma_lock`):
//! a hugetlbfs truncation that meets a fault which read the old size
//! gives back the reservation the fault has just used. Since 6.1
//! `hugetlb_vmdelete_list` skips a VMA whose hugetlb VMA lock a fault
//! holds, and `remove_inode_hugepages` takes the fault mutex only of pages
//! it finds in the cache, which the fault's page is not yet in while it is
//! zeroed; `hugetlb_unreserve_pages` then counts its promise as unused,
//! and the page stays in the cache past the end. `HugePages_Rsvd` is one
//! short until the file goes, and for good if the truncation came between
//! the fault's use of the promise and `vma_commit_reservation`, which puts
//! the page's entry back in the reservation map.
//!
//! Opt-in (`FOLIOMM_HOST_HUGETLB_RACE=1`), because that leak lasts until
//! the host reboots, and a pool whose reserved count has wrapped below
//! zero cannot shrink: `nr_hugepages` stays at 4. Needs root, two CPUs and
//! a 6.1 or later kernel; skips with a message otherwise.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use foliomm::internals::machine::HugeSize;
use foliomm_host::sys::{memfd, Advice, Map};
use foliomm_host::sysfs;

const HPAGE: usize = 2 << 20;

/// What the tries saw: how many, how many left the count one short, how
/// many left the page past the end, how many lost a promise for good.
#[derive(Debug, Default)]
struct Seen {
    tries: u32,
    short: u32,
    missed: u32,
    leaked: u32,
}

/// Tries the race until 3 tries were one short, at most `tries` times.
/// Each try: a 4-page file mapped shared (4 promised), its last page
/// populated for writing while another thread cuts the file to 2 pages.
/// Afterwards 2 promises must be left (pages 0 and 1), or 1 after an
/// undercount, when the page stays in the cache past the end: a fault
/// there maps it, and a byte written there is read back once the file
/// grows again. Once the file is closed no promise is left, or one too
/// few.
fn race(tries: u32) -> Seen {
    // Relative to the count before: other users of the pool (or an
    // earlier leak) may hold reservations.
    let mut base = sysfs::huge_counts(HugeSize::Pmd).resv;
    let mut seen = Seen::default();
    for i in 0..tries {
        let resv = || sysfs::huge_counts(HugeSize::Pmd).resv.wrapping_sub(base) as i64;
        let fd = memfd(c"foliomm-race", 4 * HPAGE as u64, true).expect("a hugetlb memfd");
        let map = Map::file(Some((fd.as_fd(), 0))).shared(true).map(4 * HPAGE).expect("a shared mapping");
        let (ready, go) = (AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|s| {
            let cutter = s.spawn(|| {
                ready.store(true, Relaxed);
                while !go.load(Relaxed) {
                    std::hint::spin_loop();
                }
                // A busy wait of 0 to 199 us, varied across tries, so that
                // some truncations land while the fault zeroes its page.
                let start = std::time::Instant::now();
                while start.elapsed() < std::time::Duration::from_micros(u64::from(i % 200)) {
                    std::hint::spin_loop();
                }
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
        let short = match resv() {
            2 => false,
            1 => true,
            n => panic!("try {i}: {n} huge pages reserved after the race, not 2 or 1"),
        };
        // Past the end a fault finds a page the truncation missed in the
        // cache and maps it (`hugetlb_no_page` checks the size only when
        // the cache has no page), so a write lands; elsewhere past the end
        // it is SIGBUS (EFAULT from MADV_POPULATE_WRITE). A fault that
        // found the promise gone took an unpromised page: missed, not short.
        let missed = map.advise(3 * HPAGE..4 * HPAGE, Advice::PopulateWrite).is_ok();
        assert!(missed || !short, "try {i}: one short, but a fault past the end found no page");
        if missed {
            map.write(3 * HPAGE, 0xfe);
        }
        // The file grows back: a page the truncation missed comes back with
        // the byte written past the end; otherwise the page reads 0.
        rustix::fs::ftruncate(&fd, 4 * HPAGE as u64).expect("ftruncate");
        let again = Map::file(Some((fd.as_fd(), 0))).shared(true).map(4 * HPAGE).expect("a shared mapping");
        assert_eq!(again.read(3 * HPAGE) == 0xfe, missed, "try {i}: the page past the old end");
        drop((again, map, fd));
        let leaked = match resv() {
            0 => false,
            -1 => true,
            n => panic!("try {i}: {n} huge pages reserved after the file went, not 0 or -1"),
        };
        base = base.wrapping_sub(u64::from(leaked));
        seen = Seen {
            tries: i + 1,
            short: seen.short + u32::from(short),
            missed: seen.missed + u32::from(missed),
            leaked: seen.leaked + u32::from(leaked),
        };
        if seen.short >= 3 {
            break;
        }
    }
    seen
}

#[test]
fn a_hugetlb_truncation_racing_a_fault_gives_back_the_used_reservation() {
    if std::env::var_os("FOLIOMM_HOST_HUGETLB_RACE").is_none() {
        return eprintln!(
            "skipped: set FOLIOMM_HOST_HUGETLB_RACE=1 (it may leak a huge page reservation until reboot)"
        );
    }
    let nr = sysfs::hugetlb_path(HugeSize::Pmd, "nr_hugepages");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let era = release.split(['.', '-']).take(2).map(|n| n.parse().unwrap_or(0)).collect::<Vec<u32>>();
    if !rustix::process::geteuid().is_root() || cpus < 2 || era < vec![6, 1] {
        return eprintln!("skipped: needs root, 2 CPUs and Linux 6.1+ ({cpus} CPUs, {release})");
    }
    if let Err(e) = sysfs::set(&nr, "4") {
        return eprintln!("skipped: cannot set {nr}: {e}");
    }
    let got = std::panic::catch_unwind(|| race(5000));
    sysfs::restore_all();
    let seen = got.unwrap_or_else(|p| std::panic::resume_unwind(p));
    eprintln!("Linux {release}: {seen:?}");
    assert!(
        seen.short > 0,
        "Linux {release} never gave back a used reservation in {} tries: if it has been fixed, \
         the model's vma-lock era needs the fix from that release",
        seen.tries
    );
}
