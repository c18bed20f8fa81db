//! Moving anon and shmem folios to another node (mm/migrate.c `migrate_pages`,
//! `migrate_pages_batch`, `migrate_folio_unmap` + `migrate_folio_move`,
//! `alloc_migration_target`), for `move_pages(2)`.
//!
//! Each folio gets a target of its order on the node (`__GFP_THISNODE`;
//! a large one without reclaim); its bytes, flags and every mapping move
//! there, the old folio is freed. A partially mapped large folio is split
//! first, and a large folio whose target cannot be allocated is split and
//! its pages migrated one by one (`try_split_folio`); a folio held by more
//! than its mappings (a GUP pin) fails after the retries, as
//! `folio_migrate_mapping`'s reference check makes it.
//!
//! Differs from Linux: the mappings are held still by their tables' locks
//! ([`super::folio_mappings`]) and cleared while the bytes move, not
//! replaced by migration entries; a PMD mapping moves as a PMD (as with
//! `set_pmd_migration_entry`). Anon, shmem and hugetlb folios
//! migrate (the hugetlb differences in [`super::hugetlb_migrate`]); a
//! folio in the swap cache fails with EBUSY.

use super::folio_mappings::{with_mappings, Mapping};
use super::hugetlb_migrate::{self as hugetlb, is_hugetlb};
use super::split::split_folio_to_order;
use crate::arch::{Pte, PAGE_SIZE, PMD_ORDER};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::mapcount::Level;
use crate::mm_types::{Mm, MmList};
use crate::pgtable::{pt_share_count, store, take};
use crate::phys::{pg, Placement};
use crate::rmap;
use crate::shmem::PageCache;
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::MutexGuard;
use crate::{Errno, Result};

/// `NR_MAX_MIGRATE_PAGES_RETRY`: passes over the folios that gave EAGAIN.
const RETRIES: usize = 10;

/// Why folios migrate (`enum migrate_reason`): a NUMA hinting fault's
/// migration never splits a folio for want of a target (`nosplit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `MR_SYSCALL`: `move_pages`.
    Syscall,
    /// `MR_MEMPOLICY_MBIND`.
    Mbind,
    /// `MR_NUMA_MISPLACED`.
    NumaMisplaced,
}

/// `migrate_pages(from, alloc_migration_target, nid, MIGRATE_SYNC,
/// MR_SYSCALL)`: migrates the isolated anon folios `from` (each holding
/// its isolation reference) to node `nid`. Returns how many folios were
/// not migrated as Linux counts them (0 when every page reached the node,
/// even through a split; a folio split counts as one), or ENOMEM when a
/// small folio found no room there. The folios not migrated go back to the
/// LRU (`putback_movable_pages`).
pub fn migrate_pages<'k>(
    k: &'k Kernel,
    mmlist: &MmList,
    from: Vec<Folio<'k>>,
    nid: usize,
    reason: Reason,
) -> Result<u64> {
    let mut failed = Vec::new();
    let mut split = Vec::new();
    let nosplit = reason == Reason::NumaMisplaced;
    let batch = migrate_batch(k, mmlist, from, nid, Some(&mut split), nosplit, &mut failed);
    let nr_failed = match batch {
        Ok(n) if !split.is_empty() => {
            // The pieces get one pass, and no further split.
            let _ = migrate_batch(k, mmlist, split, nid, None, nosplit, &mut failed);
            n
        }
        Ok(n) => n,
        Err(e) => {
            failed.append(&mut split);
            putback(k, failed);
            return Err(e);
        }
    };
    let all_moved = failed.is_empty();
    putback(k, failed);
    Ok(if all_moved { 0 } else { nr_failed })
}

/// `migrate_pages_batch`: each folio of `from` migrated, retrying EAGAIN
/// up to [`RETRIES`] passes; with `split`, a large folio partially mapped,
/// or without a target unless `nosplit`, is split there. Folios that fail
/// go to `failed`.
/// Returns the failures counted (a split one too), or ENOMEM (the rest of
/// `from` moved to `failed`).
fn migrate_batch<'k>(
    k: &'k Kernel,
    mmlist: &MmList,
    mut from: Vec<Folio<'k>>,
    nid: usize,
    mut split: Option<&mut Vec<Folio<'k>>>,
    nosplit: bool,
    failed: &mut Vec<Folio<'k>>,
) -> Result<u64> {
    let mut nr_failed = 0;
    for pass in 0..RETRIES {
        let mut retry = Vec::new();
        let mut rest = from.into_iter();
        while let Some(f) = rest.next() {
            let thp = f.order() == PMD_ORDER && !is_hugetlb(f);
            let partial = f.nr_pages() > 2
                && f.page(1).test(pg::PARTIALLY_MAPPED)
                && k.config.release().migrate_splits_partially_mapped();
            if partial && split.as_deref_mut().is_some_and(|list| try_split(k, mmlist, f, list)) {
                nr_failed += 1;
                if thp {
                    Stats::inc(&k.stats.thp_migration_fail);
                }
                continue;
            }
            if f.refcount() == 1 {
                // Freed meanwhile: nothing left to move (`migrate_folio_done`).
                count_moved(k, f);
                k.folio_put_refs(f, 1);
                continue;
            }
            match move_folio(k, mmlist, f, nid) {
                Ok(()) => {}
                Err(Errno::ENOMEM)
                    if f.is_large()
                        && !nosplit
                        && !is_hugetlb(f)
                        && split.as_deref_mut().is_some_and(|l| try_split(k, mmlist, f, l)) =>
                {
                    nr_failed += 1;
                    if thp {
                        Stats::inc(&k.stats.thp_migration_fail);
                    }
                }
                Err(Errno::ENOMEM) => {
                    count_failed(k, f);
                    failed.push(f);
                    failed.extend(rest.chain(retry));
                    return Err(Errno::ENOMEM);
                }
                Err(Errno::EAGAIN) if pass + 1 < RETRIES => retry.push(f),
                Err(_) => {
                    nr_failed += 1;
                    count_failed(k, f);
                    failed.push(f);
                }
            }
        }
        if retry.is_empty() {
            break;
        }
        from = retry;
    }
    Ok(nr_failed)
}

/// `try_split_folio` into order-0 pieces, the mapped ones joining `list`
/// (the first keeping the isolation reference); false if the split failed.
/// Linux puts every piece on the list and counts those nothing maps as
/// migrated when it meets them holding only the list's reference; foliomm
/// frees them at the split and counts them here.
fn try_split<'k>(k: &'k Kernel, mmlist: &MmList, f: Folio<'k>, list: &mut Vec<Folio<'k>>) -> bool {
    let (mut pieces, nr, thp) = (Vec::new(), f.nr_pages(), f.order() == PMD_ORDER);
    if split_folio_to_order(k, mmlist, f, 0, 1, Some(&mut pieces)).is_err() {
        return false;
    }
    if thp {
        Stats::inc(&k.stats.thp_migration_split);
    }
    k.stats.pgmigrate_success.fetch_add(nr - 1 - pieces.len() as u64, Relaxed);
    list.push(Folio::from_head(&k.phys, f.pfn));
    list.append(&mut pieces);
    true
}

fn count_moved(k: &Kernel, f: Folio) {
    k.stats.pgmigrate_success.fetch_add(f.nr_pages(), Relaxed);
    if f.order() == PMD_ORDER && !is_hugetlb(f) {
        Stats::inc(&k.stats.thp_migration_success);
    }
}

fn count_failed(k: &Kernel, f: Folio) {
    k.stats.pgmigrate_fail.fetch_add(f.nr_pages(), Relaxed);
    if f.order() == PMD_ORDER && !is_hugetlb(f) {
        Stats::inc(&k.stats.thp_migration_fail);
    }
}

/// `folio_isolate_lru` for migration, taking a reference: an anon folio,
/// or a shmem folio still in its page cache, off the LRU; a hugetlb folio
/// by `isolate_hugetlb`. False if it is not there to take (isolated
/// already, or neither).
pub fn isolate_folio(k: &Kernel, f: Folio) -> bool {
    if is_hugetlb(f) {
        return hugetlb::isolate_hugetlb(f);
    }
    let movable = f.test_anon() || crate::shmem::in_page_cache(f);
    movable && k.lru.isolate(f)
}

/// `putback_movable_pages`: each folio back on the LRU (a hugetlb one
/// migratable again), its isolation reference dropped.
pub(crate) fn putback(k: &Kernel, folios: Vec<Folio>) {
    for f in folios {
        if is_hugetlb(f) {
            hugetlb::putback_hugetlb(k, f);
            continue;
        }
        k.folio_add_lru(f);
        k.folio_put_refs(f, 1);
    }
}

/// `migrate_folio_unmap` + `migrate_folio_move` of one isolated folio:
/// ENOMEM without a target on `nid`; EAGAIN if it is locked, a table's
/// lock is busy, or something besides its mappings (and the page cache)
/// holds it; EBUSY for a folio in the swap cache, or a page-cache folio
/// no longer in its file. A page-cache folio's file index moves to the
/// new folio under the cache's lock (`__folio_migrate_mapping`), taken
/// before the tables' (which are only tried). A page-cache hugetlb folio
/// is locked first, then the MMs sharing its PMD table let go of it
/// ([`hugetlb::unshare_for_migration`]), as `unmap_and_move_huge_page` does;
/// its cache's lock comes after the tables' (its faults take that lock
/// inside `i_mmap_rwsem`, which the walk takes), and a table shared again
/// meanwhile gives EAGAIN (Linux's walk keeps `i_mmap_rwsem` for write, so
/// no fault shares it again before the entry is a migration entry).
fn move_folio(k: &Kernel, mmlist: &MmList, f: Folio, nid: usize) -> Result<()> {
    let dst = match is_hugetlb(f) {
        true => hugetlb::alloc_target(k, f, nid)?,
        false => k.alloc_folio_on(Placement::this_node(nid), f.order(), false)?,
    };
    let moved = (|| {
        if k.folio_swap(f).is_some() {
            return Err(Errno::EBUSY);
        }
        let inode = match f.test_anon() {
            true => None,
            false => Some(mmlist.inode(f.head().link.load(Relaxed)).ok_or(Errno::EBUSY)?),
        };
        let hugetlb_lock = match is_hugetlb(f) {
            true => Some(f.trylock().ok_or(Errno::EAGAIN)?),
            false => None,
        };
        if let Some(inode) = inode.as_ref().filter(|_| hugetlb_lock.is_some()) {
            hugetlb::unshare_for_migration(k, mmlist, inode, f)?;
        }
        let hugetlb = hugetlb_lock.is_some();
        let lock_cache = || inode.as_ref().map(|i| i.pages.lock().unwrap());
        let in_file = |c: &Option<MutexGuard<PageCache>>| c.as_ref().is_none_or(|c| c.get(&f.index()) == Some(&f.pfn));
        let mut early = if hugetlb { None } else { lock_cache() };
        if !in_file(&early) {
            return Err(Errno::EBUSY);
        }
        let cache_refs = if inode.is_some() { crate::shmem::cache_refs(f) } else { 0 };
        let lock = match hugetlb_lock {
            Some(lock) => lock,
            None => f.trylock().ok_or(Errno::EAGAIN)?,
        };
        let mapped = with_mappings(k, mmlist, f, false, |maps| {
            let mut late = if hugetlb { lock_cache() } else { None };
            let cache = if hugetlb { &mut late } else { &mut early };
            if !in_file(cache) {
                return Err(Errno::EBUSY);
            }
            if hugetlb && maps.iter().any(|m| pt_share_count(&k.phys, m.table).load(Relaxed) > 0) {
                return Err(Errno::EAGAIN);
            }
            let mapcount = rmap::folio_mapcount(k, f);
            if maps.len() as u64 != mapcount || f.refcount() as u64 != mapcount + 1 + cache_refs as u64 {
                return Err(Errno::EAGAIN);
            }
            move_mapped(k, f, dst, maps);
            if let Some(cache) = cache.as_mut() {
                (0..f.nr_pages()).for_each(|i| _ = cache.insert(f.index() + i, dst.pfn + i));
                dst.ref_add(cache_refs);
            }
            Ok(maps.len() as i32)
        })?;
        if f.test_ksm() {
            // ksm_migrate_folio(): the stable node names the new frame.
            mmlist.ksm.stable.set_kpfn(f.head().link.load(Relaxed), dst.pfn);
        }
        drop(lock);
        Ok(mapped + cache_refs)
    })();
    match moved {
        Ok(refs) => {
            count_moved(k, f);
            if is_hugetlb(f) {
                hugetlb::move_hugetlb_state(k, f, dst);
            }
            f.head().link.store(0, Relaxed);
            k.folio_put_refs(f, refs + 1);
            k.folio_put_refs(dst, 1);
            Ok(())
        }
        Err(e) => {
            k.folio_put_refs(dst, 1);
            Err(e)
        }
    }
}

/// The move under every table's lock, in Linux's order: each mapping
/// cleared (its latest accessed and dirty bits taken with it,
/// `ptep_get_and_clear`) and its TLB entries shot down, as `try_to_migrate`
/// does, so that no CPU writes to `f` any more; then the bytes and flags
/// copied (`folio_migrate_copy`, `folio_migrate_flags`); then each mapping
/// installed on `dst` with its bits and its page's AnonExclusive
/// (`remove_migration_pte`). A fault meeting a cleared entry waits for the
/// table's lock and finds the new one. `dst` joins the LRU, unless hugetlb.
fn move_mapped(k: &Kernel, f: Folio, dst: Folio, maps: &[Mapping]) {
    let phys = &k.phys;
    let cleared: Vec<Pte> = maps.iter().map(|m| take(phys, m.table, m.idx)).collect();
    // One shootdown per MM over the span it maps (`try_to_unmap_flush`).
    let mut spans: Vec<(&Mm, u64, u64)> = Vec::new();
    for m in maps {
        let end = m.addr + if m.level == Level::Pmd { f.nr_pages() * PAGE_SIZE } else { PAGE_SIZE };
        match spans.iter_mut().find(|(mm, ..)| std::ptr::eq(*mm, m.mm)) {
            Some((_, start, stop)) => (*start, *stop) = ((*start).min(m.addr), (*stop).max(end)),
            None => spans.push((m.mm, m.addr, end)),
        }
    }
    for (mm, start, end) in spans {
        mm.tlb.flush_range(&k.stats, start, end);
    }
    for i in 0..f.nr_pages() {
        phys.copy_frame(dst.pfn + i, f.pfn + i);
    }
    let kept = pg::ANON | pg::KSM | pg::SWAPBACKED | pg::DIRTY | pg::UPTODATE | pg::REFERENCED;
    dst.head().set(f.head().flags.load(Relaxed) & kept);
    dst.head().link.store(f.head().link.load(Relaxed), Relaxed);
    dst.set_index(f.index());
    for (m, old) in maps.iter().zip(cleared) {
        let exclusive = f.anon_exclusive(m.page);
        let nr = if m.level == Level::Pmd { f.nr_pages() } else { 1 };
        rmap::folio_remove_rmap(k, f, m.page, nr, m.level, m.mm.rmap);
        match m.level {
            _ if !f.test_anon() => rmap::folio_add_file_rmap(k, dst, m.page, nr, m.level, m.mm.rmap),
            Level::Pte => rmap::folio_add_anon_rmap_ptes(k, dst, m.page, 1, m.mm.rmap, exclusive),
            Level::Pmd => rmap::folio_add_anon_rmap_pmd(k, dst, m.mm.rmap, exclusive),
        }
        dst.ref_add(1);
        // remove_migration_pte(): the entry's dirty bit comes back through
        // pte_mkdirty, soft-dirty with it.
        let dirty = if old.dirty() { Pte::MKDIRTY } else { 0 };
        store(phys, m.table, m.idx, Pte::new(dst.pfn + m.page, old.0 & !Pte::PFN_MASK).with(dirty));
    }
    if !is_hugetlb(dst) {
        k.folio_add_lru(dst);
    }
}
