//! The seam between the interpreter and what runs the workload: the model
//! ([`crate::model::ModelBackend`]), the host kernel or a guest's. Every
//! operation goes through [`Backend::perform`] as an [`Op`]; the rest of the
//! trait is what the interpreter asks of the backend as a whole (its
//! settings, counters, checker and what it can observe). Processes are named
//! as in the scenario file.

use foliomm::internals::check::Violation;
use foliomm::internals::machine::{HugeCounts, HugeSize};
use foliomm::internals::release::KernelVersion;

use crate::error::{BackendResult, Machinery, StepError};
use crate::lang::{Daemon, MachineSetting, Tunable};
use crate::observation::Observation;
use crate::op::{GupKind, Op, Reply};

/// A thread of a scenario process: the process's name and the thread's
/// number in it. Thread 0 is the one a process starts with (the
/// thread-group leader); others come from [`Op::SpawnThread`]. Every
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

    /// A machinery failure of this thread's that it cannot be `why`.
    pub fn failure(&self, why: impl Into<String>) -> StepError {
        StepError::Machinery(Machinery::Thread { thread: self.to_string(), why: why.into() })
    }
}

impl std::fmt::Display for Thread<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.proc, self.tid)
    }
}

/// What runs a scenario. Calls of different threads may run at once (from
/// different OS threads of the caller); calls of one thread come one at a
/// time, as a thread makes its system calls.
pub trait Backend: Send + Sync {
    /// `model`, `host` or `guest`.
    fn name(&self) -> &'static str;
    /// Why the backend cannot honour `setting`, if it cannot (an unknown
    /// name, or a setting the machine cannot take). Asked for each setting
    /// in force before [`Backend::start`], so the refusal names its `set` line.
    fn refusal(&self, setting: &MachineSetting) -> Option<String>;
    /// Builds the machine from the `set` lines seen so far, none of them
    /// refused; called once, before the first process step.
    fn start(&self, settings: &[MachineSetting]) -> BackendResult<()>;
    /// Performs one operation of thread `t`.
    fn perform(&self, t: Thread, op: Op) -> BackendResult<Reply>;
    /// Sets a system tunable: THP modes (top-level and per folio order),
    /// shmem THP modes, or a huge page pool's `nr_hugepages` and
    /// `nr_overcommit_hugepages` (unsupported if the pool gets fewer pages).
    fn tune(&self, t: &Tunable) -> BackendResult<()>;
    /// Runs khugepaged or ksmd for `passes` full scans (its `full_scans`
    /// grown by that many) and returns once they are done.
    fn scan(&self, daemon: Daemon, passes: u32) -> BackendResult<()>;
    /// Whether the backend can take GUP references of this kind; a scenario
    /// that needs one it cannot take is skipped there.
    fn supports_gup(&self, kind: GupKind) -> bool {
        let _ = kind;
        true
    }
    /// Whether an observation through a GUP reference carries `field`.
    fn observes_through_gup(&self, field: &str) -> bool {
        self.observes(field)
    }
    /// The release of the kernel this backend runs: the model's default
    /// (the newest modelled), or a real kernel's. Per-design and
    /// per-release `expect` lines follow it, and its era's design.
    fn release(&self) -> KernelVersion {
        KernelVersion::default()
    }
    /// Every machine setting the started machine runs with, defaults
    /// included, as `set` lines (none where the backend cannot say).
    fn in_effect(&self) -> Vec<MachineSetting> {
        Vec::new()
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
    /// ones: frame identity aside, only [`Observation::compared_fields`]).
    fn observes(&self, field: &str) -> bool {
        Observation::field_names().any(|f| f == field)
    }
    /// Invariant violations (a backend that cannot check returns none),
    /// over as much as `scope` says.
    fn check(&self, scope: foliomm::internals::check::Scope) -> Vec<Violation>;
    /// The simulated CPUs `parallel` blocks run on (`set sim_cpus`), if
    /// the backend simulates them (the model).
    fn simulated_cpus(&self) -> Option<usize> {
        None
    }
}

/// The counters of the pool of `size` as sysfs shows them
/// (`hugepages-<size>kB/nr_hugepages`, ...), named as scenarios read them:
/// `hugepages_total`, `_free`, `_rsvd`, `_surp` for 2 MiB pages,
/// `hugepages_1g_...` for 1 GiB ones.
pub fn hugepage_counters(size: HugeSize, h: HugeCounts) -> [(String, u64); 4] {
    let prefix = pool_prefix(size);
    [("total", h.total), ("free", h.free), ("rsvd", h.resv), ("surp", h.surplus)]
        .map(|(n, v)| (format!("{prefix}_{n}"), v))
}

/// The counts of node `nid`'s part of the pool of `size` as sysfs shows
/// them (`node<nid>/hugepages/hugepages-<size>kB/nr_hugepages`,
/// `free_hugepages`, `surplus_hugepages`), named as scenarios read them:
/// `node<nid>_hugepages_total`, `_free`, `_surp` (`_1g_` for 1 GiB pages).
/// Backends give them on machines of more than one node.
pub fn node_hugepage_counters(nid: usize, size: HugeSize, h: HugeCounts) -> [(String, u64); 3] {
    let prefix = pool_prefix(size);
    [("total", h.total), ("free", h.free), ("surp", h.surplus)].map(|(n, v)| (format!("node{nid}_{prefix}_{n}"), v))
}

/// How counter names start for the pool of `size`.
fn pool_prefix(size: HugeSize) -> &'static str {
    match size {
        HugeSize::Pmd => "hugepages",
        HugeSize::Pud => "hugepages_1g",
    }
}

/// The hugetlb lines of `/proc/meminfo`: `HugePages_Total`, `_Free`,
/// `_Rsvd`, `_Surp` of the default size (2 MiB) as `meminfo_hugepages_...`,
/// and `Hugetlb` (every pool's pages, in KiB) as `meminfo_hugetlb_kb`.
pub fn meminfo_counters(pools: &[(HugeSize, HugeCounts)]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    if let Some((_, h)) = pools.iter().find(|(s, _)| *s == HugeSize::Pmd) {
        let lines = [("total", h.total), ("free", h.free), ("rsvd", h.resv), ("surp", h.surplus)];
        out.extend(lines.map(|(n, v)| (format!("meminfo_hugepages_{n}"), v)));
    }
    let kb = pools.iter().map(|(s, h)| h.total * (s.bytes() >> 10)).sum();
    out.push(("meminfo_hugetlb_kb".to_string(), kb));
    out
}
