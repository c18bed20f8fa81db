//! Page-table range operations of mm/memory.c, mm/mprotect.c and mm/mremap.c:
//! zap (`unmap_page_range` → `zap_pte_range` → `zap_present_ptes`), fork's
//! `copy_page_range` with PTE batches, `free_pgtables`, `change_protection`
//! and `move_page_tables`. Huge-PMD cases are in [`crate::huge_memory`].

use crate::folio::Folio;
use crate::huge_memory;
use crate::machine::Machine;
use crate::machine::ZapStrategy;
use crate::mapcount::Level;
use crate::mm::{Mm, Vma, Vmas};
use crate::mmu_gather::MmuGather;
use crate::pgtable::{
    self, alloc_pmd, alloc_pte_table, load, pgd_index, pmd_index, pte_index, pud_index, store, table_lock, walk_pmd,
    Pte, PGDIR_SIZE, PMD_SIZE, PUD_SIZE,
};
use crate::phys::{Pfn, PhysMem, PAGE_SIZE};
use crate::rmap;
use crate::stats::Stats;
use crate::Result;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};

/// End of the PMD-sized block containing `addr`, capped at `end`.
pub(crate) fn pmd_end(addr: u64, end: u64) -> u64 {
    ((addr | (PMD_SIZE - 1)) + 1).min(end)
}

fn pud_end(addr: u64, end: u64) -> u64 {
    ((addr | (PUD_SIZE - 1)) + 1).min(end)
}

/// `folio_pte_batch`: how many PTEs from `idx` (at most `max_nr`, never past
/// the table) map consecutive pages of folio `f` with the same bits, ignoring
/// accessed and write (and dirty unless `respect_dirty`). Also returns whether
/// any of them was writable (`FPB_MERGE_WRITE`).
pub fn folio_pte_batch(
    phys: &PhysMem,
    f: Folio,
    table: Pfn,
    idx: usize,
    pte: Pte,
    max_nr: usize,
    respect_dirty: bool,
) -> (usize, bool) {
    let ignore = Pte::ACCESSED | Pte::RW | if respect_dirty { 0 } else { Pte::DIRTY };
    let end_pfn = f.pfn + f.nr_pages();
    let max_nr = max_nr.min(512 - idx);
    let mut expected = pte.without(ignore).next_pfn(1);
    let mut any_writable = pte.write();
    let mut nr = 1;
    while nr < max_nr && expected.pfn() < end_pfn {
        let p = load(phys, table, idx + nr);
        if p.without(ignore) != expected {
            break;
        }
        any_writable |= p.write();
        expected = expected.next_pfn(1);
        nr += 1;
    }
    (nr, any_writable)
}

/// `unmap_page_range` over `[start, end)`: huge PMDs covered whole are
/// zapped as one, partially covered ones are split first.
pub(crate) fn zap_range(m: &Machine, mm: &Mm, tlb: &mut MmuGather, start: u64, end: u64) {
    let mut addr = start;
    while addr < end {
        let Some(pmd) = walk_pmd(&m.phys, mm.pgd, addr) else {
            addr = pud_end(addr, end);
            continue;
        };
        let next = pmd_end(addr, end);
        let mut e = pmd.load(&m.phys);
        if e.huge() {
            if addr.is_multiple_of(PMD_SIZE) && next - addr == PMD_SIZE {
                huge_memory::zap_huge_pmd(m, mm, tlb, pmd, addr);
                addr = next;
                continue;
            }
            huge_memory::split_huge_pmd(m, mm, addr);
            e = pmd.load(&m.phys);
        }
        if !e.is_none() {
            zap_pte_range(m, mm, tlb, e.pfn(), addr, next);
        }
        addr = next;
    }
}

/// `zap_pte_range` + `zap_present_ptes`: clears present PTEs in batches of
/// consecutive pages of one folio, with one rmap removal, one rss update, one
/// TLB-range extension and one gather entry per batch. A full gather is
/// flushed (TLB, then frees) after dropping the PTL and the walk resumes.
fn zap_pte_range(m: &Machine, mm: &Mm, tlb: &mut MmuGather, table: Pfn, start: u64, end: u64) {
    let phys = &m.phys;
    let mut addr = start;
    while addr < end {
        let mut full = false;
        {
            let _ptl = table_lock(phys, table);
            while addr < end && !full {
                let idx = pte_index(addr);
                if load(phys, table, idx).is_none() {
                    addr += PAGE_SIZE;
                    continue;
                }
                // get_and_clear_full_ptes(): atomic exchanges, so that an
                // accessed/dirty bit a CPU sets meanwhile is not lost.
                let pte = Pte(pgtable::slot(phys, table, idx).swap(0, AcqRel));
                if pte.special() {
                    tlb.remove_tlb_entries(addr, 1);
                    addr += PAGE_SIZE;
                    continue;
                }
                let f = Folio::containing(phys, pte.pfn());
                let max_nr = ((end - addr) / PAGE_SIZE) as usize;
                let batched = m.config.zap == ZapStrategy::Batched;
                let nr = if batched && f.is_large() && max_nr > 1 {
                    folio_pte_batch(phys, f, table, idx, pte, max_nr, false).0
                } else {
                    1
                };
                for i in 1..nr {
                    pgtable::slot(phys, table, idx + i).swap(0, AcqRel);
                }
                Stats::add(&m.stats.zap_ptes, nr as u64);
                Stats::inc(&m.stats.zap_batches);
                mm.rss_anon.fetch_sub(nr as i64, Relaxed);
                tlb.remove_tlb_entries(addr, nr as u64);
                rmap::folio_remove_rmap(m, f, pte.pfn() - f.pfn, nr as u64, Level::Pte, mm.id);
                full = tlb.remove_folio_pages(pte.pfn(), nr as u32, false);
                addr += nr as u64 * PAGE_SIZE;
            }
        }
        if full {
            tlb.flush_mmu();
        }
    }
}

/// `free_pgtables` / `free_pgd_range`: after `[start, end)` was unmapped,
/// frees every page table below the PGD whose span no VMA intersects any more.
pub(crate) fn free_pgtables(m: &Machine, mm: &Mm, vmas: &Vmas, tlb: &mut MmuGather, start: u64, end: u64) {
    let phys = &m.phys;
    let unused = |lo: u64, size: u64| !vmas.any_in(lo, lo.saturating_add(size));
    let mut a = start & !(PGDIR_SIZE - 1);
    while a < end {
        let pgde = load(phys, mm.pgd, pgd_index(a));
        if !pgde.is_none() {
            let pud_table = pgde.pfn();
            let mut b = a.max(start & !(PUD_SIZE - 1));
            let b_end = (a + PGDIR_SIZE).min(end);
            while b < b_end {
                let pude = load(phys, pud_table, pud_index(b));
                if !pude.is_none() {
                    let pmd_table = pude.pfn();
                    let mut c = b.max(start & !(PMD_SIZE - 1));
                    let c_end = (b + PUD_SIZE).min(end);
                    while c < c_end {
                        let pmde = load(phys, pmd_table, pmd_index(c));
                        if !pmde.is_none() && !pmde.huge() && unused(c, PMD_SIZE) {
                            store(phys, pmd_table, pmd_index(c), Pte::NONE);
                            tlb.remove_table(pmde.pfn(), c);
                        }
                        c += PMD_SIZE;
                    }
                    if unused(b, PUD_SIZE) {
                        store(phys, pud_table, pud_index(b), Pte::NONE);
                        tlb.remove_table(pmd_table, b);
                    }
                }
                b += PUD_SIZE;
            }
            if unused(a, PGDIR_SIZE) {
                store(phys, mm.pgd, pgd_index(a), Pte::NONE);
                tlb.remove_table(pud_table, a);
            }
        }
        a = match a.checked_add(PGDIR_SIZE) {
            Some(n) => n,
            None => break,
        };
    }
}

/// The protection bits of a present entry after `change_protection` to
/// `vma.flags`: PROT_NONE entries lose PRESENT and gain PROTNONE; write
/// permission is granted only where `can_write` (`can_change_pte_writable`:
/// an AnonExclusive page) and the VMA is writable.
pub(crate) fn modify_prot(e: Pte, vma: &Vma, can_write: bool) -> Pte {
    let base = e.without(Pte::PRESENT | Pte::PROTNONE | Pte::RW);
    let base = base.with(if vma.readable() { Pte::PRESENT } else { Pte::PROTNONE });
    if vma.writable() && can_write {
        base.with(Pte::RW)
    } else {
        base
    }
}

/// `change_protection` over one VMA whose flags were just changed. Returns
/// whether any entry changed (the caller then flushes the TLB).
pub(crate) fn change_protection(m: &Machine, mm: &Mm, vma: &Vma) -> bool {
    let phys = &m.phys;
    let mut changed = false;
    let mut addr = vma.start;
    while addr < vma.end {
        let next = pmd_end(addr, vma.end);
        let Some(pmd) = walk_pmd(phys, mm.pgd, addr) else {
            addr = next;
            continue;
        };
        let e = pmd.load(phys);
        if e.huge() {
            changed |= huge_memory::change_huge_pmd(m, pmd, vma);
        } else if !e.is_none() {
            let table = e.pfn();
            let _ptl = table_lock(phys, table);
            for a in (addr..next).step_by(PAGE_SIZE as usize) {
                let idx = pte_index(a);
                let p = load(phys, table, idx);
                if !p.present() {
                    continue;
                }
                let can_write = !p.special() && {
                    let f = Folio::containing(phys, p.pfn());
                    f.anon_exclusive(p.pfn() - f.pfn)
                };
                let n = modify_prot(p, vma, can_write);
                if n != p {
                    store(phys, table, idx, n);
                    changed = true;
                }
            }
        }
        addr = next;
    }
    changed
}

/// `copy_page_range` for one private anonymous VMA of the parent `src` into
/// the child `dst`, whose copy of the VMA is `dst_vma`. A huge PMD that may
/// be pinned is split in the parent and copied by PTEs (`copy_huge_pmd`
/// returning -EAGAIN).
pub(crate) fn copy_page_range(m: &Machine, dst: &Mm, src: &Mm, vma: &Vma, dst_vma: &Vma) -> Result<()> {
    let phys = &m.phys;
    let mut addr = vma.start;
    while addr < vma.end {
        let Some(spmd) = walk_pmd(phys, src.pgd, addr) else {
            addr = pud_end(addr, vma.end);
            continue;
        };
        let next = pmd_end(addr, vma.end);
        let mut e = spmd.load(phys);
        if e.huge() {
            let dpmd = alloc_pmd(m, dst.pgd, addr, &dst.page_table_lock)?;
            if huge_memory::copy_huge_pmd(m, dst, src, dpmd, spmd, addr)? {
                addr = next;
                continue;
            }
            huge_memory::split_huge_pmd(m, src, addr);
            e = spmd.load(phys);
        }
        if !e.is_none() {
            let dpmd = alloc_pmd(m, dst.pgd, addr, &dst.page_table_lock)?;
            let dtable = alloc_pte_table(m, dpmd)?.expect("child PMD cannot be huge");
            copy_pte_range(m, dst, src, dst_vma, dtable, e.pfn(), addr, next)?;
        }
        addr = next;
    }
    Ok(())
}

/// `copy_pte_range` + `copy_present_ptes`: copies present PTEs in batches of
/// one folio (dirty respected, write merged), one reference add and one rmap
/// duplication per batch; write-protects the parent's PTEs and gives the child
/// old, read-only copies. The zero page is copied as it is. When duplication
/// refuses a batch (a page that may be pinned), the batch is redone page by
/// page and each such page is copied for the child (`copy_present_page`).
#[allow(clippy::too_many_arguments)]
fn copy_pte_range(
    m: &Machine,
    dst: &Mm,
    src: &Mm,
    dst_vma: &Vma,
    dtable: Pfn,
    stable: Pfn,
    start: u64,
    end: u64,
) -> Result<()> {
    let phys = &m.phys;
    let pinned = src.has_pinned.load(Relaxed);
    let _dptl = table_lock(phys, dtable);
    let _sptl = table_lock(phys, stable);
    let mut addr = start;
    let mut single = 0; // pages left to handle one by one after a refused batch
    while addr < end {
        let idx = pte_index(addr);
        let pte = load(phys, stable, idx);
        if pte.is_none() {
            addr += PAGE_SIZE;
            continue;
        }
        if pte.special() {
            store(phys, dtable, idx, pte);
            addr += PAGE_SIZE;
            continue;
        }
        let f = Folio::containing(phys, pte.pfn());
        let max_nr = ((end - addr) / PAGE_SIZE) as usize;
        let (nr, any_writable) = if single == 0 && f.is_large() && max_nr > 1 {
            folio_pte_batch(phys, f, stable, idx, pte, max_nr, true)
        } else {
            (1, pte.write())
        };
        single = usize::saturating_sub(single, 1);
        f.ref_add(nr as i32);
        if rmap::folio_try_dup_anon_rmap(m, f, pte.pfn() - f.pfn, nr as u64, Level::Pte, dst.id, pinned).is_err() {
            f.put_refs(nr as i32);
            if nr > 1 {
                single = nr;
                continue;
            }
            copy_present_page(m, dst, dst_vma, dtable, idx, pte)?;
            addr += PAGE_SIZE;
            continue;
        }
        let child = pte.without(Pte::RW | Pte::ACCESSED);
        for i in 0..nr {
            if any_writable {
                let s = load(phys, stable, idx + i);
                store(phys, stable, idx + i, s.without(Pte::RW));
            }
            store(phys, dtable, idx + i, child.next_pfn(i as u64));
        }
        dst.rss_anon.fetch_add(nr as i64, Relaxed);
        Stats::add(&m.stats.fork_ptes, nr as u64);
        Stats::inc(&m.stats.fork_batches);
        addr += nr as u64 * PAGE_SIZE;
    }
    Ok(())
}

/// `copy_present_page`: the child gets its own copy of a page that may be
/// pinned, mapped writable if the VMA is; the parent's PTE stays as it was
/// (writable, exclusive), so the pin keeps seeing the parent's page.
fn copy_present_page(m: &Machine, dst: &Mm, dst_vma: &Vma, dtable: Pfn, idx: usize, pte: Pte) -> Result<()> {
    let new = m.alloc_folio(0)?;
    m.phys.copy_frame(new.pfn, pte.pfn());
    rmap::folio_add_new_anon_rmap(m, new, Level::Pte, dst.id, dst_vma.anon_vma());
    let w = if dst_vma.writable() { Pte::RW | Pte::DIRTY } else { 0 };
    store(&m.phys, dtable, idx, Pte::new(new.pfn, Pte::PRESENT | Pte::USER | Pte::ACCESSED | w));
    dst.rss_anon.fetch_add(1, Relaxed);
    Stats::inc(&m.stats.fork_copy_pinned);
    Ok(())
}

/// `move_page_tables`: moves the entries of `[old, old+len)` to `new`. A huge
/// PMD moves as one entry (with its deposited table) when both addresses are
/// PMD-aligned and the block is whole; otherwise it is split and its PTEs
/// move one by one (`move_ptes`). rmap is unchanged: the same MM maps the
/// same folios.
pub(crate) fn move_page_tables(m: &Machine, mm: &Mm, old: u64, new: u64, len: u64) -> Result<()> {
    let phys = &m.phys;
    let mut off = 0;
    while off < len {
        let (src, dst) = (old + off, new + off);
        let step = (pmd_end(src, old + len) - src).min(pmd_end(dst, new + len) - dst);
        let Some(spmd) = walk_pmd(phys, mm.pgd, src) else {
            off += step;
            continue;
        };
        let e = spmd.load(phys);
        if e.huge() && src % PMD_SIZE == 0 && dst % PMD_SIZE == 0 && step == PMD_SIZE {
            let dpmd = alloc_pmd(m, mm.pgd, dst, &mm.page_table_lock)?;
            huge_memory::move_huge_pmd(m, mm, spmd, dpmd, src, dst);
            off += step;
            continue;
        }
        if e.huge() {
            huge_memory::split_huge_pmd(m, mm, src);
        }
        let e = spmd.load(phys);
        if !e.is_none() {
            let dpmd = alloc_pmd(m, mm.pgd, dst, &mm.page_table_lock)?;
            let dtable = alloc_pte_table(m, dpmd)?.expect("mremap destination cannot be huge");
            let stable = e.pfn();
            let _sptl = table_lock(phys, stable);
            let _dptl = (dtable != stable).then(|| table_lock(phys, dtable));
            for i in 0..step / PAGE_SIZE {
                let (s, d) = (src + i * PAGE_SIZE, dst + i * PAGE_SIZE);
                let p = load(phys, stable, pte_index(s));
                if !p.is_none() {
                    store(phys, stable, pte_index(s), Pte::NONE);
                    store(phys, dtable, pte_index(d), p);
                }
            }
        }
        off += step;
    }
    mm.tlb.flush_range(&m.stats, old, old + len);
    Ok(())
}

/// Whether PTEs `idx..idx+nr` of `table` are all none (`pte_range_none`).
pub(crate) fn pte_range_none(phys: &PhysMem, table: Pfn, idx: usize, nr: usize) -> bool {
    (idx..idx + nr).all(|i| pgtable::load(phys, table, i).is_none())
}
