//! The kernel-version axis for mlock (mm/mlock.c, mm/internal.h).

use super::KernelVersion;

impl KernelVersion {
    /// Whether a folio unmapped from a locked VMA is munlocked whatever
    /// its size (`munlock_vma_folio`, "mm: mlock: update mlock_pte_range
    /// to handle large folio", 6.6 by our reading). Before, only a small
    /// folio or a PMD mapping was (`munlock_vma_page(page, vma,
    /// compound)`): a PTE of a large folio was not.
    pub fn munlocks_pte_mapped_large_folios(self) -> bool {
        self >= KernelVersion::new(6, 6)
    }
}
