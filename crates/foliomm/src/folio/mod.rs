//! Folio handles over the memmap (`struct folio`, include/linux/mm.h helpers).
//!
//! A [`Folio`] names the head page of a block of `2^order` frames. Refcount and
//! flags live in the head descriptor; a large folio keeps its order in the
//! second descriptor (`_flags_1`) and its mapcount fields where the chosen
//! [`crate::mapcount::MapcountDesign`] puts them. [`thp`] holds the THP
//! policy that decides which folio sizes anonymous faults may use.

pub mod thp;

use crate::arch::Pfn;
use crate::phys::{pg, Page, PhysMem};
use crate::sync::atomic::Ordering::*;
use crate::sync::cacheline::{self, Structure};
use crate::sync::BitSpinLock;

/// `GUP_PIN_COUNTING_BIAS`: refcount added per FOLL_PIN of a small folio.
pub const GUP_PIN_COUNTING_BIAS: i32 = 1024;
/// The word of the second page's `w` that holds `_pincount` in every design.
pub const PINCOUNT_WORD: usize = 3;

/// A handle to a folio: the pfn of its head page.
#[derive(Clone, Copy)]
pub struct Folio<'a> {
    phys: &'a PhysMem,
    pub pfn: Pfn,
}

impl<'a> Folio<'a> {
    /// The folio whose head is `pfn` (no check that it is a head).
    pub fn from_head(phys: &'a PhysMem, pfn: Pfn) -> Folio<'a> {
        Folio { phys, pfn }
    }

    /// The folio containing `pfn` (`page_folio` / `compound_head`).
    pub fn containing(phys: &'a PhysMem, pfn: Pfn) -> Folio<'a> {
        let p = phys.page(pfn);
        let head = if p.test(pg::TAIL) { p.compound.load(Relaxed) } else { pfn };
        Folio { phys, pfn: head }
    }

    pub fn phys(&self) -> &'a PhysMem {
        self.phys
    }

    /// Descriptor of page `i` of the folio (`folio_page`).
    pub fn page(&self, i: u64) -> &'a Page {
        self.phys.page(self.pfn + i)
    }

    pub fn head(&self) -> &'a Page {
        self.page(0)
    }

    pub fn is_large(&self) -> bool {
        self.head().test(pg::HEAD)
    }

    /// `folio_order`: 0 for a small folio, else from the second page.
    pub fn order(&self) -> u32 {
        if self.is_large() {
            self.page(1).order_field()
        } else {
            0
        }
    }

    pub fn nr_pages(&self) -> u64 {
        1 << self.order()
    }

    pub fn refcount(&self) -> i32 {
        self.head().refcount.load(Acquire)
    }

    /// `folio_ref_add`.
    pub fn ref_add(&self, n: i32) {
        cacheline::write(Structure::Folio, self.head());
        self.head().refcount.fetch_add(n, AcqRel);
    }

    /// Drops `n` references (`folio_put_refs`); returns true if that was the last.
    pub fn put_refs(&self, n: i32) -> bool {
        cacheline::write(Structure::Folio, self.head());
        let old = self.head().refcount.fetch_sub(n, AcqRel);
        assert!(old >= n, "folio {:#x}: refcount underflow ({old} - {n})", self.pfn);
        old == n
    }

    /// `folio_try_get`: takes a reference unless the count is already 0
    /// (the folio is being freed); returns whether it did.
    pub fn try_get(&self) -> bool {
        let rc = &self.head().refcount;
        rc.fetch_update(AcqRel, Acquire, |n| (n > 0).then_some(n + 1)).is_ok()
    }

    /// `folio->index`: the page index of the first page (for an anon folio
    /// `linear_page_index` of where it was first mapped). Kept in the head's
    /// `compound` word, which only tails and free blocks use otherwise.
    pub fn index(&self) -> u64 {
        self.head().compound.load(Relaxed)
    }

    /// Sets `folio->index`.
    pub fn set_index(&self, index: u64) {
        self.head().compound.store(index, Relaxed);
    }

    pub fn test_anon(&self) -> bool {
        self.head().test(pg::ANON)
    }

    /// `folio_test_ksm`: a KSM folio (always also anon).
    pub fn test_ksm(&self) -> bool {
        self.head().test(pg::KSM)
    }

    pub fn is_zero_page(&self) -> bool {
        self.head().test(pg::ZERO)
    }

    /// `PageAnonExclusive` of page `i`.
    pub fn anon_exclusive(&self, i: u64) -> bool {
        self.page(i).test(pg::ANON_EXCLUSIVE)
    }

    pub fn set_anon_exclusive(&self, i: u64, on: bool) {
        if on {
            self.page(i).set(pg::ANON_EXCLUSIVE)
        } else {
            self.page(i).clear(pg::ANON_EXCLUSIVE)
        }
    }

    /// `_pincount` of a large folio (FOLL_PIN references).
    pub fn pincount(&self) -> i32 {
        self.page(1).w[PINCOUNT_WORD].load(Relaxed)
    }

    /// Takes one FOLL_PIN reference the way Linux counts it
    /// (`try_grab_folio`): a small folio's refcount grows by
    /// [`GUP_PIN_COUNTING_BIAS`], a large folio's by one with `_pincount` + 1.
    pub fn grab_pin(&self) {
        if self.is_large() {
            self.page(1).w[PINCOUNT_WORD].fetch_add(1, Relaxed);
            self.ref_add(1);
        } else {
            self.ref_add(GUP_PIN_COUNTING_BIAS);
        }
    }

    /// `folio_maybe_dma_pinned`: exact for large folios, a guess from the
    /// refcount for small ones (many plain references look like a pin).
    pub fn maybe_dma_pinned(&self) -> bool {
        if self.is_large() {
            self.pincount() > 0
        } else {
            self.refcount() >= GUP_PIN_COUNTING_BIAS
        }
    }

    /// `folio_lock`: waits, asleep on simulated CPUs, until `PG_locked` is
    /// taken. Callers take it before any page-table lock, as Linux does.
    pub fn lock(&self) -> BitSpinLock<'a> {
        BitSpinLock::lock_sleeping(Structure::Folio, &self.head().flags, 0)
    }

    /// `folio_trylock`.
    pub fn trylock(&self) -> Option<BitSpinLock<'a>> {
        BitSpinLock::try_lock(Structure::Folio, &self.head().flags, 0)
    }
}
