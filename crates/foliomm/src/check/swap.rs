//! Swap invariants: every swap entry lies in a private VMA that has an
//! anon_vma; `MM_SWAPENTS` counts an MM's swap entries; each slot's swap
//! count is the number of swap entries naming it, and an exclusive entry
//! names a slot nothing else names; a slot in use is named or cached, and a
//! cached slot's frame is a folio in the swap cache.

use std::collections::BTreeMap;

use super::{Subject, Violation, ViolationKind::*};
use crate::arch::{Pte, SwpEntry};
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::MmId;
use crate::mm_types::{Mm, Vmas};
use crate::phys::pg;
use crate::shmem::Inode;
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::Arc;

/// One swap entry found by the walk.
pub(super) struct SwapLeaf {
    pub mm: MmId,
    pub addr: u64,
    pub pte: Pte,
}

/// Checks the swap entries of `mm` (its part of `leaves`) against its VMAs
/// and `MM_SWAPENTS`.
pub(super) fn check_mm_swap(mm: &Mm, vmas: &Vmas, leaves: &[SwapLeaf], bad: &mut Vec<Violation>) {
    for l in leaves {
        let at = Subject::Mm { mm: l.mm, addr: Some(l.addr) };
        match vmas.find(l.addr) {
            Some(v) if !v.shared() && v.anon_vma() != 0 => {}
            _ => bad.push(Violation::new(
                Swap,
                at,
                format!("mm {}: swap entry at {:#x} outside a private VMA with an anon_vma", l.mm, l.addr),
            )),
        }
    }
    let have = mm.rss_swap.load(Relaxed);
    if have != leaves.len() as i64 {
        let what = format!("mm {}: MM_SWAPENTS is {have}, page tables hold {} swap entries", mm.id, leaves.len());
        bad.push(Violation::new(Rss, Subject::Mm { mm: mm.id, addr: None }, what));
    }
}

/// Checks the swap device's counts and cache against every swap entry:
/// those of page tables and those shmem page caches hold for pages
/// swapped out (one name each, never exclusive).
pub(super) fn check_swap_map(m: &Kernel, leaves: &[SwapLeaf], inodes: &[Arc<Inode>], bad: &mut Vec<Violation>) {
    let mut named: BTreeMap<SwpEntry, (u32, bool)> = BTreeMap::new();
    for l in leaves {
        let n = named.entry(l.pte.swp_entry()).or_default();
        n.0 += 1;
        n.1 |= l.pte.swp_exclusive();
    }
    for (_, e) in inodes.iter().flat_map(|i| i.swapped()) {
        named.entry(e).or_default().0 += 1;
    }
    let Some(dev) = m.swap.as_ref() else {
        if let Some(l) = leaves.first() {
            let what = format!("mm {}: swap entry at {:#x} without a swap device", l.mm, l.addr);
            bad.push(Violation::new(Swap, Subject::Mm { mm: l.mm, addr: Some(l.addr) }, what));
        }
        return;
    };
    let mut push = |what: String| bad.push(Violation::new(Swap, Subject::Machine, what));
    let used = dev.slots_in_use();
    for &(offset, count, cached) in &used {
        let e = SwpEntry { kind: 0, offset };
        let (n, exclusive) = named.remove(&e).unwrap_or_default();
        if n != count {
            push(format!("swap slot {offset}: swap count {count}, {n} swap entries name it"));
        }
        if exclusive && n != 1 {
            push(format!("swap slot {offset}: named by an exclusive entry and {} more", n - 1));
        }
        match cached {
            None if count == 0 => push(format!("swap slot {offset}: in use but neither named nor cached (leak)")),
            Some(pfn) => {
                let f = Folio::containing(&m.phys, pfn);
                // Not anon yet if a fault read it in and then found its
                // entry gone (as Linux's readahead leaves a folio).
                let swap = f.head().test(pg::SWAPCACHE) && f.head().test(pg::SWAPBACKED);
                let ok = f.refcount() > 0 && swap;
                let holds = m.folio_swap(f).map(|s| s.offset + (pfn - f.pfn));
                if !ok || holds != Some(offset) {
                    let (refs, order, cache) = (f.refcount(), f.order(), f.head().test(pg::SWAPCACHE));
                    push(format!(
                        "swap slot {offset}: cached by frame {pfn:#x}, which is not its swap-cache folio \
                         (order {order}, {refs} references, swap cache {cache}, holding slot {holds:?})"
                    ));
                }
            }
            None => {}
        }
    }
    for (e, (n, _)) in named {
        push(format!("swap slot {}: free, yet {n} swap entries name it", e.offset));
    }
}

/// The references the swap cache holds on `f` (one per page), if it holds it.
pub(super) fn cache_refs(f: Folio) -> Option<u64> {
    f.head().test(pg::SWAPCACHE).then(|| f.nr_pages())
}
