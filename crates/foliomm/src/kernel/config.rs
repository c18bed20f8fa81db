//! A machine's configuration: memory size, the strategies (mapcount design,
//! zap batching), the TLB size, and the deliberate bugs tests switch on.
#![warn(missing_docs)]

use crate::mapcount::{CompoundLock, Design, MmId, RmapIdStage};
use crate::release::KernelVersion;

/// The model RAM sizes a machine takes, from one 4 MiB block to 1 TiB. Frames
/// never touched cost no host memory, but each 4 MiB free block's descriptor
/// does (a host page per block: about 1 MiB per GiB of model RAM).
pub const MEMORY_RANGE: std::ops::RangeInclusive<u64> = (4 << 20)..=(1 << 40);

/// How to build a machine: its size, strategies and switches.
#[derive(Clone, Debug)]
pub struct Config {
    /// Bytes of model RAM (rounded down to 4 MiB; within [`MEMORY_RANGE`]).
    pub memory: u64,
    /// The mapcount design.
    pub mapcount: Design,
    /// The Linux release whose behaviour the model follows where releases
    /// differ ([`KernelVersion`]); `None` for the one the design is paired
    /// with ([`Design::release`]). See [`Config::release`].
    pub kernel: Option<KernelVersion>,
    /// Seed 000's stage, for the rmap-ID designs (the others ignore it).
    pub rmap_id_stage: RmapIdStage,
    /// How seed 003's `compound-locked` design serialises its updates; any
    /// but the default needs that design.
    pub compound_lock: CompoundLock,
    /// How zap unmaps PTE-mapped large folios.
    pub zap: ZapStrategy,
    /// How a fault locks its VMA.
    pub vma_lock: VmaLockDesign,
    /// Where the VMA lock lies against the fields a fault reads (for the
    /// cache-line accounting).
    pub vma_layout: VmaLayout,
    /// How hugetlb faults and PMD unsharing synchronize (seed 002).
    pub hugetlb_sync: HugetlbSync,
    /// Entries in each CPU's software TLB; 0 turns the TLB off (every access walks).
    pub tlb_entries: usize,
    /// Fill freed frames with a poison byte (costs a write of every freed page).
    pub poison: bool,
    /// `init_on_free=1`: every freed frame is zeroed (`free_pages_prepare`),
    /// a cost at munmap and exit; the fault still zeroes the pages it
    /// allocates, as Linux does without `init_on_alloc`. Wins over `poison`.
    pub init_on_free: bool,
    /// Keep every written frame's bytes in the arena instead of storing
    /// frames by content class ([`crate::phys::PhysMem::with_dense`]): a
    /// fault's zeroing and a COW's copy then take the time they take on
    /// hardware (the benchmarks that time them); off, a machine larger than
    /// the host fits.
    pub dense_frames: bool,
    /// Large folios keep a `_mapcount` per page (`CONFIG_PAGE_MAPCOUNT`,
    /// the default); off, the `mm-id` design goes without
    /// (`CONFIG_NO_PAGE_MAPCOUNT`, 6.15+), which no other design can.
    pub page_mapcount: bool,
    /// `CONFIG_MEM_SOFT_DIRTY`: pagemap reports soft-dirty bits and
    /// `clear_refs` of them write-protects to track writes; off (Kconfig's
    /// default), neither does anything.
    pub soft_dirty: bool,
    /// Stop a gather after this many pages (the page-count limit weighed in
    /// seed 001's discussion); `None` limits slots only, as Linux does.
    pub gather_page_limit: Option<u64>,
    /// Deliberate bugs, for tests that prove the checks catch them.
    pub debug: DebugSwitches,
    /// Keep the precision and safety report (`crate::precision`).
    pub precision: bool,
    /// Fewer MM IDs than the design allows, to reach ID exhaustion in a test
    /// (`set mm_ids N` in a scenario).
    pub max_mm_id: Option<MmId>,
    /// `vm.max_map_count`: the most VMAs an MM may hold (see
    /// `crate::mm::Mm::mmap` and the splits of `munmap`, `mprotect`,
    /// `madvise` and `mremap`).
    pub max_map_count: usize,
    /// Bytes of the swap device (`swapon` of a zram-like synchronous
    /// device); 0 for none.
    pub swap: u64,
    /// NUMA nodes the memory is cut into (1 to [`crate::phys::MAX_NUMNODES`]).
    pub nodes: usize,
}

/// `DEFAULT_MAX_MAP_COUNT`: `USHRT_MAX` less the ELF core dump margin.
pub const DEFAULT_MAX_MAP_COUNT: usize = 65530;

/// Zap strategies (seed 001); fork follows the same one (both learnt
/// `folio_pte_batch` in 6.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ZapStrategy {
    /// Linux 6.9+: one rmap, refcount, PTE-clear and TLB-entry operation per
    /// batch of consecutive pages of one folio (`folio_pte_batch`).
    Batched,
    /// Before 6.9: every PTE on its own, at zap and at fork.
    PerPage,
}

impl ZapStrategy {
    /// Every strategy, with its name (`set zap NAME`, `--zap NAME`).
    pub const ALL: [(ZapStrategy, &'static str); 2] =
        [(ZapStrategy::Batched, "batched"), (ZapStrategy::PerPage, "per-page")];

    /// The strategy called `s`, or `None` for an unknown name.
    pub fn parse(s: &str) -> Option<ZapStrategy> {
        Self::ALL.iter().find(|(_, n)| *n == s).map(|(z, _)| *z)
    }

    /// The strategy's name, as `parse` reads it.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(z, _)| *z == self).map(|(_, n)| *n).unwrap()
    }
}

/// Deliberate bugs (all off by default).
#[derive(Clone, Copy, Debug, Default)]
pub struct DebugSwitches {
    /// mmu_gather frees its pages before the TLB flush, and waits this long
    /// between the two so that other CPUs can use their stale entries.
    pub free_before_flush: Option<std::time::Duration>,
    /// fork write-protects the parent's PTEs without flushing its TLB.
    pub skip_fork_flush: bool,
    /// Write faults never reuse a large anon folio that is not AnonExclusive
    /// (Linux before 6.15): shows that comparisons with the host can fail.
    pub no_large_reuse: bool,
    /// Write faults reuse a large anon folio without asking the design: a
    /// data leak the precision report and the byte checks must catch.
    pub reuse_shared: bool,
    /// `lock_vma_under_rcu` trusts the VMA it found without checking, once
    /// it holds it, that the VMA still belongs to this MM and covers the
    /// address (seed 004's revalidation): wrong once VMAs are reused.
    pub no_vma_revalidate: bool,
    /// A write fault reuses a KSM page mapped once, as any small anon
    /// page: it stays in the stable tree, writable, so a page ksmd merges
    /// into it later sees the owner's writes.
    pub ksm_reuse: bool,
    /// `can_change_pte_writable` forgets soft-dirty tracking, as before
    /// "mm/mprotect: fix soft-dirty check in can_change_pte_writable()"
    /// (6.0): mprotect makes a clean entry writable, and the next write is
    /// never seen.
    pub soft_dirty_unchecked: bool,
    /// `vma_refcount_put` as v8 of seed 004 had it: `vm_mm`, for the
    /// writer's wake-up, read only after the reference is dropped, when the
    /// VMA may be freed and reused (v9 reads it before: "use a copy of
    /// vma->vm_mm ... in case vma is freed from under us").
    pub vma_put_late_mm: bool,
}

impl DebugSwitches {
    /// Names of the switches a scenario or the command line can set.
    pub const NAMES: &'static [&'static str] = &[
        "no-large-reuse",
        "reuse-shared",
        "skip-fork-flush",
        "free-before-flush",
        "no-vma-revalidate",
        "ksm-reuse",
        "soft-dirty-unchecked",
        "vma-put-late-mm",
    ];

    /// Turns on the switch called `name`; false if there is none.
    pub fn set(&mut self, name: &str) -> bool {
        match name {
            "no-large-reuse" => self.no_large_reuse = true,
            "reuse-shared" => self.reuse_shared = true,
            "skip-fork-flush" => self.skip_fork_flush = true,
            "no-vma-revalidate" => self.no_vma_revalidate = true,
            "ksm-reuse" => self.ksm_reuse = true,
            "soft-dirty-unchecked" => self.soft_dirty_unchecked = true,
            "vma-put-late-mm" => self.vma_put_late_mm = true,
            "free-before-flush" => self.free_before_flush = Some(std::time::Duration::from_millis(20)),
            _ => return false,
        }
        true
    }
}

impl Config {
    /// The release the model follows: the chosen one, or the design's.
    pub fn release(&self) -> KernelVersion {
        self.kernel.unwrap_or(self.mapcount.release())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            memory: 4 << 30,
            mapcount: Design::default(),
            kernel: None,
            rmap_id_stage: RmapIdStage::default(),
            compound_lock: CompoundLock::default(),
            zap: ZapStrategy::Batched,
            vma_lock: VmaLockDesign::default(),
            vma_layout: VmaLayout::default(),
            hugetlb_sync: HugetlbSync::default(),
            tlb_entries: 2048,
            poison: false,
            init_on_free: false,
            dense_frames: false,
            page_mapcount: true,
            soft_dirty: false,
            gather_page_limit: None,
            debug: DebugSwitches::default(),
            precision: false,
            max_mm_id: None,
            max_map_count: DEFAULT_MAX_MAP_COUNT,
            swap: 0,
            nodes: 1,
        }
    }
}

/// How a fault locks its VMA (seed 004; see [`crate::mm_types::vma_lock`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum VmaLockDesign {
    /// `mmap_read_lock` held for the whole fault (Linux before 6.4).
    MmapLock,
    /// A separately allocated rw semaphore per VMA (`vma->vm_lock`), a
    /// `detached` flag, VMAs freed after an RCU grace period (6.4 to 6.14).
    VmaRwsem,
    /// Seed 004 (6.15+): `vm_refcnt` inside the VMA, 0 meaning detached, the
    /// writer's `VMA_LOCK_OFFSET`, VMAs reused at once (`SLAB_TYPESAFE_BY_RCU`).
    #[default]
    VmaRefcount,
}

/// `ALL` (every design with its name), `name` and `parse` of a design enum.
macro_rules! design_names {
    ($t:ident { $($v:ident = $n:literal),* $(,)? }) => {
        impl $t {
            /// Every design, with its name.
            pub const ALL: [($t, &'static str); [$($n),*].len()] = [$(($t::$v, $n)),*];

            /// The design's name (`set ... NAME`, `--... NAME`).
            pub fn name(self) -> &'static str {
                Self::ALL.iter().find(|(d, _)| *d == self).map(|(_, n)| *n).unwrap()
            }

            /// The design called `s`, or `None` for an unknown name.
            pub fn parse(s: &str) -> Option<$t> {
                Self::ALL.iter().find(|(_, n)| *n == s).map(|(d, _)| *d)
            }
        }
    };
}

design_names!(VmaLockDesign { MmapLock = "mmap-lock", VmaRwsem = "vma-rwsem", VmaRefcount = "vma-refcount" });

/// How a VMA's members and its lock word lie in the kernel's memory, as
/// the cache-line accounting sees them (seed 004; see
/// `mm_types::vma_layout`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum VmaLayout {
    /// The design's own release: 6.15's three lines of a cacheline-aligned
    /// VMA, `vm_refcnt` opening the third (`vma-refcount`); 6.4 to 6.14's
    /// packed 184-byte VMAs, their `vm_lock` a 40-byte object of its own
    /// slab, packed with other VMAs' locks (`vma-rwsem`); 6.1's packed
    /// VMAs without a lock (`mmap-lock`).
    #[default]
    Design,
    /// The lock word inside the VMA's first line, beside the fields a fault
    /// reads: the 6.4 merge window's layout, whose false sharing moved
    /// `vm_lock` out ("mm: separate vma->lock from vm_area_struct").
    Embedded,
}

design_names!(VmaLayout { Design = "design", Embedded = "embedded" });

/// How a hugetlb fault keeps the PMD table it found from being unshared
/// under it (seed 002; see [`crate::memory::hugetlb`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum HugetlbSync {
    /// `i_mmap_rwsem` held for read across the whole fault (5.7 to 6.0).
    IMmapRwsem,
    /// The seed (6.1+): the hugetlb VMA lock held for read across the
    /// fault and for write around unsharing; `i_mmap_rwsem` only to set
    /// sharing up and to unshare.
    #[default]
    VmaLock,
    /// Neither across the fault (the reverted state the seed measured as
    /// "No locking"): racy, kept to show the race.
    NoLock,
}

design_names!(HugetlbSync { IMmapRwsem = "i-mmap-rwsem", VmaLock = "vma-lock", NoLock = "no-lock" });
