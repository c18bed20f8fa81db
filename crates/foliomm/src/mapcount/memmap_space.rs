//! The memmap space each design spends on mapcounts in a large folio
//! (seed 000's Q/A: "aren't we consuming a lot of memmap space?"): the
//! folio's own fields in its tail pages (`struct folio`'s `_nr_pages_mapped`,
//! `_large_mapcount`, `_mm_ids`...; seed 000's rmap values) and the per-page
//! `_mapcount` of every page, which `CONFIG_NO_PAGE_MAPCOUNT` (6.15+) gives
//! up. Counted as Linux lays the fields out, in bytes; `_pincount` and the
//! flags word's lock bit are not mapcount space.

use super::eras::{PageMapcounts, Total};
use super::Design;

/// One design's mapcount space in a folio of one order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemmapSpace {
    /// The folio-wide fields: name and bytes.
    pub fields: Vec<(&'static str, u64)>,
    /// The per-page `_mapcount`s: 4 bytes a page.
    pub page_mapcounts: u64,
}

impl MemmapSpace {
    /// The folio-wide fields together.
    pub fn folio_bytes(&self) -> u64 {
        self.fields.iter().map(|&(_, b)| b).sum()
    }
}

impl PageMapcounts {
    /// The space of a folio of `order` (at least 1: a small folio has only
    /// its page's `_mapcount`).
    fn memmap_space(&self, order: u32) -> MemmapSpace {
        let mut fields = vec![("_entire_mapcount", 4)];
        if self.f.nr_pages_mapped {
            fields.push(("_nr_pages_mapped", 4));
        }
        match self.f.total {
            Total::Ptes => fields.push(("subpages_mapcount", 4)),
            Total::All => fields.push(("_large_mapcount", 4)),
            Total::None => {}
        }
        if self.f.mm_ids {
            fields.push(("_mm_id_mapcount[2]", 8));
            fields.push(("_mm_ids", 8));
        }
        if let Some(c) = self.f.rmap_sums {
            fields.push(("rmap values", 8 * c.count(order) as u64));
            fields.push(("atomic seqcount", 8));
        }
        MemmapSpace { fields, page_mapcounts: if self.f.page_mapcounts { 4 << order } else { 0 } }
    }
}

impl Design {
    /// The mapcount space this design spends in a folio of `order` (at
    /// seed 000's last stage).
    pub fn memmap_space(self, order: u32) -> MemmapSpace {
        super::eras::DESIGNS[self as usize].memmap_space(order)
    }

    /// The same built without per-page mapcounts (`set page_mapcount
    /// off`); `None` for a design that cannot go without them.
    pub fn memmap_space_without_page_mapcount(self, order: u32) -> Option<MemmapSpace> {
        (self == Design::MmId).then(|| super::eras::MM_ID_NO_PAGE_MAPCOUNT.memmap_space(order))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed 000's answer: "we need 8 byte for order-2, 16 byte order-5 and
    /// 32 byte for order-10" of rmap values, excluding the seqcount; "the
    /// subpage mapcounts alone are 16 bytes for order-2, 128 byte for
    /// order-5 and 4096 bytes for order-10".
    #[test]
    fn the_seeds_figures() {
        for (order, values, pages) in [(2, 8, 16), (5, 16, 128), (10, 32, 4096)] {
            let s = Design::RmapId.memmap_space(order);
            let got = s.fields.iter().find(|f| f.0 == "rmap values").map(|f| f.1);
            assert_eq!(got, Some(values), "order {order}");
            assert_eq!(s.page_mapcounts, pages, "order {order}");
        }
        let mm_id = Design::MmId.memmap_space(9);
        assert_eq!(mm_id.folio_bytes(), 4 + 4 + 4 + 16, "{mm_id:?}");
        assert_eq!(Design::Subpage.memmap_space(9).folio_bytes(), 4, "6.1: _entire_mapcount alone");
        // CONFIG_NO_PAGE_MAPCOUNT: no per-page counts, no _nr_pages_mapped.
        let without = Design::MmId.memmap_space_without_page_mapcount(9).unwrap();
        assert_eq!((without.folio_bytes(), without.page_mapcounts), (4 + 4 + 16, 0));
        assert!(Design::RmapId.memmap_space_without_page_mapcount(9).is_none());
    }
}
