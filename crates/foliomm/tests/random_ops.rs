//! Property test: random sequences of mmap/munmap/mprotect/madvise/mremap/
//! fork/exit/read/write over several processes. After every step the
//! invariant checker must find nothing, and every read must return what the
//! reference byte model says (fork = deep copy). Two CPUs with TLBs take
//! turns, freed frames are poisoned, and every mapcount design takes its
//! turn. Set FOLIOMM_PROPTEST_CASES
//! for a longer run.

use std::sync::Arc;

use foliomm::check::reference::RefSpace;
use foliomm::folio::thp::ThpMode;
use foliomm::mm::Advice;
use foliomm::{Config, Cpu, Errno, Machine, Mm, MmapFlags, Prot};
use proptest::prelude::*;

const PAGE: u64 = 4096;
/// Every mapping lives in a fixed window so that operations hit each other.
const WINDOW: u64 = 0x4000_0000;
const WINDOW_PAGES: u64 = 2048; // 8 MiB: four PMDs

#[derive(Clone, Debug)]
enum Op {
    Mmap { proc: usize, page: u64, pages: u64, prot: u32, huge: bool },
    Munmap { proc: usize, page: u64, pages: u64 },
    Mprotect { proc: usize, page: u64, pages: u64, prot: u32 },
    DontNeed { proc: usize, page: u64, pages: u64 },
    Mremap { proc: usize, page: u64, pages: u64, to: u64, new_pages: u64 },
    Fork { proc: usize },
    Exit { proc: usize },
    Write { proc: usize, page: u64, pages: u64, val: u8 },
    WriteBytes { proc: usize, off: u64, len: u64, val: u8 },
    Read { proc: usize, page: u64, pages: u64 },
}

fn range() -> impl Strategy<Value = (u64, u64)> {
    prop_oneof![
        (0..WINDOW_PAGES, 1..64u64),
        // PMD-aligned, PMD-sized ranges so THPs appear and get split.
        (0..4u64, 1..3u64).prop_map(|(i, n)| (i * 512, n * 512)),
    ]
    .prop_map(|(p, n)| (p, n.min(WINDOW_PAGES - p)))
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
            | Op::Mremap { proc, .. }
            | Op::Fork { proc }
            | Op::Exit { proc }
            | Op::Write { proc, .. }
            | Op::WriteBytes { proc, .. }
            | Op::Read { proc, .. } => *proc,
        };
        if self.procs[proc].is_none() {
            self.procs[proc] = Some((self.m.new_mm().unwrap(), RefSpace::default()));
        }
        let (mm, rs) = self.procs[proc].as_mut().unwrap();
        let mm = mm.clone();
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
                if covered {
                    rs.protect(addr(page), pages * PAGE, Prot(prot));
                }
            }
            Op::DontNeed { page, pages, .. } => {
                let _ = mm.madvise(addr(page), pages * PAGE, Advice::DontNeed);
                rs.zap(addr(page), pages * PAGE);
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
        }
        Ok(())
    }

    /// Reads every mapped byte of every process and compares with the reference.
    fn verify_all_bytes(&mut self) -> Result<(), TestCaseError> {
        for slot in self.procs.iter_mut().flatten() {
            let (mm, rs) = slot;
            for v in mm.vmas() {
                if v.readable() {
                    let mut buf = vec![0; (v.end() - v.start()) as usize];
                    self.cpus[0].read(mm, v.start(), &mut buf).unwrap();
                    prop_assert!(
                        buf == rs.read(v.start(), v.end() - v.start()).unwrap(),
                        "bytes of {:#x}..{:#x} differ",
                        v.start(),
                        v.end()
                    );
                }
            }
        }
        Ok(())
    }
}

fn cases() -> u32 {
    std::env::var("FOLIOMM_PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_every_invariant(
        ops in proptest::collection::vec(op(), 1..40),
        mthp in 0..3u32,
        design in 0..foliomm::mapcount::Design::ALL.len(),
    ) {
        let mapcount = foliomm::mapcount::Design::ALL[design];
        let m = Machine::new(Config { memory: 64 << 20, poison: true, tlb_entries: 64, mapcount, precision: true, ..Config::default() })
            .unwrap();
        match mthp {
            1 => m.thp.set_order(4, ThpMode::Always).unwrap(),
            2 => { m.thp.set_order(2, ThpMode::Always).unwrap(); m.thp.set_order(6, ThpMode::Madvise).unwrap(); }
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
        w.procs.clear();
        let bad: Vec<String> = w.m.check().iter().map(ToString::to_string).collect();
        prop_assert!(bad.is_empty(), "after every process exited:\n{}", bad.join("\n"));
        prop_assert_eq!(w.m.frames_in_use(), 1 + w.m.zero_frames().count() as u64 - 1, "only the zero pages remain allocated");
    }
}
