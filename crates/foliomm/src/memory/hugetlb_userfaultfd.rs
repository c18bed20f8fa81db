//! userfaultfd's resolving ioctls on a hugetlb VMA (mm/hugetlb.c
//! `hugetlb_mfill_atomic_pte`): one huge page at a time, under the locks a
//! hugetlb fault takes (the fault mutex, and the VMA's hugetlb lock or
//! `i_mmap_rwsem` by the synchronization design).
//!
//! Differs from Linux: no `MFILL_ATOMIC_POISON`; the page a copy fills is
//! taken from the pool as a fault's would be, without the retry that
//! copies from userspace outside the locks.

use super::hugetlb::with_fault_locks;
use super::userfaultfd::Fill;
use crate::arch::{pud_addr_end, Pte, PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::Level;
use crate::mm_types::{Mm, Vma};
use crate::pgtable::{pte_lockptr, walk_pmd, walk_pud, PmdSlot};
use crate::rmap;
use crate::tlb::MmuGather;
use crate::{Errno, Result};

/// `hugetlb_mfill_atomic_pte` for the huge page at `haddr` (aligned) of
/// the hugetlb VMA `vma`: a copy fills a new page (of the file for a
/// shared VMA, anonymous for a private one) with the bytes (one huge page
/// of them); a continue maps the page the file caches, writable only in a
/// shared writable VMA. EEXIST if the entry is not none or (shared copy)
/// the file has the page; EFAULT for a continue at a hole; EINVAL for
/// `UFFDIO_ZEROPAGE`; ENOMEM when the pool has no page.
pub fn hugetlb_mfill_atomic_pte(mm: &Mm, vma: &Vma, haddr: u64, fill: Fill) -> Result<()> {
    let k = &*mm.kernel;
    let inode = vma.file().expect("a hugetlb VMA maps a hugetlbfs file");
    let index = vma.page_index(haddr);
    with_fault_locks(mm, vma, &inode, haddr, |walked| {
        let phys = &k.phys;
        if !walked.pmd.load(phys).is_none() {
            return Err(Errno::EEXIST);
        }
        let nr = walked.size.pages();
        let (f, anon, wp) = match fill {
            Fill::ZeroPage => return Err(Errno::EINVAL),
            Fill::Continue { wp } => {
                if !inode.has_entry(index) {
                    return Err(Errno::EFAULT);
                }
                (inode.hugetlb_get_folio(index, vma.huge_placement(index, walked.size.order()))?, false, wp)
            }
            Fill::Copy { bytes, wp } => {
                let f = match vma.shared() {
                    _ if index >= inode.nr_pages() => return Err(Errno::EFAULT),
                    true if inode.has_entry(index) => return Err(Errno::EEXIST),
                    true => inode.hugetlb_get_folio(index, vma.huge_placement(index, walked.size.order()))?,
                    false => {
                        let f = super::hugetlb_resv::alloc_private(k, vma, index, walked.size, true)?;
                        Folio::from_head(phys, f.pfn)
                    }
                };
                for (i, page) in bytes.chunks(PAGE_SIZE as usize).enumerate().take(nr as usize) {
                    phys.write_bytes(f.pfn + i as u64, 0, page);
                }
                (f, !vma.shared(), wp)
            }
        };
        let anon_vma = anon.then(|| mm.anon_vma_prepare(vma));
        let _pl = pte_lockptr(phys, walked.pmd.table).lock();
        if !walked.pmd.load(phys).is_none() || !walked.still_ours(k, mm) {
            k.folio_put_refs(f, 1);
            return Err(Errno::EEXIST);
        }
        // Writable unless write-protected, or a continue of a private VMA
        // (the cache's page, copied on write).
        let writable = vma.writable() && !wp && (vma.shared() || anon);
        let mut bits = Pte::PRESENT | Pte::USER | Pte::PSE | Pte::ACCESSED | Pte::MKDIRTY;
        bits |= if wp {
            Pte::UFFD_WP
        } else if writable {
            Pte::RW
        } else {
            0
        };
        match anon_vma {
            Some(av) => rmap::folio_add_new_anon_rmap(k, f, Level::Pmd, mm.rmap, (av, index)),
            None => rmap::folio_add_file_rmap(k, f, 0, nr, Level::Pmd, mm.rmap),
        }
        walked.pmd.store(phys, Pte::new(f.pfn, bits));
        mm.add_rss(f, nr as i64);
        Ok(())
    })
}

/// `hugetlb_unshare_all_pmds`: this MM lets go of every PMD table of the
/// hugetlb VMA `vma` it shares (registration for minor or write-protect
/// faults); the pages refault into tables of its own.
pub(crate) fn unshare_all_pmds(k: &Kernel, mm: &Mm, vma: &Vma) {
    let mut tlb = MmuGather::new(k, &mm.tlb, false);
    super::hugetlb::with_unshare_locks(k, vma, || {
        let mut addr = vma.start();
        while addr < vma.end() {
            super::hugetlb::huge_pmd_unshare(k, mm, &mut tlb, addr);
            addr = pud_addr_end(addr, vma.end());
        }
    });
}

/// `uffd_wp_range` of a hugetlb VMA (`hugetlb_change_protection` with
/// `MM_CP_UFFD_WP` or `_RESOLVE`) over whole huge pages of `[start, end)`:
/// `protect` sets the uffd-wp bit of every mapped huge page and takes
/// write away; otherwise the bit is cleared and the entry stays read-only
/// (the VMA's protection is: copy-on-write for a private one, write
/// notification for a shared one registered for write protection), so the
/// next write takes the ordinary write fault. Returns whether an entry
/// changed. Differs from Linux: a none entry gets no uffd-wp marker.
pub(crate) fn hugetlb_wp_range(k: &Kernel, mm: &Mm, vma: &Vma, start: u64, end: u64, protect: bool) -> bool {
    let phys = &k.phys;
    let size = vma.huge_page_size().expect("a hugetlb VMA");
    let mut changed = false;
    for haddr in (start..end).step_by(size as usize) {
        let slot = match size {
            PMD_SIZE => walk_pmd(phys, mm.pgd, haddr),
            _ => walk_pud(phys, mm.pgd, haddr).map(|(table, idx)| PmdSlot { table, idx }),
        };
        let Some(slot) = slot else { continue };
        let _ptl = pte_lockptr(phys, slot.table).lock();
        let e = slot.load(phys);
        if !e.present() || !e.huge() {
            continue;
        }
        let n = if protect { e.with(Pte::UFFD_WP).without(Pte::RW) } else { e.without(Pte::UFFD_WP | Pte::RW) };
        if n != e {
            slot.store(phys, n);
            changed = true;
        }
    }
    changed
}
