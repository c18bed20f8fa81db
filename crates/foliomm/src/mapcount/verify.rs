//! A design's fields against the ground truth the checker rebuilt from the
//! page tables (docs/KERNEL-REFERENCE.md §2.5 and §11).

use super::construction::Construction;
use super::eras::{PageMapcounts, Total};
use super::fields::{field, shared, slot_id, w, ENTIRELY_MAPPED};
use super::{FolioTruth, MapcountDesign};
use crate::folio::Folio;
use crate::sync::atomic::Ordering::*;

impl PageMapcounts {
    /// Compares every field the design keeps with the page tables' truth.
    pub(super) fn verify_fields(&self, f: Folio, truth: &FolioTruth) -> Vec<String> {
        let mut bad = Vec::new();
        let total = truth.total() as i64;
        let ptes: i64 = truth.pte.iter().map(|&n| n as i64).sum();
        match self.f.total {
            Total::All => {
                let large = self.large_raw(f) as i64 + 1;
                if large != total {
                    bad.push(format!("large mapcount {large}, page tables say {total}"));
                }
            }
            Total::Ptes => {
                let sub = w(f, field::TOTAL).load(Relaxed) as i64;
                if sub != ptes {
                    bad.push(format!("subpages mapcount {sub}, page tables say {ptes} PTE mappings"));
                }
            }
            Total::None => {}
        }
        if self.mapcount(f) as i64 != total {
            bad.push(format!("folio_mapcount {}, page tables say {total}", self.mapcount(f)));
        }
        let entire = self.entire_mapcount(f) as u32;
        if entire != truth.pmd {
            bad.push(format!("entire mapcount {entire}, page tables say {}", truth.pmd));
        }
        if super::page_mapcounts::is_hugetlb(f) {
            // Only the entire and large mapcounts count hugetlb mappings.
            return bad;
        }
        let mut pages_mapped = 0;
        // 6.1 counts a file PMD in every page. DoubleMap raises an anon THP's
        // counts from the split that made PTEs beside other PMDs to the last PMD.
        let pmd_in_pages = if self.pmd_in_pages(f) { truth.pmd } else { 0 };
        let bias = self.double_map_bias(f) as u32;
        let mixed = truth.pmd > 0 && truth.pte.iter().any(|&n| n > 0);
        if bias == 1 && truth.pmd == 0 {
            bad.push("PG_double_map is set, but no PMD maps the folio".into());
        }
        if self.double_maps(f) && mixed && bias == 0 {
            bad.push("PMDs and PTEs both map the folio, but PG_double_map is clear".into());
        }
        for (i, &n) in truth.pte.iter().enumerate() {
            let m = f.page(i as u64).mapcount.load(Relaxed) + 1;
            // CONFIG_NO_PAGE_MAPCOUNT: the pages' counts stay at -1.
            let want = if self.f.page_mapcounts { n + pmd_in_pages + bias } else { 0 };
            if m as u32 != want {
                bad.push(format!("page {i} mapcount {m}, page tables say {want}"));
            }
            pages_mapped += (n > 0) as i32;
        }
        if self.f.nr_pages_mapped {
            let want = pages_mapped + if truth.pmd > 0 { ENTIRELY_MAPPED } else { 0 };
            let have = w(f, field::NR_PAGES_MAPPED).load(Relaxed);
            if have != want {
                bad.push(format!("_nr_pages_mapped {have:#x}, page tables say {want:#x}"));
            }
        }
        if self.f.mm_ids {
            verify_slots(f, truth, total, &mut bad);
        }
        // At stage all-skip-entire the sums leave PMD mappings out, which the
        // truth does not count per MM: checked once no PMD maps the folio.
        let skipped = self.skips_entire(super::Level::Pmd) && truth.pmd > 0;
        if let Some(c) =
            self.construction().filter(|_| !super::large_mapcount::untracked(f) && self.tracks(f) && !skipped)
        {
            self.verify_sums(c, f, truth, total, &mut bad);
        }
        bad
    }

    /// The rmap-id sums against the page tables' per-MM counts, an idle
    /// seqcount, and the sole owner where the folio is exclusive.
    fn verify_sums(&self, c: Construction, f: Folio, truth: &FolioTruth, total: i64, bad: &mut Vec<String>) {
        let mut want = vec![0u64; c.count(f.order())];
        for (&id, &n) in &truth.per_mm {
            for (s, &v) in want.iter_mut().zip(c.values(id as u64, f.order()).iter()) {
                *s = s.wrapping_add((n as u64).wrapping_mul(v));
            }
        }
        let (_, have) = self.sums(c, f);
        if have != want {
            bad.push(format!("rmap sums {have:?}, page tables say {want:?}"));
        }
        if !self.seqcount(f).is_idle() {
            bad.push("a writer is still inside the rmap seqcount".into());
        }
        let owner = self.sole_owner(f);
        let truly = (truth.per_mm.len() == 1).then(|| *truth.per_mm.keys().next().unwrap());
        if total > 0 && total <= f.nr_pages() as i64 && owner != truly {
            bad.push(format!("sole owner {owner:?}, page tables say {truly:?}"));
        }
    }
}

/// The MM-ID slot rules (docs/KERNEL-REFERENCE.md §2.5 sanity checks): an
/// id has a count and a count an id, a slot names an MM that maps the
/// folio, the shared bit agrees with the slots, and the slots' counts fit
/// in the large mapcount.
fn verify_slots(f: Folio, truth: &FolioTruth, total: i64, bad: &mut Vec<String>) {
    let ids = f.page(1).ids.load(Relaxed);
    let mut occupied = 0;
    let mut slot_sum = 0i64;
    for s in 0..2 {
        let id = slot_id(ids, s);
        let c = w(f, field::SLOT0 + s).load(Relaxed);
        if (id == 0) != (c == -1) {
            bad.push(format!("slot {s}: id {id} with count {c}"));
        }
        if id != 0 {
            occupied += 1;
            slot_sum += c as i64 + 1;
            if !truth.per_mm.contains_key(&id) {
                bad.push(format!("slot {s} names MM {id}, which maps nothing of the folio"));
            }
        }
    }
    let sh = shared(f);
    if total == 0 && sh {
        bad.push("shared bit set on an unmapped folio".into());
    }
    if occupied == 2 && !sh {
        bad.push("two occupied slots but the shared bit is clear".into());
    }
    if slot_sum > total {
        bad.push(format!("slot counts sum to {slot_sum} > large mapcount {total}"));
    }
}
