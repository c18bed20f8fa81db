//! Anonymous faults on a none PTE (mm/memory.c `do_anonymous_page`,
//! `alloc_anon_folio`): the zero page for a read, the largest allowed folio
//! for a write; in a range registered for missing faults, the fault goes to
//! the userfaultfd once the PTE lock shows the entry still none.

use super::fault::VmFault;
use crate::arch::{pte_index, Pte, PAGE_SIZE, PMD_ORDER};
use crate::folio::Folio;
use crate::kernel::Stats;
use crate::mapcount::Level;
use crate::mm_types::UffdReason;
use crate::pgtable::{load, pte_range_none, store};
use crate::rmap;
use crate::Result;

/// `do_anonymous_page`: a read maps the shared zero page; a write allocates
/// the largest allowed folio (`alloc_anon_folio`), zeroes it and maps all its
/// pages with one batched rmap call, provided every PTE of the range is still
/// none.
pub(super) fn do_anonymous_page(vmf: &VmFault) -> Result<()> {
    let (k, phys, table, addr) = (vmf.k, &vmf.k.phys, vmf.table, vmf.address);
    if !vmf.write() {
        let ptl = vmf.pte_lock();
        if ptl.is_some() && load(phys, table, pte_index(addr)).is_none() {
            if vmf.vma.userfaultfd_missing() {
                drop(ptl);
                return Err(vmf.userfault(UffdReason::Missing));
            }
            let zero = Pte::new(k.zero_pfn, Pte::PRESENT | Pte::USER | Pte::SPECIAL | Pte::ACCESSED);
            store(phys, table, pte_index(addr), zero);
            Stats::inc(&k.stats.zero_page_map);
        }
        return Ok(());
    }
    let anon_vma = vmf.mm.anon_vma_prepare(vmf.vma);
    let f = alloc_anon_folio(vmf)?;
    let nr = f.nr_pages();
    let base = addr & !(nr * PAGE_SIZE - 1);
    let ptl = vmf.pte_lock();
    if ptl.is_none() || !pte_range_none(phys, table, pte_index(base), nr as usize) {
        drop(ptl);
        k.folio_put_refs(f, 1);
        return Ok(());
    }
    if vmf.vma.userfaultfd_missing() {
        drop(ptl);
        k.folio_put_refs(f, 1);
        return Err(vmf.userfault(UffdReason::Missing));
    }
    f.ref_add(nr as i32 - 1);
    rmap::folio_add_new_anon_rmap(k, f, Level::Pte, vmf.mm.rmap, (anon_vma, vmf.vma.page_index(base)));
    k.folio_add_lru_vma(f, vmf.vma.mlocked());
    for i in 0..nr {
        let e = Pte::new(f.pfn + i, Pte::PRESENT | Pte::USER | Pte::ACCESSED | Pte::MKDIRTY | Pte::RW);
        store(phys, table, pte_index(base) + i as usize, e);
    }
    vmf.mm.add_anon_rss(nr as i64);
    Stats::inc(&k.stats.anon_fault_alloc[f.order() as usize]);
    Ok(())
}

/// `alloc_anon_folio`: from the highest allowed order below PMD order down,
/// the first whose naturally aligned range lies inside the VMA, has only none
/// PTEs and can be allocated; else order 0, the only order in a VMA
/// registered with a userfaultfd. The folio comes zeroed.
fn alloc_anon_folio<'k>(vmf: &VmFault<'k>) -> Result<Folio<'k>> {
    let k = vmf.k;
    let armed = vmf.vma.userfaultfd_armed();
    let orders = if armed { 0 } else { vmf.thp_orders() & ((1 << PMD_ORDER) - 1) };
    for order in (1..PMD_ORDER).rev().filter(|o| orders & (1 << o) != 0) {
        let size = PAGE_SIZE << order;
        let base = vmf.address & !(size - 1);
        let inside = base >= vmf.vma.start() && base + size <= vmf.vma.end();
        if !inside || !pte_range_none(&k.phys, vmf.table, pte_index(base), 1 << order) {
            continue;
        }
        match k.alloc_folio_on(vmf.vma.placement(base, order), order, true) {
            Ok(f) => return Ok(f),
            Err(_) => Stats::inc(&k.stats.anon_fault_fallback[order as usize]),
        }
    }
    super::vmscan::alloc_folio_reclaim(k, &vmf.mm.mmlist, vmf.vma.placement(vmf.address, 0), true)
}
