//! `struct mmu_gather` (include/asm-generic/tlb.h, mm/mmu_gather.c): collects
//! the pages and page tables a zap unmaps, and frees them only after the TLB
//! flush that covers their last mapping.
//!
//! Entries carry a page and a page count (`ENCODED_PAGE_BIT_NR_PAGES_NEXT`):
//! one slot for a single page, two for a batch. Capacity follows Linux: an
//! embedded bundle of 8 slots plus up to `MAX_GATHER_BATCH_COUNT` batches of
//! `MAX_GATHER_BATCH` slots; a full gather asks the caller to flush. The TLB
//! itself is a counter until the TLB issue gives every CPU a software TLB.

use crate::folio::Folio;
use crate::machine::Machine;
use crate::phys::Pfn;
use crate::stats::Stats;

/// `MAX_GATHER_BATCH` on x86-64: slots in one batch page.
pub const MAX_GATHER_BATCH: usize = 510;
/// `MAX_GATHER_BATCH_COUNT`: extra batches at most.
pub const MAX_GATHER_BATCH_COUNT: usize = 10_000 / MAX_GATHER_BATCH;
/// `MMU_GATHER_BUNDLE`: slots embedded in the gather itself.
pub const MMU_GATHER_BUNDLE: usize = 8;
const CAPACITY: usize = MMU_GATHER_BUNDLE + MAX_GATHER_BATCH * MAX_GATHER_BATCH_COUNT;

/// An mmu_gather over one address space.
pub struct MmuGather<'a> {
    m: &'a Machine,
    /// Tearing down the whole address space (`tlb->fullmm`).
    pub fullmm: bool,
    pages: Vec<(Pfn, u32)>,
    slots: usize,
    tables: Vec<Pfn>,
    range: Option<(u64, u64)>,
}

impl<'a> MmuGather<'a> {
    /// `tlb_gather_mmu` / `tlb_gather_mmu_fullmm`.
    pub fn new(m: &'a Machine, fullmm: bool) -> MmuGather<'a> {
        MmuGather { m, fullmm, pages: Vec::new(), slots: 0, tables: Vec::new(), range: None }
    }

    /// `tlb_remove_tlb_entries`: records that `nr` pages from `addr` lost
    /// their translation and must be flushed.
    pub fn remove_tlb_entries(&mut self, addr: u64, nr: u64) {
        let end = addr + nr * crate::phys::PAGE_SIZE;
        self.range = Some(match self.range {
            Some((s, e)) => (s.min(addr), e.max(end)),
            None => (addr, end),
        });
    }

    /// `__tlb_remove_folio_pages`: queues the references of `nr` pages from
    /// `page` for release after the flush. Returns true if the gather is full
    /// and the caller must flush before queueing more.
    pub fn remove_folio_pages(&mut self, page: Pfn, nr: u32) -> bool {
        self.pages.push((page, nr));
        self.slots += if nr == 1 { 1 } else { 2 };
        // Always keep room for a two-slot entry, as Linux does.
        self.slots >= CAPACITY - 1
    }

    /// `tlb_remove_table` / `pte_free_tlb`: a page table to free after the flush.
    pub fn remove_table(&mut self, table: Pfn, addr: u64) {
        self.remove_tlb_entries(addr, 1);
        self.tables.push(table);
    }

    /// `tlb_flush_mmu_tlbonly`: flushes the gathered range if anything was cleared.
    pub fn flush_tlb(&mut self) {
        if self.range.take().is_some() {
            Stats::inc(&self.m.stats.tlb_flush);
        }
    }

    /// `tlb_flush_mmu`: flushes the TLB, then frees the gathered pages and tables.
    pub fn flush_mmu(&mut self) {
        self.flush_tlb();
        for (page, nr) in self.pages.drain(..) {
            let f = Folio::containing(&self.m.phys, page);
            self.m.folio_put_refs(f, nr as i32);
        }
        self.slots = 0;
        for t in self.tables.drain(..) {
            self.m.free_table(t);
        }
    }
}

impl Drop for MmuGather<'_> {
    /// `tlb_finish_mmu`.
    fn drop(&mut self) {
        self.flush_mmu();
    }
}
