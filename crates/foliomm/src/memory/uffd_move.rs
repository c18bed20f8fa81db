//! `UFFDIO_MOVE` on the page tables (mm/userfaultfd.c `move_pages_pte`,
//! `move_pages_huge_pmd`, `folio_move_anon_rmap`): an anonymous page
//! moves from one address to another of the same MM without a copy; the
//! folio's anon_vma and index become the destination's.
//!
//! Differs from Linux: a swapped-out page is not moved (EBUSY); the two
//! page-table locks are taken in frame order (`double_pt_lock` orders by
//! address, to the same end).

use crate::arch::{pte_index, Pte, PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mm_types::{Mm, Vma};
use crate::pgtable::{alloc_pmd, alloc_pte_table, load, pte_lockptr, store, walk_pmd};
use crate::{Errno, Result};

/// What one step of a move did.
pub enum Step {
    /// Bytes moved (a page, a PMD's worth, or a hole allowed).
    Moved(u64),
    /// The source PMD was split: the same address again, at PTE level.
    Again,
}

/// One step of `move_pages` at `src` → `dst` (both in anonymous private
/// VMAs of `mm`, `dst_vma` with an anon_vma), with `left` bytes to go: a
/// whole THP by its PMD when both sides are PMD-aligned, a whole PMD is
/// left and the destination PMD is none; else one page. A page must be
/// AnonExclusive and not pinned (EBUSY); a large folio mapped by PTEs is
/// split first (its error if it cannot be). EEXIST if the destination is
/// mapped, ENOENT at a hole of the source unless `holes`
/// (`UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES`), ENOMEM without page tables.
pub fn move_step(k: &Kernel, mm: &Mm, dst_vma: &Vma, (src, dst, left): (u64, u64, u64), holes: bool) -> Result<Step> {
    let phys = &k.phys;
    let Some(spmd) = walk_pmd(phys, mm.pgd, src).filter(|p| !p.load(phys).is_none()) else {
        return if holes { Ok(Step::Moved(PAGE_SIZE)) } else { Err(Errno::ENOENT) };
    };
    let dpmd = alloc_pmd(k, mm.pgd, dst, &mm.page_table_lock)?;
    if dpmd.load(phys).huge() {
        return Err(Errno::EEXIST);
    }
    let e = spmd.load(phys);
    if e.huge() {
        let whole = src.is_multiple_of(PMD_SIZE) && dst.is_multiple_of(PMD_SIZE) && left >= PMD_SIZE;
        let movable = e.special() || movable_page(Folio::from_head(phys, e.pfn()), 0);
        if whole && dpmd.load(phys).is_none() {
            if !movable {
                return Err(Errno::EBUSY);
            }
            if !super::huge_memory::move_huge_pmd(k, mm, spmd, dpmd, src, dst, &|p| moved_entry(p)) {
                // Split meanwhile: the next step moves its PTEs.
                return Ok(Step::Again);
            }
            if !e.special() {
                move_anon_rmap(Folio::from_head(phys, e.pfn()), dst_vma, dst);
            }
            mm.tlb.flush_range(&k.stats, src, src + PMD_SIZE);
            Stats::add(&k.stats.uffd_move, PMD_SIZE / PAGE_SIZE);
            return Ok(Step::Moved(PMD_SIZE));
        }
        if !movable {
            return Err(Errno::EBUSY);
        }
        super::huge_memory::split_huge_pmd(k, mm, src);
        return Ok(Step::Again);
    }
    let dtable = alloc_pte_table(k, dpmd)?.ok_or(Errno::EEXIST)?;
    let stable = e.pfn();
    let (si, di) = (pte_index(src), pte_index(dst));
    let large = {
        let (first, second) = if stable <= dtable { (stable, dtable) } else { (dtable, stable) };
        let _l1 = pte_lockptr(phys, first).lock();
        let _l2 = (second != first).then(|| pte_lockptr(phys, second).lock());
        if !load(phys, dtable, di).is_none() {
            return Err(Errno::EEXIST);
        }
        let p = load(phys, stable, si);
        if p.is_none() {
            return if holes { Ok(Step::Moved(PAGE_SIZE)) } else { Err(Errno::ENOENT) };
        }
        if !p.present() {
            return Err(Errno::EBUSY);
        }
        let f = Folio::containing(phys, p.pfn());
        if !p.special() && f.is_large() {
            f.ref_add(1);
            Some(f)
        } else {
            if !p.special() && !movable_page(f, p.pfn() - f.pfn) {
                return Err(Errno::EBUSY);
            }
            store(phys, stable, si, Pte::NONE);
            store(phys, dtable, di, if p.special() { p } else { moved_entry(p) });
            if !p.special() {
                move_anon_rmap(f, dst_vma, dst);
            }
            None
        }
    };
    if let Some(f) = large {
        // split_folio(), outside the table locks; then the page again.
        let r = super::split::split_folio_to_order(k, &mm.mmlist, f, 0, 1, None);
        k.folio_put_refs(f, 1);
        return r.map(|()| Step::Again);
    }
    mm.tlb.flush_range(&k.stats, src, src + PAGE_SIZE);
    Stats::inc(&k.stats.uffd_move);
    Ok(Step::Moved(PAGE_SIZE))
}

/// Whether page `i` of anonymous folio `f` may move: AnonExclusive and
/// not maybe pinned.
fn movable_page(f: Folio, i: u64) -> bool {
    f.test_anon() && f.anon_exclusive(i) && !f.maybe_dma_pinned()
}

/// The entry a moved page gets (`folio_mk_pte` of the destination's
/// protection): writable, dirty if it was, soft-dirty so that a tracker
/// notices the move (`pte_mksoft_dirty`), no uffd-wp.
fn moved_entry(p: Pte) -> Pte {
    p.without(Pte::UFFD_WP).with(Pte::RW | Pte::ACCESSED | Pte::SOFT_DIRTY)
}

/// `folio_move_anon_rmap` and the new index: the folio now belongs to
/// `dst_vma`'s anon_vma at `dst`.
fn move_anon_rmap(f: Folio, dst_vma: &Vma, dst: u64) {
    f.head().link.store(dst_vma.anon_vma(), crate::sync::atomic::Ordering::Relaxed);
    f.set_index(dst_vma.page_index(dst & !(f.nr_pages() * PAGE_SIZE - 1)));
}
