//! The settings a scenario fixes when the machine is built (`set ...`
//! lines before the first step), as data and as their scenario lines.

use foliomm::internals::machine::{HugetlbSync, VmaLayout, VmaLockDesign, ZapStrategy};
use foliomm::internals::mapcount::{CompoundLock, Design, RmapIdStage};
use foliomm::internals::release::KernelVersion;

/// Settings fixed when the machine is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineSetting {
    /// Model RAM in bytes.
    Memory(u64),
    /// `set memory at least SIZE`: model RAM of at least that many bytes
    /// (the scenario needs room, not a limit); a host with that much RAM
    /// honours it.
    MemoryAtLeast(u64),
    /// `set memory limit SIZE`: model RAM of that many bytes, and on a host
    /// the workers in a memory cgroup limited to it, so that a workload
    /// larger than it is reclaimed there too.
    MemoryLimit(u64),
    /// The mapcount design.
    Mapcount(Design),
    /// The Linux release whose behaviour the model follows where releases
    /// differ (`set kernel 6.8`); without `set mapcount`, also its design.
    Kernel(KernelVersion),
    /// Seed 000's stage for the rmap-ID designs (`set rmap_id_stage NAME`).
    RmapIdStage(RmapIdStage),
    /// How seed 003's design locks its compound mapcounts.
    CompoundLock(CompoundLock),
    /// Zap strategy: `batched` or `per-page`.
    Zap(ZapStrategy),
    /// How faults lock their VMA: `mmap-lock`, `vma-rwsem` or `vma-refcount`.
    VmaLock(VmaLockDesign),
    /// Where the VMA lock lies against the fault's fields: `design`, `embedded`.
    VmaLayout(VmaLayout),
    /// How hugetlb faults and unsharing synchronize: `i-mmap-rwsem`,
    /// `vma-lock` or `no-lock`.
    HugetlbSync(HugetlbSync),
    /// Entries per CPU TLB (0: no TLB).
    Tlb(u64),
    /// A model debug switch (see `foliomm::internals::machine::DebugSwitches::NAMES`).
    Debug(String),
    /// The highest MM ID the allocator hands out (`set mm_ids N`), so that
    /// a scenario can run out of IDs.
    MmIds(u64),
    /// `vm.max_map_count` (`set max_map_count N`).
    MaxMapCount(u64),
    /// A swap device of this many bytes (`set swap SIZE`).
    Swap(u64),
    /// NUMA nodes (`set nodes N`): the model cuts its memory into N nodes;
    /// a host needs at least N online nodes with memory.
    Nodes(u64),
    /// Simulated CPUs (`set sim_cpus N`): the model runs each `parallel`
    /// block's threads on simulated CPUs with virtual time.
    SimCpus(u64),
    /// `init_on_free=1` (`set init_on_free on`): freed pages are zeroed.
    InitOnFree(bool),
    PageMapcount(bool),
    /// `CONFIG_MEM_SOFT_DIRTY` (`set soft_dirty on`).
    SoftDirty(bool),
    /// Every written frame in the arena (`set frames dense`), or frames by
    /// content class (`sparse`, the default).
    DenseFrames(bool),
    /// The mmu_gather page-count cap seed 001's thread weighed
    /// (`set gather_limit N`, `off` for Linux's slot limit alone).
    GatherLimit(Option<u64>),
}

/// The setting as its scenario line says it (`set memory 64M`).
impl std::fmt::Display for MachineSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use MachineSetting::*;
        match self {
            Memory(b) => write!(f, "set memory {}", size_text(*b)),
            MemoryAtLeast(b) => write!(f, "set memory at least {}", size_text(*b)),
            MemoryLimit(b) => write!(f, "set memory limit {}", size_text(*b)),
            Mapcount(d) => write!(f, "set mapcount {}", d.name()),
            Kernel(v) => write!(f, "set kernel {v}"),
            RmapIdStage(s) => write!(f, "set rmap_id_stage {}", s.name()),
            CompoundLock(l) => write!(f, "set compound_lock {}", l.name()),
            Zap(z) => write!(f, "set zap {}", z.name()),
            VmaLock(d) => write!(f, "set vma_lock {}", d.name()),
            VmaLayout(l) => write!(f, "set vma_layout {}", l.name()),
            HugetlbSync(d) => write!(f, "set hugetlb_sync {}", d.name()),
            Tlb(n) => write!(f, "set tlb {n}"),
            Debug(d) => write!(f, "set debug {d}"),
            MmIds(n) => write!(f, "set mm_ids {n}"),
            MaxMapCount(n) => write!(f, "set max_map_count {n}"),
            Swap(b) => write!(f, "set swap {}", size_text(*b)),
            Nodes(n) => write!(f, "set nodes {n}"),
            SimCpus(n) => write!(f, "set sim_cpus {n}"),
            InitOnFree(on) => write!(f, "set init_on_free {}", if *on { "on" } else { "off" }),
            PageMapcount(on) => write!(f, "set page_mapcount {}", if *on { "on" } else { "off" }),
            SoftDirty(on) => write!(f, "set soft_dirty {}", if *on { "on" } else { "off" }),
            DenseFrames(on) => write!(f, "set frames {}", if *on { "dense" } else { "sparse" }),
            GatherLimit(Some(n)) => write!(f, "set gather_limit {n}"),
            GatherLimit(None) => write!(f, "set gather_limit off"),
        }
    }
}

/// `bytes` with the largest unit that divides it (64M, 4K, 12345).
pub fn size_text(bytes: u64) -> String {
    let units = [(40, "T"), (30, "G"), (20, "M"), (10, "K")];
    match units.iter().find(|(shift, _)| bytes != 0 && bytes.trailing_zeros() >= *shift) {
        Some((shift, unit)) => format!("{}{unit}", bytes >> shift),
        None => bytes.to_string(),
    }
}
