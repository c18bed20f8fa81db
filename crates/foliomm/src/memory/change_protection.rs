//! mm/mprotect.c `change_protection`: a VMA's new protection applied to its
//! entries. In a private mapping write permission is granted only to
//! AnonExclusive pages (`can_change_pte_writable`); in a shared writable
//! one to every page, as its `vm_page_prot` is writable (shmem and
//! hugetlbfs want no write notification: `vma_wants_writenotify` is false
//! unless soft-dirty tracking wants it), so a later write dirties only the
//! PTE, not the folio. PROT_NONE entries
//! lose PRESENT and gain PROTNONE (`pte_modify`).

use crate::arch::{pmd_addr_end, pte_index, pud_addr_end, Pfn, Pte, PAGE_SIZE};
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mm_types::{Mm, Vma};
use crate::pgtable::{huge_pud, load, pte_lockptr, store, walk_pmd};
use crate::phys::PhysMem;
use crate::tlb::MmuGather;

/// `change_protection` over one VMA whose flags were just changed. Returns
/// whether any entry changed (the caller then flushes the TLB).
pub(crate) fn change_protection(k: &Kernel, mm: &Mm, vma: &Vma) -> bool {
    let phys = &k.phys;
    let mut changed = false;
    let (start, end) = (vma.start(), vma.end());
    let mut addr = start;
    let mut tlb = MmuGather::new(k, &mm.tlb, false);
    while addr < end {
        // hugetlb_change_protection(): a shared PMD table is let go of; the
        // pages refault with the new protection.
        if vma.is_hugetlb() && super::hugetlb::huge_pmd_unshare(k, mm, &mut tlb, addr) {
            addr = pud_addr_end(addr, end);
            changed = true;
            continue;
        }
        let next = pmd_addr_end(addr, end);
        let Some(pmd) = walk_pmd(phys, mm.pgd, addr) else {
            // No PMD table: nothing there, or a 1 GiB hugetlb page.
            if let Some(pud) = huge_pud(phys, mm.pgd, addr) {
                changed |= super::huge_memory::change_huge_pmd(k, pud, vma).unwrap_or(false);
                addr = pud_addr_end(addr, end);
                continue;
            }
            addr = next;
            continue;
        };
        let mut e = pmd.load(phys);
        if e.huge() {
            match super::huge_memory::change_huge_pmd(k, pmd, vma) {
                Some(c) => {
                    changed |= c;
                    addr = next;
                    continue;
                }
                // Split meanwhile: its PTEs change instead.
                None => e = pmd.load(phys),
            }
        }
        if !e.is_none() && !e.huge() {
            let table = e.pfn();
            let _ptl = pte_lockptr(phys, table).lock();
            let n = change_pte_range_batched(
                k,
                table,
                addr,
                next,
                |_| false,
                |p| {
                    if !p.present() {
                        return p;
                    }
                    let can_write =
                        can_change_writable(k, vma, p, || {
                            let f = Folio::containing(phys, p.pfn());
                            f.anon_exclusive(p.pfn() - f.pfn)
                        }) && (vma.shared() || p.dirty() || k.config.release().mprotect_writes_clean_private());
                    p.modify_prot(vma.readable(), vma.writable() && can_write)
                },
            );
            changed |= n > 0;
        }
        addr = next;
    }
    changed
}

/// [`change_pte_range`] as mprotect, NUMA hinting and uffd-wp run it: the
/// entries `skipped` says to leave alone (`prot_numa_skip`) stay as they
/// are; the others become `f(entry)`, and from 6.17 (`mprotect_batches_ptes`)
/// a present one reaches `f` with its batch's young and dirty bits
/// ([`batch_bits`]), as `modify_prot_start_ptes` hands them to every entry
/// of the batch; before, each entry alone.
pub(crate) fn change_pte_range_batched(
    k: &Kernel,
    table: Pfn,
    addr: u64,
    next: u64,
    skipped: impl Fn(Pte) -> bool,
    mut f: impl FnMut(Pte) -> Pte,
) -> u64 {
    let phys = &k.phys;
    let batched = k.config.release().mprotect_batches_ptes().then(|| batch_bits(phys, table, addr, next));
    let mut at = 0;
    change_pte_range(phys, table, addr, next, |p| {
        at += 1;
        match &batched {
            _ if skipped(p) => p,
            Some(b) if p.present() => f(p.with(b[at - 1])),
            _ => f(p),
        }
    })
}

/// The young and dirty bits each entry of `[addr, next)` takes from its
/// batch: from 6.17 `change_pte_range` changes the PTEs that map
/// consecutive pages of one large folio with the same write and soft-dirty
/// bits at once (`mprotect_folio_pte_batch`), and `modify_prot_start_ptes`
/// hands their young and dirty bits, OR'ed, to every entry of the batch.
fn batch_bits(phys: &PhysMem, table: Pfn, addr: u64, next: u64) -> Vec<u64> {
    let n = ((next - addr) / PAGE_SIZE) as usize;
    let ptes: Vec<Pte> = (0..n).map(|i| load(phys, table, pte_index(addr) + i)).collect();
    let entry = |i: usize| ptes[i];
    let same = |p: Pte, q: Pte| (p.0 ^ q.0) & (Pte::RW | Pte::SOFT_DIRTY) == 0;
    let mut bits = vec![0; n];
    let mut i = 0;
    while i < n {
        let p = entry(i);
        let f = (p.present() && !p.special()).then(|| Folio::containing(phys, p.pfn())).filter(|f| f.is_large());
        let end = f.map_or(p.pfn() + 1, |f| f.pfn + f.nr_pages());
        let mut j = i + 1;
        while f.is_some() && j < n && entry(j).present() && entry(j).pfn() == p.pfn() + (j - i) as u64 {
            if entry(j).pfn() >= end || !same(p, entry(j)) {
                break;
            }
            j += 1;
        }
        let or = (i..j).fold(0, |a, k| a | (entry(k).0 & (Pte::DIRTY | Pte::ACCESSED)));
        bits[i..j].fill(or);
        i = j;
    }
    bits
}

/// `can_change_pte_writable` (and `can_change_pmd_writable`): whether an
/// entry of `vma` may become writable without a write fault. Never a zero
/// page, one userfaultfd write-protects, or one soft-dirty tracking waits
/// to see written (`pte_needs_soft_dirty_wp`); in a private mapping only an
/// AnonExclusive page (`exclusive`, asked only there); in a shared one
/// every page, unless tracking wants write notification
/// (`vma_wants_writenotify`): then only a dirty one.
pub(crate) fn can_change_writable(k: &Kernel, vma: &Vma, e: Pte, exclusive: impl FnOnce() -> bool) -> bool {
    let tracked = k.config.soft_dirty && !k.config.debug.soft_dirty_unchecked;
    let allowed = match vma.shared() {
        true => !vma.soft_dirty_enabled(tracked) || e.dirty(),
        false => exclusive(),
    };
    !e.special() && !e.uffd_wp() && !vma.needs_soft_dirty_wp(tracked, e.any_soft_dirty()) && allowed
}

/// The loop of `change_pte_range` that mprotect, NUMA hinting
/// (`MM_CP_PROT_NUMA`) and uffd-wp (`MM_CP_UFFD_WP`) share: each entry of
/// the PTE table `table` in `[addr, next)` becomes `f(entry)`. The caller
/// holds the table's lock; where the kernel passes `cp_flags`, the caller
/// passes its per-entry rule. Returns how many entries changed.
pub(crate) fn change_pte_range(phys: &PhysMem, table: Pfn, addr: u64, next: u64, mut f: impl FnMut(Pte) -> Pte) -> u64 {
    let mut changed = 0;
    for a in (addr..next).step_by(PAGE_SIZE as usize) {
        let p = load(phys, table, pte_index(a));
        let n = f(p);
        if n != p {
            store(phys, table, pte_index(a), n);
            changed += 1;
        }
    }
    changed
}
