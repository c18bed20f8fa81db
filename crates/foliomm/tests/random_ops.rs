//! Property test: random sequences of mmap/munmap/mprotect/madvise/mremap/fork/exit/read/write/
//! split/collapse/khugepaged over several processes, and in the threaded test two threads
//! writing while a third changes the mappings. After every step
//! the invariant checker must find nothing, and every read must return what the reference byte
//! model says (fork = deep copy). Two CPUs with TLBs take turns, freed frames are poisoned, and
//! every mapcount design takes its turn. The machine (14M, with 32M of swap) is smaller than four
//! processes' windows, so reclaim runs under memory pressure in some cases
//! (the test fails if in none). Each test runs about 50,000 operations; `FOLIOMM_SOAK=N` runs
//! about N in each (10000000 for a soak). Shrunk failures are saved in the regressions file and run first.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use foliomm::internals::check::reference::RefSpace;
use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::mapcount::RmapIdStage;
use foliomm::internals::mm::Advice;
use foliomm::{Config, Cpu, Errno, Machine, Mm, MmapFlags, Prot};
use proptest::option;
use proptest::prelude::*;

#[path = "random_ops/concurrent.rs"]
mod concurrent;
use concurrent::{concurrent_op, run_concurrent, Change};

const PAGE: u64 = 4096;
/// Every mapping lives in a fixed window so that operations hit each other.
const WINDOW: u64 = 0x4000_0000;
const WINDOW_PAGES: u64 = 2048; // 8 MiB: four PMDs

#[derive(Clone, Debug)]
enum Op {
    Mmap {
        proc: usize,
        page: u64,
        pages: u64,
        prot: u32,
        huge: bool,
    },
    Munmap {
        proc: usize,
        page: u64,
        pages: u64,
    },
    Mprotect {
        proc: usize,
        page: u64,
        pages: u64,
        prot: u32,
    },
    DontNeed {
        proc: usize,
        page: u64,
        pages: u64,
    },
    /// A change of how the range is backed that keeps every byte.
    Reshape {
        proc: usize,
        page: u64,
        pages: u64,
        how: Reshape,
    },
    Mremap {
        proc: usize,
        page: u64,
        pages: u64,
        to: u64,
        new_pages: u64,
    },
    Fork {
        proc: usize,
    },
    Exit {
        proc: usize,
    },
    Write {
        proc: usize,
        page: u64,
        pages: u64,
        val: u8,
    },
    WriteBytes {
        proc: usize,
        off: u64,
        len: u64,
        val: u8,
    },
    Read {
        proc: usize,
        page: u64,
        pages: u64,
    },
    /// Two threads of `proc` write one byte per page of two adjacent
    /// ranges from `page` while a third applies `change` to the range
    /// after them; the outcome is the same in every order.
    Concurrent {
        proc: usize,
        page: u64,
        lens: [u64; 3],
        vals: [u8; 2],
        change: Change,
    },
}

/// What [`Op::Reshape`] does: MADV_PAGEOUT (pages mapped once go to swap),
/// debugfs `split_huge_pages` to an order (0, 2, 4), maybe around a page,
/// MADV_COLLAPSE, a full khugepaged scan (of every process, whatever the
/// range), or `move_pages` to a node (`MPOL_MF_MOVE_ALL` or not).
#[derive(Clone, Copy, Debug)]
enum Reshape {
    PageOut,
    Split(u32, Option<u64>),
    Collapse,
    Khugepaged,
    Migrate { node: i32, all: bool },
}

fn range() -> impl Strategy<Value = (u64, u64)> {
    prop_oneof![
        (0..WINDOW_PAGES, 1..64u64),
        // PMD-aligned, PMD-sized ranges so THPs appear and get split.
        (0..4u64, 1..3u64).prop_map(|(i, n)| (i * 512, n * 512)),
    ]
    .prop_map(|(p, n)| (p, n.min(WINDOW_PAGES - p)))
}

fn reshape() -> impl Strategy<Value = Reshape> {
    prop_oneof![
        Just(Reshape::PageOut),
        (prop_oneof![Just(0u32), Just(2), Just(4)], option::of(0..512u64)).prop_map(|(o, at)| Reshape::Split(o, at)),
        Just(Reshape::Collapse),
        Just(Reshape::Khugepaged),
        (0..2i32, any::<bool>()).prop_map(|(node, all)| Reshape::Migrate { node, all }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let proc = prop_oneof![3 => Just(0usize), 2 => Just(1usize), 1 => Just(2usize), 1 => Just(3usize)];
    prop_oneof![
        3 => (proc.clone(), range(), prop_oneof![Just(3u32), Just(1u32)], any::<bool>())
            .prop_map(|(proc, (page, pages), prot, huge)| Op::Mmap { proc, page, pages, prot, huge }),
        1 => (proc.clone(), range()).prop_map(|(proc, (page, pages))| Op::Munmap { proc, page, pages }),
        2 => (proc.clone(), range(), prop_oneof![Just(0u32), Just(1u32), Just(3u32)])
            .prop_map(|(proc, (page, pages), prot)| Op::Mprotect { proc, page, pages, prot }),
        1 => (proc.clone(), range()).prop_map(|(proc, (page, pages))| Op::DontNeed { proc, page, pages }),
        3 => (proc.clone(), range(), reshape()).prop_map(|(proc, (page, pages), how)| Op::Reshape { proc, page, pages, how }),
        1 => (proc.clone(), range(), 0..WINDOW_PAGES, 1..64u64)
            .prop_map(|(proc, (page, pages), to, new_pages)| Op::Mremap { proc, page, pages, to, new_pages: new_pages.min(WINDOW_PAGES - to) }),
        2 => proc.clone().prop_map(|proc| Op::Fork { proc }),
        1 => proc.clone().prop_map(|proc| Op::Exit { proc }),
        5 => (proc.clone(), range(), any::<u8>()).prop_map(|(proc, (page, pages), val)| Op::Write { proc, page, pages, val }),
        2 => (proc.clone(), 0..WINDOW_PAGES * PAGE, 1..3 * PAGE, any::<u8>())
            .prop_map(|(proc, off, len, val)| Op::WriteBytes { proc, off, len, val }),
        3 => (proc, range()).prop_map(|(proc, (page, pages))| Op::Read { proc, page, pages }),
    ]
}

struct World {
    m: Arc<Machine>,
    /// Two CPUs with TLBs: accesses alternate between them, so a flush that
    /// misses a CPU leaves a stale translation that the checks see.
    cpus: [Cpu; 2],
    procs: Vec<Option<(Arc<Mm>, RefSpace)>>,
}

fn addr(page: u64) -> u64 {
    WINDOW + page * PAGE
}

fn same_outcome<T: std::fmt::Debug>(
    what: &str,
    model: Result<T, Errno>,
    reference: Result<(), Errno>,
) -> Result<Option<T>, TestCaseError> {
    match (model, reference) {
        (Ok(v), Ok(())) => Ok(Some(v)),
        (Err(a), Err(b)) if a == b => Ok(None),
        (a, b) => Err(TestCaseError::fail(format!("{what}: model {a:?}, reference {b:?}"))),
    }
}

impl World {
    fn step(&mut self, i: usize, op: &Op) -> Result<(), TestCaseError> {
        let proc = match op {
            Op::Mmap { proc, .. }
            | Op::Munmap { proc, .. }
            | Op::Mprotect { proc, .. }
            | Op::DontNeed { proc, .. }
            | Op::Reshape { proc, .. }
            | Op::Mremap { proc, .. }
            | Op::Fork { proc }
            | Op::Exit { proc }
            | Op::Write { proc, .. }
            | Op::WriteBytes { proc, .. }
            | Op::Read { proc, .. }
            | Op::Concurrent { proc, .. } => *proc,
        };
        if self.procs[proc].is_none() {
            self.procs[proc] = Some((self.m.new_mm().unwrap(), RefSpace::default()));
        }
        let (mm, rs) = self.procs[proc].as_mut().unwrap();
        let mm = mm.clone();
        if let Op::Concurrent { page, lens, vals, change, .. } = *op {
            return run_concurrent(&mut self.cpus, &mm, rs, page, lens, vals, change);
        }
        let cpu = &mut self.cpus[(i + proc) % 2];
        match *op {
            Op::Mmap { page, pages, prot, huge, .. } => {
                let fixed = MmapFlags { fixed: true, ..Default::default() };
                mm.mmap(addr(page), pages * PAGE, Prot(prot), fixed).unwrap();
                rs.map(addr(page), pages * PAGE, Prot(prot));
                if huge {
                    mm.madvise(addr(page), pages * PAGE, Advice::HugePage).unwrap();
                }
            }
            Op::Munmap { page, pages, .. } => {
                mm.munmap(addr(page), pages * PAGE).unwrap();
                rs.unmap(addr(page), pages * PAGE);
            }
            Op::Mprotect { page, pages, prot, .. } => {
                let covered = rs.covers(addr(page), pages * PAGE);
                let r = mm.mprotect(addr(page), pages * PAGE, Prot(prot));
                prop_assert_eq!(r.is_ok(), covered, "mprotect over holes fails with ENOMEM");
                // Over a hole, the VMAs before it change (do_mprotect_pkey).
                if covered {
                    rs.protect(addr(page), pages * PAGE, Prot(prot));
                } else {
                    rs.protect_until_hole(addr(page), pages * PAGE, Prot(prot));
                }
            }
            Op::DontNeed { page, pages, .. } => {
                let _ = mm.madvise(addr(page), pages * PAGE, Advice::DontNeed);
                rs.zap(addr(page), pages * PAGE);
            }
            Op::Reshape { page, pages, how, .. } => {
                let (a, len) = (addr(page), pages * PAGE);
                match how {
                    Reshape::PageOut => {
                        let r = mm.madvise(a, len, Advice::PageOut);
                        prop_assert_eq!(r.is_ok(), rs.covers(a, len), "pageout over holes fails with ENOMEM");
                    }
                    Reshape::Split(order, at) => {
                        let r = mm.split_huge_pages(a, a + len, order, at);
                        prop_assert!(r.is_ok(), "split_huge_pages: {r:?}");
                    }
                    Reshape::Collapse => {
                        // Any of madvise_collapse_errno's answers may come.
                        let r = mm.madvise(a, len, Advice::Collapse);
                        prop_assert!(r.is_err() || rs.covers(a, len), "collapse over holes fails");
                    }
                    Reshape::Khugepaged => {
                        foliomm::internals::mm::khugepaged::khugepaged_scan(&self.m.kernel, &self.m.mms, 1);
                    }
                    Reshape::Migrate { node, all } => migrate(&mm, a, len, node, all)?,
                }
            }
            Op::Mremap { page, pages, to, new_pages, .. } => {
                let (old, old_len, new, new_len) = (addr(page), pages * PAGE, addr(to), new_pages * PAGE);
                let overlap = old < new + new_len && new < old + old_len;
                let single_vma =
                    rs.covers(old, old_len) && mm.vmas().iter().any(|v| v.start() <= old && old + old_len <= v.end());
                let r = mm.mremap(old, old_len, new_len, true, Some(new));
                if overlap {
                    prop_assert_eq!(r, Err(Errno::EINVAL));
                } else if single_vma {
                    prop_assert_eq!(r, Ok(new));
                    rs.unmap(new, new_len);
                    rs.remap(old, old_len.min(new_len), new, new_len);
                    rs.unmap(old, old_len);
                } else {
                    prop_assert!(r.is_err(), "mremap of a range not inside one VMA must fail");
                }
            }
            Op::Fork { .. } => {
                let copy = rs.clone();
                if let Some(slot) = self.procs.iter().position(|p| p.is_none()) {
                    self.procs[slot] = Some((mm.fork().unwrap(), copy));
                }
            }
            Op::Exit { .. } => {
                mm.exit();
                self.procs[proc] = None;
            }
            Op::Write { page, pages, val, .. } => {
                let model = cpu.write_byte_per_page(&mm, addr(page), pages * PAGE, val);
                let reference = rs.write_byte_per_page(addr(page), pages * PAGE, val);
                same_outcome("write", model, reference)?;
            }
            Op::WriteBytes { off, len, val, .. } => {
                let data: Vec<u8> = (0..len).map(|i| val.wrapping_add(i as u8)).collect();
                let model = cpu.write(&mm, WINDOW + off, &data);
                let reference = rs.write(WINDOW + off, &data);
                same_outcome("write bytes", model, reference)?;
            }
            Op::Read { page, pages, .. } => {
                let model = cpu.read_byte_per_page(&mm, addr(page), pages * PAGE);
                let reference = rs.read_byte_per_page(addr(page), pages * PAGE);
                match (model, reference) {
                    (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "bytes read differ from the reference"),
                    (Err(a), Err(b)) => prop_assert_eq!(a, b),
                    (a, b) => prop_assert!(false, "read: model {:?}, reference {:?}", a.map(|_| ()), b.map(|_| ())),
                }
            }
            Op::Concurrent { .. } => unreachable!("handled above"),
        }
        Ok(())
    }

    /// Reads every mapped byte of every process and compares with the
    /// reference; a difference names the process, the first address and
    /// both bytes.
    fn verify_all_bytes(&mut self) -> Result<(), TestCaseError> {
        for (p, slot) in self.procs.iter_mut().enumerate() {
            let Some((mm, rs)) = slot else { continue };
            for v in mm.vmas().iter().filter(|v| v.readable()) {
                let mut buf = vec![0; (v.end() - v.start()) as usize];
                self.cpus[0].read(mm, v.start(), &mut buf).unwrap();
                let want = rs.read(v.start(), v.end() - v.start()).unwrap();
                if let Some(i) = buf.iter().zip(&want).position(|(a, b)| a != b) {
                    let at = v.start() + i as u64;
                    prop_assert!(
                        false,
                        "process {p}: byte at {at:#x} is {:#x}, the reference has {:#x}",
                        buf[i],
                        want[i]
                    );
                }
            }
        }
        Ok(())
    }
}

/// The operations each test runs: `FOLIOMM_SOAK`, or 50,000.
fn target_ops() -> u64 {
    std::env::var("FOLIOMM_SOAK").ok().and_then(|s| s.parse().ok()).unwrap_or(50_000)
}

/// Operations per case: up to `MAX_OPS`, so a case is long enough for
/// state to build up and short enough to shrink.
const MAX_OPS: usize = 200;

/// Runs random cases of `ops` until about [`target_ops`] operations have
/// run (proptest's own runner, with its failure persistence: a failing case
/// is shrunk, saved and replayed first by later runs).
fn run(name: &str, ops: impl Strategy<Value = Op>) {
    let count = AtomicU64::new(0);
    let reclaimed = AtomicU64::new(0);
    let splits = AtomicU64::new(0);
    let collapses = AtomicU64::new(0);
    let migrated = AtomicU64::new(0);
    let per_design: Vec<AtomicU64> =
        foliomm::internals::mapcount::Design::ALL.iter().map(|_| AtomicU64::new(0)).collect();
    let per_stage: Vec<AtomicU64> = RmapIdStage::ALL.iter().map(|_| AtomicU64::new(0)).collect();
    let per_case = (MAX_OPS as u64).div_ceil(2) + 3;
    let cases = target_ops().div_ceil(per_case) as u32;
    let config = ProptestConfig {
        cases,
        max_shrink_iters: 2000,
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let designs = 0..foliomm::internals::mapcount::Design::ALL.len();
    let case = (proptest::collection::vec(ops, 1..MAX_OPS), 0..3u32, designs, 0..RmapIdStage::ALL.len());
    let result = runner.run(&case, |(ops, mthp, design, stage)| {
        count.fetch_add(ops.len() as u64 + 3, Relaxed);
        per_design[design].fetch_add(ops.len() as u64 + 3, Relaxed);
        if foliomm::internals::mapcount::Design::ALL[design].has_stages() {
            per_stage[stage].fetch_add(ops.len() as u64 + 3, Relaxed);
        }
        run_case(&ops, mthp, design, RmapIdStage::ALL[stage], [&reclaimed, &splits, &collapses, &migrated])
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    let designs = foliomm::internals::mapcount::Design::ALL.iter().zip(&per_design);
    let spread: Vec<String> = designs.map(|(d, n)| format!("{} {}", d.name(), n.load(Relaxed))).collect();
    eprintln!("{name}: {} operations in {cases} cases ({})", count.load(Relaxed), spread.join(", "));
    let stages = RmapIdStage::ALL.iter().zip(&per_stage);
    let spread: Vec<String> = stages.map(|(s, n)| format!("{s} {}", n.load(Relaxed))).collect();
    eprintln!("{name}: the rmap-id designs' operations by seed 000 stage: {}", spread.join(", "));
    // Each kind of work the cases must have done at least once.
    let done = [
        (&reclaimed, "reclaim runs under memory pressure", "no case ran out of memory: reclaim is not pressed"),
        (&splits, "large folios split", "no large folio was split"),
        (&collapses, "ranges collapsed", "no range was collapsed"),
        (&migrated, "pages migrated", "no page was migrated"),
    ];
    for (counter, what, missing) in done {
        let n = counter.load(Relaxed);
        eprintln!("{name}: {n} {what}");
        assert!(n > 0, "{name}: {missing}");
    }
}

/// `move_pages` of every page of `[a, a + len)` to `node`: it fails only
/// for want of memory on the node (a batch without room may also come
/// back with pages not migrated, after a split); each status written is
/// the node or a per-page errno, and none is left unwritten unless a batch
/// failed.
fn migrate(mm: &Mm, a: u64, len: u64, node: i32, all: bool) -> Result<(), TestCaseError> {
    let pages: Vec<u64> = (a..a + len).step_by(PAGE as usize).collect();
    let r = mm.move_pages(&pages, Some(&vec![node; pages.len()]), all);
    let per_page = [Errno::EACCES, Errno::EBUSY, Errno::ENOENT, Errno::EFAULT].map(|e| -e.number());
    for s in r.status.iter().flatten() {
        prop_assert!(*s == node || per_page.contains(s), "status {s} moving to node {node}");
    }
    match r.result {
        Ok(0) => prop_assert!(r.status.iter().all(Option::is_some), "a status left unwritten: {:?}", r.status),
        Ok(_) => {}
        Err(e) => prop_assert_eq!(e, Errno::ENOMEM),
    }
    Ok(())
}

/// Runs `ops` under design number `design` (at seed 000's `rmap_id_stage`
/// when it reads the stage).
fn run_case(
    ops: &[Op],
    mthp: u32,
    design: usize,
    rmap_id_stage: RmapIdStage,
    [reclaimed, splits, collapses, migrated]: [&AtomicU64; 4],
) -> Result<(), TestCaseError> {
    let mapcount = foliomm::internals::mapcount::Design::ALL[design];
    let config = Config {
        memory: 14 << 20,
        swap: 32 << 20,
        poison: true,
        tlb_entries: 64,
        mapcount,
        rmap_id_stage,
        precision: true,
        nodes: 2,
        ..Config::default()
    };
    let m = Machine::new(config).unwrap();
    match mthp {
        1 => m.thp.set_order(4, ThpMode::Always).unwrap(),
        2 => {
            m.thp.set_order(2, ThpMode::Always).unwrap();
            m.thp.set_order(6, ThpMode::Madvise).unwrap();
        }
        _ => {}
    }
    let mut w = World { cpus: [m.new_cpu(), m.new_cpu()], m, procs: vec![None, None, None, None] };
    // Every case starts from a process with the whole window mapped, part
    // of it written, and a child: the state where COW bugs live.
    let start = [
        Op::Mmap { proc: 0, page: 0, pages: WINDOW_PAGES, prot: 3, huge: mthp != 1 },
        Op::Write { proc: 0, page: 256, pages: 1024, val: 0x5a },
        Op::Fork { proc: 0 },
    ];
    for (i, op) in start.iter().chain(ops.iter()).enumerate() {
        w.step(i, op)?;
        let bad: Vec<String> = w.m.check().iter().map(ToString::to_string).collect();
        prop_assert!(bad.is_empty(), "after step {} ({:?}):\n{}", i, op, bad.join("\n"));
    }
    w.verify_all_bytes()?;
    // Reclaim runs memory pressure started (not MADV_PAGEOUT's).
    reclaimed.fetch_add(w.m.stats.pageoutrun.load(Relaxed) + w.m.stats.allocstall.load(Relaxed), Relaxed);
    splits.fetch_add(w.m.stats.split.iter().map(|c| c.load(Relaxed)).sum(), Relaxed);
    collapses.fetch_add(w.m.stats.collapse_scan[1].load(Relaxed), Relaxed);
    migrated.fetch_add(w.m.stats.pgmigrate_success.load(Relaxed), Relaxed);
    w.procs.clear();
    let bad: Vec<String> = w.m.check().iter().map(ToString::to_string).collect();
    prop_assert!(bad.is_empty(), "after every process exited:\n{}", bad.join("\n"));
    // A swap-cache folio whose lock was busy when its last entry went
    // stays in the cache, unmapped and clean, for reclaim to drop
    // (`free_swap_cache` and `__try_to_reclaim_swap` only trylock).
    let (in_cache, lru) = (w.m.swap.as_ref().map_or(0, |d| d.stats().cached), w.m.lru.sizes());
    // The CPUs' LRU batches hold the folios unmapped last (from 6.14 exit
    // does not drain them) until they move.
    w.m.kernel.lru_add_drain_all();
    foliomm::internals::memory::vmscan::try_to_free_pages(&w.m.kernel, &w.m.mms);
    let left = w.m.frames_in_use() - w.m.zero_frames().count() as u64;
    prop_assert_eq!(
        left,
        0,
        "frames left after exit and reclaim (before: {} in the swap cache, LRU {:?})",
        in_cache,
        lru
    );
    Ok(())
}

#[test]
fn random_operations_keep_every_invariant() {
    run("random operations", op());
}

#[test]
fn random_operations_with_threads_keep_every_invariant() {
    let proc = prop_oneof![3 => Just(0usize), 1 => Just(1usize)];
    run("random operations with threads", prop_oneof![3 => op(), 1 => concurrent_op(proc)]);
}
