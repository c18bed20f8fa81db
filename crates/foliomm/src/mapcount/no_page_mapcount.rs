//! `CONFIG_NO_PAGE_MAPCOUNT` (6.15+): what an rmap update tells about
//! pages newly mapped or unmapped when a large folio keeps no per-page
//! `_mapcount`, only its large mapcount (mm/rmap.c `__folio_add_rmap`,
//! `__folio_remove_rmap`, their branches for it).

use super::eras::PageMapcounts;
use super::{Cost, MapcountDesign, Removed};
use crate::folio::Folio;

impl PageMapcounts {
    /// What a removal tells under `CONFIG_NO_PAGE_MAPCOUNT`
    /// (`__folio_remove_rmap`'s branch for it), from the large mapcount
    /// `left` as the update returned it: every page unmapped when it reaches 0; otherwise none, and the
    /// folio queued for deferred split when fewer mappings than pages are
    /// left and no PMD maps it (a PTE removal), or its last PMD went
    /// (`last_pmd`).
    pub(super) fn removed_without_page_mapcounts(&self, f: Folio, left: u64, last_pmd: bool, cost: Cost) -> Removed {
        let few = left < f.nr_pages();
        let partially = left > 0 && few && (last_pmd || self.entire_mapcount(f) == 0);
        let unmapped_pages = if left == 0 { f.nr_pages() } else { 0 };
        Removed { unmapped_pages, deferred_split: partially, cost }
    }

    /// What an addition tells under `CONFIG_NO_PAGE_MAPCOUNT`: the whole
    /// folio newly mapped if the large mapcount the update returned says it
    /// `was_unmapped`, else nothing (`__folio_add_rmap`).
    pub(super) fn whole_if_was_unmapped(&self, f: Folio, was_unmapped: bool) -> u64 {
        was_unmapped as u64 * f.nr_pages()
    }
}
