//! The seam between the interpreter and what runs the workload: the model
//! ([`crate::model::ModelBackend`]) or, later, the host kernel. Processes are
//! named as in the scenario file.

use foliomm::check::Violation;
use foliomm::folio::thp::{ShmemHuge, ShmemMode, ThpMode};
use foliomm::machine::{HugeCounts, HugeSize};
use foliomm::mm::{Advice, PageInfo, RangeInfo};
use foliomm::mm_types::Prot;
use foliomm::Errno;

use crate::lang::MachineSetting;

/// How a step touches memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Access {
    /// Write `val` to the first byte of each page, or to every byte.
    Write { val: u8, every_byte: bool },
    /// Write every byte with [`pattern_byte`] of its offset from `origin`
    /// (the mapping's start, so that backends placing the mapping at
    /// different addresses write the same bytes) and `seed`.
    Pattern { origin: u64, seed: u8 },
    /// Read the first byte of each page, or every byte.
    Read { every_byte: bool },
}

/// The byte a `pattern` write puts at offset `off` of a mapping: it differs
/// between neighbouring bytes and between pages, so a page that shows up at
/// the wrong place is noticed.
pub fn pattern_byte(off: u64, seed: u8) -> u8 {
    ((off >> 12).wrapping_mul(0x9e37) ^ (off & 0xfff).wrapping_mul(7)) as u8 ^ seed
}

/// The bytes of a `pattern` write of `len` bytes at `addr`, for a mapping
/// that starts at `origin`.
pub fn pattern_bytes(origin: u64, addr: u64, len: u64, seed: u8) -> Vec<u8> {
    (addr..addr + len).map(|a| pattern_byte(a - origin, seed)).collect()
}

/// What a trace sees of one page ([`Backend::peek`]).
pub struct Peek {
    pub page: PageInfo,
    /// The byte at the address.
    pub byte: u8,
    /// The mapcount design's raw fields of the page's large folio, by
    /// Linux's names (the model only).
    pub fields: Vec<(String, i64)>,
}

/// The reference by its GUP flags (`FOLL_PIN | FOLL_WRITE`, ...).
impl std::fmt::Display for GupKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            GupKind::Get => write!(f, "FOLL_GET"),
            GupKind::Pin { write, longterm } => {
                write!(
                    f,
                    "FOLL_PIN{}{}",
                    if write { " | FOLL_WRITE" } else { "" },
                    if longterm { " | FOLL_LONGTERM" } else { "" }
                )
            }
        }
    }
}

/// Which kind of GUP reference a `pin`/`get` step takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GupKind {
    /// FOLL_GET, read-only (what `vmsplice()` takes).
    Get,
    /// FOLL_PIN, optionally FOLL_WRITE and FOLL_LONGTERM.
    Pin { write: bool, longterm: bool },
}

/// What an `observe` step records: the first page of the place as pagemap and
/// kpageflags report it, and smaps-style sums over the whole place.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Observation {
    pub page: PageInfo,
    pub range: RangeInfo,
    /// The byte at the observed address.
    pub byte: u8,
    /// Observed through a GUP reference rather than the page tables.
    #[serde(default)]
    pub via_gup: bool,
    /// The process's page-table memory (`VmPTE`) in KiB (model only: the
    /// host worker's own tables would count too).
    #[serde(default)]
    pub pgtables_kb: u64,
}

impl Observation {
    /// Fields the kernel reports too (pagemap, kpageflags, PAGEMAP_SCAN):
    /// the ones a comparison with the host checks.
    pub const KERNEL_FIELDS: &'static [&'static str] = &[
        "present",
        "zero_page",
        "pmd_mapped",
        "folio_order",
        "folio_kb",
        "exclusive",
        "byte",
        "rss_kb",
        "anonymous_kb",
        "anon_huge_kb",
        "shmem_kb",
        "shmem_pmd_kb",
        "shared_kb",
        "private_kb",
    ];

    /// Fields only the model knows (the kernel exposes no PTE write bit,
    /// mapcount, refcount, AnonExclusive, "maybe shared" or the policy guess).
    pub const MODEL_FIELDS: &'static [&'static str] = &[
        "writable",
        "mapcount",
        "folio_mapcount",
        "refcount",
        "anon_exclusive",
        "maybe_shared",
        "likely_shared",
        "pmd_shared",
        "pgtables_kb",
    ];

    /// Every field `expect` can use: `frame`, the kernel's and the model's.
    pub fn field_names() -> impl Iterator<Item = &'static str> {
        std::iter::once("frame").chain(Self::KERNEL_FIELDS.iter().copied()).chain(Self::MODEL_FIELDS.iter().copied())
    }

    /// The value of a field, booleans as 0/1.
    pub fn field(&self, name: &str) -> Option<u64> {
        let p = &self.page;
        let r = &self.range;
        Some(match name {
            "frame" => p.pfn,
            "folio_order" => p.folio_order as u64,
            "folio_kb" => 4 << p.folio_order,
            "present" => p.present as u64,
            "exclusive" => p.exclusive as u64,
            "zero_page" => p.zero_page as u64,
            "pmd_mapped" => p.pmd_mapped as u64,
            "writable" => p.writable as u64,
            "byte" => self.byte as u64,
            "rss_kb" => r.rss_kb,
            "anonymous_kb" => r.anonymous_kb,
            "anon_huge_kb" => r.anon_huge_kb,
            "shmem_kb" => r.shmem_kb,
            "shmem_pmd_kb" => r.shmem_pmd_kb,
            "shared_kb" => r.shared_kb,
            "private_kb" => r.private_kb,
            "mapcount" => p.mapcount,
            "folio_mapcount" => p.folio_mapcount,
            "refcount" => p.refcount,
            "anon_exclusive" => p.anon_exclusive as u64,
            "maybe_shared" => p.maybe_shared as u64,
            "likely_shared" => p.likely_shared as u64,
            "pmd_shared" => p.pmd_shared as u64,
            "pgtables_kb" => self.pgtables_kb,
            _ => return None,
        })
    }
}

/// Why a backend call failed. Only an [`StepError::Errno`] is a result a
/// scenario can expect (`fails EINVAL`); the other two stop the run whatever
/// the step says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The operation failed as the kernel fails it.
    #[error("{0}")]
    Errno(Errno),
    /// The backend's machinery broke: a worker died, a socket closed, a
    /// setting could not be written. The run fails.
    #[error("backend failure: {0}")]
    Backend(String),
    /// The backend cannot do this (a setting, a GUP kind, an errno foliomm
    /// does not model): the scenario is skipped on this backend.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl From<Errno> for StepError {
    fn from(e: Errno) -> StepError {
        StepError::Errno(e)
    }
}

/// What a backend call returns.
pub type BackendResult<T> = Result<T, StepError>;

/// A thread of a scenario process: the process's name and the thread's
/// number in it. Thread 0 is the one the process starts with (the
/// thread-group leader); others come from [`Backend::spawn_thread`]. Every
/// system call and memory access is made by one thread, as in Linux.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Thread<'a> {
    pub proc: &'a str,
    pub tid: u32,
}

impl<'a> Thread<'a> {
    /// The thread process `proc` started with.
    pub fn main(proc: &'a str) -> Thread<'a> {
        Thread { proc, tid: 0 }
    }
}

impl std::fmt::Display for Thread<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.proc, self.tid)
    }
}

/// What kind of file a scenario makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FileKind {
    /// `memfd_create` (the internal shm mount, whose `huge` follows
    /// `shmem_enabled`).
    Memfd,
    /// A file on a tmpfs mount of its own with option `huge=`; `named`
    /// false for an `O_TMPFILE` file, which has no name.
    Tmpfs { huge: ShmemHuge, named: bool },
    /// `memfd_create(MFD_HUGETLB)` with the size flag of its pages: a
    /// hugetlbfs file.
    Hugetlbfs(HugeSize),
}

/// An `mmap` call: `at` is a hint, or the exact place with `fixed`; `file`
/// is a file handle and a byte offset, `None` for anonymous memory.
#[derive(Clone, Copy, Debug)]
pub struct MmapRequest {
    pub at: Option<u64>,
    pub len: u64,
    pub prot: Prot,
    pub fixed: bool,
    pub populate: bool,
    pub shared: bool,
    /// `MAP_HUGETLB` with a page size (`MAP_HUGE_2MB`, `MAP_HUGE_1GB`).
    pub hugetlb: Option<HugeSize>,
    /// `MAP_NORESERVE`.
    pub noreserve: bool,
    pub file: Option<(u64, u64)>,
}

impl MmapRequest {
    /// Private anonymous memory of `len` bytes anywhere.
    pub fn anon(len: u64, prot: Prot) -> MmapRequest {
        MmapRequest {
            at: None,
            len,
            prot,
            fixed: false,
            populate: false,
            shared: false,
            hugetlb: None,
            noreserve: false,
            file: None,
        }
    }
}

/// What runs a scenario. Calls of different threads may run at once (from
/// different OS threads of the caller); calls of one thread come one at a
/// time, as a thread makes its system calls.
pub trait Backend: Send + Sync {
    /// `model` or `host`.
    fn name(&self) -> &'static str;
    /// Why the backend cannot honour `setting`, if it cannot (an unknown
    /// name, or a setting the machine cannot take). Asked for each setting
    /// in force before [`Backend::start`], so the refusal names its `set` line.
    fn refusal(&self, setting: &MachineSetting) -> Option<String>;
    /// Builds the machine from the `set` lines seen so far, none of them
    /// refused; called once, before the first process step.
    fn start(&self, settings: &[MachineSetting]) -> BackendResult<()>;
    /// Applies THP settings (top-level mode, and modes per folio order).
    fn set_thp(&self, enabled: Option<ThpMode>, sizes: &[(u32, ThpMode)]) -> BackendResult<()>;
    /// Applies shmem THP settings (`shmem_enabled`, and modes per folio order).
    fn set_shmem(&self, enabled: Option<ShmemHuge>, sizes: &[(u32, ShmemMode)]) -> BackendResult<()>;
    /// Sets the size (`nr_hugepages`) of the huge page pool of `size`, and
    /// its `nr_overcommit_hugepages`; the backend cannot if it gets fewer
    /// pages.
    fn set_hugetlb(&self, size: HugeSize, pages: u64, overcommit: Option<u64>) -> BackendResult<()>;
    /// Creates a process with an empty address space and one thread (0).
    fn spawn(&self, proc: &str) -> BackendResult<()>;
    /// Creates thread `t.tid` in process `t.proc`, sharing its address space
    /// (`clone(CLONE_VM | CLONE_THREAD)`).
    fn spawn_thread(&self, t: Thread) -> BackendResult<()>;
    /// Ends thread `t` (not thread 0: a process ends with [`Backend::exit`]).
    fn exit_thread(&self, t: Thread) -> BackendResult<()>;
    /// `t` forks: the child is a process named `child` with one thread, the copy of `t`.
    fn fork(&self, t: Thread, child: &str) -> BackendResult<()>;
    /// Ends the process with all its threads (`exit_group`).
    fn exit(&self, proc: &str) -> BackendResult<()>;
    /// mmap of anonymous memory or of a file, private or shared.
    fn mmap(&self, t: Thread, req: MmapRequest) -> BackendResult<u64>;
    /// A new shmem file of `kind` and `size` bytes (`memfd_create`, or an
    /// `open` on a tmpfs mount, + `ftruncate`) in `t`'s process, inherited
    /// by children it forks later; returns its handle.
    fn create_file(&self, t: Thread, kind: FileKind, size: u64) -> BackendResult<u64>;
    /// `ftruncate` of file `file` (a handle [`Backend::create_file`] returned).
    fn ftruncate(&self, t: Thread, file: u64, size: u64) -> BackendResult<()>;
    /// `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)` of file `file`.
    fn punch_hole(&self, t: Thread, file: u64, offset: u64, len: u64) -> BackendResult<()>;
    /// `fallocate(keep_size ? FALLOC_FL_KEEP_SIZE : 0)` of file `file`.
    fn fallocate(&self, t: Thread, file: u64, offset: u64, len: u64, keep_size: bool) -> BackendResult<()>;
    /// `pwrite` of `data` at `offset`; returns the bytes written.
    fn pwrite(&self, t: Thread, file: u64, offset: u64, data: &[u8]) -> BackendResult<u64>;
    /// `pread` of up to `len` bytes at `offset`; returns the bytes read.
    fn pread(&self, t: Thread, file: u64, offset: u64, len: u64) -> BackendResult<Vec<u8>>;
    /// The file's page at `offset` in the page cache, mapped nowhere for
    /// the purpose: `present` if cached, its frame and folio order, and the
    /// byte at `offset`. Allocates nothing.
    fn observe_file(&self, t: Thread, file: u64, offset: u64) -> BackendResult<Observation>;
    fn munmap(&self, t: Thread, addr: u64, len: u64) -> BackendResult<()>;
    fn mprotect(&self, t: Thread, addr: u64, len: u64, prot: Prot) -> BackendResult<()>;
    fn madvise(&self, t: Thread, addr: u64, len: u64, advice: Advice) -> BackendResult<()>;
    /// mremap with MREMAP_MAYMOVE, and MREMAP_FIXED when `to` is given.
    fn mremap(&self, t: Thread, addr: u64, len: u64, new_len: u64, to: Option<u64>) -> BackendResult<u64>;
    /// Performs an access on `t`'s CPU; a read returns the bytes read.
    fn access(&self, t: Thread, addr: u64, len: u64, access: Access) -> BackendResult<Vec<u8>>;
    fn observe(&self, t: Thread, addr: u64, len: u64) -> BackendResult<Observation>;
    /// Whether the backend can take GUP references of this kind; a scenario
    /// that needs one it cannot take is skipped there.
    fn supports_gup(&self, kind: GupKind) -> bool {
        let _ = kind;
        true
    }
    /// Takes GUP references to the pages of a range; returns a handle.
    fn pin(&self, t: Thread, addr: u64, len: u64, kind: GupKind) -> BackendResult<u64>;
    fn unpin(&self, pin: u64) -> BackendResult<()>;
    /// The first referenced page as it is now: frame, folio order (where
    /// the backend can tell), and the byte at the referenced address.
    fn observe_pin(&self, pin: u64) -> BackendResult<Observation>;
    /// What the page tables of `t`'s process map at `addr` (with the byte
    /// there), for a trace: no access through the process's CPU (no TLB
    /// fill, no accessed bit) and no precision judgement. By default an
    /// [`Backend::observe`], which the host's kernel interfaces allow.
    fn peek(&self, t: Thread, addr: u64) -> Option<Peek> {
        self.observe(t, addr, 4096).ok().map(|o| Peek { page: o.page, byte: o.byte, fields: Vec::new() })
    }
    /// Whether an observation through a GUP reference carries `field`.
    fn observes_through_gup(&self, field: &str) -> bool {
        self.observes(field)
    }
    /// The mapcount design of the kernel this backend runs: the model's
    /// default, or the one of a real kernel's era (per-design `expect`
    /// lines follow it).
    fn design(&self) -> foliomm::mapcount::Design {
        foliomm::mapcount::Design::default()
    }
    /// Event counters by name.
    fn counters(&self) -> Vec<(String, u64)>;
    /// Whether counter `name` counts only this run's events or state (every
    /// counter of the model) rather than the whole system's (most of the
    /// host's): `stat.` expectations are checked only where they are exact.
    fn exact_counter(&self, _name: &str) -> bool {
        true
    }
    /// Whether observations carry `field` (the host lacks the model-only
    /// ones: frame identity aside, only [`Observation::KERNEL_FIELDS`]).
    fn observes(&self, field: &str) -> bool {
        Observation::field_names().any(|f| f == field)
    }
    /// Invariant violations (a backend that cannot check returns none).
    fn check(&self) -> Vec<Violation>;
}

/// The counters of the pool of `size`, named as scenarios read them:
/// `hugepages_total`, `_free`, `_rsvd`, `_surp` for 2 MiB pages (the
/// default size, as `/proc/meminfo` shows it), `hugepages_1g_...` for
/// 1 GiB ones.
pub fn hugepage_counters(size: HugeSize, h: HugeCounts) -> [(String, u64); 4] {
    let prefix = match size {
        HugeSize::Pmd => "hugepages",
        HugeSize::Pud => "hugepages_1g",
    };
    [("total", h.total), ("free", h.free), ("rsvd", h.resv), ("surp", h.surplus)]
        .map(|(n, v)| (format!("{prefix}_{n}"), v))
}
