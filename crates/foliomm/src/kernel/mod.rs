//! The kernel context every layer from page tables up receives: one
//! machine's physical memory, mapcount design, THP policy, event counters,
//! zero pages, MM-ID allocator, configuration, the reports of broken rules,
//! and the observers ([`observer`]). It knows nothing of address spaces: the
//! top [`crate::machine::Machine`] owns the list of MMs and the observers'
//! state. Folio and page-table allocation live in `page_alloc`.
//!
//! Linux keeps these as globals (the zone, vmstat, `ZERO_PAGE`, `mm_ida`,
//! the sysfs knobs); a context object lets two configurations live in one
//! process.

pub mod config;
mod deferred_split;
mod folio_split;
pub mod hugetlb_pool;
mod hugetlb_vmemmap;
pub mod lru;
mod lru_batch;
pub mod observer;
mod page_alloc;
mod scan_result;
pub mod stats;
mod swap_state;

pub use config::{
    Config, DebugSwitches, HugetlbSync, VmaLayout, VmaLockDesign, ZapStrategy, DEFAULT_MAX_MAP_COUNT, MEMORY_RANGE,
};
pub use hugetlb_pool::{HugeCounts, HugeSize};
pub use observer::{Consumer, Observer};
pub use scan_result::ScanResult;
pub use stats::{MappedPages, Stats};

use crate::arch::{Pfn, PMD_ORDER};
use crate::folio::thp::ThpSettings;
use crate::mapcount::{CompoundLock, Design, MapcountDesign, MmId, MmIds};
use crate::phys::{pg, PhysMem};
use crate::sync::atomic::{AtomicU64, Ordering::Relaxed};
use crate::sync::{Arc, Mutex};
use crate::Errno;

/// One machine's kernel-wide state.
///
/// Line-aligned, so that which of its words share a line does not depend
/// on where the allocator put it: the simulated coherence costs are the
/// same on every run.
#[repr(align(64))]
pub struct Kernel {
    pub phys: PhysMem,
    pub design: &'static dyn MapcountDesign,
    pub thp: ThpSettings,
    pub stats: Stats,
    pub config: Config,
    /// The shared zero page (`ZERO_PAGE(0)`).
    pub zero_pfn: Pfn,
    /// The huge zero folio once asked for (`mm_get_huge_zero_folio`); `None`
    /// inside if that allocation failed.
    huge_zero: Mutex<Option<Option<Pfn>>>,
    /// MM IDs (`mm_ida`).
    pub mm_ids: MmIds,
    /// The 2 MiB huge page pool.
    pub hugetlb: hugetlb_pool::HugePool,
    /// The anon LRU lists.
    pub lru: lru::Lru,
    /// Every CPU's LRU batches (`lru_add`, `lru_lazyfree`).
    lru_batches: lru_batch::LruBatches,
    /// The deferred split queue (head frames).
    deferred_split: Mutex<deferred_split::SplitQueue>,
    /// The swap device, if the configuration has one.
    pub swap: Option<crate::swap::SwapDevice>,
    /// "Bad page" reports from frees whose fields were not reset: the folio
    /// and what was wrong with it.
    pub bad_pages: Mutex<Vec<(Pfn, String)>>,
    /// Broken rules seen while running. The checker reports them.
    pub violations: Mutex<Vec<Incident>>,
    /// Told of mapping changes, GUP references and sharing decisions.
    pub observer: Option<Arc<dyn Observer>>,
    next_anon_vma: AtomicU64,
    next_serial: AtomicU64,
}

/// A rule broken while running, as recorded for the checker; `what` is its
/// report line.
#[derive(Debug)]
pub enum Incident {
    /// A CPU used a stale TLB entry for `addr` in `mm` whose frame had been freed.
    UseAfterFree { mm: MmId, addr: u64, what: String },
    /// The design called `folio` exclusive (or reused it) while another MM maps it.
    WrongExclusive { folio: Pfn, what: String },
}

impl Kernel {
    /// Builds the memory, the zero page and the ID allocator of `config`;
    /// EINVAL for a size outside [`MEMORY_RANGE`], ENOMEM when the host
    /// cannot reserve it.
    pub fn new(config: Config, observer: Option<Arc<dyn Observer>>) -> Result<Kernel, Errno> {
        if !MEMORY_RANGE.contains(&config.memory) {
            return Err(Errno::EINVAL);
        }
        let design = match (config.page_mapcount, config.mapcount, config.compound_lock) {
            (false, d, CompoundLock::BitSpinlock) => d.without_page_mapcount().ok_or(Errno::EINVAL)?,
            (true, Design::CompoundLocked, lock) => lock.design(),
            (true, d, CompoundLock::BitSpinlock) => d.implementation_at(config.rmap_id_stage),
            // Another compound lock needs seed 003's design.
            _ => return Err(Errno::EINVAL),
        };
        let phys = PhysMem::new_numa(config.memory, config.nodes, config.poison)?
            .with_init_on_free(config.init_on_free)
            .with_dense(config.dense_frames);
        let zero_pfn = phys.alloc_pages_zeroed(0)?;
        let zp = phys.page(zero_pfn);
        zp.flags.store(pg::ZERO, Relaxed);
        zp.refcount.store(1, Relaxed);
        zp.mapcount.store(-1, Relaxed);
        let max_id = config.max_mm_id.unwrap_or(MmId::MAX).min(design.max_mm_id());
        let swap = (config.swap > 0).then(|| crate::swap::SwapDevice::new(config.swap));
        Ok(Kernel {
            phys,
            design,
            thp: ThpSettings::default(),
            stats: Stats::default(),
            lru: lru::Lru::new(config.release(), config.nodes),
            config,
            zero_pfn,
            huge_zero: Mutex::new(None),
            mm_ids: MmIds::new(max_id),
            hugetlb: hugetlb_pool::HugePool::default(),
            lru_batches: lru_batch::LruBatches::default(),
            deferred_split: deferred_split::new_queue(),
            swap,
            bad_pages: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            observer,
            next_anon_vma: AtomicU64::new(1),
            next_serial: AtomicU64::new(1),
        })
    }

    /// The huge zero folio's head pfn, allocating it on first use.
    pub fn huge_zero_pfn(&self) -> Option<Pfn> {
        *self.huge_zero.lock().unwrap().get_or_insert_with(|| {
            let pfn = self.phys.alloc_pages_zeroed(PMD_ORDER).ok()?;
            for i in 0..1u64 << PMD_ORDER {
                let p = self.phys.page(pfn + i);
                p.flags.store(pg::ZERO | if i == 0 { pg::HEAD } else { pg::TAIL }, Relaxed);
                p.compound.store(pfn, Relaxed);
                p.mapcount.store(-1, Relaxed);
            }
            self.phys.page(pfn + 1).flags.fetch_or((PMD_ORDER as u64) << pg::ORDER_SHIFT, Relaxed);
            self.phys.page(pfn).refcount.store(1, Relaxed);
            Some(pfn)
        })
    }

    /// Frames held by the zero page and (if allocated) the huge zero folio.
    pub fn zero_frames(&self) -> impl Iterator<Item = Pfn> + '_ {
        let huge = self.huge_zero.lock().unwrap().flatten();
        std::iter::once(self.zero_pfn).chain(huge.into_iter().flat_map(|p| p..p + (1 << PMD_ORDER)))
    }

    /// A number never handed out before: tags TLB entries with their MM (an
    /// ASID that is never reused) and names CPUs.
    pub fn new_serial(&self) -> u64 {
        self.next_serial.fetch_add(1, Relaxed)
    }

    /// A fresh anon_vma identity (`anon_vma_alloc`).
    pub fn new_anon_vma(&self) -> u64 {
        self.next_anon_vma.fetch_add(1, Relaxed)
    }

    /// Frames in use: total minus free.
    pub fn frames_in_use(&self) -> u64 {
        self.phys.nr_frames() - self.phys.nr_free()
    }

    /// Runs `event` on the observer, if there is one.
    pub fn observe(&self, event: impl FnOnce(&dyn Observer)) {
        if let Some(o) = &self.observer {
            event(o.as_ref());
        }
    }
}
