//! HugeTLB Vmemmap Optimization (HVO, `mm/hugetlb_vmemmap.c`): the
//! descriptors of a hugetlb folio's tail pages are all alike, so Linux keeps
//! only the first page of the folio's memmap (64 descriptors) and maps the
//! rest of the range to it read-only, freeing 7 of 8 pages of memmap per
//! 2 MiB page and 4095 of 4096 per 1 GiB page.
//!
//! foliomm keeps the same first 64 descriptors and gives the host memory of
//! the others back (`MADV_DONTNEED`); [`super::PhysMem::page`] answers every
//! later tail with one descriptor, the 64th, a plain tail. Differs from
//! Linux: Linux's alias repeats the first 64 descriptors, so every 64th tail
//! reads as a head (a "fake head", which `page_fixed_fake_head` sees
//! through); here no tail reads as a head. The memmap is host memory, not
//! model RAM, so optimizing frees no model frames and restoring cannot fail
//! for want of them (Linux allocates 7 pages, and keeps a page in the pool
//! as a surplus page when it cannot: `__update_and_free_hugetlb_folio`).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::*};

use crate::arch::{Pfn, PAGE_SIZE, PMD_ORDER, PUD_ORDER};
use crate::Errno;

/// Descriptors in one page of memmap, the part an optimized folio keeps
/// (`HUGETLB_VMEMMAP_RESERVE_SIZE / sizeof(struct page)`: 4096 / 64). A
/// constant, not derived from `Page`'s size, which loom's and shuttle's
/// atomics make larger.
pub const KEPT_DESCRIPTORS: u64 = 64;

#[cfg(not(any(loom, shuttle)))]
const _: () = assert!(size_of::<super::Page>() as u64 * KEPT_DESCRIPTORS == PAGE_SIZE);

/// How the descriptors of a 2 MiB block are held.
const REAL: u8 = 0;
/// The block is a 2 MiB hugetlb folio whose memmap is optimized.
const OPTIMIZED_PMD: u8 = 1;
/// The block is part of a 1 GiB hugetlb folio whose memmap is optimized.
const OPTIMIZED_PUD: u8 = 2;

/// Which hugetlb folios have an optimized memmap. Its atomics are `std`
/// ones in every build: every descriptor look-up reads them, and under loom
/// or shuttle each read would be a scheduling point.
pub(super) struct Vmemmap {
    /// Per 2 MiB block of frames, REAL or OPTIMIZED_*.
    blocks: Box<[AtomicU8]>,
    /// Optimized folios: while none is, a look-up reads nothing more.
    optimized: AtomicU64,
}

impl Vmemmap {
    pub(super) fn new(nr_frames: u64) -> Result<Vmemmap, Errno> {
        let n = nr_frames.div_ceil(1 << PMD_ORDER) as usize;
        let mut blocks = Vec::new();
        blocks.try_reserve_exact(n).map_err(|_| Errno::ENOMEM)?;
        blocks.resize_with(n, || AtomicU8::new(REAL));
        Ok(Vmemmap { blocks: blocks.into_boxed_slice(), optimized: AtomicU64::new(0) })
    }

    /// The descriptor that stands for `pfn`'s: its own, or, for a tail of
    /// an optimized folio past the kept page, the folio's last kept one.
    #[inline]
    pub(super) fn descriptor(&self, pfn: Pfn) -> Pfn {
        if self.optimized.load(Acquire) == 0 {
            return pfn;
        }
        let span = match self.blocks[(pfn >> PMD_ORDER) as usize].load(Acquire) {
            OPTIMIZED_PMD => 1 << PMD_ORDER,
            OPTIMIZED_PUD => 1 << PUD_ORDER,
            _ => return pfn,
        };
        let first = pfn & !(span - 1);
        if pfn - first < KEPT_DESCRIPTORS {
            pfn
        } else {
            first + KEPT_DESCRIPTORS - 1
        }
    }

    /// Whether every frame of `pfns` has its own descriptor (no block of
    /// theirs is optimized).
    pub(super) fn all_real(&self, pfns: std::ops::Range<Pfn>) -> bool {
        self.optimized.load(Acquire) == 0
            || pfns.is_empty()
            || self.blocks[(pfns.start >> PMD_ORDER) as usize..=((pfns.end - 1) >> PMD_ORDER) as usize]
                .iter()
                .all(|b| b.load(Acquire) == REAL)
    }

    /// Whether the folio at `pfn` (its head) has an optimized memmap
    /// (`folio_test_hugetlb_vmemmap_optimized`).
    pub(super) fn is_optimized(&self, pfn: Pfn) -> bool {
        self.blocks[(pfn >> PMD_ORDER) as usize].load(Acquire) != REAL
    }

    /// Marks the folio at `pfn` of `order` optimized (`on`) or not; true
    /// if that changed it (only 2 MiB and 1 GiB folios are ever optimized).
    /// The count goes up before the blocks are marked and down after they
    /// are cleared, with release order: a reader that sees no optimized
    /// folio, or a block not marked, sees the descriptors restored.
    pub(super) fn mark(&self, pfn: Pfn, order: u32, on: bool) -> bool {
        let kind = match order {
            PMD_ORDER => OPTIMIZED_PMD,
            PUD_ORDER => OPTIMIZED_PUD,
            _ => return false,
        };
        if self.is_optimized(pfn) == on {
            return false;
        }
        let blocks = (pfn >> PMD_ORDER) as usize..((pfn + (1 << order)) >> PMD_ORDER) as usize;
        if on {
            self.optimized.fetch_add(1, Relaxed);
        }
        self.blocks[blocks].iter().for_each(|b| b.store(if on { kind } else { REAL }, Release));
        if !on {
            self.optimized.fetch_sub(1, Release);
        }
        true
    }
}

impl super::PhysMem {
    /// `hugetlb_vmemmap_optimize_folio`: the descriptors of the hugetlb
    /// folio of `order` at `pfn` past its first 64 are given up, and read
    /// as its 64th from now on. The folio is new (its tails as
    /// `prep_compound_page` left them) and only a reader holding a stale
    /// pfn may look at it (a PFN walker, a KSM stable node); such a reader
    /// may read a given-up descriptor as zeros, where Linux makes it wait
    /// (`synchronize_rcu` before the remap). Returns whether it was
    /// optimized (only 2 MiB and 1 GiB folios are).
    pub fn vmemmap_optimize(&self, pfn: Pfn, order: u32) -> bool {
        if !self.vmemmap.mark(pfn, order, true) {
            return false;
        }
        let nr = 1u64 << order;
        super::memmap::discard(&self.memmap, (pfn + KEPT_DESCRIPTORS) as usize..(pfn + nr) as usize);
        true
    }

    /// `hugetlb_vmemmap_restore_folio`: the folio at `pfn` gets its own
    /// descriptors back, each a copy of the one that stood for it, before
    /// it leaves the pool (its tails are then cleared one by one). Returns
    /// whether it had been optimized.
    pub fn vmemmap_restore(&self, pfn: Pfn, order: u32) -> bool {
        if !self.vmemmap.is_optimized(pfn) {
            return false;
        }
        let kept = &self.memmap[(pfn + KEPT_DESCRIPTORS - 1) as usize];
        for own in &self.memmap[(pfn + KEPT_DESCRIPTORS) as usize..(pfn + (1 << order)) as usize] {
            own.copy_from(kept);
        }
        self.vmemmap.mark(pfn, order, false)
    }

    /// Whether the hugetlb folio at `pfn` has an optimized memmap.
    pub fn vmemmap_optimized(&self, pfn: Pfn) -> bool {
        self.vmemmap.is_optimized(pfn)
    }
}
