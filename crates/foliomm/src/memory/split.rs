//! Splitting a mapped anonymous large folio into pages (mm/huge_memory.c
//! `split_folio` → `__folio_split`: `unmap_folio`, `__split_unmapped_folio`,
//! `remap_page`), for the case `MADV_PAGEOUT` meets: every mapping of the
//! folio is a PTE of one table of one MM, whose lock the caller holds.
//!
//! Differs from Linux: under the PTL the entries need no migration
//! entries (nothing can walk them meanwhile), so they stay as they are
//! and only the folio's metadata changes: its mappings are removed from
//! the large folio and added back to each page, which keeps its
//! AnonExclusive flag. A folio mapped elsewhere too is not split (Linux
//! walks the rmap, which #32 brings).

use crate::arch::{Pfn, Pte, PAGE_SIZE, PTRS_PER_TABLE};
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::Level;
use crate::mm_types::Mm;
use crate::pgtable::{load, store};
use crate::rmap;

/// Splits the anon large folio `f` into pages if every mapping of it is a
/// PTE of `table` (one of `mm`'s, mapping `[base, base + 2 MiB)`), nothing
/// but those mappings and the caller's `held` references holds it
/// (`can_split_folio`: no pin, no other reference, not in the swap cache),
/// and it is not locked; true if it did. The caller's references stay on
/// the first page. Pages nothing maps are freed; from 6.12 so are mapped
/// pages that hold only zeros, their PTEs pointing at the shared zero page
/// instead (`try_to_map_unused_to_zeropage`; the callers' VMAs are never
/// mlocked, where Linux keeps them). The caller holds the table's lock.
pub fn split_folio_in_table(k: &Kernel, mm: &Mm, (table, base): (Pfn, u64), f: Folio, held: i32) -> bool {
    let phys = &k.phys;
    let maps: Vec<(usize, u64)> = (0..PTRS_PER_TABLE as usize)
        .filter_map(|i| {
            let pte = load(phys, table, i);
            let mapped = pte.present() && !pte.special() && (f.pfn..f.pfn + f.nr_pages()).contains(&pte.pfn());
            mapped.then(|| (i, pte.pfn() - f.pfn))
        })
        .collect();
    let mapcount = rmap::folio_mapcount(k, f);
    let in_cache = f.head().test(crate::phys::pg::SWAPCACHE);
    if !f.test_anon() || maps.len() as u64 != mapcount || f.refcount() as u64 != mapcount + held as u64 || in_cache {
        return false;
    }
    let Some(lock) = f.trylock() else { return false };
    let exclusive: Vec<bool> = maps.iter().map(|&(_, p)| f.anon_exclusive(p)).collect();
    for &(_, p) in &maps {
        rmap::folio_remove_rmap(k, f, p, 1, Level::Pte, mm.rmap);
    }
    drop(lock);
    let pages = k.split_unmapped_folio_to_pages(f, 1);
    Folio::from_head(phys, pages[0]).ref_add(held);
    let to_zero = k.config.release().split_maps_zero_pages_to_zero_page();
    for (&(i, p), excl) in maps.iter().zip(exclusive) {
        let page = Folio::from_head(phys, pages[p as usize]);
        if to_zero && zero_filled(k, page.pfn) {
            // The VMA's protection: a PROT_NONE entry stays inaccessible.
            let (addr, prot) = (base + i as u64 * PAGE_SIZE, load(phys, table, i).0 & (Pte::PRESENT | Pte::PROTNONE));
            store(phys, table, i, Pte::new(k.zero_pfn, prot | Pte::USER | Pte::SPECIAL | Pte::ACCESSED));
            mm.tlb.flush_range(&k.stats, addr, addr + PAGE_SIZE);
            mm.add_anon_rss(-1);
            continue;
        }
        page.ref_add(1);
        rmap::folio_add_anon_rmap_ptes(k, page, 0, 1, mm.rmap, excl);
    }
    for pfn in pages {
        // The split's own reference: the last one of a page nothing maps.
        k.folio_put_refs(Folio::from_head(phys, pfn), 1);
    }
    true
}

/// Whether the page at `pfn` holds only zeros (`pages_identical` with the
/// zero page).
fn zero_filled(k: &Kernel, pfn: Pfn) -> bool {
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    k.phys.read_bytes(pfn, 0, &mut buf);
    buf.iter().all(|&b| b == 0)
}
