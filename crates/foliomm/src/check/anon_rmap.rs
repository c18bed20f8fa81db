//! The anon rmap and the LRU lists against the page tables: an rmap walk
//! from every mapped anon folio must reach every mapping of it
//! (`folio->mapping`'s anon_vma tree holds the VMA, and `folio->index`
//! with the VMA's `vm_pgoff` gives the address), and every mapped anon
//! folio, and every shmem folio in a page cache, is on exactly the LRU
//! list its flags say, as is every folio on a
//! list (at a quiescent point none is isolated); the deferred split queue
//! holds exactly the partially mapped large folios, once each.

use std::collections::{HashMap, HashSet};

use super::{Subject, Violation, ViolationKind::Rmap};
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::kernel::lru::LruList;
use crate::kernel::Kernel;
use crate::mm_types::{Mm, Vmas};
use crate::phys::pg;
use crate::shmem::Inode;
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::Arc;

/// Whether each (anon_vma, VMA) pair of one MM is linked (`None`: the
/// anon_vma is gone), found once for all the VMA's pages.
pub(super) type Links = HashMap<(u64, usize), Option<bool>>;

/// Checks that the walk from `f`, whose page `page` `mm` maps at `addr`,
/// finds that mapping.
pub(super) fn check_anon_mapping(
    mm: &Mm,
    vmas: &Vmas,
    (f, page, addr): (Folio, u64, u64),
    links: &mut Links,
    bad: &mut Vec<Violation>,
) {
    let at = Subject::Mm { mm: mm.id, addr: Some(addr) };
    let Some(v) = vmas.find(addr) else { return };
    let id = f.head().link.load(Relaxed);
    if f.test_ksm() {
        return check_ksm_mapping(mm, v.id(), (f, id, addr), at, bad);
    }
    let linked = *links.entry((id, v.id())).or_insert_with(|| {
        let av = mm.mmlist.anon_vma(id)?;
        let linked = av.tree.read().iter().any(|r| r.vma == v.id() && r.mm == mm.serial);
        Some(linked)
    });
    let Some(linked) = linked else {
        let what = format!("mm {}: {addr:#x} maps folio {:#x}, whose anon_vma {id} is gone", mm.id, f.pfn);
        return bad.push(Violation::new(Rmap, at, what));
    };
    let index = f.index() + page;
    let want = v.page_index(addr);
    if !linked || index != want {
        let what = format!(
            "mm {}: {addr:#x} maps page {page} of folio {:#x} (anon_vma {id}, index {index}): {}",
            mm.id,
            f.pfn,
            if linked {
                format!("the VMA puts index {want} there")
            } else {
                "the anon_vma's tree lacks the VMA".into()
            }
        );
        bad.push(Violation::new(Rmap, at, what));
    }
}

/// Checks that the KSM folio `f`, of stable node `id`, which `mm` maps at
/// `addr` in the VMA `vma`, is its node's frame and that `rmap_walk_ksm`
/// from the node reaches that mapping, unless ksmd has not yet recorded
/// the mapping as merged: a fork child's mapping is reached only through
/// its parent's rmap item until ksmd scans the child, and once the parent
/// let go of the page and ksmd dropped that item, not at all (Linux has
/// the same window: a walk then misses the mapping, and the folio cannot
/// be unmapped).
fn check_ksm_mapping(mm: &Mm, vma: usize, (f, id, addr): (Folio, u64, u64), at: Subject, bad: &mut Vec<Violation>) {
    let ksm = &mm.mmlist.ksm;
    let tree = &ksm.stable;
    let recorded = || ksm.scanned.lock().unwrap().get(&(mm.serial, addr)).is_some_and(|s| s.stable == Some(id));
    let what = match tree.get(id) {
        None => format!("mm {}: {addr:#x} maps KSM folio {:#x}, whose stable node {id} is gone", mm.id, f.pfn),
        Some(n) if n.kpfn != f.pfn => {
            format!("mm {}: {addr:#x} maps KSM folio {:#x}, but its stable node {id} names {:#x}", mm.id, f.pfn, n.kpfn)
        }
        Some(_) if tree.walk_ranges(id).iter().any(|(r, start, _)| (r.vma, r.mm, *start) == (vma, mm.serial, addr)) => {
            return
        }
        Some(_) if !recorded() => return,
        Some(_) => format!(
            "mm {}: {addr:#x} maps KSM folio {:#x}, merged there into node {id}, but no rmap item of the node reaches it",
            mm.id, f.pfn
        ),
    };
    bad.push(Violation::new(Rmap, at, what));
}

/// Checks the LRU lists against their folios' flags, and that every folio
/// of `mapped_anon` (the mapped anon folios, not hugetlb), every swap-cache
/// folio with no mapping, and every folio in a shmem file's page cache is
/// on one or waits in an LRU batch.
pub(super) fn check_lru(m: &Kernel, mapped_anon: &HashSet<Pfn>, inodes: &[Arc<Inode>], bad: &mut Vec<Violation>) {
    let mut listed = HashSet::new();
    for which in [LruList::Inactive, LruList::Active] {
        for pfn in m.lru.snapshot(&m.phys, which) {
            let head = m.phys.page(pfn);
            let active = which == LruList::Active;
            let ok = head.refcount.load(Relaxed) > 0
                && head.test(pg::LRU)
                && head.test(pg::ACTIVE) == active
                && !head.test(pg::TAIL)
                && listed.insert(pfn);
            if !ok {
                let what = format!("folio {pfn:#x} on the {which:?} list with flags {:#x}", head.flags.load(Relaxed));
                bad.push(Violation::new(Rmap, Subject::Folio(pfn), what));
            }
        }
    }
    // A folio waiting in a CPU's LRU batch is on no list yet (or no more).
    let listed_or_waiting = |p: &Pfn| listed.contains(p) || m.lru_batch_refs(*p) > 0;
    for &pfn in mapped_anon.iter().filter(|p| !listed_or_waiting(p)) {
        let what = format!("mapped anon folio {pfn:#x} is on no LRU list");
        bad.push(Violation::new(Rmap, Subject::Folio(pfn), what));
    }
    // A swap-cache folio with no mapping (one a swap-in read and nothing
    // mapped joined the LRU as it was read).
    let cached = m.swap.as_ref().map(|d| d.slots_in_use()).unwrap_or_default();
    let read_in = cached.iter().filter_map(|&(_, _, pfn)| pfn).map(|p| Folio::containing(&m.phys, p));
    let read_in: HashSet<Pfn> = read_in.filter(|&f| m.unmapped_swapcache(f)).map(|f| f.pfn).collect();
    for pfn in read_in.into_iter().filter(|p| !listed_or_waiting(p)) {
        let what = format!("swap-cache folio {pfn:#x} with no mapping is on no LRU list");
        bad.push(Violation::new(Rmap, Subject::Folio(pfn), what));
    }
    for inode in inodes.iter().filter(|i| !i.is_hugetlbfs()) {
        let heads: HashSet<Pfn> = inode.cached().iter().map(|&(_, p)| Folio::containing(&m.phys, p).pfn).collect();
        for pfn in heads.into_iter().filter(|p| !listed_or_waiting(p)) {
            let what = format!("shmem folio {pfn:#x} of inode {} is on no LRU list", inode.ino);
            bad.push(Violation::new(Rmap, Subject::Folio(pfn), what));
        }
    }
    let queued = m.deferred_split_snapshot();
    let mut seen = HashSet::new();
    for &pfn in &queued {
        let f = Folio::from_head(&m.phys, pfn);
        let ok = !m.phys.page(pfn).test(pg::TAIL) && f.is_large() && f.page(1).test(pg::DEFERRED);
        if !ok || !seen.insert(pfn) {
            let what = format!(
                "folio {pfn:#x} on the deferred split queue is not a large folio marked queued, or is there twice"
            );
            bad.push(Violation::new(Rmap, Subject::Folio(pfn), what));
        }
    }
    for &pfn in mapped_anon.iter().filter(|p| !seen.contains(p)) {
        let f = Folio::from_head(&m.phys, pfn);
        if f.is_large() && f.page(1).test(pg::PARTIALLY_MAPPED | pg::DEFERRED) {
            let what = format!("folio {pfn:#x}, partially mapped or marked queued, is not on the deferred split queue");
            bad.push(Violation::new(Rmap, Subject::Folio(pfn), what));
        }
    }
}
