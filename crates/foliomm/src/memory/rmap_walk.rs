//! The rmap walk and what reclaim does with it (mm/rmap.c
//! `rmap_walk_anon`, `rmap_walk_file`, `page_vma_mapped_walk`, `try_to_unmap` /
//! `try_to_unmap_one`, `folio_referenced` / `folio_referenced_one`).
//!
//! From an anon folio's `folio->mapping` the walk finds its anon_vma, and
//! in its tree every VMA that may map the folio (its own, and fork
//! children's, whose chains link them there); in each, the addresses of
//! the folio's pages follow from `folio->index` and the VMA's `vm_pgoff`
//! (`vma_address`), and the page tables there say whether they map it.
//! A page-cache folio's walk goes through its file's `i_mmap` instead.
//!
//! Differs from Linux: the anon_vma's tree is scanned, not searched; the
//! walk holds the anon_vma's lock for read as Linux does, and the MM's
//! table read section instead of the VMA (the tree's record stands for it);
//! an MM whose last reference went meanwhile is passed over.

use super::huge_memory::split_huge_pmd;
use crate::arch::{pmd_addr_end, pte_index, Pfn, Pte, SwpEntry, PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::Level;
use crate::mm_types::{vm, Mm, MmList};
use crate::pgtable::{load, pte_lock_checked, pte_lockptr, store, walk_pmd, PmdSlot};
use crate::rmap::{self, VmaRecord};

/// `rmap_walk_anon` / `rmap_walk_file` / `rmap_walk_ksm`: calls `visit` with the MM, the
/// VMA's record and the address range `[start, end)` of it that holds page
/// indexes of `f`, for each VMA linked to `f`'s anon_vma (or, for a
/// page-cache folio, in its file's `i_mmap`), in link order, until `visit`
/// returns false. Visits nothing if the anon_vma or the file is gone
/// (nothing maps the folio).
pub fn rmap_walk(mmlist: &MmList, f: Folio, mut visit: impl FnMut(&Mm, &VmaRecord, u64, u64) -> bool) {
    let link = f.head().link.load(crate::sync::atomic::Ordering::Relaxed);
    if f.test_ksm() {
        // rmap_walk_ksm(), each anon_vma's lock let go before the visits.
        for (rec, start, end) in mmlist.ksm.stable.walk_ranges(link) {
            let Some(mm) = mmlist.get(rec.mm) else { continue };
            let _tables = mm.pt_read();
            if !visit(&mm, &rec, start, end) {
                break;
            }
        }
        return;
    }
    let (av, inode);
    let tree = if f.test_anon() {
        let Some(a) = mmlist.anon_vma(link) else { return };
        av = a;
        av.tree.read()
    } else {
        let Some(i) = mmlist.inode(link) else { return };
        inode = i;
        inode.i_mmap.read()
    };
    for rec in tree.iter() {
        let Some((start, end)) = rec.addresses(f.index(), f.index() + f.nr_pages()) else { continue };
        let Some(mm) = mmlist.get(rec.mm) else { continue };
        let _tables = mm.pt_read();
        if !visit(&mm, rec, start, end) {
            break;
        }
    }
}

/// What maps a page at `addr` of `mm`: a huge PMD, or the PTE table (by
/// the PMD slot and the table's frame); None where nothing is there.
fn leaf(k: &Kernel, mm: &Mm, addr: u64) -> Option<(PmdSlot, Pte)> {
    let pmd = walk_pmd(&k.phys, mm.pgd, addr)?;
    let e = pmd.load(&k.phys);
    (!e.is_none()).then_some((pmd, e))
}

/// `try_to_unmap(folio, TTU_SPLIT_HUGE_PMD)` for reclaim of the locked
/// anon folio `f`, whose slots start at `e` (`None` for a lazily freed
/// folio, which is dropped instead): every mapping the rmap walk
/// finds goes, a huge PMD split first, each PTE replaced by the swap entry
/// of its page's slot, or cleared ([`try_to_unmap_one`]). A `VM_LOCKED` VMA found
/// mapping the folio stops the walk (`mlock_vma_folio`; the folio
/// stays). Returns true if nothing
/// maps the folio afterwards (`!folio_mapped`); the pages unmapped before a
/// failure stay swapped out, as in Linux.
pub fn try_to_unmap(k: &Kernel, mmlist: &MmList, f: Folio, e: Option<SwpEntry>) -> bool {
    let mut ok = true;
    rmap_walk(mmlist, f, |mm, rec, start, end| {
        let locked = rec.flags & vm::LOCKED != 0;
        let mut addr = start;
        while addr < end && ok {
            let p = (addr - rec.start) / PAGE_SIZE + rec.pgoff - f.index();
            match leaf(k, mm, addr) {
                Some((_, pmd)) if pmd.huge() && pmd.pfn() == f.pfn && !pmd.special() => {
                    if locked {
                        ok = false;
                        break;
                    }
                    // 6.12 on, a lazily freed THP goes without a split.
                    if e.is_none() && k.config.release().discards_lazyfree_pmd_whole() {
                        ok = super::rmap_lazyfree::discard_pmd(k, mm, addr, f);
                        addr = (addr & !(PMD_SIZE - 1)) + PMD_SIZE;
                        continue;
                    }
                    split_huge_pmd(k, mm, addr);
                    // A PMD that stays huge (remapped meanwhile) is passed over.
                    if leaf(k, mm, addr).is_some_and(|(_, e)| e.huge()) {
                        addr = (addr & !(PMD_SIZE - 1)) + PMD_SIZE;
                    }
                    continue;
                }
                Some((slot, pmd)) if !pmd.huge() => match e {
                    Some(e) => {
                        let page_slot = SwpEntry { offset: e.offset + p, ..e };
                        ok = try_to_unmap_one(k, mm, (slot, pmd.pfn()), addr, f, p, (page_slot, locked));
                    }
                    None => {
                        let max = (pmd_addr_end(addr, end) - addr) / PAGE_SIZE;
                        let nr;
                        (ok, nr) =
                            super::rmap_lazyfree::discard_ptes(k, mm, (slot, pmd.pfn()), addr, (f, p), locked, max);
                        addr += (nr.max(1) - 1) * PAGE_SIZE;
                    }
                },
                _ => {}
            }
            addr += PAGE_SIZE;
        }
        ok
    });
    ok && rmap::folio_mapcount(k, f) == 0
}

/// `try_to_unmap_one` for the PTE at `addr`, if it maps page `p` of the
/// anon folio `f`, whose slot is `e`: the entry is cleared and flushed, and
/// replaced by a swap entry naming the slot (`swap_duplicate`), exclusive
/// if the page was AnonExclusive (`folio_try_share_anon_rmap_pte` clears
/// that, and fails for a page that may be pinned: the entry is put back);
/// a dirty entry dirties the folio; the mapping's rmap and reference go.
/// False only if the page could not be shared, or the VMA is mlocked
/// (`locked`: nothing changes).
pub fn try_to_unmap_one(
    k: &Kernel,
    mm: &Mm,
    (pmd, table): (PmdSlot, Pfn),
    addr: u64,
    f: Folio,
    p: u64,
    (e, locked): (SwpEntry, bool),
) -> bool {
    let (phys, idx) = (&k.phys, pte_index(addr));
    let Some(_ptl) = pte_lock_checked(phys, pmd, table) else { return true };
    let pte = load(phys, table, idx);
    if !pte.present() || pte.special() || pte.pfn() != f.pfn + p {
        return true;
    }
    if locked {
        return false;
    }
    store(phys, table, idx, Pte::NONE);
    if pte.0 & Pte::DIRTY != 0 {
        f.head().set(crate::phys::pg::DIRTY);
    }
    mm.tlb.flush_range(&k.stats, addr, addr + PAGE_SIZE);
    let exclusive = f.anon_exclusive(p);
    if exclusive && f.maybe_dma_pinned() {
        store(phys, table, idx, pte);
        return false;
    }
    let dev = k.swap.as_ref().expect("a slot implies a device");
    dev.duplicate(e, 1);
    f.set_anon_exclusive(p, false);
    // try_to_unmap_one(): pte_swp_mksoft_dirty(), pte_swp_mkuffd_wp().
    store(phys, table, idx, Pte::swap(e, exclusive).with(pte.swp_bits_of()));
    mm.add_anon_rss(-1);
    mm.add_swap_rss(1);
    rmap::folio_remove_rmap(k, f, p, 1, Level::Pte, mm.rmap);
    f.put_refs(1);
    true
}

/// What `folio_referenced` found: the VMAs with young mappings of the
/// folio (their accessed bits now cleared) and whether an mlocked VMA maps
/// it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Referenced {
    pub vmas: u32,
    pub mlocked: bool,
}

/// `folio_referenced`: counts the VMAs in which the CPUs have accessed `f`
/// since the last look (`folio_referenced_one` counts a VMA once, however
/// many young entries it has) and clears the accessed bits
/// (`ptep_clear_flush_young`, flushing the page as the generic version
/// does; x86 leaves its TLB alone); `mlocked` if an mlocked VMA maps it.
pub fn folio_referenced(k: &Kernel, mmlist: &MmList, f: Folio) -> Referenced {
    let phys = &k.phys;
    let mut r = Referenced::default();
    rmap_walk(mmlist, f, |mm, rec, start, end| {
        let (mut young, mut mapped) = (false, false);
        let mut addr = start;
        while addr < end {
            let Some((slot, e)) = leaf(k, mm, addr) else {
                addr += PAGE_SIZE;
                continue;
            };
            let _ptl = pte_lockptr(phys, if e.huge() { slot.table } else { e.pfn() }).lock();
            if e.huge() {
                let now = slot.load(phys);
                mapped |= now.huge() && now.pfn() == f.pfn;
                if now.huge() && now.pfn() == f.pfn && now.0 & Pte::ACCESSED != 0 {
                    slot.store(phys, now.without(Pte::ACCESSED));
                    mm.tlb.flush_range(&k.stats, addr & !(PMD_SIZE - 1), (addr & !(PMD_SIZE - 1)) + PMD_SIZE);
                    young = true;
                }
                addr = (addr & !(PMD_SIZE - 1)) + PMD_SIZE;
                continue;
            }
            let (table, idx) = (e.pfn(), pte_index(addr));
            let pte = load(phys, table, idx);
            let here = pte.present() && !pte.special() && (f.pfn..f.pfn + f.nr_pages()).contains(&pte.pfn());
            let ours = slot.load(phys) == e && here;
            mapped |= ours;
            if ours && pte.0 & Pte::ACCESSED != 0 {
                store(phys, table, idx, pte.without(Pte::ACCESSED));
                mm.tlb.flush_range(&k.stats, addr, addr + PAGE_SIZE);
                young = true;
            }
            addr += PAGE_SIZE;
        }
        r.mlocked |= mapped && rec.flags & vm::LOCKED != 0;
        r.vmas += young as u32;
        true
    });
    r
}
