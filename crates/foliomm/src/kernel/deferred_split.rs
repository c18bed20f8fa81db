//! The deferred split queue (mm/huge_memory.c `deferred_split_folio`'s
//! `split_queue`, emptied by the `deferred_split_scan` shrinker): anon
//! large folios partly unmapped, waiting to be split under memory
//! pressure. A queued folio has `PG_partially_mapped` on its second page.
//!
//! Differs from Linux: one queue for the machine (Linux has one per node
//! and per memcg); a folio leaves it when freed or split, by a scan of the
//! queue.

use std::collections::VecDeque;

use crate::arch::Pfn;
use crate::folio::Folio;
use crate::phys::pg;

use super::Kernel;

impl Kernel {
    /// Queues `f`, just marked partially mapped.
    pub(crate) fn deferred_split_queue(&self, f: Folio) {
        self.deferred_split.lock().unwrap().push_back(f.pfn);
    }

    /// Takes `f` off the queue if it is on it (its mark cleared), as it is
    /// freed or split.
    pub(crate) fn deferred_split_remove(&self, f: Folio) {
        if f.is_large() && f.page(1).test(pg::PARTIALLY_MAPPED) {
            f.page(1).clear(pg::PARTIALLY_MAPPED);
            self.deferred_split.lock().unwrap().retain(|&p| p != f.pfn);
        }
    }

    /// Up to `nr` folios from the head of the queue, taken off it.
    pub fn deferred_split_take(&self, nr: usize) -> Vec<Pfn> {
        let mut q = self.deferred_split.lock().unwrap();
        let n = nr.min(q.len());
        q.drain(..n).collect()
    }

    /// Puts back at the tail folios a scan could not split.
    pub fn deferred_split_requeue(&self, pfns: impl IntoIterator<Item = Pfn>) {
        self.deferred_split.lock().unwrap().extend(pfns);
    }

    /// The queued folios' head frames, from the head (for the checker).
    pub fn deferred_split_snapshot(&self) -> Vec<Pfn> {
        self.deferred_split.lock().unwrap().iter().copied().collect()
    }
}

/// An empty queue.
pub(super) fn new_queue() -> crate::sync::Mutex<VecDeque<Pfn>> {
    crate::sync::Mutex::new(VecDeque::new())
}
