//! Scans over runs of PTEs in one table: `folio_pte_batch` (which consecutive
//! PTEs map consecutive pages of one folio alike) and `pte_range_none`.

use super::load;
use crate::arch::{Pfn, Pte, PTRS_PER_TABLE};
use crate::folio::Folio;
use crate::phys::PhysMem;

/// `folio_pte_batch`: how many PTEs from `idx` (at most `max_nr`, never past
/// the table) map consecutive pages of folio `f` with the same bits, ignoring
/// accessed and write, and dirty and soft-dirty unless `respect` holds them
/// (`FPB_RESPECT_DIRTY`, `FPB_RESPECT_SOFT_DIRTY`: [`Pte::DIRTY`],
/// [`Pte::SOFT_DIRTY`]). Also returns whether any of them was writable
/// (`FPB_MERGE_WRITE`).
pub fn folio_pte_batch(
    phys: &PhysMem,
    f: Folio,
    table: Pfn,
    idx: usize,
    pte: Pte,
    max_nr: usize,
    respect: u64,
) -> (usize, bool) {
    let ignore = Pte::ACCESSED | Pte::RW | ((Pte::DIRTY | Pte::SOFT_DIRTY) & !respect);
    let end_pfn = f.pfn + f.nr_pages();
    let max_nr = max_nr.min(PTRS_PER_TABLE as usize - idx);
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

/// Whether PTEs `idx..idx+nr` of `table` are all none (`pte_range_none`).
pub fn pte_range_none(phys: &PhysMem, table: Pfn, idx: usize, nr: usize) -> bool {
    (idx..idx + nr).all(|i| load(phys, table, i).is_none())
}
