//! Write-protect faults on a present, read-only PTE of a private mapping
//! (mm/memory.c `do_wp_page`, `wp_can_reuse_anon_folio`, `wp_page_copy`):
//! reuse an anon page when this MM alone may own it, else copy (a file
//! page is always copied).

use super::fault::VmFault;
use crate::arch::{pte_index, Pte, PAGE_SIZE};
use crate::folio::Folio;
use crate::kernel::Stats;
use crate::mapcount::Level;
use crate::pgtable::{load, store};
use crate::rmap;
use crate::Result;

/// `do_wp_page` for a private anonymous mapping: reuse the page if it is
/// AnonExclusive, or if `wp_can_reuse_anon_folio` says so (small folio: sole
/// reference; large folio: the design's answer); otherwise copy it. Reuse
/// makes only the faulting PTE writable and marks only that page exclusive;
/// an unshare fault (FAULT_FLAG_UNSHARE) leaves the PTE read-only.
pub(super) fn do_wp_page(vmf: &VmFault) -> Result<()> {
    let (k, phys, orig) = (vmf.k, &vmf.k.phys, vmf.orig);
    if orig.special() {
        return wp_page_copy(vmf, None);
    }
    let idx = pte_index(vmf.address);
    let f = {
        let ptl = vmf.pte_lock();
        if ptl.is_none() || load(phys, vmf.table, idx) != orig {
            return Ok(());
        }
        let f = Folio::containing(phys, orig.pfn());
        let i = orig.pfn() - f.pfn;
        // A file page in a private mapping is always copied.
        let reuse = f.test_anon()
            && (f.anon_exclusive(i)
                || if f.is_large() {
                    let debug = &k.config.debug;
                    let reuse = debug.reuse_shared || (!debug.no_large_reuse && k.design.can_reuse(f, vmf.mm.id));
                    k.observe(|o| o.cow_decided(k, f, vmf.mm.id, reuse));
                    reuse
                } else {
                    can_reuse_small(k, f)
                });
        if reuse {
            f.set_anon_exclusive(i, true);
            if !vmf.unshare() {
                store(phys, vmf.table, idx, orig.with(Pte::ACCESSED | Pte::MKDIRTY | Pte::RW));
                Stats::inc(&k.stats.pgreuse);
            }
            return Ok(());
        }
        if f.test_ksm() {
            Stats::inc(&k.stats.cow_ksm);
        }
        f.ref_add(1);
        f
    };
    wp_page_copy(vmf, Some(f))
}

/// `wp_can_reuse_anon_folio` for a small folio: never a KSM folio nor one
/// of more than 3 references; one on no LRU list may wait in an LRU batch,
/// so this CPU's batches are drained (another CPU's reference stays, and
/// the folio is copied); then it may be reused when the mapping holds its
/// only reference, once the swap cache has let go of it (`folio_free_swap`,
/// which it does only when no swap entry names the slot any more); the
/// folio lock is taken for that.
fn can_reuse_small(k: &crate::kernel::Kernel, f: Folio) -> bool {
    use crate::phys::pg;
    let in_cache = f.head().test(pg::SWAPCACHE);
    if (f.test_ksm() && !k.config.debug.ksm_reuse) || f.refcount() > 3 {
        return false;
    }
    if !f.head().test(pg::LRU) {
        k.lru_add_drain();
    }
    if f.refcount() > 1 + in_cache as i32 {
        return false;
    }
    let Some(_lock) = f.trylock() else { return false };
    if in_cache {
        k.folio_free_swap(f);
    }
    f.refcount() == 1
}

/// `wp_page_copy`: copies the page `old` (or zero-fills for the zero page)
/// into a new order-0 folio and replaces the PTE; the old mapping's rmap is
/// removed after the PTE is cleared and flushed, and the old folio's
/// references (the mapping's and the one taken by the caller) are dropped
/// last. An unshare fault maps the new page read-only and clean.
fn wp_page_copy(vmf: &VmFault, old: Option<Folio>) -> Result<()> {
    let (k, mm, phys, orig) = (vmf.k, vmf.mm, &vmf.k.phys, vmf.orig);
    let anon_vma = vmf.mm.anon_vma_prepare(vmf.vma);
    let place = vmf.vma.placement(vmf.address, 0);
    let new = super::vmscan::alloc_folio_reclaim(k, &mm.mmlist, place, old.is_none());
    let new = match new {
        Ok(f) => f,
        Err(e) => {
            if let Some(old) = old {
                k.folio_put_refs(old, 1);
            }
            return Err(e);
        }
    };
    if old.is_some() {
        phys.copy_frame(new.pfn, orig.pfn());
    }
    let idx = pte_index(vmf.address);
    let ptl = vmf.pte_lock();
    if ptl.is_none() || load(phys, vmf.table, idx) != orig {
        drop(ptl);
        k.folio_put_refs(new, 1);
        if let Some(old) = old {
            k.folio_put_refs(old, 1);
        }
        return Ok(());
    }
    // ptep_clear_flush(): no CPU may keep writing the old page.
    store(phys, vmf.table, idx, Pte::NONE);
    let page = vmf.address & !(PAGE_SIZE - 1);
    mm.tlb.flush_range(&k.stats, page, page + PAGE_SIZE);
    rmap::folio_add_new_anon_rmap(k, new, Level::Pte, mm.rmap, (anon_vma, vmf.vma.page_index(vmf.address)));
    k.folio_add_lru_vma(new, vmf.vma.mlocked());
    // An unshare keeps the soft-dirty bit; a write dirties (pte_mkdirty).
    let writable = if vmf.unshare() { orig.0 & Pte::SOFT_DIRTY } else { Pte::MKDIRTY | Pte::RW };
    store(phys, vmf.table, idx, Pte::new(new.pfn, Pte::PRESENT | Pte::USER | Pte::ACCESSED | writable));
    match old {
        Some(old) => {
            rmap::folio_remove_rmap(k, old, orig.pfn() - old.pfn, 1, Level::Pte, mm.rmap);
            k.munlock_vma_folio(old, vmf.vma.mlocked(), false);
            if !old.test_anon() {
                mm.add_rss(old, -1);
                mm.add_anon_rss(1);
            }
        }
        None => {
            mm.add_anon_rss(1);
        }
    }
    drop(ptl);
    if let Some(old) = old {
        k.folio_put_refs(old, 2);
    }
    Stats::inc(&k.stats.cow_copy);
    Ok(())
}
