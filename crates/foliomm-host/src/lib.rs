//! The host backend: every scenario process is a real Linux process (a
//! worker, see [`worker`]) whose address space the running kernel manages.
//! The controller (the interpreter's process) sends each step over a Unix
//! socket; observations come from the kernel's own interfaces ([`procfs`]);
//! THP settings go through sysfs and are restored afterwards ([`sysfs`]).
//! Linux only; needs root for frame numbers, kpageflags and sysfs.

pub mod gup;
pub mod procfs;
pub mod sysfs;
pub mod worker;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Child, Command};

use foliomm::folio::thp::ThpMode;
use foliomm::mm::Advice;
use foliomm::mm_types::Prot;
use foliomm::Errno;
use foliomm_scenario::backend::{Access, Backend, BackendError, GupKind, Observation};
use foliomm_scenario::lang::MachineSetting;

pub use worker::worker_main;

/// The first argument that makes the foliomm binary run as a worker.
pub const WORKER_ARG: &str = "__host-worker";

/// A step sent to a worker.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub enum Request {
    Hello {
        name: String,
    },
    Mmap {
        at: Option<u64>,
        len: u64,
        prot: u32,
        fixed: bool,
        populate: bool,
    },
    Munmap {
        addr: u64,
        len: u64,
    },
    Mprotect {
        addr: u64,
        len: u64,
        prot: u32,
    },
    Madvise {
        addr: u64,
        len: u64,
        advice: Advice,
    },
    Mremap {
        addr: u64,
        len: u64,
        new_len: u64,
        to: Option<u64>,
    },
    Access {
        addr: u64,
        len: u64,
        access: Access,
    },
    Observe {
        addr: u64,
        len: u64,
    },
    Fork {
        child: String,
    },
    /// Take GUP references (handle `id`, chosen by the controller).
    Gup {
        id: u64,
        addr: u64,
        len: u64,
        kind: GupKind,
    },
    /// The first byte the references of `id` hold.
    GupByte {
        id: u64,
    },
    Ungup {
        id: u64,
    },
    Exit,
}

/// A worker's answer.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub enum Response {
    Value(u64),
    Bytes(Vec<u8>),
    Observed(Observation),
    Err(Errno),
}

struct Worker {
    conn: BufReader<UnixStream>,
    /// The process the controller started (the first of a fork tree).
    child: Option<Child>,
}

/// Counters of /proc/vmstat that the model also keeps, under the model's names.
const VMSTAT: &[&str] =
    &["thp_fault_alloc", "thp_fault_fallback", "thp_split_pmd", "thp_deferred_split_page", "pgreuse"];

/// Runs scenarios on the running kernel.
pub struct HostBackend {
    exe: PathBuf,
    dir: PathBuf,
    listener: Option<UnixListener>,
    procs: HashMap<String, Worker>,
    baseline: Vec<(String, u64)>,
    /// GUP handle -> the process holding it.
    gups: HashMap<u64, String>,
}

impl HostBackend {
    /// `exe` is a program that runs [`worker_main`] when its first argument
    /// is [`WORKER_ARG`] (the foliomm binary).
    pub fn new(exe: PathBuf) -> HostBackend {
        let dir = std::env::temp_dir().join(format!("foliomm-host-{}-{}", std::process::id(), unique()));
        HostBackend { exe, dir, listener: None, procs: HashMap::new(), baseline: Vec::new(), gups: HashMap::new() }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("ctl.sock")
    }

    /// Accepts the next worker connection and checks that it is `name`.
    fn accept(&self, name: &str) -> Result<BufReader<UnixStream>, Errno> {
        let (s, _) = self.listener.as_ref().ok_or(Errno::EINVAL)?.accept().map_err(|_| Errno::EINVAL)?;
        let mut conn = BufReader::new(s);
        let mut line = String::new();
        conn.read_line(&mut line).map_err(|_| Errno::EINVAL)?;
        match serde_json::from_str(&line) {
            Ok(Request::Hello { name: n }) if n == name => Ok(conn),
            _ => Err(Errno::EINVAL),
        }
    }

    fn request(&mut self, proc: &str, req: &Request) -> Result<Response, Errno> {
        let w = self.procs.get_mut(proc).ok_or(Errno::EINVAL)?;
        let mut line = serde_json::to_string(req).unwrap();
        line.push('\n');
        w.conn.get_mut().write_all(line.as_bytes()).map_err(|_| Errno::EINVAL)?;
        line.clear();
        if w.conn.read_line(&mut line).unwrap_or(0) == 0 {
            return Err(Errno::EINVAL);
        }
        match serde_json::from_str(&line) {
            Ok(Response::Err(e)) => Err(e),
            Ok(r) => Ok(r),
            Err(_) => Err(Errno::EINVAL),
        }
    }

    fn value(&mut self, proc: &str, req: Request) -> Result<u64, Errno> {
        match self.request(proc, &req)? {
            Response::Value(v) => Ok(v),
            _ => Err(Errno::EINVAL),
        }
    }

    fn raw_counters() -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
        for l in vmstat.lines() {
            if let Some((k, v)) = l.split_once(' ') {
                if VMSTAT.contains(&k) {
                    out.push((k.to_string(), v.trim().parse().unwrap_or(0)));
                }
            }
        }
        for order in 2..=9u32 {
            let dir = format!("{}/hugepages-{}kB/stats", sysfs::THP, 4u64 << order);
            for (file, name) in [("anon_fault_alloc", "anon_fault_alloc"), ("split_deferred", "split_deferred")] {
                if let Ok(v) = std::fs::read_to_string(format!("{dir}/{file}")) {
                    out.push((format!("{name}[{}K]", 4u64 << order), v.trim().parse().unwrap_or(0)));
                }
            }
        }
        out
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    fn refusal(&self, s: &MachineSetting) -> Option<String> {
        let why = match s {
            MachineSetting::Memory(_) => "the host's memory size is fixed",
            MachineSetting::Mapcount(d) if *d != foliomm::mapcount::Design::MmId => {
                "the host kernel tracks mapcounts as mm-id"
            }
            MachineSetting::Zap(z) if *z != foliomm::machine::ZapStrategy::Batched => "the host kernel zaps batched",
            MachineSetting::Tlb(_) => "the host's TLB is hardware",
            MachineSetting::Debug(_) => "debug switches break the model, not the kernel",
            MachineSetting::MmIds(_) => "the host kernel's MM ID space cannot be limited",
            _ => return None,
        };
        Some(format!("cannot honour {s:?}: {why}"))
    }

    fn start(&mut self, _settings: &[MachineSetting]) -> Result<(), BackendError> {
        if std::fs::File::open("/proc/kpageflags").is_err() {
            return Err(BackendError("cannot read /proc/kpageflags: the host backend needs root".into()));
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| BackendError(format!("cannot create {}: {e}", self.dir.display())))?;
        let listener = UnixListener::bind(self.socket())
            .map_err(|e| BackendError(format!("cannot listen on {}: {e}", self.socket().display())))?;
        self.listener = Some(listener);
        self.baseline = Self::raw_counters();
        Ok(())
    }

    fn set_thp(&mut self, enabled: Option<ThpMode>, sizes: &[(u32, ThpMode)]) -> Result<(), BackendError> {
        if let Some(m) = enabled {
            sysfs::set(&sysfs::thp_path(None), sysfs::mode_name(m)).map_err(BackendError)?;
        }
        for &(order, m) in sizes {
            sysfs::set(&sysfs::thp_path(Some(order)), sysfs::mode_name(m)).map_err(BackendError)?;
        }
        Ok(())
    }

    fn spawn(&mut self, proc: &str) -> Result<(), Errno> {
        let child =
            Command::new(&self.exe).arg(WORKER_ARG).arg(self.socket()).arg(proc).spawn().map_err(|_| Errno::EINVAL)?;
        let conn = self.accept(proc)?;
        self.procs.insert(proc.into(), Worker { conn, child: Some(child) });
        Ok(())
    }

    fn fork(&mut self, parent: &str, child: &str) -> Result<(), Errno> {
        self.value(parent, Request::Fork { child: child.into() })?;
        let conn = self.accept(child)?;
        self.procs.insert(child.into(), Worker { conn, child: None });
        Ok(())
    }

    fn exit(&mut self, proc: &str) {
        let Some(mut w) = self.procs.remove(proc) else { return };
        let _ = w.conn.get_mut().write_all(b"\"Exit\"\n");
        // The socket closes after the process's address space is gone
        // (do_exit: exit_mm before exit_files).
        let mut rest = String::new();
        while w.conn.read_line(&mut rest).unwrap_or(0) > 0 {}
        if let Some(mut c) = w.child {
            let _ = c.wait();
        }
    }

    fn mmap(
        &mut self,
        proc: &str,
        at: Option<u64>,
        len: u64,
        prot: Prot,
        fixed: bool,
        populate: bool,
    ) -> Result<u64, Errno> {
        self.value(proc, Request::Mmap { at, len, prot: prot.0, fixed, populate })
    }

    fn munmap(&mut self, proc: &str, addr: u64, len: u64) -> Result<(), Errno> {
        self.value(proc, Request::Munmap { addr, len }).map(|_| ())
    }

    fn mprotect(&mut self, proc: &str, addr: u64, len: u64, prot: Prot) -> Result<(), Errno> {
        self.value(proc, Request::Mprotect { addr, len, prot: prot.0 }).map(|_| ())
    }

    fn madvise(&mut self, proc: &str, addr: u64, len: u64, advice: Advice) -> Result<(), Errno> {
        self.value(proc, Request::Madvise { addr, len, advice }).map(|_| ())
    }

    fn mremap(&mut self, proc: &str, addr: u64, len: u64, new_len: u64, to: Option<u64>) -> Result<u64, Errno> {
        self.value(proc, Request::Mremap { addr, len, new_len, to })
    }

    fn access(&mut self, proc: &str, addr: u64, len: u64, access: Access) -> Result<Vec<u8>, Errno> {
        match self.request(proc, &Request::Access { addr, len, access })? {
            Response::Bytes(b) => Ok(b),
            _ => Ok(Vec::new()),
        }
    }

    fn observe(&mut self, proc: &str, addr: u64, len: u64) -> Result<Observation, Errno> {
        match self.request(proc, &Request::Observe { addr, len })? {
            Response::Observed(o) => Ok(o),
            _ => Err(Errno::EINVAL),
        }
    }

    /// FOLL_GET through vmsplice(); FOLL_PIN only as io_uring takes it
    /// (write, longterm). R/O or short-term FOLL_PIN needs the kernel's
    /// gup_test debugfs interface, which this backend does not use.
    fn supports_gup(&self, kind: GupKind) -> bool {
        matches!(kind, GupKind::Get | GupKind::Pin { write: true, longterm: true })
    }

    fn pin(&mut self, proc: &str, addr: u64, len: u64, kind: GupKind) -> Result<u64, Errno> {
        let id = self.gups.len() as u64 + unique() + 1;
        self.value(proc, Request::Gup { id, addr, len, kind })?;
        self.gups.insert(id, proc.to_string());
        Ok(id)
    }

    fn unpin(&mut self, pin: u64) -> Result<(), Errno> {
        let proc = self.gups.remove(&pin).ok_or(Errno::EINVAL)?;
        self.value(&proc, Request::Ungup { id: pin }).map(|_| ())
    }

    /// Only the byte: the kernel shows no frame for a GUP reference.
    fn observe_pin(&mut self, pin: u64) -> Result<Observation, Errno> {
        let proc = self.gups.get(&pin).ok_or(Errno::EINVAL)?.clone();
        let byte = self.value(&proc, Request::GupByte { id: pin })? as u8;
        Ok(Observation { byte, via_gup: true, ..Default::default() })
    }

    fn observes_through_gup(&self, field: &str) -> bool {
        field == "byte"
    }

    /// Deltas since `start` of the system-wide counters the model also keeps.
    fn counters(&self) -> Vec<(String, u64)> {
        Self::raw_counters()
            .into_iter()
            .map(|(k, v)| {
                let base = self.baseline.iter().find(|(b, _)| *b == k).map_or(0, |(_, b)| *b);
                (k, v.saturating_sub(base))
            })
            .collect()
    }

    fn exact_counters(&self) -> bool {
        false
    }

    fn observes(&self, field: &str) -> bool {
        field == "frame" || Observation::KERNEL_FIELDS.contains(&field)
    }

    fn check(&self) -> Vec<String> {
        Vec::new()
    }
}

impl Drop for HostBackend {
    fn drop(&mut self) {
        let names: Vec<String> = self.procs.keys().cloned().collect();
        for p in names {
            self.exit(&p);
        }
        sysfs::restore_all();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
