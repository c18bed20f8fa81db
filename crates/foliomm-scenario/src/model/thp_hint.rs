//! Why an anonymous page sits in a smaller folio than the THP settings
//! allow for its VMA, when the VMA itself is the reason: the naturally
//! aligned block of the allowed size around the page does not fit in the
//! VMA (a mapping that is not aligned, or too short), so the fault could
//! not use that order (`thp_vma_suitable_order` in `alloc_anon_folio` and
//! `do_huge_pmd_anonymous_page`).

use foliomm::internals::mm::PageInfo;
use foliomm::internals::mm_types::vm;
use foliomm::{Machine, Mm};

/// The largest order the THP settings allow for the VMA at `addr` whose
/// aligned block around `addr` does not fit in the VMA, if the page is an
/// anonymous one in a smaller folio; 0 otherwise (also when the block fits
/// and the fault fell back for another reason: no free block, pages
/// already mapped in it).
pub(super) fn order_the_vma_missed(m: &Machine, mm: &Mm, addr: u64, page: &PageInfo) -> u32 {
    if !page.present || !page.anon || page.zero_page {
        return 0;
    }
    let vmas = mm.vmas();
    let Some(vma) = vmas.iter().find(|v| v.start() <= addr && addr < v.end()) else { return 0 };
    let flags = vma.flags();
    let allowed = m.thp.allowable_orders(flags & vm::HUGEPAGE != 0, flags & vm::NOHUGEPAGE != 0);
    let Some(order) = (0..32u32).rev().find(|o| allowed & (1 << o) != 0) else { return 0 };
    let size = 4096u64 << order;
    let block = addr & !(size - 1);
    let fits = block >= vma.start() && block + size <= vma.end();
    if order > page.folio_order && !fits {
        order
    } else {
        0
    }
}
