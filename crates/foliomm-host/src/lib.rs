//! The host backend: every scenario process is a real Linux process (a
//! worker, see [`worker`]) whose address space the running kernel manages.
//! The controller (the interpreter's process) sends each step over a Unix
//! socket; observations come from the kernel's own interfaces ([`procfs`]);
//! THP settings go through sysfs and are restored afterwards ([`sysfs`]).
//! Linux only; needs root for frame numbers, kpageflags and sysfs.

#![deny(unsafe_code)]

mod connection;
mod counters;
mod damon;
pub mod debugfs;
pub mod files;
pub mod guest;
pub mod khugepaged;
pub mod ksm;
pub mod memcg;
pub mod procfs;
pub mod protocol;
mod refusal;
mod release;
pub mod run_dir;
mod signals;
mod smaps;
mod status;
pub mod swap;
#[allow(unsafe_code)] // the host's system-call boundary: its only unsafe code
pub mod sys;
pub mod sysfs;
mod truncate_guard;
mod uffd;
pub mod worker;

use std::collections::HashMap;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, RwLock};

use foliomm::internals::folio::thp::{ShmemMode, ThpMode};
use foliomm::internals::machine::HugeSize;
use foliomm_scenario::backend::{hugepage_counters, node_hugepage_counters, Backend, Thread};
use foliomm_scenario::error::{BackendResult, Machinery, StepError};
use foliomm_scenario::lang::{Daemon, MachineSetting, Tunable};
use foliomm_scenario::op::{Access, GupKind, Op, Reply};
use foliomm_scenario::Observation;

use connection::{setup, Conn};
pub use signals::{end_descendants, handles_signals};
pub use worker::worker_main;

/// The first argument that makes the foliomm binary run as a worker.
pub const WORKER_ARG: &str = "__host-worker";

/// A worker process: a socket per thread.
struct Worker {
    threads: HashMap<u32, Conn>,
    pid: u32,
    /// The process the controller started (the first of a fork tree).
    child: Option<Child>,
}

/// Runs scenarios on the running kernel. Calls of different threads go to
/// different worker threads over their own sockets, and run at once.
pub struct HostBackend {
    exe: PathBuf,
    dir: PathBuf,
    /// Held from the request that makes a worker connect until its
    /// connection is accepted, so that connections pair with their names.
    listener: Mutex<Option<UnixListener>>,
    procs: RwLock<HashMap<String, Worker>>,
    baseline: Mutex<Vec<(String, u64)>>,
    /// The run has a swap device: workers keep to one CPU, so that the
    /// pages they fault in sit in that CPU's LRU batch, which
    /// `MADV_PAGEOUT`'s `lru_add_drain` empties (a page in another CPU's
    /// batch is not on the LRU, and reclaim passes over it).
    one_cpu: std::sync::atomic::AtomicBool,
    /// The workers' memory cgroup, for `set memory limit`.
    memcg: Mutex<Option<memcg::Memcg>>,
    /// debugfs, once a step splits folios.
    debugfs: Mutex<Option<debugfs::Debugfs>>,
    /// The scenario's NUMA nodes (`set nodes`, 1 by default): on a machine
    /// with more, its huge page pools are kept on node 0, as on the
    /// machine it describes.
    nodes: std::sync::atomic::AtomicU64,
    /// Where the pool of a scenario of several nodes grows next (the
    /// model's `next_nid_to_alloc`, from node 0 in each run; the kernel's
    /// own carries over from earlier runs).
    pool_next_node: std::sync::atomic::AtomicU64,
}

impl HostBackend {
    /// `exe` is a program that runs [`worker_main`] when its first argument
    /// is [`WORKER_ARG`] (the foliomm binary).
    pub fn new(exe: PathBuf) -> HostBackend {
        let dir = run_dir::new();
        HostBackend {
            exe,
            dir,
            listener: Mutex::new(None),
            procs: RwLock::new(HashMap::new()),
            baseline: Mutex::default(),
            one_cpu: Default::default(),
            memcg: Mutex::new(None),
            debugfs: Mutex::new(None),
            nodes: std::sync::atomic::AtomicU64::new(1),
            pool_next_node: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The host process id of scenario process `proc`.
    pub fn pid(&self, proc: &str) -> Option<u32> {
        self.procs.read().unwrap().get(proc).map(|w| w.pid)
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("ctl.sock")
    }

    /// Starts a worker process for scenario process `proc`.
    fn spawn(&self, proc: &str) -> BackendResult<Reply> {
        let mut child = None;
        let conn = self.connect(proc, || {
            let mut c = Command::new(&self.exe);
            c.arg(WORKER_ARG).arg(self.socket()).arg(proc);
            if self.one_cpu.load(std::sync::atomic::Ordering::Relaxed) {
                c.env(worker::ONE_CPU, "1");
            }
            let c = c.spawn().map_err(|e| setup(format!("cannot start worker {}: {e}", self.exe.display())))?;
            if let Some(memcg) = self.memcg.lock().unwrap().as_ref() {
                memcg.add(c.id()).map_err(setup)?;
            }
            child = Some(c);
            Ok(())
        })?;
        let pid = child.as_ref().map_or(0, Child::id);
        self.procs.write().unwrap().insert(proc.into(), Worker { threads: HashMap::from([(0, conn)]), pid, child });
        Ok(Reply::Done)
    }

    /// Has thread 0 of `t`'s worker start thread `t`.
    fn spawn_thread(&self, t: Thread) -> BackendResult<Reply> {
        let conn =
            self.connect(&t.to_string(), || self.request(Thread::main(t.proc), t.tid, Op::SpawnThread).map(|_| ()))?;
        let mut procs = self.procs.write().unwrap();
        let w = procs.get_mut(t.proc).ok_or_else(|| Machinery::NoProcess(t.proc.into()))?;
        w.threads.insert(t.tid, conn);
        Ok(Reply::Done)
    }

    /// Ends worker thread `t` and waits until its socket closes.
    fn exit_thread(&self, t: Thread) -> BackendResult<Reply> {
        if t.tid == 0 {
            return Err(t.failure("is the process's first; exit the process"));
        }
        let conn = self.conn(t)?;
        Self::send(&conn, t.tid, Op::ExitThread).map_err(|e| t.failure(format!("went away: {e}")))?;
        Self::wait_closed(&conn);
        if let Some(w) = self.procs.write().unwrap().get_mut(t.proc) {
            w.threads.remove(&t.tid);
        }
        Ok(Reply::Done)
    }

    /// Has worker thread `t` fork; the child connects as `child`.
    fn fork(&self, t: Thread, child: &str) -> BackendResult<Reply> {
        let mut pid = 0;
        let conn = self.connect(child, || {
            pid = self.request(t, t.tid, Op::Fork { child: child.into() })?.value()? as u32;
            Ok(())
        })?;
        self.procs
            .write()
            .unwrap()
            .insert(child.into(), Worker { threads: HashMap::from([(0, conn)]), pid, child: None });
        Ok(Reply::Done)
    }

    /// debugfs `split_huge_pages` over `range` of a worker's addresses or a
    /// file's pages, to `order` (which needs 6.8), around page `at` of each
    /// folio (which needs 6.15).
    fn split_huge_pages(
        &self,
        target: debugfs::SplitTarget,
        range: (u64, u64),
        order: u32,
        at: Option<u64>,
    ) -> BackendResult<Reply> {
        use foliomm::internals::release::KernelVersion;
        if order > 0 && release::version() < KernelVersion::new(6, 8) {
            return Err(StepError::Unsupported("split_huge_pages takes an order from Linux 6.8".into()));
        }
        if at.is_some() && release::version() < KernelVersion::new(6, 15) {
            return Err(StepError::Unsupported("split_huge_pages takes an offset in the folio from Linux 6.15".into()));
        }
        let mut debugfs = self.debugfs.lock().unwrap();
        if debugfs.is_none() {
            *debugfs = Some(debugfs::Debugfs::open(&self.dir.join("debugfs")).map_err(StepError::Unsupported)?);
        }
        let d = debugfs.as_ref().expect("opened above");
        d.split_huge_pages(&target, range, order, at).map_err(|e| match protocol::Refused::from(e) {
            // Lockdown, or a debugfs restricted to its API: not the split's answer.
            protocol::Refused::Errno(foliomm::Errno::EPERM) => {
                StepError::Unsupported("the kernel refuses writes to debugfs (EPERM): no split_huge_pages".into())
            }
            protocol::Refused::Errno(n) => StepError::Errno(n),
            other => setup(format!("split_huge_pages: {other:?}")),
        })?;
        Ok(Reply::Done)
    }

    /// Ends the worker process of `proc` and waits until it is gone.
    fn exit(&self, proc: &str) -> BackendResult<Reply> {
        let w = self.procs.write().unwrap().remove(proc).ok_or_else(|| Machinery::NoProcess(proc.into()))?;
        let main = w.threads.get(&0).ok_or_else(|| Thread::main(proc).failure("does not exist"))?;
        // A worker that is gone already has exited too; its socket reads EOF.
        let _ = Self::send(main, 0, Op::Exit);
        for conn in w.threads.values() {
            Self::wait_closed(conn);
        }
        if let Some(mut c) = w.child {
            let _ = c.wait();
        }
        Ok(Reply::Done)
    }
}

pub(crate) fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// The most bytes one read asks a worker for (1 MiB).
const READ_CHUNK: u64 = 1 << 20;

/// `kernel.shm_rmid_forced`.
const SHM_RMID_FORCED: &str = "/proc/sys/kernel/shm_rmid_forced";

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    fn release(&self) -> foliomm::internals::release::KernelVersion {
        release::version()
    }

    fn refusal(&self, s: &MachineSetting) -> Option<String> {
        refusal::refusal(s)
    }

    fn start(&self, settings: &[MachineSetting]) -> BackendResult<()> {
        if std::fs::File::open("/proc/kpageflags").is_err() {
            return Err(StepError::Unsupported("cannot read /proc/kpageflags: the host backend needs root".into()));
        }
        if let Some(&MachineSetting::Swap(bytes)) = settings.iter().rev().find(|s| matches!(s, MachineSetting::Swap(_)))
        {
            swap::start(bytes).map_err(StepError::Unsupported)?;
            self.one_cpu.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(&MachineSetting::MemoryLimit(bytes)) =
            settings.iter().rev().find(|s| matches!(s, MachineSetting::MemoryLimit(_)))
        {
            *self.memcg.lock().unwrap() = Some(memcg::Memcg::create(bytes).map_err(StepError::Unsupported)?);
        }
        let nodes = settings.iter().rev().find_map(|s| match s {
            MachineSetting::Nodes(n) => Some(*n),
            _ => None,
        });
        self.nodes.store(nodes.unwrap_or(1), std::sync::atomic::Ordering::Relaxed);
        self.pool_next_node.store(0, std::sync::atomic::Ordering::Relaxed);
        if procfs::memory_nodes() > 1 {
            // On a machine of several nodes, which node a pool page is on
            // shows: the run starts from an empty pool, as the model's
            // machine does, not from the pages an earlier run left on
            // some node.
            for size in HugeSize::ALL {
                sysfs::set(&sysfs::hugetlb_path(size, "nr_hugepages"), "0").map_err(StepError::Unsupported)?;
            }
        }
        khugepaged::quiet().and_then(|()| damon::pause()).map_err(StepError::Unsupported)?;
        std::fs::create_dir_all(&self.dir).map_err(|e| setup(format!("cannot create {}: {e}", self.dir.display())))?;
        // The directory is named after this process: a socket left there
        // is a killed run's whose process id came round again.
        let _ = std::fs::remove_file(self.socket());
        let listener = UnixListener::bind(self.socket())
            .map_err(|e| setup(format!("cannot listen on {}: {e}", self.socket().display())))?;
        *self.listener.lock().unwrap() = Some(listener);
        *self.baseline.lock().unwrap() = counters::since_boot();
        Ok(())
    }

    fn scan(&self, daemon: Daemon, passes: u32) -> BackendResult<()> {
        match daemon {
            Daemon::Khugepaged => khugepaged::run(passes),
            Daemon::Ksmd => ksm::run(passes),
        }
        .map_err(StepError::Unsupported)
    }

    fn tune(&self, t: &Tunable) -> BackendResult<()> {
        match *t {
            Tunable::Thp { enabled, ref sizes } => {
                if let Some(m) = enabled {
                    sysfs::set(&sysfs::thp_path(None), sysfs::mode_name(m)).map_err(StepError::Unsupported)?;
                }
                for &(order, m) in sizes {
                    let (size, top) = (sysfs::thp_path(Some(order)), sysfs::thp_path(None));
                    sysfs::set_per_size(order, &size, &top, sysfs::mode_name(m), m == ThpMode::Inherit, "THP", "6.8")
                        .map_err(StepError::Unsupported)?;
                }
                // A khugepaged just started scans at once, and has no slot
                // of this process's yet.
                khugepaged::quiet().map_err(StepError::Unsupported)
            }
            Tunable::Shmem { enabled, ref sizes } => {
                if let Some(m) = enabled {
                    sysfs::set(&sysfs::shmem_path(None), m.name()).map_err(StepError::Unsupported)?;
                }
                for &(order, m) in sizes {
                    let (size, top) = (sysfs::shmem_path(Some(order)), sysfs::shmem_path(None));
                    sysfs::set_per_size(order, &size, &top, m.name(), m == ShmemMode::Inherit, "shmem THP", "6.11")
                        .map_err(StepError::Unsupported)?;
                }
                khugepaged::quiet().map_err(StepError::Unsupported)
            }
            Tunable::Khugepaged(ref knobs) => {
                for &(knob, v) in knobs {
                    sysfs::set(&khugepaged::path(knob.name()), &v.to_string()).map_err(StepError::Unsupported)?;
                }
                Ok(())
            }
            Tunable::HugetlbVmemmap(on) => sysfs::set_hvo(on).map_err(StepError::Unsupported),
            Tunable::Hugetlb { pages, overcommit, size } => {
                if let Some(n) = overcommit {
                    sysfs::set(&sysfs::hugetlb_path(size, "nr_overcommit_hugepages"), &n.to_string())
                        .map_err(StepError::Unsupported)?;
                }
                let path = sysfs::hugetlb_path(size, "nr_hugepages");
                let read = |p: &str| {
                    sysfs::read_selected(p).map_err(setup)?.parse::<u64>().map_err(|e| setup(format!("{p}: {e}")))
                };
                let persistent = |nr: &str, surplus: &str| -> BackendResult<u64> { Ok(read(nr)? - read(surplus)?) };
                let surplus_of = |p: &str| p.replace("nr_hugepages", "surplus_hugepages");
                let now = persistent(&path, &surplus_of(&path))?;
                let (nodes, host_nodes) = (self.nodes.load(Relaxed), procfs::memory_nodes());
                if (nodes < host_nodes || nodes > 1) && pages > now {
                    // A pool that grows grows as the scenario's machine's
                    // does: on node 0 of a one-node machine, else on its
                    // nodes in turn from node 0. A node's count is written
                    // as its share of the global one. Shrinking stays
                    // global, so that pages in use anywhere turn surplus.
                    for _ in now..pages {
                        let nid =
                            if nodes < host_nodes { 0 } else { self.pool_next_node.fetch_add(1, Relaxed) % nodes };
                        let node = sysfs::node_hugetlb_path(nid, size);
                        let want = persistent(&node, &surplus_of(&node))? + 1;
                        sysfs::set(&node, &want.to_string()).map_err(StepError::Unsupported)?;
                    }
                } else {
                    sysfs::set(&path, &pages.to_string()).map_err(StepError::Unsupported)?;
                }
                // Pages in use beyond the new size stay, as surplus pages.
                match read(&path)?.checked_sub(read(&sysfs::hugetlb_path(size, "surplus_hugepages"))?) {
                    Some(got) if got == pages => Ok(()),
                    got => Err(StepError::Unsupported(format!(
                        "the host kernel gave {} of {pages} huge pages of {}",
                        got.unwrap_or(0),
                        size.name()
                    ))),
                }
            }
        }
    }

    /// Runs `op` in the worker of `t`; a `shmget` first sets
    /// `kernel.shm_rmid_forced` (the model's behaviour, see
    /// `foliomm::internals::ipc::shm`).
    fn perform(&self, t: Thread, op: Op) -> BackendResult<Reply> {
        match op {
            Op::Spawn => self.spawn(t.proc),
            Op::SpawnThread => self.spawn_thread(t),
            Op::ExitThread => self.exit_thread(t),
            Op::Exit => self.exit(t.proc),
            Op::Fork { child } => self.fork(t, &child),
            op @ Op::ShmGet { .. } => {
                // No segment may outlive its creator's run: exit_shm removes
                // a segment its creator leaves behind (restored at the end).
                sysfs::set(SHM_RMID_FORCED, "1").map_err(StepError::Unsupported)?;
                self.request(t, t.tid, op)
            }
            Op::SplitHugePages { addr, len, order, at } => {
                let pid = self.pid(t.proc).ok_or_else(|| Machinery::NoProcess(t.proc.into()))?;
                self.split_huge_pages(debugfs::SplitTarget::Pid(pid), (addr, addr + len), order, at)
            }
            Op::SplitFile { file, offset, len, order, at } => {
                let pid = self.pid(t.proc).ok_or_else(|| Machinery::NoProcess(t.proc.into()))?;
                let page = foliomm::internals::arch::PAGE_SIZE;
                let pages = (offset / page, (offset + len).div_ceil(page));
                self.split_huge_pages(debugfs::SplitTarget::File(format!("/proc/{pid}/fd/{file}")), pages, order, at)
            }
            Op::NumaScan { .. } => {
                Err(StepError::Unsupported("the kernel scans for NUMA balancing on its own schedule".into()))
            }
            Op::Access { addr, len, access: access @ Access::Read { every_byte: true } } if len > READ_CHUNK => {
                // In pieces: the worker holds what it read until it
                // replies, which a memory limit counts.
                let mut bytes = Vec::new();
                for at in (addr..addr + len).step_by(READ_CHUNK as usize) {
                    let piece = Op::Access { addr: at, len: READ_CHUNK.min(addr + len - at), access };
                    match self.request(t, t.tid, piece)? {
                        Reply::Bytes(b) => bytes.extend(b),
                        other => return Ok(other),
                    }
                }
                Ok(Reply::Bytes(bytes))
            }
            op => self.request(t, t.tid, op),
        }
    }

    /// FOLL_GET through vmsplice(); FOLL_PIN only as io_uring takes it
    /// (write, longterm). R/O or short-term FOLL_PIN needs the kernel's
    /// gup_test debugfs interface, which this backend does not use.
    fn supports_gup(&self, kind: GupKind) -> bool {
        matches!(kind, GupKind::Get | GupKind::Pin { write: true, longterm: true })
    }

    fn observes_through_gup(&self, field: &str) -> bool {
        field == "byte"
    }

    /// Deltas since `start` of the system-wide counters the model also keeps.
    fn counters(&self) -> Vec<(String, u64)> {
        let baseline = self.baseline.lock().unwrap();
        let mut counters: Vec<(String, u64)> = counters::since_boot()
            .into_iter()
            .map(|(k, v)| {
                let base = baseline.iter().find(|(b, _)| *b == k).map_or(0, |(_, b)| *b);
                (k, v.saturating_sub(base))
            })
            .collect();
        // The pools' counts are states, not events: as they are.
        for size in HugeSize::ALL {
            counters.extend(hugepage_counters(size, sysfs::huge_counts(size)));
        }
        let nodes = procfs::memory_nodes() as usize;
        for (size, nid) in HugeSize::ALL.into_iter().flat_map(|s| (0..nodes).map(move |n| (s, n))).filter(|_| nodes > 1)
        {
            counters.extend(node_hugepage_counters(nid, size, sysfs::node_huge_counts(nid, size)));
        }
        counters.extend(procfs::meminfo_hugetlb_and_swap());
        counters
    }

    /// Only the huge page pools' counts: the runs own the pools (they set
    /// them up from nothing), while other counters count the whole system.
    fn exact_counter(&self, name: &str) -> bool {
        let swap = ["meminfo_swap_total_kb", "meminfo_swap_free_kb"];
        let per_node = name
            .strip_prefix("node")
            .is_some_and(|r| r.trim_start_matches(|c: char| c.is_ascii_digit()).starts_with("_hugepages"));
        name.starts_with("hugepages_") || per_node || name.starts_with("meminfo_huge") || swap.contains(&name)
    }

    /// Every field the kernel reports, but `RssShmem` only where the
    /// worker's program is not itself on tmpfs (in the guest it is, and
    /// its own text faults move the count).
    fn observes(&self, field: &str) -> bool {
        if field == "rss_shmem_total_kb" {
            return !sys::program_on_shmem();
        }
        if field == "swap_total_kb" {
            return release::version().counts_rss_exactly();
        }
        field == "frame"
            || Observation::compared_fields().any(|f| *f == field)
            || Observation::UNCOMPARED_FIELDS.contains(&field)
    }

    fn check(&self, _scope: foliomm::internals::check::Scope) -> Vec<foliomm::internals::check::Violation> {
        Vec::new()
    }
}

impl Drop for HostBackend {
    fn drop(&mut self) {
        let names: Vec<String> = self.procs.read().unwrap().keys().cloned().collect();
        for p in names {
            let _ = self.exit(&p);
        }
        sysfs::restore_all();
        drop(self.debugfs.lock().unwrap().take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
