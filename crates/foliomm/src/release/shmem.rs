//! The kernel-version axis for shmem faults (mm/shmem.c) and holes
//! punched through a mapping (mm/madvise.c).

use super::KernelVersion;

impl KernelVersion {
    /// Whether a shmem fault fits a large folio to the faulting VMA
    /// (`shmem_suitable_orders` → `thp_vma_suitable_orders`): for an
    /// unnamed file (anonymous shmem and memfd, `shmem_anon_vm_ops`) from
    /// 6.11 ("mm: shmem: add multi-size THP support for anonymous shmem"),
    /// for a named tmpfs file from 6.14 ("mm: shmem: add large folio
    /// support for tmpfs"). Before, a huge fault takes a PMD-sized folio
    /// wherever the page cache has room for it (`shmem_alloc_hugefolio`),
    /// in a VMA too small to map it whole and past `i_size` alike.
    pub fn shmem_fault_fits_the_vma(self, named: bool) -> bool {
        self >= KernelVersion::new(6, if named { 14 } else { 11 })
    }

    /// Whether `MADV_REMOVE` takes a shared mapping that may become
    /// writable (`vma_is_shared_maywrite`: `VM_SHARED` and `VM_MAYWRITE`),
    /// as from 6.7 ("mm: drop the assumption that VM_SHARED always
    /// implies writable"), and in the 6.1 stable series, which took that
    /// change back (the 6.1 guest, Debian's 6.1.0-47, punches the hole);
    /// in 6.2 to 6.6, only one writable now (`VM_SHARED` and `VM_WRITE`):
    /// EACCES through a read-only mapping.
    pub fn remove_takes_a_maywrite_mapping(self) -> bool {
        self >= KernelVersion::new(6, 7) || self < KernelVersion::new(6, 2)
    }
}
