//! The host backend: every scenario process is a real Linux process (a
//! worker, see [`worker`]) whose address space the running kernel manages.
//! The controller (the interpreter's process) sends each step over a Unix
//! socket; observations come from the kernel's own interfaces ([`procfs`]);
//! THP settings go through sysfs and are restored afterwards ([`sysfs`]).
//! Linux only; needs root for frame numbers, kpageflags and sysfs.

mod connection;
mod counters;
pub mod files;
pub mod guest;
pub mod gup;
pub mod procfs;
pub mod protocol;
mod release;
mod smaps;
pub mod sys;
pub mod sysfs;
pub mod worker;

use std::collections::HashMap;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Mutex, RwLock};

use foliomm::folio::thp::{ShmemHuge, ShmemMode, ThpMode};
use foliomm::machine::HugeSize;
use foliomm::mm::Advice;
use foliomm::mm_types::Prot;
use foliomm::Errno;
use foliomm_scenario::backend::{
    hugepage_counters, Access, Backend, BackendResult, FileKind, GupKind, MmapRequest, Observation, StepError, Thread,
};
use foliomm_scenario::lang::MachineSetting;

use connection::{broken, Conn};
pub use protocol::{Request, Response};
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
    /// GUP handle -> the thread holding it.
    gups: Mutex<HashMap<u64, (String, u32)>>,
}

impl HostBackend {
    /// `exe` is a program that runs [`worker_main`] when its first argument
    /// is [`WORKER_ARG`] (the foliomm binary).
    pub fn new(exe: PathBuf) -> HostBackend {
        let dir = std::env::temp_dir().join(format!("foliomm-host-{}-{}", std::process::id(), unique()));
        HostBackend {
            exe,
            dir,
            listener: Mutex::new(None),
            procs: RwLock::new(HashMap::new()),
            baseline: Mutex::default(),
            gups: Mutex::new(HashMap::new()),
        }
    }

    /// The host process id of scenario process `proc`.
    pub fn pid(&self, proc: &str) -> Option<u32> {
        self.procs.read().unwrap().get(proc).map(|w| w.pid)
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("ctl.sock")
    }
}

pub(crate) fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    /// The design of the running kernel's era ([`release::design`]).
    fn design(&self) -> foliomm::mapcount::Design {
        release::design()
    }

    fn refusal(&self, s: &MachineSetting) -> Option<String> {
        let why = match s {
            MachineSetting::Memory(_) => "the host's memory size is fixed",
            MachineSetting::MemoryAtLeast(m) if procfs::mem_total() < *m => "the host has less memory",
            MachineSetting::Mapcount(d) if *d != self.design() => {
                return Some(format!("cannot honour '{s}': the host kernel tracks mapcounts as {}", self.design()));
            }
            MachineSetting::RmapIdStage(_) => "seed 000's stages exist in the model only (the RFC was never merged)",
            MachineSetting::Zap(z) if *z != foliomm::machine::ZapStrategy::Batched => "the host kernel zaps batched",
            MachineSetting::VmaLock(d) if *d != foliomm::machine::VmaLockDesign::VmaRefcount => {
                "the host kernel locks VMAs by reference count (vma-refcount)"
            }
            MachineSetting::HugetlbSync(d) if *d != foliomm::machine::HugetlbSync::VmaLock => {
                "the host kernel synchronizes hugetlb faults with the hugetlb VMA lock (vma-lock)"
            }
            MachineSetting::Tlb(_) => "the host's TLB is hardware",
            MachineSetting::Debug(_) => "debug switches break the model, not the kernel",
            MachineSetting::MmIds(_) => "the host kernel's MM ID space cannot be limited",
            MachineSetting::MaxMapCount(n) if Some(*n) != sysfs::max_map_count() => {
                "vm.max_map_count is system-wide: changing it would limit every process on the machine"
            }
            _ => return None,
        };
        Some(format!("cannot honour '{s}': {why}"))
    }

    fn start(&self, _settings: &[MachineSetting]) -> BackendResult<()> {
        if std::fs::File::open("/proc/kpageflags").is_err() {
            return Err(StepError::Unsupported("cannot read /proc/kpageflags: the host backend needs root".into()));
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| broken(format!("cannot create {}: {e}", self.dir.display())))?;
        // The directory is named after this process: a socket left there
        // is a killed run's whose process id came round again.
        let _ = std::fs::remove_file(self.socket());
        let listener = UnixListener::bind(self.socket())
            .map_err(|e| broken(format!("cannot listen on {}: {e}", self.socket().display())))?;
        *self.listener.lock().unwrap() = Some(listener);
        *self.baseline.lock().unwrap() = counters::since_boot();
        Ok(())
    }

    fn set_thp(&self, enabled: Option<ThpMode>, sizes: &[(u32, ThpMode)]) -> BackendResult<()> {
        if let Some(m) = enabled {
            sysfs::set(&sysfs::thp_path(None), sysfs::mode_name(m)).map_err(StepError::Unsupported)?;
        }
        for &(order, m) in sizes {
            let (size, top) = (sysfs::thp_path(Some(order)), sysfs::thp_path(None));
            sysfs::set_per_size(order, &size, &top, sysfs::mode_name(m), m == ThpMode::Inherit, "THP", "6.8")
                .map_err(StepError::Unsupported)?;
        }
        Ok(())
    }

    fn set_shmem(&self, enabled: Option<ShmemHuge>, sizes: &[(u32, ShmemMode)]) -> BackendResult<()> {
        if let Some(m) = enabled {
            sysfs::set(&sysfs::shmem_path(None), m.name()).map_err(StepError::Unsupported)?;
        }
        for &(order, m) in sizes {
            let (size, top) = (sysfs::shmem_path(Some(order)), sysfs::shmem_path(None));
            sysfs::set_per_size(order, &size, &top, m.name(), m == ShmemMode::Inherit, "shmem THP", "6.11")
                .map_err(StepError::Unsupported)?;
        }
        Ok(())
    }

    fn set_hugetlb(&self, size: HugeSize, pages: u64, overcommit: Option<u64>) -> BackendResult<()> {
        if let Some(n) = overcommit {
            sysfs::set(&sysfs::hugetlb_path(size, "nr_overcommit_hugepages"), &n.to_string())
                .map_err(StepError::Unsupported)?;
        }
        let path = sysfs::hugetlb_path(size, "nr_hugepages");
        sysfs::set(&path, &pages.to_string()).map_err(StepError::Unsupported)?;
        // Pages in use beyond the new size stay, as surplus pages.
        let read =
            |p: &str| sysfs::read_selected(p).map_err(broken)?.parse::<u64>().map_err(|e| broken(format!("{p}: {e}")));
        match read(&path)?.checked_sub(read(&sysfs::hugetlb_path(size, "surplus_hugepages"))?) {
            Some(got) if got == pages => Ok(()),
            got => Err(StepError::Unsupported(format!(
                "the host kernel gave {got:?} of {pages} huge pages of {}",
                size.name()
            ))),
        }
    }

    fn spawn(&self, proc: &str) -> BackendResult<()> {
        let mut child = None;
        let conn = self.connect(proc, || {
            let c = Command::new(&self.exe).arg(WORKER_ARG).arg(self.socket()).arg(proc).spawn();
            child = Some(c.map_err(|e| broken(format!("cannot start worker {}: {e}", self.exe.display())))?);
            Ok(())
        })?;
        let pid = child.as_ref().map_or(0, Child::id);
        self.procs.write().unwrap().insert(proc.into(), Worker { threads: HashMap::from([(0, conn)]), pid, child });
        Ok(())
    }

    fn spawn_thread(&self, t: Thread) -> BackendResult<()> {
        let conn = self.connect(&t.to_string(), || {
            self.value(Thread::main(t.proc), Request::SpawnThread { tid: t.tid }).map(|_| ())
        })?;
        let mut procs = self.procs.write().unwrap();
        let w = procs.get_mut(t.proc).ok_or_else(|| broken(format!("no process {}", t.proc)))?;
        w.threads.insert(t.tid, conn);
        Ok(())
    }

    fn exit_thread(&self, t: Thread) -> BackendResult<()> {
        if t.tid == 0 {
            return Err(broken(format!("thread {t} is the process's first; exit the process")));
        }
        let conn = self.conn(t)?;
        Self::send(&conn, &Request::Exit).map_err(|e| broken(format!("worker {t}: {e}")))?;
        Self::wait_closed(&conn);
        if let Some(w) = self.procs.write().unwrap().get_mut(t.proc) {
            w.threads.remove(&t.tid);
        }
        Ok(())
    }

    fn fork(&self, t: Thread, child: &str) -> BackendResult<()> {
        let mut pid = 0;
        let conn = self.connect(child, || {
            pid = self.value(t, Request::Fork { child: child.into() })? as u32;
            Ok(())
        })?;
        self.procs
            .write()
            .unwrap()
            .insert(child.into(), Worker { threads: HashMap::from([(0, conn)]), pid, child: None });
        Ok(())
    }

    fn exit(&self, proc: &str) -> BackendResult<()> {
        let w = self.procs.write().unwrap().remove(proc).ok_or_else(|| broken(format!("no process {proc}")))?;
        let main = w.threads.get(&0).ok_or_else(|| broken(format!("process {proc} has no thread 0")))?;
        // A worker that is gone already has exited too; its socket reads EOF.
        let _ = Self::send(main, &Request::Exit);
        for conn in w.threads.values() {
            Self::wait_closed(conn);
        }
        if let Some(mut c) = w.child {
            let _ = c.wait();
        }
        Ok(())
    }

    fn mmap(&self, t: Thread, req: MmapRequest) -> BackendResult<u64> {
        let MmapRequest { at, len, prot, fixed, populate, shared, hugetlb, noreserve, file } = req;
        self.value(t, Request::Mmap { at, len, prot: prot.0, fixed, populate, shared, hugetlb, noreserve, file })
    }

    fn create_file(&self, t: Thread, kind: FileKind, size: u64) -> BackendResult<u64> {
        self.value(t, Request::CreateFile { kind, size })
    }

    fn fallocate(&self, t: Thread, file: u64, offset: u64, len: u64, keep_size: bool) -> BackendResult<()> {
        self.value(t, Request::Fallocate { fd: file, offset, len, keep_size }).map(|_| ())
    }

    fn pwrite(&self, t: Thread, file: u64, offset: u64, data: &[u8]) -> BackendResult<u64> {
        self.value(t, Request::Pwrite { fd: file, offset, data: data.to_vec() })
    }

    fn pread(&self, t: Thread, file: u64, offset: u64, len: u64) -> BackendResult<Vec<u8>> {
        match self.request(t, &Request::Pread { fd: file, offset, len })? {
            Response::Bytes(b) => Ok(b),
            r => Err(broken(format!("worker {t} answered pread with {r:?}"))),
        }
    }

    fn observe_file(&self, t: Thread, file: u64, offset: u64) -> BackendResult<Observation> {
        match self.request(t, &Request::ObserveFile { fd: file, offset })? {
            Response::Observed(o) => Ok(o),
            r => Err(broken(format!("worker {t} answered a file observation with {r:?}"))),
        }
    }

    fn ftruncate(&self, t: Thread, file: u64, size: u64) -> BackendResult<()> {
        self.value(t, Request::Ftruncate { fd: file, size }).map(|_| ())
    }

    fn punch_hole(&self, t: Thread, file: u64, offset: u64, len: u64) -> BackendResult<()> {
        self.value(t, Request::PunchHole { fd: file, offset, len }).map(|_| ())
    }

    fn munmap(&self, t: Thread, addr: u64, len: u64) -> BackendResult<()> {
        self.value(t, Request::Munmap { addr, len }).map(|_| ())
    }

    fn mprotect(&self, t: Thread, addr: u64, len: u64, prot: Prot) -> BackendResult<()> {
        self.value(t, Request::Mprotect { addr, len, prot: prot.0 }).map(|_| ())
    }

    fn madvise(&self, t: Thread, addr: u64, len: u64, advice: Advice) -> BackendResult<()> {
        self.value(t, Request::Madvise { addr, len, advice }).map(|_| ())
    }

    fn mremap(&self, t: Thread, addr: u64, len: u64, new_len: u64, to: Option<u64>) -> BackendResult<u64> {
        self.value(t, Request::Mremap { addr, len, new_len, to })
    }

    fn access(&self, t: Thread, addr: u64, len: u64, access: Access) -> BackendResult<Vec<u8>> {
        match self.request(t, &Request::Access { addr, len, access })? {
            Response::Bytes(b) => Ok(b),
            Response::Value(_) => Ok(Vec::new()),
            r => Err(broken(format!("worker {t} answered an access with {r:?}"))),
        }
    }

    fn observe(&self, t: Thread, addr: u64, len: u64) -> BackendResult<Observation> {
        match self.request(t, &Request::Observe { addr, len })? {
            Response::Observed(o) => Ok(o),
            r => Err(broken(format!("worker {t} answered observe with {r:?}"))),
        }
    }

    /// FOLL_GET through vmsplice(); FOLL_PIN only as io_uring takes it
    /// (write, longterm). R/O or short-term FOLL_PIN needs the kernel's
    /// gup_test debugfs interface, which this backend does not use.
    fn supports_gup(&self, kind: GupKind) -> bool {
        matches!(kind, GupKind::Get | GupKind::Pin { write: true, longterm: true })
    }

    fn pin(&self, t: Thread, addr: u64, len: u64, kind: GupKind) -> BackendResult<u64> {
        let id = unique() + 1;
        self.value(t, Request::Gup { id, addr, len, kind })?;
        self.gups.lock().unwrap().insert(id, (t.proc.to_string(), t.tid));
        Ok(id)
    }

    fn unpin(&self, pin: u64) -> BackendResult<()> {
        let (proc, tid) = self.gups.lock().unwrap().remove(&pin).ok_or(Errno::EINVAL)?;
        self.value(Thread { proc: &proc, tid }, Request::Ungup { id: pin }).map(|_| ())
    }

    /// Only the byte: the kernel shows no frame for a GUP reference.
    fn observe_pin(&self, pin: u64) -> BackendResult<Observation> {
        let (proc, tid) = self.gups.lock().unwrap().get(&pin).cloned().ok_or(Errno::EINVAL)?;
        let byte = self.value(Thread { proc: &proc, tid }, Request::GupByte { id: pin })? as u8;
        Ok(Observation { byte, via_gup: true, ..Default::default() })
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
        counters
    }

    /// Only the huge page pools' counts: the runs own the pools (they set
    /// them up from nothing), while other counters count the whole system.
    fn exact_counter(&self, name: &str) -> bool {
        name.starts_with("hugepages_")
    }

    fn observes(&self, field: &str) -> bool {
        field == "frame" || Observation::KERNEL_FIELDS.contains(&field)
    }

    fn check(&self) -> Vec<foliomm::check::Violation> {
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
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
