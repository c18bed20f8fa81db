//! The safe system-call types the benchmarks' host columns use: mappings
//! keep their bounds and their meaning, workers report or are reported
//! dead, never hang.

use std::os::fd::AsFd;

use foliomm_host::sys::{fork_child_that_exits, memfd, Advice, Map, Workers};

const PAGE: usize = 4096;
const PMD: usize = 2 << 20;

#[test]
fn anonymous_memory_reads_back_and_dontneed_zeroes_it() {
    let m = Map::anon().map(4 * PAGE).unwrap();
    assert_eq!(m.len(), 4 * PAGE);
    m.write_every(0..4 * PAGE, PAGE, 7);
    assert_eq!((m.read(0), m.read(3 * PAGE), m.read(1)), (7, 7, 0));
    m.advise(PAGE..2 * PAGE, Advice::DontNeed).unwrap();
    assert_eq!((m.read(0), m.read(PAGE), m.read(2 * PAGE)), (7, 0, 7));
}

#[test]
fn a_shared_file_mapping_sees_another_mappings_writes_and_a_private_one_does_not_leak_them() {
    let fd = memfd(c"foliomm-test", 2 * PAGE as u64, false).unwrap();
    let file = Map::file(Some((fd.as_fd(), 0)));
    let (a, b) = (file.shared(true).map(2 * PAGE).unwrap(), file.shared(true).map(2 * PAGE).unwrap());
    let private = file.map(2 * PAGE).unwrap();
    a.write(PAGE + 5, 42);
    assert_eq!(b.read(PAGE + 5), 42);
    private.write(PAGE + 5, 9);
    assert_eq!((private.read(PAGE + 5), a.read(PAGE + 5)), (9, 42));
    // After MADV_DONTNEED a private mapping of a file reads the file again.
    private.advise(0..2 * PAGE, Advice::DontNeed).unwrap();
    assert_eq!(private.read(PAGE + 5), 42);
}

#[test]
fn fixed_placement_refuses_an_occupied_range_and_alignment_is_exact() {
    let m = Map::anon().aligned(PMD).map(PMD + PAGE).unwrap();
    assert_eq!((m.addr() % PMD, m.len()), (0, PMD + PAGE));
    let err = Map::anon().at(m.addr() + PAGE).map(PAGE).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    // The trimmed ends were unmapped: a fixed mapping fits right after.
    let after = Map::anon().at(m.addr() + m.len()).map(PAGE).unwrap();
    assert_eq!(after.addr(), m.addr() + PMD + PAGE);
}

#[test]
fn a_protection_round_trip_leaves_the_memory_writable_and_its_bytes() {
    let mut m = Map::anon().map(2 * PAGE).unwrap();
    m.fill(0..2 * PAGE, 3);
    m.protect_round_trip(0..PAGE).unwrap();
    m.write(10, 4);
    assert_eq!((m.read(10), m.read(PAGE + 10)), (4, 3));
    m.unmap().unwrap();
}

#[test]
#[should_panic(expected = "outside a mapping")]
fn an_access_past_the_end_panics_instead_of_touching_other_memory() {
    let m = Map::anon().map(PAGE).unwrap();
    m.write(PAGE, 1);
}

#[test]
fn workers_start_together_and_report_their_words() {
    let shared = Map::anon().map(PAGE).unwrap();
    shared.write(0, 5);
    let mut w = Workers::fork(3, |i| [i as u64 * 10, shared.read(0) as u64]).unwrap();
    w.start().unwrap();
    let mut reports = w.reports().unwrap();
    reports.sort();
    assert_eq!(reports, vec![(0, [0, 5]), (1, [10, 5]), (2, [20, 5])]);
}

#[test]
fn a_worker_that_dies_is_reported_and_nothing_waits_for_it() {
    let mut w = Workers::<1>::fork(2, |i| {
        if i == 1 {
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL).unwrap();
        }
        [1]
    })
    .unwrap();
    w.start().unwrap();
    let err = w.reports().unwrap_err();
    assert!(err.to_string().contains("died"), "{err}");
}

#[test]
fn a_forked_child_that_exits_is_reaped() {
    fork_child_that_exits().unwrap();
    // Neither running nor a zombie: this thread has no child left.
    let children = std::fs::read_to_string("/proc/thread-self/children").unwrap();
    assert_eq!(children.trim(), "");
}
