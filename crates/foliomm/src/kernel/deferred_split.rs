//! The deferred split queue (mm/huge_memory.c `deferred_split_folio`'s
//! `split_queue`, emptied by the `deferred_split_scan` shrinker): anon
//! large folios partly unmapped, waiting to be split under memory
//! pressure, and from 6.12 every THP a fault or khugepaged made, for the
//! shrinker to split if it turns out underused. A queued folio has
//! [`pg::DEFERRED`] on its second page, a partially mapped one
//! `PG_partially_mapped` too.
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
    /// Queues `f` at the tail unless it is queued already.
    pub(crate) fn deferred_split_queue(&self, f: Folio) {
        let mut q = self.deferred_split.lock().unwrap();
        if !f.page(1).test(pg::DEFERRED) {
            f.page(1).set(pg::DEFERRED);
            q.push_back(f.pfn);
        }
    }

    /// `deferred_split_folio(folio, false)` after a THP fault or collapse
    /// from 6.12 ("mm: split underused THPs"): the new THP is queued, not
    /// partially mapped, for the shrinker to judge.
    pub(crate) fn deferred_split_new_thp(&self, f: Folio) {
        if self.config.release().splits_underused_thps() {
            self.deferred_split_queue(f);
        }
    }

    /// Takes `f` off the queue if it is on it (its marks cleared), as it is
    /// freed or split.
    pub(crate) fn deferred_split_remove(&self, f: Folio) {
        if f.is_large() && f.page(1).test(pg::DEFERRED) {
            f.page(1).clear(pg::DEFERRED | pg::PARTIALLY_MAPPED);
            self.deferred_split.lock().unwrap().retain(|&p| p != f.pfn);
        }
    }

    /// Unmarks a folio a scan took off the queue and leaves off it (a
    /// whole THP found not underused), unless an unmap marked it partially
    /// mapped meanwhile: then it goes back to the tail (Linux tests
    /// `folio_test_partially_mapped` under `split_queue_lock`).
    pub fn deferred_split_drop(&self, f: Folio) {
        let mut q = self.deferred_split.lock().unwrap();
        if f.page(1).test(pg::PARTIALLY_MAPPED) {
            q.push_back(f.pfn);
        } else {
            f.page(1).clear(pg::DEFERRED);
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
