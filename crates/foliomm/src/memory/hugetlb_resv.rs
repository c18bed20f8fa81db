//! The reservations of private hugetlb mappings at fault, zap, unmap and
//! COW (mm/hugetlb.c): `alloc_hugetlb_folio` with `vma_needs_reservation`
//! and `vma_commit_reservation`, the reservation restored when the owner's
//! page is zapped (`__unmap_hugepage_range`, "restore the reservation if
//! needed"), `hugetlb_vm_op_close`, and `unmap_ref_private`, by which the
//! owner takes a page back from its children when a COW finds the pool
//! empty. The map itself is [`PrivateResv`](crate::shmem::PrivateResv).
//!
//! Differs from Linux: no subpool or cgroup charges, and no
//! `restore_reserve_on_error` (a fault here fails before it allocates).

use super::hugetlb::huge_pte_offset;
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::kernel::{HugeSize, Kernel};
use crate::mm_types::{vm, Mm, Vma};
use crate::phys::pg;
use crate::shmem::Inode;
use crate::tlb::MmuGather;
use crate::{Errno, Result};

/// `alloc_hugetlb_folio` for the private VMA `vma` at file page `index`
/// (a huge page's first): the page promised to the owner's mapping if it
/// still is (`uses_reserve`: not a COW of its own anonymous page, which
/// Linux makes outside the reserve), then that promise is recorded as
/// used; else an unpromised page. ENOMEM if the pool has none.
pub(super) fn alloc_private<'k>(
    k: &'k Kernel,
    vma: &Vma,
    index: u64,
    size: HugeSize,
    uses_reserve: bool,
) -> Result<Folio<'k>> {
    let resv = vma.hugetlb_resv().filter(|_| uses_reserve);
    let reserved = resv.as_ref().is_some_and(|r| r.reserved(index));
    let f = k.alloc_hugetlb_folio(size, reserved, vma.huge_placement(index, size.order()))?;
    if let Some(r) = resv {
        r.commit(index);
    }
    Ok(f)
}

/// `__unmap_hugepage_range`'s restore, before `[start, end)` of the
/// owner's private VMA `v` is zapped: each anonymous huge page mapped
/// there is marked to give its promise back to the pool when it is freed
/// (`HPageRestoreReserve`), and its reservation is restored in the map if
/// a fault had consumed it; unless the pool has surplus pages. The pool's
/// count rises only when the page is freed: if a child still maps it, the
/// owner may consume the restored reservation first, and `HugePages_Rsvd`
/// wraps below zero until the child lets go (Linux does the same). Only
/// from 6.9 ([`crate::release::KernelVersion::restores_hugetlb_reservation_at_zap`]).
pub(crate) fn restore_reservations(k: &Kernel, mm: &Mm, v: &Vma, start: u64, end: u64) {
    // Every zap comes here: the cheap flag tests first.
    if !v.is_hugetlb() || v.shared() || !k.config.release().restores_hugetlb_reservation_at_zap() {
        return;
    }
    let Some(resv) = v.hugetlb_resv() else { return };
    let step = resv.size.bytes();
    for addr in (start..end).step_by(step as usize) {
        let Some(slot) = huge_pte_offset(k, mm, addr, resv.size) else { continue };
        let e = slot.load(&k.phys);
        if e.is_none() || !e.huge() {
            continue;
        }
        let f = Folio::from_head(&k.phys, e.pfn());
        if f.test_anon() && k.huge_counts(resv.size).surplus == 0 {
            f.head().set(pg::HUGETLB_RESTORE_RESERVE);
            resv.restore(v.page_index(addr));
        }
    }
}

/// `hugetlb_vm_op_close`: the owner's VMA `v` goes (munmap, exit); the
/// promises of its huge pages no fault consumed go back to the pool.
pub(crate) fn vm_op_close(k: &Kernel, v: &Vma) {
    let Some(resv) = v.hugetlb_resv() else { return };
    let first = v.pgoff();
    let last = first + (v.end() - v.start()) / crate::arch::PAGE_SIZE;
    k.hugetlb_unreserve(resv.size, resv.unconsumed(first, last));
}

/// `unmap_ref_private`: the owner of the private mapping `vma` (in `mm`)
/// could not copy the page `pfn` it shares at `haddr`: the page is
/// unmapped from every other private VMA of the file without reservations
/// that maps it there (its children), each marked so that its next fault
/// without a page gets SIGBUS (`HPAGE_RESV_UNMAPPED`).
pub(super) fn unmap_ref_private(k: &Kernel, mm: &Mm, vma: &Vma, inode: &Inode, pfn: Pfn, haddr: u64) {
    let size = inode.huge_size().expect("a hugetlbfs file");
    let pgoff = vma.page_index(haddr);
    let others: Vec<_> = inode
        .i_mmap
        .read()
        .iter()
        .filter(|s| s.vma != vma.id() && s.flags & vm::SHARED == 0)
        .filter(|s| s.pgoff <= pgoff && pgoff < s.pgoff + s.pages)
        .map(|s| (s.mm, s.vma))
        .collect();
    for (serial, id) in others {
        let Some(other) = mm.mmlist.get(serial) else { continue };
        let Some(v) = other.published_vma(haddr).filter(|v| v.id() == id) else { continue };
        if v.hugetlb_resv().is_some() {
            continue;
        }
        let maps_it = huge_pte_offset(k, &other, haddr, size).is_some_and(|s| {
            let e = s.load(&k.phys);
            !e.is_none() && e.huge() && e.pfn() == pfn
        });
        if maps_it {
            let mut tlb = MmuGather::new(k, &other.tlb, false);
            super::zap::unmap_vma_range(k, &other, &mut tlb, &v, (haddr, haddr + size.bytes()), Default::default());
            drop(tlb);
            v.set_flags(v.flags() | vm::HUGETLB_RESV_UNMAPPED);
        }
    }
}

/// Whether a fault without a page in `vma` must fail: its owner took a
/// page of it back (`HPAGE_RESV_UNMAPPED`; Linux kills the process).
pub(super) fn resv_unmapped(vma: &Vma) -> Result<()> {
    if vma.flags() & vm::HUGETLB_RESV_UNMAPPED != 0 {
        return Err(Errno::SIGBUS);
    }
    Ok(())
}
