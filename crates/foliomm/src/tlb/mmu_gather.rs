//! `struct mmu_gather` (include/asm-generic/tlb.h, mm/mmu_gather.c): collects
//! the pages and page tables a zap unmaps, and frees them only after the TLB
//! flush that covers their last mapping.
//!
//! Entries are encoded pages: a page and, for a batch of consecutive pages of
//! one folio, a second slot with the page count (`ENCODED_PAGE_BIT_NR_PAGES_NEXT`),
//! and a delay-rmap flag (`ENCODED_PAGE_BIT_DELAY_RMAP`). Slots live in the
//! embedded bundle (`MMU_GATHER_BUNDLE`) and then in batches of
//! `MAX_GATHER_BATCH`, at most `MAX_GATHER_BATCH_COUNT` of them; while a
//! delayed rmap is pending no batch beyond the local one plus one is started
//! (`tlb_next_batch`). Differs from Linux: batch pages are host memory, and a
//! gather optionally also stops at a page count ([`crate::Config::gather_page_limit`]).

use super::MmTlb;
use crate::arch::{Pfn, PAGE_SIZE};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::{Level, RmapMm};
use crate::rmap;

/// `MAX_GATHER_BATCH` on x86-64: slots in one batch page.
pub const MAX_GATHER_BATCH: usize = 510;
/// `MAX_GATHER_BATCH_COUNT`: batches at most.
pub const MAX_GATHER_BATCH_COUNT: usize = 10_000 / MAX_GATHER_BATCH;
/// `MAX_NR_FOLIOS_PER_FREE`: what is freed between two reschedule points.
pub const MAX_NR_FOLIOS_PER_FREE: usize = 512;
/// `MMU_GATHER_BUNDLE`: slots embedded in the gather itself.
pub const MMU_GATHER_BUNDLE: usize = 8;

#[derive(Clone, Copy, Debug)]
struct Encoded {
    page: Pfn,
    nr: u32,
    delay_rmap: bool,
}

struct Batch {
    entries: Vec<Encoded>,
    /// Slots used: one per entry, two for an entry of several pages.
    slots: usize,
    max: usize,
}

impl Batch {
    fn new(max: usize) -> Batch {
        Batch { entries: Vec::new(), slots: 0, max }
    }
}

/// An mmu_gather over one address space.
pub struct MmuGather<'a> {
    k: &'a Kernel,
    /// The flush state of the MM being unmapped (`tlb->mm`).
    mm: &'a MmTlb,
    /// Tearing down the whole address space (`tlb->fullmm`).
    pub fullmm: bool,
    /// `batches[0]` is `tlb->local`; `active` indexes `tlb->active`.
    batches: Vec<Batch>,
    active: usize,
    pages: u64,
    /// `tlb->delayed_rmap`.
    delayed_rmap: bool,
    tables: Vec<Pfn>,
    range: Option<(u64, u64)>,
}

impl<'a> MmuGather<'a> {
    /// `tlb_gather_mmu` / `tlb_gather_mmu_fullmm`.
    pub fn new(k: &'a Kernel, mm: &'a MmTlb, fullmm: bool) -> MmuGather<'a> {
        MmuGather {
            k,
            mm,
            fullmm,
            batches: vec![Batch::new(MMU_GATHER_BUNDLE)],
            active: 0,
            pages: 0,
            delayed_rmap: false,
            tables: Vec::new(),
            range: None,
        }
    }

    /// `tlb_remove_tlb_entries`: `nr` pages from `addr` lost their
    /// translation and must be flushed.
    pub fn remove_tlb_entries(&mut self, addr: u64, nr: u64) {
        let end = addr + nr * PAGE_SIZE;
        self.range = Some(match self.range {
            Some((s, e)) => (s.min(addr), e.max(end)),
            None => (addr, end),
        });
    }

    /// `__tlb_remove_folio_pages`: queues the references of `nr` pages from
    /// `page` (one reference per page; a PMD passes its single reference as
    /// nr = 1) for release after the flush; with `delay_rmap` their rmap is
    /// removed only after the flush too. Returns true if the gather is full
    /// and the caller must flush before queueing more.
    pub fn remove_folio_pages(&mut self, page: Pfn, nr: u32, delay_rmap: bool) -> bool {
        self.delayed_rmap |= delay_rmap;
        let b = &mut self.batches[self.active];
        b.entries.push(Encoded { page, nr, delay_rmap });
        b.slots += if nr == 1 { 1 } else { 2 };
        self.pages += nr as u64;
        if self.k.config.gather_page_limit.is_some_and(|l| self.pages >= l) {
            return true;
        }
        // Always keep room for a two-slot entry.
        if b.slots >= b.max - 1 {
            return !self.next_batch();
        }
        false
    }

    /// `tlb_next_batch`: moves to the next batch, or refuses.
    fn next_batch(&mut self) -> bool {
        if self.delayed_rmap && self.active != 0 {
            return false;
        }
        if self.active + 1 < self.batches.len() {
            self.active += 1;
            return true;
        }
        if self.batches.len() > MAX_GATHER_BATCH_COUNT {
            return false;
        }
        self.batches.push(Batch::new(MAX_GATHER_BATCH));
        self.active += 1;
        true
    }

    /// `pte_free_tlb` / `pmd_free_tlb`: a page table to free after the flush.
    pub fn remove_table(&mut self, table: Pfn, addr: u64) {
        self.remove_tlb_entries(addr, 1);
        self.tables.push(table);
    }

    /// `tlb_flush_mmu_tlbonly`: flushes the gathered range if anything was cleared.
    pub fn flush_tlb(&mut self) {
        if let Some((s, e)) = self.range.take() {
            if self.fullmm {
                self.mm.flush_all(&self.k.stats);
            } else {
                self.mm.flush_range(&self.k.stats, s, e);
            }
        }
    }

    /// `tlb_flush_rmaps`: removes the rmap of delayed entries, which Linux
    /// keeps only in the local batch and the active one. Call after the TLB
    /// flush and before dropping the PTL.
    pub fn flush_rmaps(&mut self, mm: RmapMm) {
        if !self.delayed_rmap {
            return;
        }
        let (k, active) = (self.k, self.active);
        for bi in [0, active] {
            for e in self.batches[bi].entries.iter_mut().filter(|e| e.delay_rmap) {
                let f = Folio::containing(&k.phys, e.page);
                rmap::folio_remove_rmap(k, f, e.page - f.pfn, e.nr as u64, Level::Pte, mm);
                e.delay_rmap = false;
            }
            if active == 0 {
                break;
            }
        }
        self.delayed_rmap = false;
    }

    /// `tlb_flush_mmu`: flushes the TLB, then frees the gathered pages and
    /// tables (`tlb_batch_pages_flush`, `tlb_table_flush`).
    pub fn flush_mmu(&mut self) {
        match self.k.config.debug.free_before_flush {
            None => {
                self.flush_tlb();
                self.free_all();
            }
            Some(delay) => {
                self.free_all();
                crate::sync::thread::sleep(delay);
                self.flush_tlb();
            }
        }
    }

    /// `tlb_batch_pages_flush`: frees each batch's entries in chunks
    /// (`__tlb_batch_free_encoded_pages`) of `MAX_NR_FOLIOS_PER_FREE` (512)
    /// encoded slots, an entry's page-count slot kept with it, or from 6.9 of
    /// 512 pages when freeing costs per byte (`init_on_free`, poisoning),
    /// with a reschedule point after each (counted in `zap_resched`; the
    /// model does not preempt).
    fn free_all(&mut self) {
        debug_assert!(!self.delayed_rmap, "delayed rmaps must be flushed before the pages are freed");
        let k = self.k;
        let by_pages = k.config.release().frees_by_pages_when_costly() && (k.config.init_on_free || k.config.poison);
        for b in &mut self.batches {
            let mut chunk = 0;
            for e in b.entries.drain(..) {
                let f = Folio::containing(&k.phys, e.page);
                free_swap_cache(k, f);
                k.folio_put_refs(f, e.nr as i32);
                chunk += if by_pages { e.nr as usize } else { 1 + (e.nr > 1) as usize };
                if chunk >= MAX_NR_FOLIOS_PER_FREE {
                    Stats::inc(&k.stats.zap_resched);
                    chunk = 0;
                }
            }
            if chunk > 0 {
                Stats::inc(&k.stats.zap_resched);
            }
            b.slots = 0;
        }
        self.active = 0;
        self.pages = 0;
        for t in self.tables.drain(..) {
            self.mm.tables.free(t, |t| self.k.free_table(t));
        }
    }

    /// Batches in use (for tests).
    pub fn batch_count(&self) -> usize {
        self.active + 1
    }
}

impl Drop for MmuGather<'_> {
    /// `tlb_finish_mmu`.
    fn drop(&mut self) {
        self.flush_mmu();
    }
}

/// `free_swap_cache` (from `free_pages_and_swap_cache`, and khugepaged's
/// collapse): a folio in the swap cache that nothing maps leaves the
/// cache, if no swap entry still names its slots and it can be locked.
pub(crate) fn free_swap_cache(k: &Kernel, f: Folio) {
    if f.head().test(crate::phys::pg::SWAPCACHE) && rmap::folio_mapcount(k, f) == 0 {
        if let Some(_lock) = f.trylock() {
            k.folio_free_swap(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Config;
    use crate::sync::atomic::Ordering::Relaxed;

    fn setup(limit: Option<u64>) -> (Kernel, MmTlb) {
        let k = Kernel::new(Config { memory: 16 << 20, gather_page_limit: limit, ..Config::default() }, None).unwrap();
        let tlb = MmTlb::new(k.new_serial());
        (k, tlb)
    }

    /// Queues single-page entries of one folio until the gather says it is
    /// full; each entry holds a reference (and, when delayed, a mapping).
    fn fill(k: &Kernel, g: &mut MmuGather, pfn: Pfn, nr: u32, delay: bool) -> usize {
        let f = Folio::from_head(&k.phys, pfn);
        let mut n = 0;
        loop {
            f.ref_add(nr as i32);
            if delay {
                f.head().mapcount.fetch_add(1, Relaxed);
            }
            n += 1;
            if g.remove_folio_pages(pfn, nr, delay) {
                return n;
            }
        }
    }

    #[test]
    fn capacity_is_the_bundle_plus_nineteen_batches() {
        let (k, mm) = setup(None);
        let f = k.alloc_folio(0).unwrap();
        let mut g = MmuGather::new(&k, &mm, false);
        let n = fill(&k, &mut g, f.pfn, 1, false);
        assert_eq!(n, (MMU_GATHER_BUNDLE - 1) + MAX_GATHER_BATCH_COUNT * (MAX_GATHER_BATCH - 1));
        assert_eq!(g.batch_count(), MAX_GATHER_BATCH_COUNT + 1);
        drop(g);
        assert_eq!(f.refcount(), 1, "the flush dropped every queued reference");
        k.folio_put_refs(f, 1);
    }

    #[test]
    fn delayed_rmap_stays_in_local_plus_one_batch_until_flushed() {
        let (k, mm) = setup(None);
        let f = k.alloc_folio(0).unwrap();
        f.head().set(crate::phys::pg::ANON);
        f.head().mapcount.store(-1, Relaxed);
        let mut g = MmuGather::new(&k, &mm, false);
        let n = fill(&k, &mut g, f.pfn, 1, true);
        assert_eq!(n, (MMU_GATHER_BUNDLE - 1) + (MAX_GATHER_BATCH - 1), "no third batch while rmaps are delayed");
        assert_eq!(f.head().mapcount.load(Relaxed) + 1, n as i32, "the rmaps are still there before the flush");
        g.remove_tlb_entries(0x1000, 1);
        g.flush_tlb();
        g.flush_rmaps(RmapMm::new(1));
        assert_eq!(f.head().mapcount.load(Relaxed), -1, "flush_rmaps removed every delayed rmap");
        drop(g);
        assert_eq!(f.refcount(), 1);
        k.folio_put_refs(f, 1);
    }

    #[test]
    fn the_page_limit_knob_stops_large_entries_early() {
        let (k, mm) = setup(Some(100));
        let f = k.alloc_folio(4).unwrap();
        let mut g = MmuGather::new(&k, &mm, false);
        assert_eq!(fill(&k, &mut g, f.pfn, 16, false), 7, "7 entries of 16 pages pass 100 pages");
        drop(g);
        k.folio_put_refs(f, 1);
    }
}
