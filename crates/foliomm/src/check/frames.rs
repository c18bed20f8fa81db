//! Every frame accounted for: free (in exactly one free block and used by
//! nothing), a zero page, a reachable page table, a mapped folio, or a
//! folio something else holds (a page cache, the swap cache, a pin, the
//! hugetlb pool); free + allocated = total.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{check_references, held_by_caches, hugetlb, Ledger, Subject, Violation, ViolationKind::*};
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::kernel::{HugeSize, Kernel};
use crate::mapcount::FolioTruth;
use crate::phys::pg;

/// The free blocks sorted by start, and how many frames they hold; a frame
/// in two blocks, or a total the zone does not count, is a violation.
fn free_blocks(m: &Kernel, bad: &mut Vec<Violation>) -> (Vec<(Pfn, u32)>, u64) {
    let mut blocks = m.phys.free_blocks();
    blocks.sort_unstable();
    let (mut nr_free, mut end_of_free) = (0, 0);
    for &(pfn, order) in &blocks {
        if pfn < end_of_free {
            bad.push(Violation::new(Allocator, Subject::Frame(pfn), format!("frame {pfn:#x} is in two free blocks")));
        }
        end_of_free = end_of_free.max(pfn + (1 << order));
        nr_free += 1 << order;
    }
    if nr_free != m.phys.nr_free() {
        let what = format!("free lists hold {nr_free} frames, the zone counts {}", m.phys.nr_free());
        bad.push(Violation::new(Allocator, Subject::Machine, what));
    }
    (blocks, nr_free)
}

/// Checks an allocated folio that no page table maps: a free huge page
/// (refcount 0), a folio of a page cache or the swap cache (their
/// references, `held`), a folio a pin keeps alive after its last unmap,
/// or else a leak.
pub(super) fn check_unmapped(ledger: &Ledger, f: Folio, free_huge: bool, held: Option<u64>, bad: &mut Vec<Violation>) {
    let pfn = f.pfn;
    if free_huge {
        if f.refcount() != 0 {
            let what = format!("free huge page {pfn:#x} has refcount {}", f.refcount());
            bad.push(Violation::new(Refcount, Subject::Folio(pfn), what));
        }
    } else if let Some(refs) = held {
        check_references(ledger, f, refs, bad);
    } else if ledger.gups_of(pfn) != (0, 0) {
        check_references(ledger, f, 0, bad);
    } else {
        let what = format!("folio {pfn:#x} (order {}) is allocated but mapped nowhere (leak)", f.order());
        bad.push(Violation::new(Leak, Subject::Folio(pfn), what));
    }
}

pub(super) fn check_frames(
    m: &Kernel,
    ledger: &Ledger,
    truth: &BTreeMap<Pfn, FolioTruth>,
    cached: &HashMap<Pfn, (u64, u64)>,
    tables: &BTreeSet<Pfn>,
    bad: &mut Vec<Violation>,
) {
    let phys = &m.phys;
    let n = phys.nr_frames();
    // The free blocks by start, so the walk below skips them whole: its
    // cost grows with what is allocated, not with the size of model RAM.
    let (free_blocks, nr_free) = free_blocks(m, bad);
    let zero: BTreeSet<Pfn> = m.zero_frames().collect();
    let mut pfn = 0;
    let mut allocated = 0;
    // Per huge page size (in the order of HugeSize::ALL): folios, free
    // ones, ones in use that will restore a reservation when freed.
    let mut hugetlb = [[0u64; 3]; 2];
    let mut next_free = free_blocks.iter().peekable();
    while pfn < n {
        if let Some(&&(start, order)) = next_free.peek().filter(|(start, _)| *start <= pfn) {
            next_free.next();
            let end = start + (1 << order);
            let in_use = tables.range(start..end).chain(truth.range(start..end).map(|(p, _)| p)).next();
            if let Some(used) = in_use {
                bad.push(Violation::new(
                    Allocator,
                    Subject::Frame(*used),
                    format!("frame {used:#x} is free but in use"),
                ));
            }
            pfn = pfn.max(end);
            continue;
        }
        let p = phys.page(pfn);
        if zero.contains(&pfn) {
            allocated += 1;
            pfn += 1;
            continue;
        }
        if p.test(pg::TABLE) {
            if !tables.contains(&pfn) {
                let what = format!("page table {pfn:#x} is allocated but reachable from no MM (leak)");
                bad.push(Violation::new(Leak, Subject::Frame(pfn), what));
            }
            allocated += 1;
            pfn += 1;
            continue;
        }
        let f = Folio::from_head(phys, pfn);
        if p.test(pg::TAIL) {
            let what = format!("frame {pfn:#x} is a tail page without its head");
            bad.push(Violation::new(Allocator, Subject::Frame(pfn), what));
            pfn += 1;
            continue;
        }
        hugetlb::check_vmemmap(m, f, p.test(pg::HUGETLB), bad);
        let huge_size = HugeSize::of_order(f.order()).filter(|_| p.test(pg::HUGETLB));
        if let Some(size) = huge_size {
            hugetlb[size as usize][0] += 1;
            hugetlb[size as usize][2] += p.test(pg::HUGETLB_RESTORE_RESERVE) as u64;
        }
        if !truth.contains_key(&pfn) {
            let free_huge = huge_size.filter(|_| m.is_free_huge_page(pfn));
            if let Some(size) = free_huge {
                hugetlb[size as usize][1] += 1;
            }
            check_unmapped(ledger, f, free_huge.is_some(), held_by_caches(m, f, cached), bad);
        }
        allocated += f.nr_pages();
        pfn += f.nr_pages();
    }
    for size in HugeSize::ALL {
        hugetlb::check_pool(m, size, hugetlb[size as usize], bad);
    }
    if allocated + nr_free != n {
        let what = format!("{allocated} allocated + {nr_free} free frames != {n} total");
        bad.push(Violation::new(Allocator, Subject::Machine, what));
    }
}
