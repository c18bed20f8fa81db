//! The reverse-mapping trees: `address_space.i_mmap` of a file and the
//! `rb_root` of an `anon_vma` (mm/interval_tree.c), each holding the VMAs an
//! rmap walk visits, under its read-write lock (`i_mmap_rwsem`,
//! `anon_vma->root->rwsem`).
//!
//! A VMA is linked when it enters its MM's tree (or gains the anon_vma) and
//! unlinked when it leaves; a change of its range updates it under the
//! write lock. Walkers hold the read lock for their whole walk, so a linked
//! VMA keeps its range and its page tables (which `free_pgtables` frees
//! only after the unlink) while they look.
//!
//! Differs from Linux: the rmap layer sits below the VMAs, so a tree holds a
//! record of each VMA (its identity, MM, start and page range) instead of
//! the VMA; records are kept in link order and a walk scans them all
//! (Linux's interval tree, ordered by `vm_pgoff` and then by insertion,
//! finds the overlapping ones in O(log n)). Link order keeps what Linux's
//! order is for: a VMA linked after another (mremap's destination, fork's
//! child) is walked after it.

use std::collections::HashMap;

use crate::arch::PAGE_SIZE;
use crate::sync::cacheline::{Locked, Structure};
use crate::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// One VMA in an rmap tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VmaRecord {
    /// The VMA's identity (its address while it is linked).
    pub vma: usize,
    /// `vm_mm`: the serial of the MM the VMA belongs to.
    pub mm: u64,
    /// `vm_start`.
    pub start: u64,
    /// `vm_pgoff`: the page index mapped at `start` (a file page, or for
    /// anonymous memory the `folio->index` of the page there).
    pub pgoff: u64,
    /// Pages the VMA spans.
    pub pages: u64,
    /// `vm_flags`.
    pub flags: u32,
    /// `vma_is_shared_maywrite`: a shared mapping that is or may become
    /// writable, which counts in `i_mmap_writable` (fixed for the VMA's life).
    pub shared_maywrite: bool,
}

impl VmaRecord {
    /// The part of the pages `first..last` this VMA maps, as the address
    /// range `[start, end)` mapping it; None if it maps none of them
    /// (`vma_interval_tree_foreach` + the address clipping of
    /// `unmap_mapping_range_tree`, or `vma_address` for a folio).
    pub fn addresses(&self, first: u64, last: u64) -> Option<(u64, u64)> {
        let (lo, hi) = (self.pgoff, self.pgoff + self.pages);
        if hi <= first || lo >= last {
            return None;
        }
        let start = self.start + first.saturating_sub(lo) * PAGE_SIZE;
        let end = self.start + (last.min(hi) - lo) * PAGE_SIZE;
        Some((start, end))
    }
}

/// The records of a tree in link order, and where each VMA's is.
#[derive(Debug, Default)]
pub struct Records {
    list: Vec<VmaRecord>,
    at: HashMap<usize, usize>,
}

impl std::ops::Deref for Records {
    type Target = [VmaRecord];

    fn deref(&self) -> &[VmaRecord] {
        &self.list
    }
}

impl Records {
    /// The record of the VMA `vma`, if linked: found by its index, not by
    /// a scan (a fork updates its child's record in a tree holding every
    /// earlier child's).
    fn get_mut(&mut self, vma: usize) -> Option<&mut VmaRecord> {
        self.at.get(&vma).map(|&i| &mut self.list[i])
    }
}

/// An rmap tree and its lock, whose line the cache-line accounting names
/// `structure`: a file's `i_mmap_rwsem` (the default) or an anon_vma's
/// `rwsem` ([`RmapTree::anon`]).
#[derive(Debug)]
pub struct RmapTree {
    lock: RwLock<Records>,
    structure: Structure,
}

impl Default for RmapTree {
    fn default() -> RmapTree {
        RmapTree { lock: RwLock::default(), structure: Structure::IMmapRwsem }
    }
}

impl RmapTree {
    /// An anon_vma's tree. Differs from Linux: each anon_vma has its own
    /// lock, where Linux locks the family's root anon_vma's `rwsem`.
    pub fn anon() -> RmapTree {
        RmapTree { structure: Structure::AnonVma, ..RmapTree::default() }
    }

    /// Links a VMA, after every VMA linked before it.
    pub fn link(&self, m: VmaRecord) {
        let mut r = self.write();
        let i = r.list.len();
        r.at.insert(m.vma, i);
        r.list.push(m);
    }

    /// Unlinks the VMA `vma`; waits for every walker.
    pub fn unlink(&self, vma: usize) {
        let mut r = self.write();
        let Some(first) = r.list.iter().position(|m| m.vma == vma) else { return };
        r.list.retain(|m| m.vma != vma);
        r.at.remove(&vma);
        for i in first..r.list.len() {
            let v = r.list[i].vma;
            r.at.insert(v, i);
        }
    }

    /// `vma_prepare` .. `vma_complete` around `vma_set_range`: the linked
    /// VMA `vma` now maps `pages` pages from `pgoff` at `start`. Does
    /// nothing for a VMA not linked (yet).
    pub fn update(&self, vma: usize, start: u64, pgoff: u64, pages: u64) {
        if let Some(m) = self.write().get_mut(vma) {
            (m.start, m.pgoff, m.pages) = (start, pgoff, pages);
        }
    }

    /// The linked VMA `vma` has new flags (`vm_flags_reset`).
    pub fn update_flags(&self, vma: usize, flags: u32) {
        if let Some(m) = self.write().get_mut(vma) {
            m.flags = flags;
        }
    }

    /// The read lock: the linked VMAs in walk order, fixed until the guard
    /// is dropped.
    pub fn read(&self) -> Locked<RwLockReadGuard<'_, Records>> {
        Locked::take(self.structure, &self.lock, || self.lock.read().unwrap())
    }

    /// The write lock: the records, with no walker and no change until the
    /// guard is dropped.
    pub fn write(&self) -> Locked<RwLockWriteGuard<'_, Records>> {
        Locked::take(self.structure, &self.lock, || self.lock.write().unwrap())
    }

    /// A copy of the records (for the checker).
    pub fn snapshot(&self) -> Vec<VmaRecord> {
        self.read().to_vec()
    }
}
