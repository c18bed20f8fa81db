//! A [`Machine`]: one configuration of the model (RAM size, mapcount design)
//! with its physical memory, THP settings, counters, MM-ID allocator and the
//! zero pages. Two machines with different designs can live in one process.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::folio::Folio;
use crate::mapcount::{design_by_name, MapcountDesign, MmId};
use crate::mm::Mm;
use crate::phys::{pg, Pfn, PhysMem, PMD_ORDER};
use crate::stats::Stats;
use crate::thp::ThpSettings;
use crate::Errno;

/// How to build a machine.
#[derive(Clone, Debug)]
pub struct Config {
    /// Bytes of model RAM (rounded down to 4 MiB).
    pub memory: u64,
    /// Mapcount design name (see [`crate::mapcount::DESIGN_NAMES`]).
    pub mapcount: String,
    /// How zap unmaps PTE-mapped large folios.
    pub zap: ZapStrategy,
    /// Entries in each CPU's software TLB; 0 turns the TLB off (every access walks).
    pub tlb_entries: usize,
    /// Fill freed frames with a poison byte (costs a write of every freed page).
    pub poison: bool,
    /// Stop a gather after this many pages (the page-count limit weighed in
    /// seed 001's discussion); `None` limits slots only, as Linux does.
    pub gather_page_limit: Option<u64>,
    /// Deliberate bugs, for tests that prove the checks catch them.
    pub debug: DebugSwitches,
    /// Keep the precision and safety report ([`crate::precision`]).
    pub precision: bool,
    /// Fewer MM IDs than the design allows, to reach ID exhaustion in a test
    /// (`set mm_ids N` in a scenario).
    pub max_mm_id: Option<MmId>,
}

/// Zap strategies (seed 001).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ZapStrategy {
    /// Linux 6.9+: one rmap, refcount, PTE-clear and TLB-entry operation per
    /// batch of consecutive pages of one folio (`folio_pte_batch`).
    Batched,
    /// Before 6.9: every PTE on its own.
    PerPage,
}

impl ZapStrategy {
    pub fn parse(s: &str) -> Option<ZapStrategy> {
        match s {
            "batched" => Some(ZapStrategy::Batched),
            "per-page" => Some(ZapStrategy::PerPage),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            ZapStrategy::Batched => "batched",
            ZapStrategy::PerPage => "per-page",
        }
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
}

impl DebugSwitches {
    /// Names of the switches a scenario or the command line can set.
    pub const NAMES: &'static [&'static str] =
        &["no-large-reuse", "reuse-shared", "skip-fork-flush", "free-before-flush"];

    /// Turns on the switch called `name`; false if there is none.
    pub fn set(&mut self, name: &str) -> bool {
        match name {
            "no-large-reuse" => self.no_large_reuse = true,
            "reuse-shared" => self.reuse_shared = true,
            "skip-fork-flush" => self.skip_fork_flush = true,
            "free-before-flush" => self.free_before_flush = Some(std::time::Duration::from_millis(20)),
            _ => return false,
        }
        true
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            memory: 4 << 30,
            mapcount: "mm-id".into(),
            zap: ZapStrategy::Batched,
            tlb_entries: 2048,
            poison: false,
            gather_page_limit: None,
            debug: DebugSwitches::default(),
            precision: false,
            max_mm_id: None,
        }
    }
}

/// One model machine.
pub struct Machine {
    pub phys: PhysMem,
    pub design: Box<dyn MapcountDesign>,
    pub thp: ThpSettings,
    pub stats: Stats,
    pub config: Config,
    /// The shared zero page (`ZERO_PAGE(0)`).
    pub zero_pfn: Pfn,
    /// The huge zero folio, allocated on first use (`mm_get_huge_zero_folio`);
    /// `None` inside if that allocation failed.
    huge_zero: OnceLock<Option<Pfn>>,
    free_ids: Mutex<(BTreeSet<MmId>, MmId)>,
    mms: Mutex<Vec<Weak<Mm>>>,
    /// "Bad page" reports from frees whose fields were not reset.
    pub bad_pages: Mutex<Vec<String>>,
    /// Uses of stale TLB entries seen by CPUs (use after free).
    pub violations: Mutex<Vec<String>>,
    /// Ground truth of mappings per folio and MM, when the precision report is on.
    pub shadow: Option<crate::precision::Shadow>,
    /// GUP references per folio head, for the checker: (FOLL_PIN, FOLL_GET).
    gups: Mutex<std::collections::HashMap<Pfn, (u32, u32)>>,
    next_anon_vma: AtomicU64,
    next_serial: AtomicU64,
}

impl Machine {
    pub fn new(config: Config) -> Result<Arc<Machine>, Errno> {
        let design = design_by_name(&config.mapcount).ok_or(Errno::EINVAL)?;
        let phys = PhysMem::new(config.memory, config.poison)?;
        let precision = config.precision;
        let zero_pfn = phys.alloc_pages_zeroed(0)?;
        let zp = phys.page(zero_pfn);
        zp.flags.store(pg::ZERO, Relaxed);
        zp.refcount.store(1, Relaxed);
        zp.mapcount.store(-1, Relaxed);
        Ok(Arc::new(Machine {
            phys,
            design,
            thp: ThpSettings::default(),
            stats: Stats::default(),
            config,
            zero_pfn,
            huge_zero: OnceLock::new(),
            free_ids: Mutex::new((BTreeSet::new(), 1)),
            mms: Mutex::new(Vec::new()),
            bad_pages: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            gups: Mutex::new(std::collections::HashMap::new()),
            shadow: precision.then(Default::default),
            next_anon_vma: AtomicU64::new(1),
            next_serial: AtomicU64::new(1),
        }))
    }

    /// The huge zero folio's head pfn, allocating it on first use.
    pub fn huge_zero_pfn(&self) -> Option<Pfn> {
        *self.huge_zero.get_or_init(|| {
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
        let huge = self.huge_zero.get().copied().flatten();
        std::iter::once(self.zero_pfn).chain(huge.into_iter().flat_map(|p| p..p + (1 << PMD_ORDER)))
    }

    /// Allocates a folio of `2^order` pages with refcount 1, mapcounts reset
    /// (`folio_alloc` + `prep_compound_page`); the bytes are not zeroed.
    pub fn alloc_folio(&self, order: u32) -> Result<Folio<'_>, Errno> {
        self.phys.alloc_pages(order).map(|pfn| self.prep_folio(pfn, order))
    }

    /// [`Machine::alloc_folio`] with the bytes zeroed (`vma_alloc_zeroed_movable_folio`).
    pub fn alloc_folio_zeroed(&self, order: u32) -> Result<Folio<'_>, Errno> {
        self.phys.alloc_pages_zeroed(order).map(|pfn| self.prep_folio(pfn, order))
    }

    fn prep_folio(&self, pfn: Pfn, order: u32) -> Folio<'_> {
        let nr = 1u64 << order;
        for i in 0..nr {
            let p = self.phys.page(pfn + i);
            p.flags.store(
                if order == 0 {
                    0
                } else if i == 0 {
                    pg::HEAD
                } else {
                    pg::TAIL
                },
                Relaxed,
            );
            p.compound.store(if i == 0 { 0 } else { pfn }, Relaxed);
            p.mapcount.store(-1, Relaxed);
            p.refcount.store(0, Relaxed);
            p.link.store(0, Relaxed);
        }
        let f = Folio::from_head(&self.phys, pfn);
        if order > 0 {
            f.page(1).flags.fetch_or((order as u64) << pg::ORDER_SHIFT, Relaxed);
            self.design.prep(f);
        }
        f.head().refcount.store(1, Relaxed);
        Stats::inc(&self.stats.folio_alloc[order as usize]);
        f
    }

    /// Drops `n` references; frees the folio when they were the last
    /// (`folio_put_refs` → `free_frozen_pages`).
    pub fn folio_put_refs(&self, f: Folio, n: i32) {
        if f.put_refs(n) {
            self.free_folio(f);
        }
    }

    /// Records `delta` GUP references (FOLL_PIN or FOLL_GET) of the folio
    /// headed by `head` (model bookkeeping for the checker; Linux keeps no
    /// such table).
    pub(crate) fn note_gup(&self, head: Pfn, foll_pin: bool, delta: i32) {
        let mut gups = self.gups.lock().unwrap();
        let e = gups.entry(head).or_insert((0, 0));
        let n = if foll_pin { &mut e.0 } else { &mut e.1 };
        *n = n.checked_add_signed(delta).expect("released more GUP references than taken");
        if *e == (0, 0) {
            gups.remove(&head);
        }
    }

    /// (FOLL_PIN, FOLL_GET) references held on the folio headed by `head`.
    pub fn gups_of(&self, head: Pfn) -> (u32, u32) {
        self.gups.lock().unwrap().get(&head).copied().unwrap_or((0, 0))
    }

    /// Drops one FOLL_PIN reference (`gup_put_folio`); may free the folio.
    pub fn unpin_folio(&self, f: Folio) {
        if f.is_large() {
            f.page(1).w[crate::folio::PINCOUNT_WORD].fetch_sub(1, Relaxed);
            self.folio_put_refs(f, 1);
        } else {
            self.folio_put_refs(f, crate::folio::GUP_PIN_COUNTING_BIAS);
        }
    }

    fn free_folio(&self, f: Folio) {
        let order = f.order();
        let mut bad = if order > 0 { self.design.check_freeable(f) } else { Vec::new() };
        let m = f.head().mapcount.load(Relaxed);
        if order == 0 && m != -1 {
            bad.push(format!("_mapcount is {m}, expected -1"));
        }
        if !bad.is_empty() {
            self.bad_pages.lock().unwrap().push(format!("folio {:#x}: {}", f.pfn, bad.join("; ")));
        }
        for i in 0..f.nr_pages() {
            let p = f.page(i);
            p.flags.store(0, Relaxed);
            p.mapcount.store(0, Relaxed);
            p.compound.store(0, Relaxed);
            p.link.store(0, Relaxed);
            for w in &p.w {
                w.store(0, Relaxed);
            }
            p.ids.store(0, Relaxed);
        }
        Stats::inc(&self.stats.folio_free[order as usize]);
        self.phys.free_pages(f.pfn, order);
    }

    /// Allocates a zeroed page-table page (`pte_alloc_one` and friends).
    pub fn alloc_table(&self) -> Result<Pfn, Errno> {
        let pfn = self.phys.alloc_pages_zeroed(0)?;
        let p = self.phys.page(pfn);
        p.flags.store(pg::TABLE, Relaxed);
        p.refcount.store(1, Relaxed);
        p.mapcount.store(-1, Relaxed);
        Stats::inc(&self.stats.pgtable_alloc);
        Ok(pfn)
    }

    /// Frees a page-table page.
    pub fn free_table(&self, pfn: Pfn) {
        let p = self.phys.page(pfn);
        debug_assert!(p.test(pg::TABLE));
        p.flags.store(0, Relaxed);
        p.refcount.store(0, Relaxed);
        p.mapcount.store(0, Relaxed);
        Stats::inc(&self.stats.pgtable_free);
        self.phys.free_pages(pfn, 0);
    }

    /// Allocates the lowest free MM ID (`mm_alloc_id`: `ida_alloc_range`
    /// from `MM_ID_MIN` to the design's maximum, or `Config::max_mm_id` if
    /// lower); ENOMEM when all are taken, which fails the `mm_alloc` (and
    /// so the fork) that asked.
    pub(crate) fn alloc_mm_id(&self) -> Result<MmId, Errno> {
        let mut ids = self.free_ids.lock().unwrap();
        if let Some(id) = ids.0.pop_first() {
            return Ok(id);
        }
        let max = self.config.max_mm_id.unwrap_or(MmId::MAX).min(self.design.max_mm_id());
        if ids.1 > max {
            return Err(Errno::ENOMEM);
        }
        ids.1 += 1;
        Ok(ids.1 - 1)
    }

    pub(crate) fn free_mm_id(&self, id: MmId) {
        self.free_ids.lock().unwrap().0.insert(id);
    }

    pub(crate) fn register_mm(&self, mm: &Arc<Mm>) {
        let mut mms = self.mms.lock().unwrap();
        mms.retain(|w| w.strong_count() > 0);
        mms.push(Arc::downgrade(mm));
    }

    /// Every address space still alive (exited ones too, until dropped).
    pub fn mms(&self) -> Vec<Arc<Mm>> {
        self.mms.lock().unwrap().iter().filter_map(Weak::upgrade).collect()
    }

    /// A number never handed out before: tags TLB entries with their MM (an
    /// ASID that is never reused) and names CPUs.
    pub(crate) fn new_serial(&self) -> u64 {
        self.next_serial.fetch_add(1, Relaxed)
    }

    /// A fresh anon_vma identity (`anon_vma_alloc`).
    pub(crate) fn new_anon_vma(&self) -> u64 {
        self.next_anon_vma.fetch_add(1, Relaxed)
    }

    /// Frames in use: total minus free.
    pub fn frames_in_use(&self) -> u64 {
        self.phys.nr_frames() - self.phys.nr_free()
    }
}
