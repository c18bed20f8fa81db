//! Where the hugetlb pools use HVO (`phys::vmemmap`): a fresh hugetlb
//! folio has its memmap optimized if `vm.hugetlb_optimize_vmemmap` is on
//! when it is made (`alloc_fresh_hugetlb_folio`), and gets it back before
//! it leaves the pool for the buddy allocator
//! (`__update_and_free_hugetlb_folio`). Turning the sysctl off leaves the
//! folios optimized already as they are, as in Linux.

use crate::folio::Folio;
use crate::phys::{pg, Placement};
use crate::sync::atomic::Ordering::Relaxed;
use crate::Errno;

use super::{HugeSize, Kernel};

impl Kernel {
    /// Writes `vm.hugetlb_optimize_vmemmap` (off by default, as Linux
    /// without `CONFIG_HUGETLB_PAGE_OPTIMIZE_VMEMMAP_DEFAULT_ON`).
    pub fn set_hugetlb_optimize_vmemmap(&self, on: bool) {
        self.hugetlb.optimize_vmemmap.store(on, Relaxed);
    }

    /// Reads `vm.hugetlb_optimize_vmemmap`.
    pub fn hugetlb_optimize_vmemmap(&self) -> bool {
        self.hugetlb.optimize_vmemmap.load(Relaxed)
    }

    /// `alloc_fresh_hugetlb_folio`: a folio of `size` from the buddy
    /// allocator where `place` allows, marked hugetlb, with one reference,
    /// its memmap optimized if the sysctl says so.
    pub(super) fn alloc_fresh_hugetlb_folio(&self, place: Placement, size: HugeSize) -> Result<Folio<'_>, Errno> {
        let f = self.alloc_folio_placed(place, size.order())?;
        f.head().set(pg::HUGETLB);
        if self.hugetlb_optimize_vmemmap() {
            self.phys.vmemmap_optimize(f.pfn, f.order());
        }
        Ok(f)
    }

    /// `update_and_free_hugetlb_folio`: a hugetlb folio no one holds (its
    /// references at 0) leaves the pool for the buddy allocator, its
    /// memmap restored first.
    pub(super) fn update_and_free_hugetlb_folio(&self, f: Folio) {
        self.phys.vmemmap_restore(f.pfn, f.order());
        f.head().clear(pg::HUGETLB);
        self.free_folio(f);
    }
}
