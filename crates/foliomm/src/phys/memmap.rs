//! The memmap: one 64-byte descriptor per frame (`struct page`) and its flag
//! bits (`enum pageflags`).

#[cfg(not(any(loom, shuttle)))]
use super::arena::ZeroIsDefault;
use crate::sync::atomic::{AtomicI32, AtomicU64, Ordering::*};
use crate::Errno;

/// Page descriptor flag bits (`enum pageflags`), stored in [`Page::flags`].
pub mod pg {
    /// `PG_locked`: the folio lock; on a page-table page, its split PTL.
    pub const LOCKED: u64 = 1 << 0;
    /// `PG_head`: first page of a large folio.
    pub const HEAD: u64 = 1 << 1;
    /// The page is a tail of a large folio (Linux encodes this in `compound_head`).
    pub const TAIL: u64 = 1 << 2;
    /// `PageAnon`: `folio->mapping` has `FOLIO_MAPPING_ANON` set.
    pub const ANON: u64 = 1 << 3;
    /// `PG_anon_exclusive`: this page is exclusive to one MM (per page).
    pub const ANON_EXCLUSIVE: u64 = 1 << 4;
    /// `PG_dirty`.
    pub const DIRTY: u64 = 1 << 5;
    /// `PageBuddy`: first page of a free block in the buddy allocator.
    pub const BUDDY: u64 = 1 << 6;
    /// `PageTable`: the frame is a page table.
    pub const TABLE: u64 = 1 << 7;
    /// The frame is (part of) the shared zero page or the huge zero folio.
    pub const ZERO: u64 = 1 << 8;
    /// `PG_swapbacked`.
    pub const SWAPBACKED: u64 = 1 << 9;
    /// `PG_partially_mapped` (on the second page): queued for deferred split.
    pub const PARTIALLY_MAPPED: u64 = 1 << 10;
    /// `PG_uptodate` (of a page-cache folio): its bytes are valid; a
    /// fallocated shmem folio has none until written or faulted.
    pub const UPTODATE: u64 = 1 << 11;
    /// `PG_hugetlb` (a folio of the hugetlb pool): freed back to the pool.
    pub const HUGETLB: u64 = 1 << 12;
    /// `HPageRestoreReserve`: a hugetlb folio whose freeing gives a
    /// reservation back to the pool (its owner's mapping dropped it).
    pub const HUGETLB_RESTORE_RESERVE: u64 = 1 << 13;
    /// `PG_swapcache`: the folio holds swap slots in the swap cache.
    pub const SWAPCACHE: u64 = 1 << 14;
    /// `PG_lru`: the folio is on an LRU list (set and cleared under the
    /// LRU lock).
    pub const LRU: u64 = 1 << 15;
    /// `PG_active`: on the active list.
    pub const ACTIVE: u64 = 1 << 16;
    /// `PG_referenced`: reclaim saw the folio referenced once already.
    pub const REFERENCED: u64 = 1 << 17;
    /// `folio_test_ksm`: a KSM folio (`PAGE_MAPPING_KSM` in Linux's
    /// `folio->mapping`, whose `link` then names its stable node).
    pub const KSM: u64 = 1 << 18;
    /// On the deferred split queue (on the second page; Linux's
    /// `!list_empty(&folio->_deferred_list)`): partially mapped, or from
    /// 6.12 a THP waiting to be judged underused.
    pub const DEFERRED: u64 = 1 << 19;
    /// `HPG_temporary`: a hugetlb page taken from the buddy allocator for a
    /// migration, freed back to it rather than to the pool.
    pub const HUGETLB_TEMPORARY: u64 = 1 << 20;
    /// A hugetlb page isolated for migration (Linux clears
    /// `HPG_migratable` instead, set on pages in use).
    pub const HUGETLB_ISOLATED: u64 = 1 << 21;
    /// On the second page of a large folio, seed 000's idea "once we detect
    /// heavy contention ... stop the rmap ID tracking and mark the folio as
    /// always assumed mapped shared" (stage `all-give-up`): its rmap sums
    /// are no longer kept.
    pub const RMAP_UNTRACKED: u64 = 1 << 22;
    /// `PG_double_map` (Linux <= 6.1, on the second page): an anon THP is
    /// mapped by PMDs and PTEs at once, and every page's `_mapcount` is
    /// raised by one (the `subpage` design only).
    pub const DOUBLE_MAP: u64 = 1 << 23;
    /// Bits 56..63 hold an order: of a free block on its first page, of a
    /// large folio on its second page (`folio->_flags_1`).
    pub const ORDER_SHIFT: u32 = 56;
    pub const ORDER_MASK: u64 = 0xff << ORDER_SHIFT;
}

/// One `struct page`: 64 bytes, one cache line, all fields atomic.
///
/// The meaning of `compound`, `link`, `w` and `ids` depends on the role of the
/// page, as Linux overlays its unions: on a free block they link the buddy free
/// list; on a tail page `compound` names the head; on the second page of a large
/// folio `w` and `ids` hold the mapcount design's fields (`_large_mapcount`,
/// `_entire_mapcount`, `_mm_id[]`, ...).
#[repr(C, align(64))]
#[derive(Default)]
pub struct Page {
    pub flags: AtomicU64,
    /// `_refcount` (unbiased); only meaningful on a head or small page.
    pub refcount: AtomicI32,
    /// `_mapcount`, raw (biased by -1: -1 means unmapped).
    pub mapcount: AtomicI32,
    /// Tail page: pfn of the head. Free block: next block in its free list.
    pub compound: AtomicU64,
    /// Free block: previous block in its free list. Anon folio head: the
    /// `anon_vma` identity (`folio->mapping`).
    pub link: AtomicU64,
    /// Design-specific 32-bit counters (second page of a large folio).
    pub w: [AtomicI32; 6],
    /// Design-specific word (second page: `_mm_ids` with its lock and shared bits).
    pub ids: AtomicU64,
}

impl Page {
    pub fn test(&self, bit: u64) -> bool {
        self.flags.load(Relaxed) & bit != 0
    }
    pub fn set(&self, bit: u64) {
        self.flags.fetch_or(bit, Relaxed);
    }
    pub fn clear(&self, bit: u64) {
        self.flags.fetch_and(!bit, Relaxed);
    }
    /// Sets `bit`; true if it was set already (`test_and_set_bit`).
    pub fn test_and_set(&self, bit: u64) -> bool {
        self.flags.fetch_or(bit, AcqRel) & bit != 0
    }
    pub fn order_field(&self) -> u32 {
        ((self.flags.load(Relaxed) & pg::ORDER_MASK) >> pg::ORDER_SHIFT) as u32
    }
    pub(super) fn set_order_field(&self, order: u32) {
        let f = self.flags.load(Relaxed) & !pg::ORDER_MASK;
        self.flags.store(f | ((order as u64) << pg::ORDER_SHIFT), Relaxed);
    }
    /// Makes every field of this descriptor what `other`'s is (no one
    /// else writes either meanwhile).
    pub(super) fn copy_from(&self, other: &Page) {
        self.flags.store(other.flags.load(Relaxed), Relaxed);
        self.refcount.store(other.refcount.load(Relaxed), Relaxed);
        self.mapcount.store(other.mapcount.load(Relaxed), Relaxed);
        self.compound.store(other.compound.load(Relaxed), Relaxed);
        self.link.store(other.link.load(Relaxed), Relaxed);
        for (w, o) in self.w.iter().zip(&other.w) {
            w.store(o.load(Relaxed), Relaxed);
        }
        self.ids.store(other.ids.load(Relaxed), Relaxed);
    }
}

/// A per-frame array ([`Page`]s, generations): its own host mapping, so
/// descriptors of frames never used cost no host memory (Linux allocates
/// its memmap at boot; a model of 64 GiB would otherwise pay 1 GiB of host
/// memory up front).
#[cfg(not(any(loom, shuttle)))]
pub(super) type PerFrame<T> = super::arena::Zeroed<T>;

/// Under loom and shuttle the atomics carry the checkers' state, so each
/// value is built (the machines there are tiny).
#[cfg(any(loom, shuttle))]
pub(super) type PerFrame<T> = Box<[T]>;

#[cfg(not(any(loom, shuttle)))]
pub(super) fn new_per_frame<T: ZeroIsDefault>(n: u64) -> Result<PerFrame<T>, Errno> {
    super::arena::Zeroed::new(n as usize)
}

#[cfg(any(loom, shuttle))]
pub(super) fn new_per_frame<T: Default>(n: u64) -> Result<PerFrame<T>, Errno> {
    Ok((0..n).map(|_| T::default()).collect())
}

/// Gives the host memory behind the values `range` back where it covers
/// whole host pages; they read as zero (their default) afterwards.
#[cfg(not(any(loom, shuttle)))]
pub(super) fn discard<T: ZeroIsDefault>(values: &PerFrame<T>, range: std::ops::Range<usize>) {
    values.discard(range)
}

/// Under loom and shuttle the values stay (the machines there are tiny).
#[cfg(any(loom, shuttle))]
pub(super) fn discard<T>(_values: &PerFrame<T>, _range: std::ops::Range<usize>) {}

/// Backs the values with host memory now (see `Zeroed::populate`).
#[cfg(not(any(loom, shuttle)))]
pub(super) fn populate<T: ZeroIsDefault>(values: &PerFrame<T>) -> Result<(), crate::Errno> {
    values.populate()
}

/// Under loom and shuttle the values are built already.
#[cfg(any(loom, shuttle))]
pub(super) fn populate<T>(_values: &PerFrame<T>) -> Result<(), crate::Errno> {
    Ok(())
}

// SAFETY: outside loom and shuttle every field of `Page` is a `std` atomic
// integer, for which zero bytes are the value 0: what `Page::default()` holds.
#[cfg(not(any(loom, shuttle)))]
unsafe impl ZeroIsDefault for Page {}
// SAFETY: a `std` atomic integer of zero bytes is 0, its default.
#[cfg(not(any(loom, shuttle)))]
unsafe impl ZeroIsDefault for crate::sync::atomic::AtomicU32 {}

/// How many descriptors ahead [`super::PhysMem::pages_ahead`] prefetches.
const PREFETCH_AHEAD: u64 = 8;

impl super::PhysMem {
    /// The descriptors of `pfns` in order, each prefetched for writing a few
    /// descriptors before it is reached: a pass over a large folio's
    /// descriptors (rmap removal, freeing) is otherwise one cache miss
    /// after another, each waited for by an atomic.
    /// Where every frame of `pfns` has its own descriptor (always, but in
    /// an optimized hugetlb folio), the pass walks them as one slice.
    pub fn pages_ahead(&self, pfns: std::ops::Range<crate::arch::Pfn>) -> impl Iterator<Item = &Page> {
        let end = pfns.end;
        let real = self.vmemmap.all_real(pfns.clone()).then(|| &self.memmap[pfns.start as usize..end as usize]);
        pfns.enumerate().map(move |(i, pfn)| match real {
            Some(pages) => {
                if let Some(ahead) = pages.get(i + PREFETCH_AHEAD as usize) {
                    prefetch_for_write(ahead);
                }
                &pages[i]
            }
            None => {
                if pfn + PREFETCH_AHEAD < end {
                    prefetch_for_write(self.page(pfn + PREFETCH_AHEAD));
                }
                self.page(pfn)
            }
        })
    }
}

/// Asks the CPU to bring `page`'s cache line in for writing; a hint only.
fn prefetch_for_write(page: &Page) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads and writes no memory and cannot fault; the
    // address is that of a live descriptor.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0};
        _mm_prefetch::<_MM_HINT_ET0>((page as *const Page).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = page;
}
