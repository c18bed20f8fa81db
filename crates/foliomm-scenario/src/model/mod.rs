//! The model backend: a [`foliomm::Machine`] with one [`foliomm::Mm`] per
//! scenario process and one [`foliomm::Cpu`] (with its own TLB) per thread
//! of a process. Calls of different threads run at once; each thread's CPU
//! is locked only by its own calls.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use foliomm::internals::check::{Scope, Violation};
use foliomm::internals::machine::HugeSize;
use foliomm::internals::mapcount::{CompoundLock, Design};
use foliomm::internals::mm::gup::Pin;
use foliomm::internals::shmem::Inode;
use foliomm::internals::sync::{Mutex, RwLock};
use foliomm::{Config, Cpu, Errno, Machine, Mm, MmapFlags};

use crate::backend::{hugepage_counters, meminfo_counters, node_hugepage_counters, Backend, Thread};
use crate::error::{BackendResult, Machinery, StepError};
use crate::lang::{Daemon, MachineSetting, Tunable};
use crate::observation::Observation;
use crate::op::{pattern_bytes, Access, GupKind, MmapRequest, Op, Reply};

mod files;
mod glossary;
mod observe;
mod thp_hint;
mod uffd;
pub use glossary::counter_glossary;

/// A scenario process on the model: its address space and its threads' CPUs.
struct Process {
    mm: Arc<Mm>,
    threads: HashMap<u32, Arc<Mutex<Cpu>>>,
    /// The files it holds a descriptor of (inherited at fork).
    fds: HashSet<u64>,
}

/// Runs scenarios on the model.
#[derive(Default)]
pub struct ModelBackend {
    machine: OnceLock<Arc<Machine>>,
    /// `set sim_cpus`.
    sim_cpus: OnceLock<usize>,
    procs: RwLock<HashMap<String, Process>>,
    pins: Mutex<(u64, HashMap<u64, Pin>)>,
    /// Files by handle, while a process holds a descriptor of them (the
    /// mappings hold their own references).
    files: Mutex<HashMap<u64, Arc<Inode>>>,
    uffds: Mutex<uffd::Uffds>,
    /// The CPU each thread was put on (`cpu N`; CPU 0 otherwise), by
    /// process and thread id.
    placed: Mutex<HashMap<(String, u32), usize>>,
}

impl ModelBackend {
    pub fn new() -> ModelBackend {
        ModelBackend::default()
    }

    /// The machine, once started.
    pub fn machine(&self) -> Option<&Arc<Machine>> {
        self.machine.get()
    }

    /// The address space of process `proc`, if it exists.
    pub fn mm(&self, proc: &str) -> Option<Arc<Mm>> {
        self.procs.read().unwrap().get(proc).map(|p| p.mm.clone())
    }

    fn m(&self) -> &Arc<Machine> {
        self.machine.get().expect("the interpreter starts the backend first")
    }

    fn mm_of(&self, t: Thread) -> BackendResult<Arc<Mm>> {
        self.thread(t).map(|(mm, _)| mm)
    }

    /// The address space and the CPU of thread `t`; a thread that does not
    /// exist is the caller's mistake, not an errno.
    fn thread(&self, t: Thread) -> BackendResult<(Arc<Mm>, Arc<Mutex<Cpu>>)> {
        let procs = self.procs.read().unwrap();
        let p = procs.get(t.proc).ok_or_else(|| Machinery::NoProcess(t.proc.into()))?;
        let cpu = p.threads.get(&t.tid).ok_or_else(|| t.failure("does not exist"))?;
        Ok((p.mm.clone(), cpu.clone()))
    }

    fn add_process(&self, name: &str, mm: Arc<Mm>, fds: HashSet<u64>) {
        let cpu = Arc::new(Mutex::new(self.m().new_cpu()));
        self.procs.write().unwrap().insert(name.into(), Process { mm, threads: HashMap::from([(0, cpu)]), fds });
    }
}

impl Backend for ModelBackend {
    fn name(&self) -> &'static str {
        "model"
    }

    fn simulated_cpus(&self) -> Option<usize> {
        self.sim_cpus.get().copied()
    }

    fn refusal(&self, s: &MachineSetting) -> Option<String> {
        match s {
            MachineSetting::MmIds(n) if u32::try_from(*n).is_err() => {
                Some(format!("mm_ids {n} does not fit a 32-bit MM ID"))
            }
            MachineSetting::Debug(d) if !foliomm::internals::machine::DebugSwitches::default().set(d) => Some(format!(
                "unknown debug switch '{d}' (known: {})",
                foliomm::internals::machine::DebugSwitches::NAMES.join(", ")
            )),
            _ => None,
        }
    }

    fn start(&self, settings: &[MachineSetting]) -> BackendResult<()> {
        // The precision report is cheap at scenario scale: always on.
        let mut config = Config { precision: true, ..Config::default() };
        for s in settings {
            match s {
                MachineSetting::Memory(m) | MachineSetting::MemoryLimit(m) => config.memory = *m,
                MachineSetting::MemoryAtLeast(m) => config.memory = config.memory.max(*m),
                MachineSetting::Mapcount(d) => config.mapcount = *d,
                MachineSetting::Kernel(v) => config.kernel = Some(*v),
                MachineSetting::RmapIdStage(s) => config.rmap_id_stage = *s,
                MachineSetting::CompoundLock(l) => config.compound_lock = *l,
                MachineSetting::Zap(z) => config.zap = *z,
                MachineSetting::VmaLock(d) => config.vma_lock = *d,
                MachineSetting::VmaLayout(l) => config.vma_layout = *l,
                MachineSetting::HugetlbSync(d) => config.hugetlb_sync = *d,
                MachineSetting::Tlb(n) => config.tlb_entries = *n as usize,
                // Refused above when it does not fit.
                MachineSetting::MmIds(n) => config.max_mm_id = u32::try_from(*n).ok(),
                MachineSetting::MaxMapCount(n) => config.max_map_count = *n as usize,
                MachineSetting::Swap(b) => config.swap = *b,
                MachineSetting::Nodes(n) => config.nodes = *n as usize,
                MachineSetting::SimCpus(n) => _ = self.sim_cpus.set(*n as usize),
                MachineSetting::InitOnFree(on) => config.init_on_free = *on,
                MachineSetting::PageMapcount(on) => config.page_mapcount = *on,
                MachineSetting::SoftDirty(on) => config.soft_dirty = *on,
                MachineSetting::DenseFrames(on) => config.dense_frames = *on,
                MachineSetting::GatherLimit(n) => config.gather_page_limit = *n,
                MachineSetting::Debug(d) => {
                    config.debug.set(d);
                }
            }
        }
        // A release without a design runs the design of its era.
        if let (Some(v), false) = (config.kernel, settings.iter().any(|s| matches!(s, MachineSetting::Mapcount(_)))) {
            config.mapcount = Design::of_release(v);
        }
        // Pages freed before the flush are poisoned, so that a read through
        // a stale TLB entry shows in the bytes too, not only to the checker.
        config.poison |= config.debug.free_before_flush.is_some();
        if !config.page_mapcount && config.mapcount != Design::MmId {
            let d = config.mapcount.name();
            return Err(StepError::Unsupported(format!(
                "set page_mapcount off needs the mm-id design (CONFIG_NO_PAGE_MAPCOUNT came with MM IDs): {d} keeps per-page mapcounts"
            )));
        }
        if config.compound_lock != CompoundLock::default() && config.mapcount != Design::CompoundLocked {
            let (l, d) = (config.compound_lock.name(), config.mapcount.name());
            return Err(StepError::Unsupported(format!(
                "set compound_lock {l} needs the compound-locked design (seed 003's lock): {d} has no compound lock"
            )));
        }
        let m = Machine::new(config.clone())
            .map_err(|e| StepError::Unsupported(format!("cannot build a machine with {} bytes: {e}", config.memory)))?;
        self.machine.set(m).map_err(|_| Machinery::Setup("the machine was started twice".into()).into())
    }

    fn tune(&self, t: &Tunable) -> BackendResult<()> {
        match *t {
            Tunable::Thp { enabled, ref sizes } => {
                let m = self.m();
                if let Some(e) = enabled {
                    m.thp.set_enabled(e).map_err(|_| {
                        StepError::Unsupported(format!("'{}' is not a valid top-level THP mode", e.name()))
                    })?;
                }
                for &(order, mode) in sizes {
                    m.thp
                        .set_order(order, mode)
                        .map_err(|_| StepError::Unsupported(format!("no anonymous mTHP size {}K", 4 << order)))?;
                }
                Ok(())
            }
            Tunable::Shmem { enabled, ref sizes } => {
                let m = self.m();
                if let Some(e) = enabled {
                    m.thp.set_shmem_enabled(e);
                }
                for &(order, mode) in sizes {
                    m.thp.set_shmem_order(order, mode).map_err(|_| {
                        StepError::Unsupported(format!("no shmem setting for {}K folios", 4u64 << order))
                    })?;
                }
                Ok(())
            }
            Tunable::Khugepaged(ref knobs) => {
                for &(knob, v) in knobs {
                    self.m()
                        .thp
                        .khugepaged
                        .set(knob, v)
                        .map_err(|_| StepError::Unsupported(format!("khugepaged/{} does not take {v}", knob.name())))?;
                }
                Ok(())
            }
            Tunable::HugetlbVmemmap(on) => {
                self.m().kernel.set_hugetlb_optimize_vmemmap(on);
                Ok(())
            }
            Tunable::Hugetlb { pages, overcommit, size } => {
                if let Some(n) = overcommit {
                    self.m().kernel.set_nr_overcommit_hugepages(n);
                }
                match self.m().kernel.set_nr_hugepages(size, pages) {
                    got if got == pages => Ok(()),
                    got => Err(StepError::Unsupported(format!(
                        "the model's memory holds only {got} of {pages} huge pages of {}",
                        size.name()
                    ))),
                }
            }
        }
    }

    fn scan(&self, daemon: Daemon, passes: u32) -> BackendResult<()> {
        let m = self.m();
        match daemon {
            Daemon::Khugepaged => _ = foliomm::internals::mm::khugepaged::khugepaged_scan(&m.kernel, &m.mms, passes),
            Daemon::Ksmd => foliomm::internals::mm::ksm::ksmd_scan(&m.kernel, &m.mms, passes),
        }
        Ok(())
    }

    fn perform(&self, t: Thread, op: Op) -> BackendResult<Reply> {
        foliomm::internals::sync::on_cpu(self.cpu_of(t), || self.perform_placed(t, op))
    }

    /// The release the started machine follows (the default before).
    fn release(&self) -> foliomm::internals::release::KernelVersion {
        self.machine().map(|m| m.kernel.config.release()).unwrap_or_default()
    }

    fn in_effect(&self) -> Vec<MachineSetting> {
        let Some(m) = self.machine() else { return Vec::new() };
        let c = &m.kernel.config;
        vec![
            MachineSetting::Memory(c.memory),
            MachineSetting::Mapcount(c.mapcount),
            MachineSetting::Kernel(c.release()),
            MachineSetting::RmapIdStage(c.rmap_id_stage),
            MachineSetting::CompoundLock(c.compound_lock),
            MachineSetting::Zap(c.zap),
            MachineSetting::VmaLock(c.vma_lock),
            MachineSetting::VmaLayout(c.vma_layout),
            MachineSetting::HugetlbSync(c.hugetlb_sync),
            MachineSetting::Tlb(c.tlb_entries as u64),
            MachineSetting::MaxMapCount(c.max_map_count as u64),
            MachineSetting::Nodes(c.nodes as u64),
            MachineSetting::InitOnFree(c.init_on_free),
            MachineSetting::PageMapcount(c.page_mapcount),
            MachineSetting::SoftDirty(c.soft_dirty),
            MachineSetting::DenseFrames(c.dense_frames),
            MachineSetting::GatherLimit(c.gather_page_limit),
        ]
        .into_iter()
        // No swap device is no `set swap` line.
        .chain((c.swap > 0).then_some(MachineSetting::Swap(c.swap)))
        .collect()
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let Some(m) = self.machine() else {
            return Vec::new();
        };
        let mut c = m.stats.snapshot();
        c.push(("frames_in_use".into(), m.frames_in_use()));
        // Gauges below zero only under a design that miscounts: the checker says so.
        c.extend(m.stats.mapped.snapshot().map(|(name, v)| (name.to_string(), u64::try_from(v).unwrap_or(0))));
        let pools: Vec<_> = HugeSize::ALL.into_iter().map(|size| (size, m.huge_counts(size))).collect();
        for &(size, h) in &pools {
            c.extend(hugepage_counters(size, h));
        }
        let nodes = m.kernel.phys.nr_nodes();
        for (size, nid) in HugeSize::ALL.into_iter().flat_map(|s| (0..nodes).map(move |n| (s, n))).filter(|_| nodes > 1)
        {
            c.extend(node_hugepage_counters(nid, size, m.kernel.huge_counts_node(size, nid)));
        }
        c.extend(meminfo_counters(&pools));
        // SwapTotal, SwapFree, SwapCached (0 without a swap device).
        let swap = m.swap.as_ref().map(|d| d.stats()).unwrap_or_default();
        for (name, pages) in [("total", swap.total), ("free", swap.free), ("cached", swap.cached)] {
            c.push((format!("meminfo_swap_{name}_kb"), pages * 4));
        }
        c
    }

    fn check(&self, scope: Scope) -> Vec<Violation> {
        self.machine().map(|m| m.check_scope(scope)).unwrap_or_default()
    }
}

/// [`Reply::Done`] for an operation that succeeded.
fn done(r: foliomm::Result<()>) -> BackendResult<Reply> {
    r.map(|()| Reply::Done).map_err(StepError::from)
}

impl ModelBackend {
    /// The CPU thread `t` runs on.
    fn cpu_of(&self, t: Thread) -> usize {
        self.placed.lock().unwrap().get(&(t.proc.to_string(), t.tid)).copied().unwrap_or(0)
    }

    /// Puts the new thread `t` on the CPU of `from` (a forking or spawning
    /// thread), as its affinity is inherited.
    fn inherit_cpu(&self, from: Thread, t: Thread) {
        let cpu = self.cpu_of(from);
        self.placed.lock().unwrap().insert((t.proc.to_string(), t.tid), cpu);
    }

    fn perform_once(&self, t: Thread, op: Op) -> BackendResult<Reply> {
        let m = self.m();
        Ok(match op {
            Op::Spawn => {
                self.add_process(t.proc, m.new_mm()?, HashSet::new());
                Reply::Done
            }
            Op::SpawnThread => {
                let cpu = Arc::new(Mutex::new(m.new_cpu()));
                let mut procs = self.procs.write().unwrap();
                let p = procs.get_mut(t.proc).ok_or_else(|| Machinery::NoProcess(t.proc.into()))?;
                if p.threads.insert(t.tid, cpu).is_some() {
                    return Err(t.failure("exists already"));
                }
                p.mm.users.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                drop(procs);
                self.inherit_cpu(Thread::main(t.proc), t);
                Reply::Done
            }
            Op::ExitThread => {
                let mut procs = self.procs.write().unwrap();
                let p = procs.get_mut(t.proc).ok_or_else(|| Machinery::NoProcess(t.proc.into()))?;
                match (t.tid, p.threads.remove(&t.tid)) {
                    (0, _) => return Err(t.failure("is the process's first; exit the process")),
                    (_, Some(_)) => {
                        p.mm.users.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                        self.placed.lock().unwrap().remove(&(t.proc.to_string(), t.tid));
                        Reply::Done
                    }
                    (_, None) => return Err(t.failure("does not exist")),
                }
            }
            Op::Exit => {
                let p = self.procs.write().unwrap().remove(t.proc);
                let p = p.ok_or_else(|| Machinery::NoProcess(t.proc.into()))?;
                self.uffds.lock().unwrap().exited(&p.mm);
                p.mm.exit();
                m.shm.exit(p.mm.serial);
                self.release(p.fds);
                self.placed.lock().unwrap().retain(|(name, _), _| name != t.proc);
                Reply::Done
            }
            Op::Fork { child } => {
                let c = self.mm_of(t)?.fork()?;
                let fds = self.procs.read().unwrap().get(t.proc).map(|p| p.fds.clone()).unwrap_or_default();
                self.add_process(&child, c, fds);
                self.inherit_cpu(t, Thread::main(&child));
                Reply::Done
            }
            Op::ShmGet { size, hugetlb } => Reply::Value(m.shmget(&*self.mm_of(t)?, size, hugetlb)?),
            Op::ShmAt { shm, readonly } => Reply::Value(m.shm.shmat(&*self.mm_of(t)?, shm, readonly)?),
            Op::ShmDt { addr } => done(m.shm.shmdt(&*self.mm_of(t)?, addr))?,
            Op::ShmRm { shm } => done(m.shm.rmid(shm))?,
            Op::Mmap(req) => Reply::Value(self.mmap(t, req)?),
            Op::Munmap { addr, len } => done(self.mm_of(t)?.munmap(addr, len))?,
            Op::Mprotect { addr, len, prot } => done(self.mm_of(t)?.mprotect(addr, len, prot))?,
            Op::Mlock { addr, len, lock } => done(self.mm_of(t)?.mlock(addr, len, lock))?,
            Op::ClearSoftDirty => self.mm_of(t).map(|mm| mm.clear_refs_soft_dirty()).map(|()| Reply::Done)?,
            Op::SetCpu { cpu } => {
                self.mm_of(t)?;
                self.placed.lock().unwrap().insert((t.proc.to_string(), t.tid), cpu as usize);
                Reply::Done
            }
            Op::SplitHugePages { addr, len, order, at } => {
                done(self.mm_of(t)?.split_huge_pages(addr, addr + len, order, at).map(|_| ()))?
            }
            Op::Madvise { addr, len, advice } => done(self.mm_of(t)?.madvise(addr, len, advice))?,
            Op::NumaScan { addr, len } => Reply::Value(self.mm_of(t)?.numa_scan(addr, addr + len)),
            Op::Mbind { addr, len, mode, nodes, flags } => {
                let nodes = foliomm::internals::phys::NodeMask(nodes);
                done(self.mm_of(t)?.mbind(addr, len, mode, nodes, flags))?
            }
            Op::MovePages { addr, len, node, all } => {
                let pages: Vec<u64> = (addr..addr + len).step_by(4096).collect();
                let nodes = node.map(|n| vec![n; pages.len()]);
                let r = self.mm_of(t)?.move_pages(&pages, nodes.as_deref(), all);
                Reply::Moved { unmoved: r.result?, status: r.status }
            }
            Op::Mremap { addr, len, new_len, to, dontunmap: false } => {
                Reply::Value(self.mm_of(t)?.mremap(addr, len, new_len, true, to)?)
            }
            Op::Mremap { addr, len, new_len, to, dontunmap: true } => {
                Reply::Value(self.mm_of(t)?.mremap_dontunmap(addr, len, new_len, to)?)
            }
            Op::Access { addr, len, access } => self.access(t, addr, len, access)?,
            Op::Observe { addr, len } => Reply::Observed(Box::new(self.observe(t, addr, len)?)),
            Op::Peek { addr } => Reply::Peeked(self.peek(t, addr)?),
            Op::CreateFile { .. }
            | Op::Close { .. }
            | Op::Unlink { .. }
            | Op::AddSeals { .. }
            | Op::Ftruncate { .. }
            | Op::PunchHole { .. }
            | Op::Fallocate { .. }
            | Op::Pwrite { .. }
            | Op::Pread { .. }
            | Op::SplitFile { .. }
            | Op::ObserveFile { .. } => self.file_op(t, op)?,
            Op::Pin { addr, len, kind } => {
                let mm = self.mm_of(t)?;
                let pin = match kind {
                    GupKind::Get => mm.get_user_pages(addr, len)?,
                    GupKind::Pin { write, longterm } => mm.pin_user_pages(addr, len, write, longterm)?,
                };
                let mut pins = self.pins.lock().unwrap();
                pins.0 += 1;
                let id = pins.0;
                pins.1.insert(id, pin);
                Reply::Value(id)
            }
            Op::Unpin { pin } => {
                let pin = self.pins.lock().unwrap().1.remove(&pin).ok_or(Errno::EINVAL)?;
                m.unpin_user_pages(pin);
                Reply::Done
            }
            Op::ObservePin { pin } => Reply::Observed(Box::new(self.observe_pin(pin)?)),
            Op::Userfaultfd { sigbus } => self.userfaultfd(t, sigbus)?,
            Op::Uffd { uffd, call } => self.uffd_call(uffd, call)?,
            Op::ObserveZeroPage => {
                let f = foliomm::internals::folio::Folio::containing(&m.phys, m.zero_pfn);
                let page = foliomm::internals::mm::PageInfo {
                    present: true,
                    pfn: m.zero_pfn,
                    zero_page: true,
                    refcount: f.refcount() as u64,
                    ..Default::default()
                };
                Reply::Observed(Box::new(Observation {
                    page,
                    byte: m.phys.read_byte(m.zero_pfn, 0),
                    ..Default::default()
                }))
            }
        })
    }

    fn mmap(&self, t: Thread, req: MmapRequest) -> BackendResult<u64> {
        let (fixed, populate, shared, hugetlb, noreserve, locked) =
            (req.fixed, req.populate, req.shared, req.hugetlb, req.noreserve, req.locked);
        let flags = MmapFlags { fixed, populate, noreplace: false, shared, hugetlb, noreserve, locked };
        let file = match req.file {
            Some((h, off)) => Some((self.file(h)?, off)),
            None => None,
        };
        let file = file.as_ref().map(|(inode, off)| (inode, *off));
        Ok(self.mm_of(t)?.mmap_file(req.at.unwrap_or(0), req.len, req.prot, flags, file)?)
    }

    /// Writes reply [`Reply::Done`], reads the bytes read.
    fn access(&self, t: Thread, addr: u64, len: u64, access: Access) -> BackendResult<Reply> {
        let (mm, cpu) = self.thread(t)?;
        let mut cpu = cpu.lock().unwrap();
        let r = match access {
            Access::Write { val, every_byte: true } => cpu.fill(&mm, addr, len, val).map(|_| Reply::Done),
            Access::Write { val, every_byte: false } => {
                cpu.write_byte_per_page(&mm, addr, len, val).map(|_| Reply::Done)
            }
            Access::Pattern { origin, seed } => {
                cpu.write(&mm, addr, &pattern_bytes(origin, addr, len, seed)).map(|_| Reply::Done)
            }
            Access::Read { every_byte: true } => {
                let mut buf = vec![0; len as usize];
                cpu.read(&mm, addr, &mut buf).map(|_| Reply::Bytes(buf))
            }
            Access::Read { every_byte: false } => cpu.read_byte_per_page(&mm, addr, len).map(Reply::Bytes),
        };
        Ok(r?)
    }
}
