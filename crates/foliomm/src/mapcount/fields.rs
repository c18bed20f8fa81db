//! Where the designs keep their fields: the second page's descriptor
//! (`folio->_large_mapcount`, `_nr_pages_mapped`, `_entire_mapcount`,
//! `_pincount`, `_mm_id_mapcount[]`, `_mm_ids`), and helpers to read them.

use crate::folio::Folio;
use crate::sync::atomic::{AtomicI32, AtomicU64, Ordering::*};

use super::eras::{PageMapcounts, Total};
use super::stage::RmapIdStage;
use super::MmId;

/// Field layout in the second page's descriptor (`folio->_large_mapcount` etc.).
pub(super) mod field {
    /// `_large_mapcount`, or `subpages_mapcount` in compound-locked.
    pub const TOTAL: usize = 0;
    pub const NR_PAGES_MAPPED: usize = 1;
    pub const ENTIRE: usize = 2;
    pub const PINCOUNT: usize = crate::folio::PINCOUNT_WORD;
    pub const SLOT0: usize = 4;
    /// `FOLIO_MM_IDS_LOCK_BITNUM`: top bit of `_mm_id[0]`.
    pub const LOCK_BIT: u32 = 31;
    /// `FOLIO_MM_IDS_SHARED_BITNUM`: top bit of `_mm_id[1]`.
    pub const SHARED_BIT: u32 = 63;
    pub const ID_MASK: u64 = (1 << 31) - 1;
    /// The compound lock: `PG_locked` of the first tail page.
    pub const COMPOUND_LOCK_BIT: u32 = 0;
}

/// `ENTIRELY_MAPPED`: added to `_nr_pages_mapped` while a PMD maps the folio.
pub const ENTIRELY_MAPPED: i32 = 0x80_0000;

pub(super) fn w(f: Folio<'_>, i: usize) -> &AtomicI32 {
    &f.page(1).w[i]
}

pub(super) fn slot_id(ids: u64, s: usize) -> MmId {
    ((ids >> (32 * s)) & field::ID_MASK) as MmId
}

pub(super) fn set_slot_id(f: Folio, s: usize, id: MmId) {
    let shift = 32 * s as u32;
    let mask = field::ID_MASK << shift;
    let ids = &f.page(1).ids;
    let cur = ids.load(Relaxed);
    // The caller holds the lock bit (or owns the new folio); keep every flag bit.
    ids.store((cur & !mask) | ((id as u64) << shift), Relaxed);
}

pub(super) fn set_shared(f: Folio, on: bool) {
    let bit = 1u64 << field::SHARED_BIT;
    if on {
        f.page(1).ids.fetch_or(bit, Relaxed);
    } else {
        f.page(1).ids.fetch_and(!bit, Relaxed);
    }
}

pub(super) fn shared(f: Folio) -> bool {
    f.page(1).ids.load(Relaxed) & (1 << field::SHARED_BIT) != 0
}

/// Adds `d` to `a`, returning the old value: a plain load and store when the
/// writer is alone in the rmap seqcount (`plain`, seed 000's exclusive
/// path), an atomic read-modify-write otherwise.
pub(super) fn bump(a: &AtomicI32, d: i32, plain: bool) -> i32 {
    if plain {
        let v = a.load(Relaxed);
        a.store(v.wrapping_add(d), Relaxed);
        v
    } else {
        a.fetch_add(d, Relaxed)
    }
}

impl PageMapcounts {
    /// Word `i` of a large folio's rmap sums (`_mm_ids` for `i` = 0 under
    /// the other designs), but at stage `all-wide` ([`Self::sum`]). Spread
    /// (every stage but `all-packed`): the `ids` word of page 1 + `i`, a
    /// cache line each, and past the folio's last page the `link` word of
    /// page 2 onwards, which tail pages leave unused (page 1's is the rmap
    /// seqcount); only an order-2 folio at seed 000's stages before 123
    /// needs that: 4 sums, 3 tail pages. Packed (`all-packed`): the first
    /// in page 1's `ids`, beside the seqcount and the mapcount, the others
    /// two to a tail page (`link`, then `ids`, from page 2). The RFC keeps
    /// `_rmap_valX` in struct folio's tail-page fields; foliomm's memmap
    /// has two free words per tail page.
    fn sum_word<'a>(&self, f: Folio<'a>, i: u64) -> &'a AtomicU64 {
        debug_assert!(!self.wide(f), "a 128-bit pair is read whole");
        if self.f.stage == RmapIdStage::AllPacked && i > 0 {
            let p = f.page(1 + i.div_ceil(2));
            return if i % 2 == 1 { &p.link } else { &p.ids };
        }
        let tails = f.nr_pages() - 1;
        if i < tails {
            &f.page(1 + i).ids
        } else {
            &f.page(2 + i - tails).link
        }
    }

    /// Whether `f`'s sums go two to a 128-bit pair, the pair of page 2 +
    /// i / 2 (stage `all-wide`; a folio of two pages has no page 2).
    pub(super) fn wide(&self, f: Folio) -> bool {
        self.f.stage == RmapIdStage::AllWide && f.nr_pages() > 2
    }

    /// Sum `i` (word `i`).
    pub(super) fn sum(&self, f: Folio, i: u64) -> u64 {
        match self.wide(f) {
            true => f.page(2 + i / 2).wide_pair().load()[i as usize % 2],
            false => self.sum_word(f, i).load(Relaxed),
        }
    }

    /// Sets sum `i` of a folio no other writer can reach (being prepared,
    /// mapped for the first time, or left by every mapping).
    pub(super) fn set_sum(&self, f: Folio, i: u64, v: u64) {
        if self.wide(f) {
            let pair = f.page(2 + i / 2).wide_pair();
            let mut halves = pair.load();
            halves[i as usize % 2] = v;
            pair.store(halves);
        } else {
            self.sum_word(f, i).store(v, Relaxed);
        }
    }

    /// Adds each `(i, delta)` to sum `i`: with plain loads and stores when
    /// `plain` (seed 000's exclusive writer), else with atomics. Returns
    /// the locked operations taken: one per sum, or at `all-wide` one per
    /// pair and one per exchange lost to another writer.
    pub(super) fn add_sums(&self, f: Folio, deltas: &[(u64, u64)], plain: bool) -> u64 {
        if !self.wide(f) {
            for &(i, d) in deltas {
                let sum = self.sum_word(f, i);
                match plain {
                    true => sum.store(sum.load(Relaxed).wrapping_add(d), Relaxed),
                    false => _ = sum.fetch_add(d, Relaxed),
                }
            }
            return deltas.len() as u64;
        }
        let mut locked = 0;
        for pair in deltas.chunk_by(|a, b| a.0 / 2 == b.0 / 2) {
            let mut d = [0; 2];
            pair.iter().for_each(|&(i, v)| d[i as usize % 2] = v);
            let wide = f.page(2 + pair[0].0 / 2).wide_pair();
            if plain {
                let [a, b] = wide.load();
                wide.store([a.wrapping_add(d[0]), b.wrapping_add(d[1])]);
            } else {
                locked += 1 + wide.add(d);
            }
        }
        locked
    }

    /// The last page holding one of `f`'s `n` rmap sums (1 for none).
    pub(super) fn last_sum_page(&self, f: Folio, n: u64) -> u64 {
        if self.wide(f) {
            n.div_ceil(2) + 1
        } else if self.f.stage == RmapIdStage::AllPacked {
            n.saturating_sub(1).div_ceil(2) + 1
        } else {
            n.min(f.nr_pages() - 1).max(1)
        }
    }
}

impl PageMapcounts {
    /// The fields the design keeps in `f`, by Linux's names, raw
    /// ([`super::MapcountDesign::fields`]).
    pub(super) fn named_fields(&self, f: Folio) -> Vec<(String, i64)> {
        let get = |i: usize| w(f, i).load(Relaxed) as i64;
        let mut out: Vec<(String, i64)> = Vec::new();
        let mut push = |name: &str, v: i64| out.push((name.to_string(), v));
        match (self.f.total, self.seed_003()) {
            (Total::None, _) => {}
            (_, true) => push("subpages_mapcount", get(field::TOTAL)),
            (_, false) => push("_large_mapcount", self.large_raw(f) as i64),
        }
        if self.f.nr_pages_mapped {
            push("_nr_pages_mapped", get(field::NR_PAGES_MAPPED));
        }
        push("_entire_mapcount", get(field::ENTIRE));
        if self.f.double_map {
            push("PG_double_map", f.page(1).test(crate::phys::pg::DOUBLE_MAP) as i64);
        }
        push("_pincount", get(field::PINCOUNT));
        if self.f.mm_ids {
            let ids = f.page(1).ids.load(Relaxed);
            for s in 0..2 {
                push(&format!("_mm_id[{s}]"), slot_id(ids, s) as i64);
                push(&format!("_mm_id_mapcount[{s}]"), get(field::SLOT0 + s));
            }
            push("maybe shared bit", shared(f) as i64);
        }
        if self.f.rmap_sums.is_some() {
            push("rmap seqcount", f.page(1).link.load(Relaxed) as i64);
            for i in 0..self.sum_words(f) {
                push(&format!("rmap sum word {}", i + 1), self.sum(f, i) as i64);
            }
        }
        out
    }
}
