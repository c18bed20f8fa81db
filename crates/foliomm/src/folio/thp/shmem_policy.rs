//! Which large folio sizes a shmem file may use (mm/shmem.c
//! `shmem_allowable_huge_orders`, `shmem_huge_global_enabled`,
//! `shmem_get_orders_within_size`).
//!
//! Two rules, by what asks and what the file is:
//! - the **superblock's** `huge` setting alone (`huge=` of a tmpfs mount;
//!   for the internal mount behind memfd and shared anonymous memory,
//!   `shmem_enabled`), with `deny` and `force` overriding it. A write or
//!   fallocate (no VMA) may use every file order; a fault of a named file
//!   only the PMD order;
//! - the **per-size** `hugepages-*/shmem_enabled` knobs, for a fault in an
//!   anonymous shmem VMA (memfd, shared anonymous memory, or a file with no
//!   name left: Linux gives such a mapping `shmem_anon_vm_ops`); `inherit`
//!   takes the orders when the superblock rule allows a fault any.
//!
//! `within_size` allows an order when the aligned block of that order
//! around the page ends within the file (or within the write).
//!
//! Differs from Linux: no prctl, no hardware cases; the anonymous-VMA
//! decision is taken from the inode when it faults, not fixed at mmap.

use super::{file_orders, ShmemHuge, ShmemMode, ThpSettings};
use crate::arch::PMD_ORDER;

/// What asks for a shmem folio: a fault in a VMA (with its `VM_HUGEPAGE`
/// flag), or a write or fallocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asker {
    /// A page fault in a VMA.
    Fault {
        /// Whether the VMA has `VM_HUGEPAGE` (`MADV_HUGEPAGE`).
        vm_hugepage: bool,
    },
    /// A `write` or `fallocate` on the file, with no VMA involved.
    Write,
}

/// Whether the aligned block of `2^order` pages around page `index` ends
/// within `end_pages` pages.
fn within(order: u32, index: u64, end_pages: u64) -> bool {
    (index + 1).next_multiple_of(1 << order) <= end_pages
}

impl ThpSettings {
    /// `shmem_huge_global_enabled`: the orders the superblock setting
    /// `sb_huge` allows page `index` of a file whose size (or write end, the
    /// larger) is `end_pages` pages.
    pub fn shmem_global_orders(&self, sb_huge: ShmemHuge, asker: Asker, index: u64, end_pages: u64) -> u32 {
        match self.shmem_enabled() {
            ShmemHuge::Deny => return 0,
            ShmemHuge::Force => return 1 << PMD_ORDER,
            _ => {}
        }
        let all = match asker {
            Asker::Fault { .. } => 1 << PMD_ORDER,
            Asker::Write => file_orders().fold(0, |m, o| m | 1 << o),
        };
        let advise = match asker {
            Asker::Fault { vm_hugepage: true } => 1 << PMD_ORDER,
            _ => 0,
        };
        match sb_huge {
            ShmemHuge::Always | ShmemHuge::Force => all,
            ShmemHuge::WithinSize => {
                let fit = file_orders().filter(|&o| all & 1 << o != 0 && within(o, index, end_pages));
                match fit.fold(0, |m, o| m | 1 << o) {
                    0 => advise,
                    m => m,
                }
            }
            ShmemHuge::Advise => advise,
            ShmemHuge::Never | ShmemHuge::Deny => 0,
        }
    }

    /// `shmem_allowable_huge_orders` for a fault on page `index` of an
    /// anonymous shmem VMA (flags `vm_hugepage`, `vm_nohugepage`) of a file
    /// of `size_pages` pages on a superblock with setting `sb_huge`: the
    /// per-size knobs.
    pub fn shmem_anon_orders(&self, sb_huge: ShmemHuge, vma: (bool, bool), index: u64, size_pages: u64) -> u32 {
        let (vm_hugepage, vm_nohugepage) = vma;
        let top = self.shmem_enabled();
        if vm_nohugepage || top == ShmemHuge::Deny {
            return 0;
        }
        let global = self.shmem_global_orders(sb_huge, Asker::Fault { vm_hugepage }, index, size_pages) != 0;
        let allowed = |o: u32| match self.shmem_order_mode(o) {
            ShmemMode::Inherit => global,
            _ if top == ShmemHuge::Force => false,
            ShmemMode::Always => true,
            ShmemMode::WithinSize => within(o, index, size_pages),
            ShmemMode::Advise => vm_hugepage,
            ShmemMode::Never => false,
        };
        file_orders().filter(|&o| allowed(o)).fold(0, |m, o| m | 1 << o)
    }

    /// `hugepage_pmd_enabled`: whether khugepaged runs (and gives MMs
    /// slots): the PMD size is on for anonymous memory, or (`shmem_counts`,
    /// from 6.13's `shmem_hpage_pmd_enabled`) for shmem by its own knob or
    /// by inheriting a top-level `shmem_enabled` other than never and deny.
    pub fn hugepage_pmd_enabled(&self, shmem_counts: bool) -> bool {
        use super::ThpMode;
        let anon = match self.order_mode(PMD_ORDER) {
            ThpMode::Always | ThpMode::Madvise => true,
            ThpMode::Inherit => self.enabled() != ThpMode::Never,
            ThpMode::Never => false,
        };
        let top = self.shmem_enabled();
        let shmem = match self.shmem_order_mode(PMD_ORDER) {
            _ if top == ShmemHuge::Deny => false,
            ShmemMode::Always | ShmemMode::WithinSize | ShmemMode::Advise => true,
            ShmemMode::Inherit => top != ShmemHuge::Never,
            ShmemMode::Never => false,
        };
        anon || (shmem_counts && shmem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shmem_pmd_size_inherits_the_top_level() {
        let s = ThpSettings::default();
        let (plain, top) = ((false, false), |s: &ThpSettings| s.shmem_enabled());
        assert_eq!(s.shmem_anon_orders(top(&s), plain, 0, 1024), 0);
        s.set_shmem_enabled(ShmemHuge::Always);
        assert_eq!(s.shmem_anon_orders(top(&s), plain, 0, 1024), 1 << PMD_ORDER);
        assert_eq!(s.shmem_anon_orders(top(&s), (false, true), 0, 1024), 0, "MADV_NOHUGEPAGE");
        s.set_shmem_enabled(ShmemHuge::WithinSize);
        assert_eq!(s.shmem_anon_orders(top(&s), plain, 0, 511), 0, "the 2M block passes the end");
        s.set_shmem_order(4, ShmemMode::Always).unwrap();
        assert_eq!(s.shmem_anon_orders(top(&s), plain, 0, 511), 1 << 4);
        s.set_shmem_enabled(ShmemHuge::Deny);
        assert_eq!(s.shmem_anon_orders(top(&s), (true, false), 0, 1024), 0);
    }

    #[test]
    fn a_mount_setting_gives_writes_every_order_and_named_faults_the_pmd_one() {
        let s = ThpSettings::default();
        let all = file_orders().fold(0, |m, o| m | 1 << o);
        let fault = Asker::Fault { vm_hugepage: false };
        assert_eq!(s.shmem_global_orders(ShmemHuge::Always, Asker::Write, 0, 1), all);
        assert_eq!(s.shmem_global_orders(ShmemHuge::Always, fault, 0, 1), 1 << PMD_ORDER);
        assert_eq!(
            s.shmem_global_orders(ShmemHuge::WithinSize, Asker::Write, 5, 16),
            0b11110,
            "orders 1 to 4 end by page 16"
        );
        assert_eq!(s.shmem_global_orders(ShmemHuge::WithinSize, fault, 5, 16), 0, "no PMD, no advice");
        assert_eq!(s.shmem_global_orders(ShmemHuge::Advise, Asker::Fault { vm_hugepage: true }, 0, 1), 1 << PMD_ORDER);
        assert_eq!(s.shmem_global_orders(ShmemHuge::Advise, Asker::Write, 0, 1), 0);
        s.set_shmem_enabled(ShmemHuge::Deny);
        assert_eq!(s.shmem_global_orders(ShmemHuge::Always, Asker::Write, 0, 1), 0);
        s.set_shmem_enabled(ShmemHuge::Force);
        assert_eq!(s.shmem_global_orders(ShmemHuge::Never, Asker::Write, 0, 1), 1 << PMD_ORDER);
    }
}
