//! hugetlb invariants: every shared PMD table is reached by exactly one MM
//! more than its `pt_share_count`; the huge page pool's counts match the
//! hugetlb folios that exist, free and in use; an optimized memmap (HVO)
//! belongs to a hugetlb folio and still reads as its plain tails.

use std::collections::{BTreeSet, HashMap};

use super::{Subject, Violation, ViolationKind::Allocator, ViolationKind::PageTable};
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::kernel::{HugeSize, Kernel};
use crate::pgtable::pt_share_count;
use crate::phys::{pg, KEPT_DESCRIPTORS};
use crate::sync::atomic::Ordering::Relaxed;

/// Checks the share count of every table walked against `shared`, the
/// number of MMs that reached each table reached more than once.
pub(super) fn check_shared_tables(
    m: &Kernel,
    tables: &BTreeSet<Pfn>,
    shared: &HashMap<Pfn, i32>,
    bad: &mut Vec<Violation>,
) {
    for &t in tables {
        let count = pt_share_count(&m.phys, t).load(Relaxed);
        let reached = shared.get(&t).copied().unwrap_or(1);
        if reached != count + 1 {
            let what = format!("PMD table {t:#x}: share count {count}, reached from {reached} MM(s)");
            bad.push(Violation::new(PageTable, Subject::Frame(t), what));
        }
    }
}

/// Checks the counts of the pool of `size` against the `folios` hugetlb
/// folios of that size found in memory, `free` of them on the free list,
/// `restoring` of them in use and marked to give a reservation back when
/// freed: the reserved count fits in the free pages, and is below zero
/// (Linux's own accounting wraps it) by no more than the pages that will
/// give a reservation back. A pending give-back is not counted against the
/// free pages: shrinking the pool (`set_max_huge_pages`) does not either.
pub(super) fn check_pool(m: &Kernel, size: HugeSize, [folios, free, restoring]: [u64; 3], bad: &mut Vec<Violation>) {
    let c = m.huge_counts(size);
    let name = size.name();
    let mut push = |what: String| bad.push(Violation::new(Allocator, Subject::Machine, what));
    if c.total != folios {
        push(format!("the {name} huge page pool counts {} pages, memory holds {folios} such hugetlb folios", c.total));
    }
    if c.free != free {
        push(format!("the {name} huge page pool counts {} free pages, {free} such hugetlb folios are free", c.free));
    }
    let resv = c.resv as i64;
    if resv > c.free as i64 {
        push(format!("{resv} {name} huge pages reserved, only {} free", c.free));
    }
    if resv < -(restoring as i64) {
        push(format!("{resv} {name} huge pages reserved: below zero by more than the {restoring} pages to restore"));
    }
}

/// Checks the memmap of folio `f`, `hugetlb` or not: if it is optimized,
/// the descriptor that stands for every tail past the kept page must be a
/// plain tail of `f` with no reference, no mapping and no link (its
/// other words are left from earlier use, as on every tail; a write through it
/// would change every such tail at once; in Linux it faults on the
/// read-only alias), and `f` must be hugetlb (a folio leaving the pool gets
/// its memmap back first).
pub(super) fn check_vmemmap(m: &Kernel, f: Folio, hugetlb: bool, bad: &mut Vec<Violation>) {
    if !m.phys.vmemmap_optimized(f.pfn) {
        return;
    }
    let pfn = f.pfn;
    if !hugetlb {
        let what = format!("folio {pfn:#x} is not hugetlb, yet its memmap is still optimized");
        return bad.push(Violation::new(Allocator, Subject::Folio(pfn), what));
    }
    let kept = m.phys.page(pfn + f.nr_pages() - 1);
    let (flags, head) = (kept.flags.load(Relaxed), kept.compound.load(Relaxed));
    let (refs, mapcount, link) = (kept.refcount.load(Relaxed), kept.mapcount.load(Relaxed), kept.link.load(Relaxed));
    if flags != pg::TAIL || head != pfn || refs != 0 || mapcount != -1 || link != 0 {
        let what = format!(
            "hugetlb folio {pfn:#x}: its optimized memmap's shared tail descriptor (page {}) reads flags {flags:#x}, \
             head {head:#x}, refcount {refs}, raw mapcount {mapcount}, link {link:#x}; a plain tail of the folio \
             was expected",
            KEPT_DESCRIPTORS - 1
        );
        bad.push(Violation::new(Allocator, Subject::Folio(pfn), what));
    }
}
