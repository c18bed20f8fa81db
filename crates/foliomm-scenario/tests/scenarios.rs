//! Every scenario under scenarios/ passes on the model, under every mapcount
//! design, with the invariant checker after every step; and the interpreter
//! does fail runs that break an expectation, a data-integrity check or an
//! expected error.

use std::path::PathBuf;

use foliomm_scenario::{parse, run, ModelBackend, RunOptions};

fn scenario_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

fn run_src(src: &str) -> foliomm_scenario::Outcome {
    let steps = parse(src).expect("scenario parses");
    run(&steps, &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() })
}

/// Every shipped scenario file with expectations (scenarios/ and its
/// folders; the workloads of decisions/ expect nothing and are run by
/// `bench shared-decisions`), sorted.
fn shipped() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let dirs = [
        "",
        "cow",
        "threads",
        "shmem",
        "hugetlb",
        "swap",
        "split",
        "collapse",
        "migrate",
        "uffd",
        "ksm",
        "lazyfree",
        "soft-dirty",
        "rmap-id",
        "races",
    ];
    for dir in dirs.map(|d| scenario_dir().join(d)) {
        let found = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path());
        files.extend(found.filter(|p| p.extension().is_some_and(|e| e == "fmm")));
    }
    files.sort();
    assert!(files.len() >= 35, "expected the core scenarios and the COW suite, found {}", files.len());
    files
}

/// Runs `f` with the checker after every step under `setting` (`set`
/// lines put first); panics naming the file, the setting and the line.
fn passes_with(f: &PathBuf, setting: &str) {
    // 256 MiB keeps the checker's frame walk short; a file's own
    // `set memory` (a later line) still wins.
    let src = format!("{setting}\nset memory 256M\n{}", std::fs::read_to_string(f).unwrap());
    let steps = parse(&src).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    assert!(
        steps.iter().any(|s| {
            use foliomm_scenario::lang::Cmd;
            let statuses = matches!(&s.cmd, Cmd::MovePages(m) if !m.status.is_empty());
            s.fails.is_some() || statuses || matches!(s.cmd, Cmd::Expect { .. })
        }),
        "{} has no expect line",
        f.display()
    );
    let out = run(&steps, &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() });
    if let Some(fail) = out.failure {
        let line = fail.line - 1 - setting.lines().count();
        panic!("{} ({setting}) failed at line {line}: {}", f.display(), fail.message);
    }
}

#[test]
fn every_shipped_scenario_passes_under_every_design_with_the_checker() {
    for f in shipped() {
        for d in foliomm::internals::mapcount::Design::ALL {
            passes_with(&f, &format!("set mapcount {}", d.name()));
        }
    }
}

/// The kernel release is an axis apart from the mapcount design: every
/// shipped scenario passes with the checker under the newest design
/// following the oldest release, and under the oldest design following the
/// newest (a pairing no kernel had).
#[test]
fn every_shipped_scenario_passes_under_crossed_design_and_release() {
    for f in shipped() {
        passes_with(&f, "set mapcount mm-id\nset kernel 6.1");
        passes_with(&f, "set mapcount subpage\nset kernel 6.18");
    }
}

/// A release changes what the model does, whatever the design: a write to
/// the huge zero folio allocates a THP from 6.13 on and copies one page
/// before, under mm-id and under subpage alike; `set kernel` alone picks
/// its era's design too (6.1: subpage, whose PMD maps count in every page).
#[test]
fn a_release_decides_its_behaviours_under_any_design() {
    let zero_write = |setting: &str| {
        let src = format!("{setting}\nP: a = mmap 2M rw align 2M\nP: madvise a hugepage\nP: read a\nP: write a[4K]\nP: observe a[4K] as w\n");
        let out = run_src(&src);
        assert!(out.failure.is_none(), "{setting}: {:?}", out.failure);
        let thp = out.counters.iter().find(|(n, _)| n == "thp_fault_alloc").map(|(_, v)| *v);
        (thp.unwrap(), out.observations[0].1.page.folio_order)
    };
    for d in ["mm-id", "subpage"] {
        assert_eq!(zero_write(&format!("set mapcount {d}\nset kernel 6.12")), (0, 0), "{d} on 6.12");
        assert_eq!(zero_write(&format!("set mapcount {d}\nset kernel 6.13")), (1, 9), "{d} on 6.13");
    }
    let era = run_src("set kernel 6.1\nP: a = mmap 2M rw align 2M\nP: madvise a hugepage\nP: write a\nP: observe a as o\nexpect [subpage] o.mapcount == 1\nexpect [mm-id] o.mapcount == 99\n");
    assert!(era.failure.is_none(), "set kernel 6.1 alone runs subpage: {:?}", era.failure);
}

/// cow.c runs every case at every mTHP size the kernel offers: each
/// `mthp64k--*` case of the COW suite, rewritten for every other size from
/// 16K to 1024K, passes under every design with the checker.
#[test]
fn every_mthp_cow_case_passes_at_every_mthp_size_under_every_design() {
    let cases: Vec<PathBuf> =
        shipped().into_iter().filter(|f| f.to_string_lossy().contains("/cow/mthp64k--")).collect();
    assert!(cases.len() >= 7, "the 64K cases of the COW suite: {cases:?}");
    let dir = std::env::temp_dir().join(format!("foliomm-mthp-sizes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in &cases {
        let src = std::fs::read_to_string(f).unwrap();
        for size in ["16K", "32K", "128K", "256K", "512K", "1024K"] {
            // Named after the case and the size, so that a failure says which.
            let name = f.file_name().unwrap().to_string_lossy().replace("mthp64k", &format!("mthp{size}"));
            let sized = dir.join(name);
            std::fs::write(&sized, src.replace("64K", size)).unwrap();
            for d in foliomm::internals::mapcount::Design::ALL {
                passes_with(&sized, &format!("set mapcount {}", d.name()));
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_shipped_scenario_passes_at_every_seed_000_stage_with_the_checker() {
    for f in shipped() {
        for d in ["rmap-id", "rmap-id-powersum"] {
            for s in foliomm::internals::mapcount::RmapIdStage::ALL {
                passes_with(&f, &format!("set mapcount {d}\nset rmap_id_stage {s}"));
            }
        }
    }
}

#[test]
fn every_shipped_scenario_passes_under_every_vma_lock_design_with_the_checker() {
    for f in shipped() {
        for (_, name) in foliomm::internals::machine::VmaLockDesign::ALL {
            passes_with(&f, &format!("set vma_lock {name}"));
        }
    }
}

#[test]
fn every_hugetlb_scenario_passes_under_every_hugetlb_sync_design_with_the_checker() {
    for f in shipped().iter().filter(|f| f.parent().is_some_and(|d| d.ends_with("hugetlb"))) {
        for (_, name) in foliomm::internals::machine::HugetlbSync::ALL {
            passes_with(f, &format!("set hugetlb_sync {name}"));
        }
    }
}

/// The seeds' races as scenario files (scenarios/races/), on simulated
/// CPUs: each passes under the designs that close its race and fails under
/// the broken one the seed replaced. Seed 002: under `no-lock` the fault
/// writes through a PMD table its MM let go, and the checker names the
/// fault and the table.
#[test]
fn seed_002s_unshare_race_is_found_only_under_no_lock() {
    unshare_race_found_only_under_no_lock("races/01-hugetlb-unshare-against-a-fault.fmm");
}

/// The same race with the unsharing done by a migration's rmap walk
/// (`try_to_migrate_one`).
#[test]
fn seed_002s_migration_unshare_race_is_found_only_under_no_lock() {
    unshare_race_found_only_under_no_lock("races/03-hugetlb-migration-unshares-against-a-fault.fmm");
}

/// Runs `file` under the seed's two designs, which pass, and under
/// `no-lock`, where the checker must name the fault and the table.
fn unshare_race_found_only_under_no_lock(file: &str) {
    let f = scenario_dir().join(file);
    for design in ["vma-lock", "i-mmap-rwsem"] {
        passes_with(&f, &format!("set hugetlb_sync {design}"));
    }
    let src = format!("set hugetlb_sync no-lock\n{}", std::fs::read_to_string(&f).unwrap());
    let out = run(&parse(&src).unwrap(), &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() });
    let fail = out.failure.expect("no-lock lets the fault write through a table its MM let go");
    let m = &fail.message;
    assert!(m.contains("use_after_free") && m.contains("hugetlb fault at") && m.contains("stopped using"), "{m}");
}

/// Seed 003: under the bit spinlock and the sleeping lock the scenario
/// passes; without a lock the PMD unmap and the PTE unmap both count the
/// same page, and the stat and the checker see it. Linux 6.1 (`subpage`)
/// had no such race: its DoubleMap bias keeps the child's page counted
/// until the parent's last PMD unmap lowers it.
#[test]
fn seed_003s_race_miscounts_nr_anon_mapped_only_without_the_compound_lock() {
    let f = scenario_dir().join("races/02-compound-mapcounts-race-at-unmap.fmm");
    for lock in ["bit-spinlock", "sleeping"] {
        passes_with(&f, &format!("set compound_lock {lock}"));
    }
    let src = std::fs::read_to_string(&f).unwrap();
    let steps = parse(&src.replace("set mapcount compound-locked", "set mapcount subpage")).unwrap();
    let out = run(&steps, &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() });
    assert!(out.failure.is_none(), "6.1's DoubleMap: {:?}", out.failure);
    let unlocked = |src: &str, check: bool| {
        let steps = parse(&format!("set compound_lock unlocked\n{src}")).unwrap();
        run(&steps, &mut ModelBackend::new(), RunOptions { check, ..RunOptions::default() }).failure
    };
    let fail = unlocked(&src, false).expect("the unlocked counters must lose a page");
    assert!(fail.message.contains("stat.nr_anon_pages (= 509) == 510"), "{}", fail.message);
    let fail =
        unlocked(&src.replace("expect stat.nr_anon_pages == 510", ""), true).expect("the checker sees the drift");
    assert!(fail.message.contains("NR_ANON_MAPPED is 509, page tables map 510"), "{}", fail.message);
}

#[test]
fn a_wrong_expectation_fails_the_run() {
    let out = run_src("P: a = mmap 4K rw\nP: write a\nP: observe a as x\nexpect x.folio_order == 9\n");
    let f = out.failure.expect("must fail");
    assert_eq!(f.line, 4);
    assert!(f.message.contains("expectation failed"), "{}", f.message);
}

#[test]
fn a_wrong_sum_or_a_difference_below_zero_fails_the_run() {
    let src = "P: a = mmap 8K rw\nP: write a\nP: observe a as x\nexpect x.rss_kb == x.folio_kb + 4\n";
    assert!(run_src(src).failure.is_none(), "8 == 4 + 4");
    let out = run_src(&src.replace("+ 4", "+ 8"));
    assert!(out.failure.unwrap().message.contains("x.rss_kb (= 8) == x.folio_kb (= 4) + 8"));
    let out = run_src(&src.replace("+ 4", "- 5"));
    assert!(out.failure.unwrap().message.contains("x.folio_kb (= 4) - 5 is out of range"));
}

#[test]
fn a_reservation_count_below_zero_is_noted_with_its_line() {
    let src =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/hugetlb/26-rsvd-underflow.fmm"))
            .unwrap();
    let out = run_src(&src);
    assert!(out.failure.is_none(), "{:?}", out.failure);
    assert_eq!(out.notes.len(), 1, "{:?}", out.notes);
    assert!(out.notes[0].starts_with("line 15: hugepages_rsvd 1 below zero"), "{}", out.notes[0]);
    assert!(run_src("P: a = mmap 4K rw\nexpect stat.hugepages_rsvd == 0\n").notes.is_empty());
}

#[test]
fn an_unexpected_success_or_error_fails_the_run() {
    let out = run_src("P: a = mmap 4K rw\nP: write a fails ENOMEM\n");
    assert!(out.failure.unwrap().message.contains("succeeded, expected it to fail"));
    let out = run_src("P: a = mmap 4K r\nP: write a\n");
    assert!(out.failure.unwrap().message.contains("EACCES"));
}

#[test]
fn cow_keeps_processes_apart_byte_for_byte() {
    // The parent's later write must not reach the child: checked by reads
    // against the reference model, which the interpreter does on every read.
    let out = run_src("set thp 64K=always\nP: a = mmap 64K rw\nP: fill a = 1\nP: fork C\nP: fill a = 2\nC: verify a\nP: verify a\nC: observe a as c\nexpect c.byte == 1\n");
    assert!(out.failure.is_none(), "{:?}", out.failure);
}

#[test]
fn unknown_names_are_clear_errors() {
    let out = run_src("P: munmap nothing\n");
    assert!(out.failure.unwrap().message.contains("unknown mapping 'nothing'"));
    let out = run_src("P: a = mmap 4K rw\nP: observe a as x\nexpect x.colour == 1\n");
    assert!(out.failure.unwrap().message.contains("no field 'colour'"));
    // A field named after `except` is neither recorded nor usable.
    let out = run_src(
        "P: a = mmap 4K rw\nP: write a = 0x5a\nP: observe a as x except frame\nexpect x.byte == 0x5a\nexpect x.frame == 1\n",
    );
    let f = out.failure.unwrap();
    assert!(f.line == 5 && f.message.contains("does not record 'frame'"), "{f:?}");
    assert!(!out.steps[2].observed.unwrap().knows("frame") && out.steps[2].observed.unwrap().knows("byte"));
    // An unknown design is a parse error naming its line and column.
    let e = parse("set memory 64M\nset mapcount nonsense\nset zap batched\nP: a = mmap 4K rw\n").unwrap_err();
    assert!(e.to_string().contains("unknown mapcount design 'nonsense'"), "{e}");
    assert_eq!((e.line, e.col), (2, 14));
}

/// #15: the free-before-flush switch is caught by a scenario: a thread
/// reading through its TLB while another zaps sees the freed pages. The
/// threads are the OS's, so the race is met only when they overlap: on a
/// loaded machine a run may pass, so each switched case gets 20 runs to
/// show it (the unswitched scenario passes in every order).
#[test]
fn freeing_before_the_flush_is_caught_by_a_scenario() {
    let src = std::fs::read_to_string("../../scenarios/threads/11-read-races-dontneed.fmm").unwrap();
    let steps = parse(&src).unwrap();
    let out = run(&steps, &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() });
    assert!(out.failure.is_none(), "{:?}", out.failure.map(|f| f.message));
    let steps = parse(&format!("set debug free-before-flush\n{src}")).unwrap();
    let caught = |check: bool| {
        (0..20)
            .find_map(|_| run(&steps, &mut ModelBackend::new(), RunOptions { check, ..RunOptions::default() }).failure)
    };
    let f = caught(true).expect("the bytes or the checker must show the stale TLB entry used");
    assert!(f.message.contains("use after free") || f.message.contains("data integrity"), "{}", f.message);
    let f = caught(false).expect("without the checker, the bytes must show the poison");
    assert!(f.message.contains("data integrity"), "{}", f.message);
}

#[test]
fn a_reuse_of_a_shared_folio_is_caught_as_wrong_exclusive_and_by_bytes() {
    let src = "set debug reuse-shared\nset thp 64K=always\nP: a = mmap 64K rw align 64K\nP: fill a = 1\nP: fork C\nP: write a = 2\nC: verify a\n";
    let steps = parse(src).unwrap();
    let mut backend = ModelBackend::new();
    let out = run(&steps, &mut backend, RunOptions { check: true, ..RunOptions::default() });
    let f = out.failure.expect("a reuse of a shared folio must fail the run");
    assert!(f.message.contains("wrong-exclusive"), "{}", f.message);
    // Without the checker the bytes still catch it: the child sees the write.
    let out = run(&steps, &mut ModelBackend::new(), RunOptions::default());
    let f = out.failure.expect("the child's bytes must differ");
    assert!(f.message.contains("data integrity"), "{}", f.message);
}

/// Why a KSM page is never reused: reused once mapped once, it stays in the
/// stable tree, writable; a page ksmd merges into it then sees the owner's
/// next write. The byte checks catch the leak.
#[test]
fn a_reused_ksm_page_leaks_writes_to_the_next_page_merged_into_it() {
    let src = "set debug ksm-reuse\nP: a = mmap 4K rw\nQ: b = mmap 4K rw\nP: fill a = 7\nQ: fill b = 7\n\
               P: madvise a mergeable\nQ: madvise b mergeable\nksmd 2\nQ: munmap b\nP: write a = 9\n\
               R: c = mmap 4K rw\nR: fill c = 7\nR: write c = 9\nR: madvise c mergeable\nksmd 2\n\
               P: write a[8] = 1\nR: verify c\n";
    let steps = parse(src).unwrap();
    let out = run(&steps, &mut ModelBackend::new(), RunOptions::default());
    let f = out.failure.expect("R must see P's write");
    assert!(f.message.contains("data integrity"), "{}", f.message);
    // Without the switch the write copies the KSM page, and R keeps its bytes.
    let fixed = src.replace("set debug ksm-reuse\n", "");
    let out =
        run(&parse(&fixed).unwrap(), &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() });
    assert!(out.failure.is_none(), "{:?}", out.failure.map(|f| f.message));
}

/// Why mprotect must ask soft-dirty tracking before it makes an entry
/// writable (the 6.0 fix of `can_change_pte_writable`): without the check
/// the write after `mprotect rw` goes unseen. The invariant checker finds
/// the writable entry that is not soft-dirty, and pagemap shows the lost
/// write; with the check both hold.
#[test]
fn mprotect_that_forgets_soft_dirty_loses_a_write() {
    let src = "set soft_dirty on\nset debug soft-dirty-unchecked\nset thp enabled=never\nP: a = mmap 8K rw\n\
               P: write a = 1\nP: clear_refs soft_dirty\nP: mprotect a r\nP: mprotect a rw\nP: write a[0] = 2\n\
               P: observe a as w\nexpect w.soft_dirty == 1\n";
    let checked = RunOptions { check: true, ..RunOptions::default() };
    let out = run(&parse(src).unwrap(), &mut ModelBackend::new(), checked);
    let f = out.failure.expect("the checker must find the writable clean entry");
    assert!(f.message.contains("not soft-dirty while writes are tracked"), "{}", f.message);
    let out = run(&parse(src).unwrap(), &mut ModelBackend::new(), RunOptions::default());
    let f = out.failure.expect("pagemap must show the write as unseen");
    assert!(f.message.contains("w.soft_dirty (= 0)"), "{}", f.message);
    let fixed = src.replace("set debug soft-dirty-unchecked\n", "");
    let out = run(&parse(&fixed).unwrap(), &mut ModelBackend::new(), checked);
    assert!(out.failure.is_none(), "{:?}", out.failure.map(|f| f.message));
}

/// What MADV_FREE is for: with no swap device, memory let go is what
/// reclaim can take. The second fill fits in 64M only after the first
/// mapping's MADV_FREE; without it the model runs out of memory.
#[test]
fn lazily_freed_memory_is_what_reclaim_takes_without_swap() {
    let src = "set memory limit 64M\nset thp enabled=never\nP: a = mmap 48M rw\nP: fill a = 1\nP: madvise a free\n\
               P: b = mmap 48M rw\nP: fill b = 2\nP: verify b\nP: verify a\n";
    let checked = RunOptions { check: true, ..RunOptions::default() };
    let out = run(&parse(src).unwrap(), &mut ModelBackend::new(), checked);
    assert!(out.failure.is_none(), "{:?}", out.failure.map(|f| f.message));
    let kept = src.replace("P: madvise a free\n", "");
    let out = run(&parse(&kept).unwrap(), &mut ModelBackend::new(), RunOptions::default());
    let f = out.failure.expect("without MADV_FREE the second fill cannot fit");
    assert!(f.message.contains("ENOMEM"), "{}", f.message);
}

/// Found by the fuzzer: a pread or pwrite of tens of terabytes allocated a
/// buffer of the whole range and aborted; they go in 64 MiB pieces now,
/// a pread stopping at the end of the file.
#[test]
fn huge_preads_and_pwrites_stream() {
    let out = run_src("set memory 16M\nP: f = memfd 8K\nP: pwrite f[0..4K] = 0x41\nP: pread f[0..70T]\n");
    assert!(out.failure.is_none(), "{:?}", out.failure.map(|f| f.message));
    let read = out.steps.iter().find(|s| s.text.contains("pread")).unwrap();
    assert_eq!(read.result, "read 8192 bytes as expected");
    // Out of model memory part way: a short write, reported as such.
    let out = run_src("set memory 16M\nP: f = memfd 8K\nP: pwrite f[0..70T] = 0x42\n");
    let f = out.failure.expect("70 TiB do not fit 16 MiB");
    assert!(f.message.starts_with("pwrite wrote "), "{}", f.message);
}

#[test]
fn a_failure_expected_only_on_some_releases_must_succeed_elsewhere() {
    let src = |kernel: &str| format!("set kernel {kernel}\nP: a = mmap 8K rw\nP: munmap a fails [<6.7] EINVAL\n");
    // munmap succeeds on every release: the condition makes the expected
    // failure apply to 6.1 only, so only that run fails.
    assert!(run_src(&src("6.1")).failure.is_some());
    assert!(run_src(&src("6.8")).failure.is_none());
    let e = parse("P: munmap a fails [<6.7 EINVAL\n").unwrap_err();
    assert_eq!((e.line, e.col), (1, 19), "{e}");
    let e = parse("P: munmap a fails [6.99+] EINVAL\n").unwrap_err();
    assert!(e.msg.contains("6.99"), "{e}");
}
