//! Mapcount designs: how a folio counts its page-table mappings and answers
//! "is it mapped by more than one address space?".
//!
//! Small folios count in the head page's `_mapcount` the same way in every
//! design (handled by [`crate::rmap`]); a [`MapcountDesign`] owns the fields of
//! large folios. This issue carries the Linux 6.15+ default, [`MmId`]; the
//! older designs plug into the same trait.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::*;

use crate::folio::Folio;
use crate::sync::BitSpinLock;

/// An address space's identity in folio slots (`mm_id_t`; 0 is `MM_ID_DUMMY`).
pub type MmId = u32;

/// Which page-table level a mapping uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// `nr` PTEs mapping consecutive pages.
    Pte,
    /// One PMD mapping the whole (PMD-sized) folio.
    Pmd,
}

/// What an rmap removal did to the folio (`__folio_remove_rmap` results).
#[derive(Clone, Copy, Debug, Default)]
pub struct Removed {
    /// Pages that stopped being mapped (`NR_ANON_MAPPED` delta).
    pub unmapped_pages: u64,
    /// The folio is still mapped but only in part (deferred split candidate).
    pub partially_mapped: bool,
}

/// Ground truth for one folio, rebuilt by the checker from page-table walks.
#[derive(Clone, Debug, Default)]
pub struct FolioTruth {
    /// PTE mappings of each page.
    pub pte: Vec<u32>,
    /// PMD mappings of the whole folio.
    pub pmd: u32,
    /// Mappings (PTEs + PMDs) per address space.
    pub per_mm: BTreeMap<MmId, u32>,
}

impl FolioTruth {
    pub fn total(&self) -> u32 {
        self.pte.iter().sum::<u32>() + self.pmd
    }
}

/// The operations the rmap layer performs on a large folio's counters, and
/// the queries it asks. Every method runs with the PTL of the table being
/// changed held, as in Linux.
pub trait MapcountDesign: Send + Sync {
    /// The design's name (`--mapcount NAME`).
    fn name(&self) -> &'static str;
    /// Initialises the fields of a freshly allocated large folio (`prep_compound_head`).
    fn prep(&self, f: Folio);
    /// Returns a description of each field not back at its initial value
    /// (`free_tail_page_prepare` "bad page" checks); empty when freeable.
    fn check_freeable(&self, f: Folio) -> Vec<String>;
    /// First mapping of a new folio by `mm`: all pages by PTEs, or one PMD
    /// (`folio_add_new_anon_rmap`).
    fn add_new(&self, f: Folio, level: Level, mm: MmId);
    /// Adds `nr` PTE mappings of pages `first..first+nr`, or one PMD mapping.
    fn add(&self, f: Folio, first: u64, nr: u64, level: Level, mm: MmId);
    /// Removes mappings, the mirror image of [`MapcountDesign::add`].
    fn remove(&self, f: Folio, first: u64, nr: u64, level: Level, mm: MmId) -> Removed;
    /// `folio_mapcount`: page-table entries (PTEs and PMDs) mapping the folio.
    fn mapcount(&self, f: Folio) -> u64;
    /// `folio_entire_mapcount`: PMD mappings.
    fn entire_mapcount(&self, f: Folio) -> u64;
    /// `folio_precise_page_mapcount`: entries mapping page `i`, if the design
    /// keeps per-page counts.
    fn page_mapcount(&self, f: Folio, i: u64) -> Option<u64>;
    /// `folio_maybe_mapped_shared`: false only if one MM maps the folio; may be
    /// true although one MM maps it (imprecise designs).
    fn maybe_mapped_shared(&self, f: Folio) -> bool;
    /// Whether a write fault by `mm` may reuse the whole large anon folio
    /// (`__wp_can_reuse_large_anon_folio`); false means copy.
    fn can_reuse(&self, f: Folio, mm: MmId) -> bool;
    /// Compares the design's fields with the ground truth; returns violations.
    fn verify(&self, f: Folio, truth: &FolioTruth) -> Vec<String>;
}

/// Chooses a design by name.
pub fn design_by_name(name: &str) -> Option<Box<dyn MapcountDesign>> {
    match name {
        "mm-id" => Some(Box::new(MmId6_15)),
        _ => None,
    }
}

/// Names of the designs foliomm carries.
pub const DESIGN_NAMES: &[&str] = &["mm-id"];

/// Linux 6.15+ with the default `CONFIG_PAGE_MAPCOUNT`: per-page `_mapcount`,
/// `_nr_pages_mapped`, `_entire_mapcount`, `_large_mapcount`, and two MM-ID
/// slots with per-slot mapcounts and a "maybe shared" bit, updated under a
/// bit spinlock in `_mm_ids` (include/linux/rmap.h `folio_add_return_large_mapcount`,
/// `folio_sub_return_large_mapcount`; mm/rmap.c `__folio_add_rmap`,
/// `__folio_remove_rmap`). Differs from Linux: NR_ANON_MAPPED statistics are
/// returned to the caller instead of kept per node.
pub struct MmId6_15;

/// Field layout in the second page's descriptor (`folio->_large_mapcount` etc.).
mod field {
    pub const LARGE: usize = 0;
    pub const NR_PAGES_MAPPED: usize = 1;
    pub const ENTIRE: usize = 2;
    pub const PINCOUNT: usize = crate::folio::PINCOUNT_WORD;
    pub const SLOT0: usize = 4;
    /// `FOLIO_MM_IDS_LOCK_BITNUM`: top bit of `_mm_id[0]`.
    pub const LOCK_BIT: u32 = 31;
    /// `FOLIO_MM_IDS_SHARED_BITNUM`: top bit of `_mm_id[1]`.
    pub const SHARED_BIT: u32 = 63;
    pub const ID_MASK: u64 = (1 << 31) - 1;
}

/// `ENTIRELY_MAPPED`: added to `_nr_pages_mapped` while a PMD maps the folio.
pub const ENTIRELY_MAPPED: i32 = 0x80_0000;

impl MmId6_15 {
    fn w(f: Folio<'_>, i: usize) -> &std::sync::atomic::AtomicI32 {
        &f.page(1).w[i]
    }
    fn slot_id(ids: u64, s: usize) -> MmId {
        ((ids >> (32 * s)) & field::ID_MASK) as MmId
    }
    fn set_slot_id(f: Folio, s: usize, id: MmId) {
        let shift = 32 * s as u32;
        let mask = field::ID_MASK << shift;
        let ids = &f.page(1).ids;
        let cur = ids.load(Relaxed);
        // The caller holds the lock bit; keep every flag bit as it is.
        ids.store((cur & !mask) | ((id as u64) << shift), Relaxed);
    }
    fn set_shared(f: Folio, on: bool) {
        let bit = 1u64 << field::SHARED_BIT;
        if on {
            f.page(1).ids.fetch_or(bit, Relaxed);
        } else {
            f.page(1).ids.fetch_and(!bit, Relaxed);
        }
    }
    fn shared(f: Folio) -> bool {
        f.page(1).ids.load(Relaxed) & (1 << field::SHARED_BIT) != 0
    }

    /// `folio_add_return_large_mapcount`: raw large mapcount += d and the slot
    /// bookkeeping of KERNEL-REFERENCE §2.5.
    fn add_large(f: Folio, d: i32, mm: MmId) {
        let _lock = BitSpinLock::lock(&f.page(1).ids, field::LOCK_BIT);
        let large = Self::w(f, field::LARGE);
        let t = large.load(Relaxed) + d;
        large.store(t, Relaxed);
        let ids = f.page(1).ids.load(Relaxed);
        for s in 0..2 {
            if Self::slot_id(ids, s) == mm {
                Self::w(f, field::SLOT0 + s).fetch_add(d, Relaxed);
                return;
            }
        }
        if Self::slot_id(ids, 0) == 0 {
            Self::set_slot_id(f, 0, mm);
            Self::w(f, field::SLOT0).store(d - 1, Relaxed);
            if t != d - 1 {
                Self::set_shared(f, true);
            }
        } else if Self::slot_id(ids, 1) == 0 {
            Self::set_slot_id(f, 1, mm);
            Self::w(f, field::SLOT0 + 1).store(d - 1, Relaxed);
            Self::set_shared(f, true);
        }
        // Else: both slots belong to other MMs; this MM is untracked and the
        // shared bit is necessarily set already.
    }

    /// `folio_sub_return_large_mapcount`.
    fn sub_large(f: Folio, d: i32, mm: MmId) -> i32 {
        let _lock = BitSpinLock::lock(&f.page(1).ids, field::LOCK_BIT);
        let large = Self::w(f, field::LARGE);
        let t = large.load(Relaxed) - d;
        large.store(t, Relaxed);
        let ids = f.page(1).ids.load(Relaxed);
        for s in 0..2 {
            if Self::slot_id(ids, s) == mm {
                let c = Self::w(f, field::SLOT0 + s);
                let v = c.load(Relaxed) - d;
                if v >= 0 {
                    c.store(v, Relaxed);
                    return t;
                }
                c.store(-1, Relaxed);
                Self::set_slot_id(f, s, 0);
                break;
            }
        }
        if Self::w(f, field::SLOT0).load(Relaxed) == t || Self::w(f, field::SLOT0 + 1).load(Relaxed) == t {
            Self::set_shared(f, false);
        }
        t
    }
}

impl MapcountDesign for MmId6_15 {
    fn name(&self) -> &'static str {
        "mm-id"
    }

    fn prep(&self, f: Folio) {
        let w = &f.page(1).w;
        w[field::LARGE].store(-1, Relaxed);
        w[field::NR_PAGES_MAPPED].store(0, Relaxed);
        w[field::ENTIRE].store(-1, Relaxed);
        w[field::PINCOUNT].store(0, Relaxed);
        w[field::SLOT0].store(-1, Relaxed);
        w[field::SLOT0 + 1].store(-1, Relaxed);
        f.page(1).ids.store(0, Relaxed);
    }

    fn check_freeable(&self, f: Folio) -> Vec<String> {
        let w = &f.page(1).w;
        let mut bad = Vec::new();
        let expect = [
            (field::LARGE, -1, "_large_mapcount"),
            (field::NR_PAGES_MAPPED, 0, "_nr_pages_mapped"),
            (field::ENTIRE, -1, "_entire_mapcount"),
            (field::PINCOUNT, 0, "_pincount"),
            (field::SLOT0, -1, "_mm_id_mapcount[0]"),
            (field::SLOT0 + 1, -1, "_mm_id_mapcount[1]"),
        ];
        for (i, want, name) in expect {
            let v = w[i].load(Relaxed);
            if v != want {
                bad.push(format!("{name} is {v}, expected {want}"));
            }
        }
        let ids = f.page(1).ids.load(Relaxed);
        if ids != 0 {
            bad.push(format!("_mm_ids is {ids:#x}, expected 0"));
        }
        for i in 0..f.nr_pages() {
            let m = f.page(i).mapcount.load(Relaxed);
            if m != -1 {
                bad.push(format!("page {i} _mapcount is {m}, expected -1"));
            }
        }
        bad
    }

    fn add_new(&self, f: Folio, level: Level, mm: MmId) {
        let nr = f.nr_pages() as i32;
        let (large, entire, nr_mapped) = match level {
            Level::Pte => {
                for i in 0..f.nr_pages() {
                    f.page(i).mapcount.store(0, Relaxed);
                }
                (nr - 1, -1, nr)
            }
            Level::Pmd => (0, 0, ENTIRELY_MAPPED),
        };
        // folio_set_large_mapcount(): the folio is not visible yet, no lock.
        Self::w(f, field::LARGE).store(large, Relaxed);
        Self::w(f, field::ENTIRE).store(entire, Relaxed);
        Self::w(f, field::NR_PAGES_MAPPED).store(nr_mapped, Relaxed);
        Self::w(f, field::SLOT0).store(large, Relaxed);
        Self::set_slot_id(f, 0, mm);
    }

    fn add(&self, f: Folio, first: u64, nr: u64, level: Level, mm: MmId) {
        match level {
            Level::Pte => {
                let mut newly = 0;
                for i in first..first + nr {
                    if f.page(i).mapcount.fetch_add(1, Relaxed) == -1 {
                        newly += 1;
                    }
                }
                Self::w(f, field::NR_PAGES_MAPPED).fetch_add(newly, Relaxed);
                Self::add_large(f, nr as i32, mm);
            }
            Level::Pmd => {
                if Self::w(f, field::ENTIRE).fetch_add(1, Relaxed) == -1 {
                    Self::w(f, field::NR_PAGES_MAPPED).fetch_add(ENTIRELY_MAPPED, Relaxed);
                }
                Self::add_large(f, 1, mm);
            }
        }
    }

    fn remove(&self, f: Folio, first: u64, nr: u64, level: Level, mm: MmId) -> Removed {
        let nr_mapped = Self::w(f, field::NR_PAGES_MAPPED);
        match level {
            Level::Pte => {
                Self::sub_large(f, nr as i32, mm);
                let mut last = 0;
                for i in first..first + nr {
                    if f.page(i).mapcount.fetch_sub(1, Relaxed) == 0 {
                        last += 1;
                    }
                }
                let after = nr_mapped.fetch_sub(last, Relaxed) - last;
                let unmapped = if after < ENTIRELY_MAPPED { last as u64 } else { 0 };
                Removed { unmapped_pages: unmapped, partially_mapped: unmapped > 0 && after != 0 }
            }
            Level::Pmd => {
                Self::sub_large(f, 1, mm);
                let mut removed = Removed::default();
                if Self::w(f, field::ENTIRE).fetch_sub(1, Relaxed) == 0 {
                    let after = nr_mapped.fetch_sub(ENTIRELY_MAPPED, Relaxed) - ENTIRELY_MAPPED;
                    removed.unmapped_pages = f.nr_pages() - after as u64;
                    removed.partially_mapped = after > 0 && after < f.nr_pages() as i32;
                }
                removed
            }
        }
    }

    fn mapcount(&self, f: Folio) -> u64 {
        (Self::w(f, field::LARGE).load(Relaxed) + 1) as u64
    }

    fn entire_mapcount(&self, f: Folio) -> u64 {
        (Self::w(f, field::ENTIRE).load(Relaxed) + 1) as u64
    }

    fn page_mapcount(&self, f: Folio, i: u64) -> Option<u64> {
        Some((f.page(i).mapcount.load(Relaxed) + 1) as u64 + self.entire_mapcount(f))
    }

    fn maybe_mapped_shared(&self, f: Folio) -> bool {
        self.mapcount(f) > 1 && Self::shared(f)
    }

    fn can_reuse(&self, f: Folio, mm: MmId) -> bool {
        let m = self.mapcount(f);
        if m <= 1 || Self::shared(f) || m != f.refcount() as u64 {
            return false;
        }
        let _lock = BitSpinLock::lock(&f.page(1).ids, field::LOCK_BIT);
        let ids = f.page(1).ids.load(Relaxed);
        let ok = !Self::shared(f) && self.mapcount(f) == f.refcount() as u64;
        debug_assert!(!ok || Self::slot_id(ids, 0) == mm || Self::slot_id(ids, 1) == mm);
        ok
    }

    fn verify(&self, f: Folio, truth: &FolioTruth) -> Vec<String> {
        let mut bad = Vec::new();
        let total = truth.total() as i64;
        let large = Self::w(f, field::LARGE).load(Relaxed) as i64 + 1;
        if large != total {
            bad.push(format!("large mapcount {large}, page tables say {total}"));
        }
        let entire = self.entire_mapcount(f) as u32;
        if entire != truth.pmd {
            bad.push(format!("entire mapcount {entire}, page tables say {}", truth.pmd));
        }
        let mut pages_mapped = 0;
        for (i, &n) in truth.pte.iter().enumerate() {
            let m = f.page(i as u64).mapcount.load(Relaxed) + 1;
            if m as u32 != n {
                bad.push(format!("page {i} mapcount {m}, page tables say {n}"));
            }
            pages_mapped += (n > 0) as i32;
        }
        let want = pages_mapped + if truth.pmd > 0 { ENTIRELY_MAPPED } else { 0 };
        let have = Self::w(f, field::NR_PAGES_MAPPED).load(Relaxed);
        if have != want {
            bad.push(format!("_nr_pages_mapped {have:#x}, page tables say {want:#x}"));
        }
        // Slot rules (KERNEL-REFERENCE §2.5 sanity checks).
        let ids = f.page(1).ids.load(Relaxed);
        let mut occupied = 0;
        let mut slot_sum = 0i64;
        for s in 0..2 {
            let id = Self::slot_id(ids, s);
            let c = Self::w(f, field::SLOT0 + s).load(Relaxed);
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
        let shared = Self::shared(f);
        if total == 0 && shared {
            bad.push("shared bit set on an unmapped folio".into());
        }
        if occupied == 2 && !shared {
            bad.push("two occupied slots but the shared bit is clear".into());
        }
        if slot_sum > total {
            bad.push(format!("slot counts sum to {slot_sum} > large mapcount {total}"));
        }
        if truth.per_mm.len() > 1 && !self.maybe_mapped_shared(f) {
            bad.push(format!("answered exclusive while {} MMs map the folio (wrong-exclusive)", truth.per_mm.len()));
        }
        bad
    }
}
