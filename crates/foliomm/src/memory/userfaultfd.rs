//! userfaultfd on the page tables: where a fault goes to userspace
//! (fs/userfaultfd.c `handle_userfault`) and how the resolving ioctls map
//! one page (mm/userfaultfd.c `mfill_atomic_pte_copy`,
//! `mfill_atomic_pte_zeropage`, `mfill_atomic_install_pte`) or change its
//! write protection (`uffd_wp_range` through `change_protection`).
//!
//! Differs from Linux: no PTE markers (the write protection of a none
//! entry of shmem or hugetlb, and of an entry a zap of such a VMA drops, is
//! lost).

use super::fault::VmFault;
use crate::arch::{pmd_addr_end, pte_index, Pte, PAGE_SIZE};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::Level;
use crate::mm_types::{Mm, UffdMsg, UffdReason, Vma};
use crate::pgtable::{alloc_pmd, alloc_pte_table, load, pte_lockptr, store, walk_pmd};
use crate::{rmap, Errno, Result};

/// `handle_userfault`: hands a fault at `address` (a `write` or not) in
/// `vma` to its userfaultfd and returns what the fault ends with: SIGBUS if
/// the context asked for it (`UFFD_FEATURE_SIGBUS`) or has gone; else the
/// message (with the address rounded down to its page, or for hugetlb to
/// its huge page, as Linux's `vmf->address` is) is queued and the fault
/// ends with [`Errno::Userfault`] (`VM_FAULT_RETRY`: the thread waits for
/// the handler, then retries).
pub(super) fn handle_userfault(k: &Kernel, vma: &Vma, address: u64, write: bool, reason: UffdReason) -> Errno {
    let stats = &k.stats;
    let Some(ctx) = vma.userfaultfd_ctx() else {
        return Errno::SIGBUS;
    };
    if ctx.sigbus {
        Stats::inc(&stats.uffd_sigbus);
        return Errno::SIGBUS;
    }
    Stats::inc(match reason {
        UffdReason::Missing => &stats.uffd_missing_fault,
        UffdReason::WriteProtect => &stats.uffd_wp_fault,
        UffdReason::Minor => &stats.uffd_minor_fault,
    });
    ctx.queue(UffdMsg { address: address & !(PAGE_SIZE - 1), reason, write });
    Errno::Userfault
}

impl VmFault<'_> {
    /// [`handle_userfault`] of this fault.
    pub(super) fn userfault(&self, reason: UffdReason) -> Errno {
        handle_userfault(self.k, self.vma, self.address, self.write(), reason)
    }
}

/// What one page of a resolving ioctl maps.
#[derive(Clone, Copy)]
pub enum Fill<'a> {
    /// `UFFDIO_COPY`: a new page with these bytes (one page of them),
    /// write-protected by userfaultfd if `wp` (`UFFDIO_COPY_MODE_WP`).
    Copy { bytes: &'a [u8], wp: bool },
    /// `UFFDIO_ZEROPAGE`: the shared zero page, or in a shared shmem VMA a
    /// new zeroed page of the file.
    ZeroPage,
    /// `UFFDIO_CONTINUE`: the page the shmem file's cache holds
    /// (write-protected if `wp`).
    Continue { wp: bool },
}

/// `mfill_atomic_pte` for one page at `addr` of a VMA the caller holds
/// stable, an anon_vma made for a private one: the page tables down to the
/// PTE are allocated, then the page mapped. A private VMA (anonymous or
/// shmem) gets an anonymous copy or the zero page
/// (`mfill_atomic_pte_copy`, `mfill_atomic_pte_zeropage`); a shared shmem
/// VMA a new page of the file (`shmem_mfill_atomic_pte`); a continue maps
/// the file's cached page (`mfill_atomic_pte_continue`, writable only in
/// a shared writable VMA). EEXIST if the PMD maps a huge page, the PTE is
/// not none or (shared shmem) the cache has the page; EFAULT past the end
/// of the file or, for a continue, at a hole; ENOMEM.
pub fn mfill_atomic_pte(k: &Kernel, mm: &Mm, vma: &Vma, addr: u64, fill: Fill) -> Result<()> {
    let phys = &k.phys;
    let pmd = alloc_pmd(k, mm.pgd, addr, &mm.page_table_lock)?;
    let Some(table) = alloc_pte_table(k, pmd)? else {
        return Err(Errno::EEXIST);
    };
    let idx = pte_index(addr);
    let file = vma.file();
    let index = vma.page_index(addr);
    let writable = |wp: bool| vma.writable() && !wp;
    match (fill, file.as_deref()) {
        (Fill::Continue { wp }, Some(inode)) => {
            if index >= inode.nr_pages() || !inode.has_entry(index) {
                return Err(Errno::EFAULT);
            }
            let (f, pfn) = inode.get_folio(index, 0)?;
            install_file_pte(k, mm, table, idx, (f, pfn), vma.shared() && writable(wp), wp)
        }
        (Fill::Continue { .. }, None) => Err(Errno::EINVAL),
        (Fill::Copy { bytes, wp }, Some(inode)) if vma.shared() => {
            let got = inode.add_filled_page(index, Some(bytes))?;
            install_file_pte(k, mm, table, idx, got, writable(wp), wp)?;
            Stats::inc(&k.stats.uffd_copy);
            Ok(())
        }
        (Fill::ZeroPage, Some(inode)) if vma.shared() => {
            install_file_pte(k, mm, table, idx, inode.add_filled_page(index, None)?, writable(false), false)?;
            Stats::inc(&k.stats.uffd_zeropage);
            Ok(())
        }
        (Fill::ZeroPage, _) => {
            let _ptl = pte_lockptr(phys, table).lock();
            if !load(phys, table, idx).is_none() {
                return Err(Errno::EEXIST);
            }
            store(phys, table, idx, Pte::new(k.zero_pfn, Pte::PRESENT | Pte::USER | Pte::SPECIAL | Pte::ACCESSED));
            Stats::inc(&k.stats.uffd_zeropage);
            Ok(())
        }
        (Fill::Copy { bytes, wp }, _) => {
            let f = super::vmscan::alloc_folio_reclaim(k, &mm.mmlist, vma.placement(addr, 0), false)?;
            phys.write_bytes(f.pfn, 0, bytes);
            let ptl = pte_lockptr(phys, table).lock();
            if !load(phys, table, idx).is_none() {
                drop(ptl);
                k.folio_put_refs(f, 1);
                return Err(Errno::EEXIST);
            }
            rmap::folio_add_new_anon_rmap(k, f, Level::Pte, mm.rmap, (vma.anon_vma(), index));
            k.folio_add_lru_vma(f, vma.mlocked());
            // mfill_atomic_install_pte: dirty, writable if the VMA is and
            // the copy is not write-protected.
            store(phys, table, idx, Pte::new(f.pfn, install_bits(writable(wp), wp)));
            mm.add_anon_rss(1);
            Stats::inc(&k.stats.uffd_copy);
            Ok(())
        }
    }
}

/// The bits `mfill_atomic_install_pte` gives an entry: dirty and young,
/// writable if `writable`, uffd-wp (and so read-only) if `wp`.
fn install_bits(writable: bool, wp: bool) -> u64 {
    let base = Pte::PRESENT | Pte::USER | Pte::ACCESSED | Pte::MKDIRTY;
    base | if wp {
        Pte::UFFD_WP
    } else if writable {
        Pte::RW
    } else {
        0
    }
}

/// Maps page `pfn` of the file folio `f` (whose reference the caller
/// passes on to the mapping) at entry `idx` of `table` if it is none
/// (`mfill_atomic_install_pte` with a page-cache page), else EEXIST.
fn install_file_pte(
    k: &Kernel,
    mm: &Mm,
    table: u64,
    idx: usize,
    (f, pfn): (Folio, u64),
    writable: bool,
    wp: bool,
) -> Result<()> {
    let phys = &k.phys;
    let ptl = pte_lockptr(phys, table).lock();
    if !load(phys, table, idx).is_none() {
        drop(ptl);
        k.folio_put_refs(f, 1);
        return Err(Errno::EEXIST);
    }
    rmap::folio_add_file_rmap(k, f, pfn - f.pfn, 1, Level::Pte, mm.rmap);
    store(phys, table, idx, Pte::new(pfn, install_bits(writable, wp)));
    mm.add_rss(f, 1);
    Ok(())
}

/// `uffd_wp_range` over `[start, end)` of one VMA: `protect` sets the
/// uffd-wp bit on every present entry and takes write away; otherwise the
/// bit is cleared and, from 6.4, an entry that may be written without a
/// fault (`MM_CP_TRY_CHANGE_WRITABLE`: an AnonExclusive page of a writable
/// VMA) becomes writable at once. A huge PMD the range covers only in part is
/// split first (`change_pmd_range`). Returns whether an entry changed.
pub fn uffd_wp_range(k: &Kernel, mm: &Mm, vma: &Vma, start: u64, end: u64, protect: bool) -> bool {
    if vma.is_hugetlb() {
        return super::hugetlb_userfaultfd::hugetlb_wp_range(k, mm, vma, start, end, protect);
    }
    let phys = &k.phys;
    let change = |p: Pte, page_exclusive: &dyn Fn() -> bool| -> Pte {
        // A swap entry keeps the mark for the swap-in (change_pte_range:
        // pte_swp_mkuffd_wp, pte_swp_clear_uffd_wp).
        if p.is_swap() {
            return if protect { p.with(Pte::SWP_UFFD_WP) } else { p.without(Pte::SWP_UFFD_WP) };
        }
        if !p.present() {
            return p;
        }
        if protect {
            return p.with(Pte::UFFD_WP).without(Pte::RW);
        }
        // MM_CP_TRY_CHANGE_WRITABLE (6.4 on): can_change_pte_writable().
        let p = p.without(Pte::UFFD_WP);
        let upgrade = k.config.release().uffd_unprotect_makes_writable();
        let may_write = || super::change_protection::can_change_writable(k, vma, p, page_exclusive);
        match upgrade && vma.writable() && p.hw_present() && may_write() {
            true => p.with(Pte::RW),
            false => p,
        }
    };
    let mut changed = false;
    let mut addr = start;
    while addr < end {
        let next = pmd_addr_end(addr, end);
        let Some(pmd) = walk_pmd(phys, mm.pgd, addr) else {
            addr = next;
            continue;
        };
        let e = pmd.load(phys);
        if e.huge() && (addr & (crate::arch::PMD_SIZE - 1) != 0 || next - addr < crate::arch::PMD_SIZE) {
            super::huge_memory::split_huge_pmd(k, mm, addr);
            continue;
        }
        let _ptl = pte_lockptr(phys, pmd.table).lock();
        let e = pmd.load(phys);
        if e.huge() {
            let n = change(e, &|| phys.page(e.pfn()).test(crate::phys::pg::ANON_EXCLUSIVE));
            if n != e {
                pmd.store(phys, n);
                changed = true;
            }
        } else if !e.is_none() {
            drop(_ptl);
            let table = e.pfn();
            let _ptl = pte_lockptr(phys, table).lock();
            let n = super::change_protection::change_pte_range_batched(
                k,
                table,
                addr,
                next,
                |_| false,
                |p| {
                    change(p, &|| {
                        let f = Folio::containing(phys, p.pfn());
                        f.test_anon() && f.anon_exclusive(p.pfn() - f.pfn)
                    })
                },
            );
            changed |= n > 0;
        }
        addr = next;
    }
    changed
}
