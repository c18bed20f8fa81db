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

use crate::arch::{Pfn, PTRS_PER_TABLE};
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::Level;
use crate::mm_types::Mm;
use crate::pgtable::load;
use crate::rmap;

/// Splits the anon large folio `f` into pages if every mapping of it is a
/// PTE of `table` (one of `mm`'s), nothing but those mappings holds it
/// (`can_split_folio`: no pin, no other reference, not in the swap
/// cache), and it is not locked; true if it did. Pages nothing maps are
/// freed. The caller holds the table's lock.
pub fn split_folio_in_table(k: &Kernel, mm: &Mm, table: Pfn, f: Folio) -> bool {
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
    if !f.test_anon() || maps.len() as u64 != mapcount || f.refcount() as u64 != mapcount || in_cache {
        return false;
    }
    let Some(lock) = f.trylock() else { return false };
    let exclusive: Vec<bool> = maps.iter().map(|&(_, p)| f.anon_exclusive(p)).collect();
    for &(_, p) in &maps {
        rmap::folio_remove_rmap(k, f, p, 1, Level::Pte, mm.rmap);
    }
    drop(lock);
    let pages = k.split_unmapped_folio_to_pages(f, 1);
    for (&(_, p), excl) in maps.iter().zip(exclusive) {
        let page = Folio::from_head(phys, pages[p as usize]);
        page.ref_add(1);
        rmap::folio_add_anon_rmap_ptes(k, page, 0, 1, mm.rmap, excl);
    }
    for pfn in pages {
        // The split's own reference: the last one of a page nothing maps.
        k.folio_put_refs(Folio::from_head(phys, pfn), 1);
    }
    true
}
