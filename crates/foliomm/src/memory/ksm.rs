//! KSM on the page tables (mm/ksm.c `get_mergeable_page`,
//! `try_to_merge_one_page`, `write_protect_page`, `replace_page`,
//! `break_ksm`): a page ksmd merges is first write-protected, clean and
//! no longer AnonExclusive, in its one mapping; then either it becomes the
//! KSM folio, or its entry is replaced by one mapping the KSM folio, read
//! only, and the page goes. A write to a KSM page always copies it
//! (`wp_can_reuse_anon_folio`).
//!
//! Differs from Linux: mlocked VMAs are merged without moving the mlock
//! over to the KSM folio (the model does not keep folios mlocked).

use super::fault::{handle_fault, FaultKind};
use crate::arch::{pte_index, Pte, PAGE_SIZE};
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::Level;
use crate::mm_types::{Mm, Vma};
use crate::pgtable::{leaf_slot, load, pte_lock_checked, store, walk_pmd};
use crate::phys::pg;
use crate::rmap::{self, ksm::RmapItem};
use crate::sync::atomic::Ordering::Relaxed;
use crate::{Errno, Result};

/// `get_mergeable_page` / the walk of `scan_get_next_rmap_item`: the anon
/// folio present at `addr` of `mm` and the page of it there, with a
/// reference taken; None for no page, the zero page, or a file page.
pub fn mergeable_page<'k>(k: &'k Kernel, mm: &Mm, addr: u64) -> Option<(Folio<'k>, u64)> {
    let phys = &k.phys;
    let _tables = mm.pt_read();
    let slot = leaf_slot(phys, mm.pgd, addr)?;
    let _ptl = crate::pgtable::pte_lockptr(phys, slot.table).lock();
    let e = slot.load(phys);
    if !e.present() || e.special() || e.huge() != slot.huge() {
        return None;
    }
    let pfn = slot.page_pfn(e, addr);
    let f = Folio::containing(phys, pfn);
    if !f.test_anon() || f.is_zero_page() || f.head().test(pg::HUGETLB) {
        return None;
    }
    f.ref_add(1);
    Some((f, pfn - f.pfn))
}

/// `try_to_merge_one_page` for page `i` of `f`, which `mm` maps at `addr`
/// in the mergeable `vma`, taking over the caller's reference to `f`: a
/// large folio is split first (`split_huge_page`); then the page is
/// write-protected ([`write_protect_page`]) and, without `kpage`, becomes
/// a KSM folio of its own under a new stable node (`stable_tree_insert`),
/// else its entry comes to map the KSM folio `kpage` if the contents are
/// the same ([`replace_page`]). Either way the rmap item of `mm` at
/// `addr` joins the node (`stable_tree_append`, done here under the folio
/// lock rather than after it, so that no rmap walk finds a KSM folio
/// without its mapping). Returns the node; EBUSY where Linux gives up on
/// the page.
pub fn try_to_merge_one_page(
    k: &Kernel,
    (mm, vma, addr): (&Mm, &Vma, u64),
    (f, i): (Folio, u64),
    kpage: Option<(Folio, u64)>,
) -> Result<u64> {
    let page = f.pfn + i;
    let f = if f.is_large() {
        let split = super::split::split_folio_to_order(k, &mm.mmlist, f, 0, 1, None);
        // The caller's reference stays on the first piece: it moves to the page's.
        let piece = Folio::containing(&k.phys, page);
        if split.is_ok() && piece.pfn != f.pfn {
            piece.ref_add(1);
        }
        if split.is_err() || piece.pfn != f.pfn {
            k.folio_put_refs(f, 1);
        }
        split.map_err(|_| Errno::EBUSY)?;
        piece
    } else {
        f
    };
    let r = merge_small_page(k, (mm, vma, addr), f, kpage);
    k.folio_put_refs(f, 1);
    r
}

/// [`try_to_merge_one_page`] once the page is an order-0 folio `f`.
fn merge_small_page(
    k: &Kernel,
    (mm, vma, addr): (&Mm, &Vma, u64),
    f: Folio,
    kpage: Option<(Folio, u64)>,
) -> Result<u64> {
    let ksm = &mm.mmlist.ksm;
    let anon_vma = mm.mmlist.anon_vma(vma.anon_vma()).ok_or(Errno::EBUSY)?;
    let item = RmapItem { mm: mm.serial, addr, anon_vma };
    if let Some((_, node)) = kpage.filter(|(kf, _)| kf.pfn == f.pfn) {
        ksm.stable.append(node, item);
        return Ok(node);
    }
    let Some(_lock) = f.trylock() else { return Err(Errno::EBUSY) };
    let orig = write_protect_page(k, mm, addr, f)?;
    let node = match kpage {
        None => {
            // set_page_stable_node(), folio_mark_accessed(), dirty.
            let node = ksm.stable.insert(f.pfn);
            f.head().link.store(node, Relaxed);
            f.head().set(pg::KSM | pg::DIRTY | pg::REFERENCED);
            node
        }
        Some((kf, node)) if k.phys.content(kf.pfn) == k.phys.content(f.pfn) => {
            replace_page(k, mm, addr, (f, kf), orig)?;
            node
        }
        Some(_) => return Err(Errno::EBUSY),
    };
    ksm.stable.append(node, item);
    Ok(node)
}

/// `write_protect_page`: under the PTE lock, the entry mapping the locked
/// small folio `f` at `addr` is made read-only and clean if it was writable,
/// dirty or AnonExclusive: cleared and flushed first, then refused (put
/// back) if anything but its mapping and the caller's reference holds the
/// folio (a GUP reference or pin), and the page shared
/// (`folio_try_share_anon_rmap_pte`). Returns the entry it leaves.
fn write_protect_page(k: &Kernel, mm: &Mm, addr: u64, f: Folio) -> Result<Pte> {
    let phys = &k.phys;
    let pmd = walk_pmd(phys, mm.pgd, addr).ok_or(Errno::EFAULT)?;
    let e = pmd.load(phys);
    if e.is_none() || e.huge() {
        return Err(Errno::EFAULT);
    }
    let (table, idx) = (e.pfn(), pte_index(addr));
    let _ptl = pte_lock_checked(phys, pmd, table).ok_or(Errno::EAGAIN)?;
    let pte = load(phys, table, idx);
    if !pte.present() || pte.special() || pte.pfn() != f.pfn {
        return Err(Errno::EFAULT);
    }
    if !(pte.write() || pte.dirty() || f.anon_exclusive(0)) {
        return Ok(pte);
    }
    store(phys, table, idx, Pte::NONE);
    mm.tlb.flush_range(&k.stats, addr, addr + PAGE_SIZE);
    let swapcache = f.head().test(pg::SWAPCACHE) as i32;
    if rmap::folio_mapcount(k, f) as i32 + 1 + swapcache != f.refcount()
        || (f.anon_exclusive(0) && f.maybe_dma_pinned())
    {
        store(phys, table, idx, pte);
        return Err(Errno::EBUSY);
    }
    f.set_anon_exclusive(0, false);
    if pte.dirty() {
        f.head().set(pg::DIRTY);
    }
    let wp = pte.without(Pte::RW | Pte::DIRTY);
    store(phys, table, idx, wp);
    Ok(wp)
}

/// `replace_page`: if the entry at `addr` is still `orig`, it comes to map
/// the KSM folio `kf` (a reference and a mapping of it added, read-only as
/// the VMA's protection makes a private page) and the old page `f` loses
/// its mapping and reference.
fn replace_page(k: &Kernel, mm: &Mm, addr: u64, (f, kf): (Folio, Folio), orig: Pte) -> Result<()> {
    let phys = &k.phys;
    let pmd = walk_pmd(phys, mm.pgd, addr).ok_or(Errno::EFAULT)?;
    let table = pmd.load(phys).pfn();
    let _ptl = pte_lock_checked(phys, pmd, table).ok_or(Errno::EAGAIN)?;
    let idx = pte_index(addr);
    if load(phys, table, idx) != orig {
        return Err(Errno::EBUSY);
    }
    kf.ref_add(1);
    rmap::folio_add_anon_rmap_ptes(k, kf, 0, 1, mm.rmap, false);
    store(phys, table, idx, Pte::NONE);
    mm.tlb.flush_range(&k.stats, addr, addr + PAGE_SIZE);
    let bits = Pte::PRESENT | Pte::USER | Pte::ACCESSED | (orig.0 & Pte::PROTNONE);
    store(phys, table, idx, Pte::new(kf.pfn, bits));
    rmap::folio_remove_rmap(k, f, 0, 1, Level::Pte, mm.rmap);
    if rmap::folio_mapcount(k, f) == 0 && f.head().test(pg::SWAPCACHE) {
        k.folio_free_swap(f);
    }
    f.put_refs(1);
    Ok(())
}

/// `break_ksm`: while `mm` maps a KSM page at `addr` of `vma`, faults it as
/// an unshare (6.1: a write) so it gets a copy of its own.
pub fn break_ksm(k: &Kernel, mm: &Mm, vma: &Vma, addr: u64) -> Result<()> {
    let kind = if k.config.release().break_ksm_unshares() { FaultKind::Unshare } else { FaultKind::Write };
    loop {
        let ksm = {
            let _tables = mm.pt_read();
            let slot = leaf_slot(&k.phys, mm.pgd, addr);
            slot.is_some_and(|s| {
                let e = s.load(&k.phys);
                e.present() && !e.special() && Folio::containing(&k.phys, s.page_pfn(e, addr)).test_ksm()
            })
        };
        if !ksm {
            return Ok(());
        }
        handle_fault(mm, vma, addr, kind)?;
    }
}
