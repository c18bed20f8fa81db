//! The kernel-version axis for the per-CPU LRU batches (mm/swap.c).

use super::KernelVersion;

impl KernelVersion {
    /// The folios a per-CPU LRU batch holds before it moves them
    /// (`PAGEVEC_SIZE`): 31 in 6.18, 15 in 6.1 ("mm: increase folio batch
    /// size", 6.9).
    pub fn folio_batch_size(self) -> usize {
        if self >= KernelVersion::new(6, 9) {
            31
        } else {
            15
        }
    }
    /// Whether a folio leaves its LRU list as it joins a per-CPU move
    /// batch (`lru_deactivate`, `lru_lazyfree`): `PG_lru` cleared at add time ("mm/gup:
    /// clear the LRU flag of a page before adding to LRU batch", 6.11;
    /// reverted in 6.17). Otherwise it stays on its list, and another CPU
    /// may isolate it meanwhile.
    pub fn lru_batches_clear_lru(self) -> bool {
        KernelVersion::new(6, 11) <= self && self < KernelVersion::new(6, 17)
    }
    /// Whether munmap, `exit_mmap` and `MADV_DONTNEED` drain this CPU's
    /// LRU batches before they zap (`unmap_region`, `exit_mmap`,
    /// `zap_page_range_single`, and `free_pages_and_swap_cache` after),
    /// so that a folio they unmap from this CPU's batch is freed at once;
    /// "mm: remove unnecessary calls to lru_add_drain" (6.14) dropped them.
    pub fn zap_drains_lru_batches(self) -> bool {
        self < KernelVersion::new(6, 14)
    }
}
