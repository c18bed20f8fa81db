//! The kernel-version axis for userfaultfd (fs/userfaultfd.c,
//! mm/userfaultfd.c) and what other paths do with its bits.

use super::KernelVersion;

impl KernelVersion {
    /// Whether `UFFDIO_WRITEPROTECT` without `MODE_WP` makes an
    /// AnonExclusive page of a private writable VMA writable at once
    /// (`MM_CP_TRY_CHANGE_WRITABLE` in `uffd_wp_range`): 6.4 on. Before,
    /// the entry stays read-only and the next write reuses the page in
    /// `do_wp_page`.
    pub fn uffd_unprotect_makes_writable(self) -> bool {
        self >= KernelVersion::new(6, 4)
    }
    /// Whether `lock_vma_under_rcu` refuses a VMA registered with a
    /// userfaultfd (`userfaultfd_armed`), so that its faults take the
    /// mmap_lock: 6.4 and 6.5, the first per-VMA-lock releases, until
    /// `handle_userfault` learned to drop the VMA lock (6.6).
    pub fn vma_lock_refuses_uffd(self) -> bool {
        (KernelVersion::new(6, 4)..KernelVersion::new(6, 6)).contains(&self)
    }
    /// Whether the userfaultfd ioctls that fill pages lock the VMA alone
    /// (`uffd_mfill_lock` → `uffd_lock_vma`, 6.9); before, they hold the
    /// mmap_lock for read.
    pub fn uffd_ioctls_take_vma_lock(self) -> bool {
        self >= KernelVersion::new(6, 9)
    }
    /// Whether userfaultfd has `UFFDIO_MOVE` (6.8, "userfaultfd:
    /// UFFDIO_MOVE uABI"); before, the ioctl is unknown (EINVAL).
    pub fn has_uffd_move(self) -> bool {
        self >= KernelVersion::new(6, 8)
    }
    /// Whether `UFFDIO_WRITEPROTECT` walks every VMA of its range, holes
    /// skipped (`mwriteprotect_range` with `for_each_vma_range`): 6.4 on.
    /// Before, the range had to lie inside one registered VMA (ENOENT).
    pub fn uffd_writeprotects_across_vmas(self) -> bool {
        self >= KernelVersion::new(6, 4)
    }
    /// Whether `UFFDIO_REGISTER`/`UNREGISTER` of a range no VMA reaches
    /// fail with EINVAL (6.4 on, `vma_find`); before, ENOMEM when no VMA
    /// lies at or above the start (`find_vma_prev`).
    pub fn uffd_register_einval_without_vma(self) -> bool {
        self >= KernelVersion::new(6, 4)
    }
    /// Whether `UFFDIO_UNREGISTER` refuses a VMA registered with another
    /// userfaultfd (EINVAL, "userfaultfd: prevent unregistering VMAs
    /// through a different userfaultfd"): in 6.18, not in 6.14; taken as
    /// 6.16. Before, it unregistered it.
    pub fn uffd_unregister_checks_ctx(self) -> bool {
        self >= KernelVersion::new(6, 16)
    }
    /// Whether `move_ptes` clears the uffd-wp bits of PTEs mremap moves
    /// into a VMA that lost its registration (6.13); before, they moved
    /// with the entries, inert.
    pub fn mremap_clears_uffd_wp(self) -> bool {
        self >= KernelVersion::new(6, 13)
    }
}
