//! The seam between the interpreter and what runs the workload: the model
//! ([`crate::model::ModelBackend`]) or, later, the host kernel. Processes are
//! named as in the scenario file.

use foliomm::folio::thp::ThpMode;
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
        "shared_kb",
        "private_kb",
    ];

    /// Fields only the model knows (the kernel exposes no PTE write bit,
    /// mapcount, refcount, AnonExclusive, "maybe shared" or the policy guess).
    pub const MODEL_FIELDS: &'static [&'static str] =
        &["writable", "mapcount", "folio_mapcount", "refcount", "anon_exclusive", "maybe_shared", "likely_shared"];

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
            "shared_kb" => r.shared_kb,
            "private_kb" => r.private_kb,
            "mapcount" => p.mapcount,
            "folio_mapcount" => p.folio_mapcount,
            "refcount" => p.refcount,
            "anon_exclusive" => p.anon_exclusive as u64,
            "maybe_shared" => p.maybe_shared as u64,
            "likely_shared" => p.likely_shared as u64,
            _ => return None,
        })
    }
}

/// A backend error that is not a memory-operation errno: a setting it cannot
/// apply, or a feature it lacks.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct BackendError(pub String);

/// What runs a scenario.
pub trait Backend {
    /// `model` or `host`.
    fn name(&self) -> &'static str;
    /// Why the backend cannot honour `setting`, if it cannot (an unknown
    /// name, or a setting the machine cannot take). Asked for each setting
    /// in force before [`Backend::start`], so the refusal names its `set` line.
    fn refusal(&self, setting: &MachineSetting) -> Option<String>;
    /// Builds the machine from the `set` lines seen so far, none of them
    /// refused; called once, before the first process step.
    fn start(&mut self, settings: &[MachineSetting]) -> Result<(), BackendError>;
    /// Applies THP settings (top-level mode, and modes per folio order).
    fn set_thp(&mut self, enabled: Option<ThpMode>, sizes: &[(u32, ThpMode)]) -> Result<(), BackendError>;
    /// Creates a process with an empty address space.
    fn spawn(&mut self, proc: &str) -> Result<(), Errno>;
    fn fork(&mut self, parent: &str, child: &str) -> Result<(), Errno>;
    fn exit(&mut self, proc: &str);
    /// Anonymous private mmap; `at` is a hint, or the exact place with `fixed`.
    fn mmap(
        &mut self,
        proc: &str,
        at: Option<u64>,
        len: u64,
        prot: Prot,
        fixed: bool,
        populate: bool,
    ) -> Result<u64, Errno>;
    fn munmap(&mut self, proc: &str, addr: u64, len: u64) -> Result<(), Errno>;
    fn mprotect(&mut self, proc: &str, addr: u64, len: u64, prot: Prot) -> Result<(), Errno>;
    fn madvise(&mut self, proc: &str, addr: u64, len: u64, advice: Advice) -> Result<(), Errno>;
    /// mremap with MREMAP_MAYMOVE, and MREMAP_FIXED when `to` is given.
    fn mremap(&mut self, proc: &str, addr: u64, len: u64, new_len: u64, to: Option<u64>) -> Result<u64, Errno>;
    /// Performs an access; a read returns the bytes read.
    fn access(&mut self, proc: &str, addr: u64, len: u64, access: Access) -> Result<Vec<u8>, Errno>;
    fn observe(&mut self, proc: &str, addr: u64, len: u64) -> Result<Observation, Errno>;
    /// Whether the backend can take GUP references of this kind; a scenario
    /// that needs one it cannot take is skipped there.
    fn supports_gup(&self, kind: GupKind) -> bool {
        let _ = kind;
        true
    }
    /// Takes GUP references to the pages of a range; returns a handle.
    fn pin(&mut self, proc: &str, addr: u64, len: u64, kind: GupKind) -> Result<u64, Errno>;
    fn unpin(&mut self, pin: u64) -> Result<(), Errno>;
    /// The first referenced page as it is now: frame, folio order (where
    /// the backend can tell), and the byte at the referenced address.
    fn observe_pin(&mut self, pin: u64) -> Result<Observation, Errno>;
    /// Whether an observation through a GUP reference carries `field`.
    fn observes_through_gup(&self, field: &str) -> bool {
        self.observes(field)
    }
    /// Event counters by name.
    fn counters(&self) -> Vec<(String, u64)>;
    /// Whether the counters count only this run's events (the model) rather
    /// than the whole system's (the host): `stat.` expectations are checked
    /// only where they are exact.
    fn exact_counters(&self) -> bool {
        true
    }
    /// Whether observations carry `field` (the host lacks the model-only
    /// ones: frame identity aside, only [`Observation::KERNEL_FIELDS`]).
    fn observes(&self, field: &str) -> bool {
        Observation::field_names().any(|f| f == field)
    }
    /// Invariant violations (a backend that cannot check returns none).
    fn check(&self) -> Vec<String>;
}
