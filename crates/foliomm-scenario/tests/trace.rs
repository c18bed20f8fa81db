//! A run's trace shows every page a step changed, in every process: a
//! split of a shmem THP that one process maps zaps the other process's
//! mapping of the same file at another address, and the trace shows that
//! mapping too.

use foliomm_scenario::{parse, run, ModelBackend, RunOptions};

#[test]
fn a_split_shows_the_other_process_mapping_it_zapped() {
    let src = "set shmem enabled=always\nP: f = memfd 2M\nP: fork C\n\
               P: a = mmap 2M rw shared file f at 0x40000000 fixed\n\
               C: b = mmap 2M rw shared file f at 0x80000000 fixed\n\
               P: write a[4K] = 0x01\nC: read b[4K]\nP: split a to order 0\nP: read a[4K]\n";
    let out = run(&parse(src).unwrap(), &mut ModelBackend::new(), RunOptions { trace: true, ..RunOptions::default() });
    assert!(out.failure.is_none(), "{:?}", out.failure);
    let pages = |line: usize| &out.steps.iter().find(|s| s.line == line).unwrap().trace;
    // Before the split C's mapping is PMD-mapped; the split unmapped it.
    let before = pages(7).iter().find(|p| p.proc == "C" && p.map == "b" && p.offset == 4096).unwrap();
    assert!(before.page.present && before.page.pmd_mapped, "{before:?}");
    let after: Vec<_> = pages(8).iter().filter(|p| p.proc == "C" && p.map == "b").collect();
    assert!(!after.is_empty() && after.iter().all(|p| !p.page.present), "{after:?}");
    // A step that changes nothing elsewhere shows only its own place.
    assert!(pages(9).iter().all(|p| p.map == "a"), "{:?}", pages(9));
}
