//! hugetlb invariants: every shared PMD table is reached by exactly one MM
//! more than its `pt_share_count`; the huge page pool's counts match the
//! hugetlb folios that exist, free and in use.

use std::collections::{BTreeSet, HashMap};

use super::{Subject, Violation, ViolationKind::Allocator, ViolationKind::PageTable};
use crate::arch::Pfn;
use crate::kernel::{HugeSize, Kernel};
use crate::pgtable::pt_share_count;
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
/// freed: the reserved count, which may have wrapped below zero by up to
/// that many (Linux's own accounting), fits in the free pages once they are.
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
    if c.resv.wrapping_add(restoring) > c.free {
        push(format!("{} {name} huge pages reserved, only {} free", c.resv as i64, c.free));
    }
}
