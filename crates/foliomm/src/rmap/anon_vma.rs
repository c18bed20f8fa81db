//! A VMA's `anon_vma` (mm/rmap.c `anon_vma_prepare`, `anon_vma_alloc`).
//! foliomm keeps only the anon_vma's identity, with no chains or interval
//! tree: nothing walks the anon rmap yet.

use crate::kernel::Kernel;
use crate::sync::atomic::{AtomicU64, Ordering::*};

/// `vma->anon_vma`: the identity of the VMA's anon_vma, 0 until its first
/// anonymous folio is mapped.
#[derive(Debug, Default)]
pub struct AnonVmaSlot(AtomicU64);

impl AnonVmaSlot {
    pub fn new(id: u64) -> AnonVmaSlot {
        AnonVmaSlot(AtomicU64::new(id))
    }

    /// The anon_vma's identity, 0 if none yet.
    pub fn get(&self) -> u64 {
        self.0.load(Acquire)
    }

    /// Gives the VMA `id` (fork's `anon_vma_fork`, or a merge that adopts
    /// its neighbour's); the caller holds the mmap_lock for write.
    pub fn set(&self, id: u64) {
        self.0.store(id, Release)
    }
}

/// `anon_vma_prepare`: gives the VMA an anon_vma before its first anon
/// folio, if it has none; two faults racing agree on one. Returns it.
pub fn anon_vma_prepare(k: &Kernel, slot: &AnonVmaSlot) -> u64 {
    let cur = slot.get();
    if cur != 0 {
        return cur;
    }
    match slot.0.compare_exchange(0, k.new_anon_vma(), AcqRel, Acquire) {
        Ok(_) => slot.get(),
        Err(winner) => winner,
    }
}
