//! x86-64 4-level page tables stored in model frames: entry access, the
//! split page-table locks, the walker ([`walk`]: lookups, allocation, a
//! full walk), and batch scans over a PTE table ([`batch`]).
//!
//! Tables are 512 atomic entries in a frame. Upper levels are populated
//! under `mm->page_table_lock` (`__pud_alloc`, `__pmd_alloc`); a PTE table is
//! installed under the PMD table's lock (`pmd_install`). The PTL of a PTE
//! table and the PMD lock are bit spinlocks on the table's own descriptor
//! (`ptdesc->ptl` with `USE_SPLIT_PTE_PTLOCKS`). Nothing here knows of
//! address spaces: callers pass the PGD and the lock that guards it.

pub mod batch;
pub mod walk;

pub use batch::{folio_pte_batch, pte_range_none};
pub use walk::{
    alloc_pmd, alloc_pte_table, alloc_pud, huge_pud, leaf_slot, walk_all, walk_pmd, walk_pud, LeafSlot, PmdSlot, Visit,
};

use std::sync::atomic::AtomicU64;

use crate::arch::{Pfn, Pte};
use crate::phys::PhysMem;
use crate::sync::atomic::Ordering::*;
use crate::sync::cacheline::Structure;
use crate::sync::BitSpinLock;

/// The entry slot `idx` of table `table`.
pub fn slot(phys: &PhysMem, table: Pfn, idx: usize) -> &AtomicU64 {
    phys.word(table, idx)
}

pub fn load(phys: &PhysMem, table: Pfn, idx: usize) -> Pte {
    Pte(slot(phys, table, idx).load(Acquire))
}

pub fn store(phys: &PhysMem, table: Pfn, idx: usize, pte: Pte) {
    phys.table_written(table);
    slot(phys, table, idx).store(pte.0, Release)
}

/// `ptep_get_and_clear`: clears the entry, returning what it held.
pub fn take(phys: &PhysMem, table: Pfn, idx: usize) -> Pte {
    phys.table_written(table);
    Pte(slot(phys, table, idx).swap(0, AcqRel))
}

/// The lock of a page-table page (`pte_lockptr` / `pmd_lockptr`): its split
/// PTL, or the PMD lock of a PMD table, a bit of the table's own descriptor.
pub fn pte_lockptr(phys: &PhysMem, table: Pfn) -> Ptl<'_> {
    Ptl(&phys.page(table).flags)
}

/// `pte_offset_map_lock`: takes the PTL of the PTE table `table` that the
/// caller found under `pmd`, and returns it only if `pmd` still points at
/// that table; `None` when the table was replaced or reclaimed meanwhile
/// (PT_RECLAIM, [`crate::tlb::table_rcu`]), and the caller retries. The
/// caller is inside a read section of the MM's [`crate::tlb::TableRcu`].
pub fn pte_lock_checked(phys: &PhysMem, pmd: PmdSlot, table: Pfn) -> Option<BitSpinLock<'_>> {
    let ptl = pte_lockptr(phys, table).lock();
    let e = pmd.load(phys);
    (!e.is_none() && !e.huge() && e.pfn() == table).then_some(ptl)
}

/// A page-table lock, not yet taken.
pub struct Ptl<'a>(&'a crate::sync::atomic::AtomicU64);

impl<'a> Ptl<'a> {
    /// Takes the lock (`spin_lock(ptl)`); dropping the guard releases it.
    pub fn lock(self) -> BitSpinLock<'a> {
        BitSpinLock::lock(Structure::Ptl, self.0, 0)
    }

    /// Takes the lock if it is free (`spin_trylock(ptl)`).
    pub fn try_lock(self) -> Option<BitSpinLock<'a>> {
        BitSpinLock::try_lock(Structure::Ptl, self.0, 0)
    }
}

/// `ptdesc->pt_share_count` of a PMD table (6.13+; a page refcount
/// before): how many MMs beyond the first map it through their PUD (hugetlb
/// PMD sharing); 0 when not shared. Kept in the table page's first
/// design word, which page tables do not otherwise use.
pub fn pt_share_count(phys: &PhysMem, table: Pfn) -> &crate::sync::atomic::AtomicI32 {
    &phys.page(table).w[0]
}
