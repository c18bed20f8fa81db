//! Swap entries in page tables: the swap-in fault (mm/memory.c
//! `do_swap_page`), batches of entries (`swap_pte_batch`) and their freeing
//! when zap drops them (mm/swapfile.c `free_swap_and_cache_nr`).
//!
//! Differs from Linux: no readahead; the device is synchronous, as zram;
//! no zeromap (a zero-filled page is stored like any other).

use super::fault::{FaultKind, VmFault};
use super::vmscan::alloc_folio_reclaim;
use super::wp;
use crate::arch::{pte_index, Pfn, Pte, SwpEntry};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::Level;
use crate::mm_types::vm;
use crate::pgtable::{load, store};
use crate::phys::{pg, PhysMem};
use crate::rmap;
use crate::Result;

/// `swap_pte_batch`: how many entries from `idx` (at most `max`) continue
/// the swap entry `pte`: consecutive slots with the same exclusive,
/// uffd-wp and soft-dirty bits (`pte_same` of the expected entry).
pub fn swap_pte_batch(phys: &PhysMem, table: Pfn, idx: usize, pte: Pte, max: usize) -> usize {
    let e = pte.swp_entry();
    let continues = |i: usize| {
        let n = load(phys, table, idx + i);
        let next = SwpEntry { offset: e.offset + i as u64, ..e };
        let carried = Pte::SWP_EXCLUSIVE | Pte::SWP_UFFD_WP | Pte::SWP_SOFT_DIRTY;
        let alike = (n.0 ^ pte.0) & carried == 0;
        n.is_swap() && alike && n.swp_entry() == next
    };
    1 + (1..max).take_while(|&i| continues(i)).count()
}

/// `free_swap_and_cache_nr`: `nr` swap entries from `e` are gone. A slot
/// no entry names any more, whose swap-cache folio nothing maps, leaves the
/// cache with it (`__try_to_reclaim_swap`, which passes over a folio it
/// cannot lock).
pub fn free_swap_and_cache_nr(k: &Kernel, e: SwpEntry, nr: u64) {
    let dev = k.swap.as_ref().expect("a swap entry implies a swap device");
    let mut last = None;
    for (offset, pfn) in dev.put(e, nr) {
        let f = Folio::containing(&k.phys, pfn);
        if last == Some(f.pfn) || rmap::folio_mapcount(k, f) > 0 {
            continue;
        }
        last = Some(f.pfn);
        // Held while locked: leaving the cache may drop its last reference
        // (none to take from a folio reclaim froze to free).
        if !f.try_get() {
            continue;
        }
        // Under its lock, the folio must still hold the slot: its frame
        // may be another folio's by now.
        if let Some(_lock) = f.trylock() {
            if k.folio_matches_swap_entry(f, pfn, SwpEntry { offset, ..e }) {
                k.folio_free_swap(f);
            }
        }
        k.folio_put_refs(f, 1);
    }
}

/// `should_try_to_free_swap`: after a swap-in from the swap cache, whether
/// to let the cache go: swap is more than half full (`vm_swap_full`), the
/// VMA is mlocked, or a write fault holds the only references besides the
/// cache's.
fn should_try_to_free_swap(vmf: &VmFault, f: Folio) -> bool {
    let stats = vmf.k.swap.as_ref().map(|d| d.stats()).unwrap_or_default();
    let full = stats.free * 2 < stats.total;
    full || vmf.vma.flags() & vm::LOCKED != 0 || (vmf.write() && f.refcount() == 1 + f.nr_pages() as i32)
}

/// `do_swap_page` for a small folio: the page comes from the swap cache, or
/// when the slot has one swap entry, straight from the device
/// (`SWP_SYNCHRONOUS_IO`, the slot claimed meanwhile), else it is read into
/// the swap cache. Under the PTL (the entry unchanged), the slot loses this
/// entry; the page is mapped writable if it is exclusive (the entry's
/// exclusive bit, or a fresh page no cache saw) or its only reference, for
/// a write fault (from 6.10 also a read fault:
/// [`crate::release::KernelVersion::swapin_maps_writable_on_read`]);
/// else read-only, and a write fault goes on to [`wp::do_wp_page`].
pub(super) fn do_swap_page(vmf: &VmFault) -> Result<()> {
    let (k, phys, orig) = (vmf.k, &vmf.k.phys, vmf.orig);
    let e = orig.swp_entry();
    let dev = k.swap.as_ref().expect("a swap entry implies a swap device");
    if dev.cached(e).is_none() && dev.count(e) == 1 {
        if let Some(order) = large_swapin_order(vmf, e) {
            if let Some(done) = swapin_large(vmf, order, e) {
                return done;
            }
        }
    }
    // The page: a fresh folio's only one, or the cached page of a folio
    // (maybe large: only this page is mapped, where Linux maps the whole
    // folio when every entry of it is still in place).
    let (f, cached, page, read_lock) = match dev.cached(e) {
        Some(pfn) => {
            // folio_try_get: one reclaim froze to free fails, and the
            // fault is taken again (finding the entry's slot on the device).
            let f = Folio::containing(phys, pfn);
            if !f.try_get() {
                return Ok(());
            }
            (f, true, pfn, None)
        }
        None if dev.count(e) == 1 => {
            if !dev.prepare(e) {
                return wait_for_swapin(); // another swap-in has the slot: fault again
            }
            let f = alloc_folio_reclaim(k, &vmf.mm.mmlist, vmf.vma.placement(vmf.address, 0), false)
                .inspect_err(|_| dev.clear_prepared(e))?;
            dev.read(phys, e, f.pfn);
            Stats::inc(&k.stats.pswpin);
            (f, false, f.pfn, None)
        }
        None => {
            // Locked before the cache names it (`__folio_set_locked`), so
            // that a fault of another MM finding it waits for the read.
            // Differs from Linux: held on until the page is mapped, where
            // Linux unlocks at the end of the read (`folio_end_read`) and
            // locks again (`folio_lock_or_retry`), so that another MM may
            // map it first.
            let f = alloc_folio_reclaim(k, &vmf.mm.mmlist, vmf.vma.placement(vmf.address, 0), false)?;
            let lock = f.lock();
            if !k.swap_cache_add(f, e) {
                drop(lock);
                k.folio_put_refs(f, 1);
                return wait_for_swapin();
            }
            // On the LRU from now on (`folio_add_lru`), so that reclaim can
            // drop it if the fault leaves it unmapped.
            k.folio_add_lru(f);
            dev.read(phys, e, f.pfn);
            Stats::inc(&k.stats.pswpin);
            (f, true, f.pfn, Some(lock))
        }
    };
    // folio_lock_or_retry(): a folio of the swap cache is locked before the
    // PTL, so that two MMs faulting it in at once do not both find it not
    // yet anon and both add it as new (`folio_add_new_anon_rmap`). Found
    // in the cache, it may have left it meanwhile, or its frame be another
    // folio's by now (`folio_matches_swap_entry`): the fault is taken again.
    let folio_lock = read_lock.or_else(|| cached.then(|| f.lock()));
    if cached && !k.folio_matches_swap_entry(f, page, e) {
        drop(folio_lock);
        k.folio_put_refs(f, 1);
        return Ok(());
    }
    // Mapping a cached folio writable asks its refcount whether this MM is
    // its only user: a reference this CPU's LRU batch holds is let go.
    if cached && vmf.write() && !f.test_ksm() && !f.head().test(pg::LRU) {
        k.lru_add_drain();
    }
    let idx = pte_index(vmf.address);
    let ptl = vmf.pte_lock();
    if ptl.is_none() || load(phys, vmf.table, idx) != orig {
        drop((ptl, folio_lock));
        if !cached {
            dev.clear_prepared(e);
        }
        k.folio_put_refs(f, 1);
        return Ok(());
    }
    let exclusive = !cached || orig.swp_exclusive();
    dev.put(e, 1);
    if !cached {
        dev.clear_prepared(e);
    } else if should_try_to_free_swap(vmf, f) {
        k.folio_free_swap(f);
    }
    vmf.mm.add_anon_rss(1);
    vmf.mm.add_swap_rss(-1);
    // A soft-dirty page comes back soft-dirty (pte_mksoft_dirty).
    let sd = orig.any_soft_dirty();
    let mut pte = Pte::new(page, Pte::PRESENT | Pte::USER | Pte::ACCESSED | if sd { Pte::SOFT_DIRTY } else { 0 });
    let reuse = exclusive || f.refcount() == 1;
    let release = k.config.release();
    // A write-protected page comes back write-protected, read-only.
    let uffd_wp = orig.swp_uffd_wp() && vmf.vma.userfaultfd_wp();
    let writes = reuse
        && vmf.vma.writable()
        && !uffd_wp
        && !vmf.vma.needs_soft_dirty_wp(k.config.soft_dirty, sd)
        && (vmf.write() || release.swapin_maps_writable_on_read());
    if writes {
        pte = pte.with(Pte::RW | if vmf.write() { Pte::MKDIRTY } else { 0 });
    }
    if uffd_wp {
        pte = pte.with(Pte::UFFD_WP);
    }
    if f.test_anon() {
        rmap::folio_add_anon_rmap_ptes(k, f, page - f.pfn, 1, vmf.mm.rmap, reuse);
    } else {
        // Without RMAP_EXCLUSIVE the page is not AnonExclusive, and the
        // folio records the root anon_vma: other VMAs of the family may map
        // it from the swap cache (`__folio_set_anon`).
        let own = vmf.mm.anon_vma_prepare(vmf.vma);
        let anon_vma = if reuse { own } else { vmf.vma.anon_vma.root() };
        let index = vmf.vma.page_index(vmf.address);
        // A cached folio joined the LRU when it was read (and may have left
        // the swap cache just now: `folio_free_swap` above).
        rmap::folio_add_new_anon_rmap(k, f, Level::Pte, vmf.mm.rmap, (anon_vma, index));
        if !cached {
            // The skip-swapcache path's folio_add_lru(), whatever the VMA.
            k.folio_add_lru(f);
        }
        f.set_anon_exclusive(0, reuse);
    }
    store(phys, vmf.table, idx, pte);
    drop((ptl, folio_lock));
    if vmf.kind == FaultKind::Write && !writes {
        return wp::do_wp_page(&VmFault { orig: pte, ..*vmf });
    }
    Ok(())
}

/// A fault that found another swap-in claiming its slot waits a moment
/// before it is taken again (`schedule_timeout_uninterruptible(1)`, on
/// `swapcache_wq` when it skips the swap cache); here a point where
/// another thread may run under shuttle (elsewhere the retried fault's
/// cost is the wait).
fn wait_for_swapin() -> Result<()> {
    crate::sync::cond_resched();
    Ok(())
}

/// The highest mTHP order `alloc_swap_folio` would swap in whole at the
/// fault, if any: one the VMA allows for a fault, whose aligned range lies
/// in the VMA and lines up with the slot (`thp_swap_suitable_orders`), and
/// whose entries are consecutive slots alike, none cached
/// (`can_swapin_thp`).
fn large_swapin_order(vmf: &VmFault, e: SwpEntry) -> Option<u32> {
    let (k, phys) = (vmf.k, &vmf.k.phys);
    if !k.config.release().swaps_in_large_folios() {
        return None;
    }
    let dev = k.swap.as_ref()?;
    let orders = vmf.thp_orders() & ((1 << crate::arch::PMD_ORDER) - 1) & !1;
    (1..crate::arch::PMD_ORDER).rev().filter(|o| orders & (1 << o) != 0).find(|&order| {
        let nr = 1u64 << order;
        let base = vmf.address & !(nr * crate::arch::PAGE_SIZE - 1);
        let page = (vmf.address - base) / crate::arch::PAGE_SIZE;
        let inside = base >= vmf.vma.start() && base + nr * crate::arch::PAGE_SIZE <= vmf.vma.end();
        if !inside || e.offset % nr != page {
            return false;
        }
        let first = load(phys, vmf.table, pte_index(base));
        let batch = first.is_swap()
            && first.swp_entry() == SwpEntry { offset: e.offset - page, ..e }
            && swap_pte_batch(phys, vmf.table, pte_index(base), first, nr as usize) == nr as usize;
        batch && (0..nr).all(|i| dev.cached(SwpEntry { offset: e.offset - page + i, ..e }).is_none())
    })
}

/// `do_swap_page` reading a large folio of `order` whole on the
/// skip-cache path: its slots claimed, a fresh folio (exclusive, so mapped
/// writable as a small fresh one is), every PTE of the range mapped at
/// once if all are still the entries they were; else nothing changes and
/// the fault is taken again. None if no folio of that order could be had:
/// the caller reads the one page (`alloc_swap_folio`'s fallback to order
/// 0; Linux tries the smaller suitable orders first). `fault` is the
/// entry of the faulting address; another thread may have changed the
/// range's first entry since [`large_swapin_order`] looked (then the
/// fault is taken again).
fn swapin_large(vmf: &VmFault, order: u32, fault: SwpEntry) -> Option<Result<()>> {
    let (k, phys) = (vmf.k, &vmf.k.phys);
    let dev = k.swap.as_ref().expect("a swap entry implies a swap device");
    let nr = 1u64 << order;
    let base = vmf.address & !(nr * crate::arch::PAGE_SIZE - 1);
    let e = SwpEntry { offset: fault.offset - (vmf.address - base) / crate::arch::PAGE_SIZE, ..fault };
    let first = load(phys, vmf.table, pte_index(base));
    if !first.is_swap() || first.swp_entry() != e {
        return Some(Ok(()));
    }
    let claimed: Vec<u64> = (0..nr).take_while(|&i| dev.prepare(SwpEntry { offset: e.offset + i, ..e })).collect();
    let release = |n: u64| (0..n).for_each(|i| dev.clear_prepared(SwpEntry { offset: e.offset + i, ..e }));
    if claimed.len() as u64 != nr {
        release(claimed.len() as u64);
        return Some(wait_for_swapin());
    }
    let f = match k.alloc_folio_on(vmf.vma.placement(base, order), order, false) {
        Ok(f) => f,
        Err(_) => {
            release(nr);
            return None;
        }
    };
    for i in 0..nr {
        dev.read(phys, SwpEntry { offset: e.offset + i, ..e }, f.pfn + i);
    }
    let ptl = vmf.pte_lock();
    let same = (0..nr).all(|i| {
        load(phys, vmf.table, pte_index(base) + i as usize)
            == Pte::swap(SwpEntry { offset: e.offset + i, ..e }, first.swp_exclusive())
                .with(first.0 & (Pte::SWP_UFFD_WP | Pte::SWP_SOFT_DIRTY))
    });
    if ptl.is_none() || !same {
        drop(ptl);
        release(nr);
        k.folio_put_refs(f, 1);
        return Some(Ok(()));
    }
    dev.put(e, nr);
    release(nr);
    f.ref_add(nr as i32 - 1);
    rmap::folio_add_new_anon_rmap(
        k,
        f,
        Level::Pte,
        vmf.mm.rmap,
        (vmf.mm.anon_vma_prepare(vmf.vma), vmf.vma.page_index(base)),
    );
    k.folio_add_lru(f);
    let sd = first.any_soft_dirty();
    let writes = vmf.vma.writable()
        && !vmf.vma.needs_soft_dirty_wp(k.config.soft_dirty, sd)
        && (vmf.write() || k.config.release().swapin_maps_writable_on_read());
    // set_ptes(): one entry for every page, so a write fault dirties all.
    let bits = match (writes, vmf.write()) {
        (true, true) => Pte::RW | Pte::MKDIRTY,
        (true, false) => Pte::RW,
        _ => 0,
    } | if sd { Pte::SOFT_DIRTY } else { 0 };
    let pte = Pte::new(f.pfn, Pte::PRESENT | Pte::USER | Pte::ACCESSED | bits);
    for i in 0..nr {
        store(phys, vmf.table, pte_index(base) + i as usize, pte.next_pfn(i));
    }
    vmf.mm.add_anon_rss(nr as i64);
    vmf.mm.add_swap_rss(-(nr as i64));
    Stats::add(&k.stats.pswpin, nr);
    Stats::inc(&k.stats.swpin[order as usize]);
    drop(ptl);
    if vmf.write() && !writes {
        return Some(wp::do_wp_page(&VmFault { orig: load(phys, vmf.table, pte_index(vmf.address)), ..*vmf }));
    }
    Some(Ok(()))
}
