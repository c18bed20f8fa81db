//! The deferred split queue (mm/huge_memory.c `deferred_split_folio`'s
//! `split_queue`, emptied by the `deferred_split_scan` shrinker): anon
//! large folios partly unmapped, waiting to be split under memory
//! pressure, and from 6.12 every THP a fault or khugepaged made, for the
//! shrinker to split if it turns out underused. A queued folio has
//! [`pg::DEFERRED`] on its second page, a partially mapped one
//! `PG_partially_mapped` too.
//!
//! Differs from Linux: one queue for the machine (Linux has one per node
//! and per memcg). It is a list as Linux's is (`folio->_deferred_list`):
//! a folio leaves it in constant time when freed or split, whatever its
//! length (a zap that frees thousands of queued folios at once used to scan
//! it for each).

use std::collections::HashMap;

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
            self.deferred_split.lock().unwrap().remove(f.pfn);
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
        (0..nr).map_while(|_| q.pop_front()).collect()
    }

    /// Puts back at the tail folios a scan could not split.
    pub fn deferred_split_requeue(&self, pfns: impl IntoIterator<Item = Pfn>) {
        let mut q = self.deferred_split.lock().unwrap();
        pfns.into_iter().for_each(|p| q.push_back(p));
    }

    /// The queued folios' head frames, from the head (for the checker).
    pub fn deferred_split_snapshot(&self) -> Vec<Pfn> {
        self.deferred_split.lock().unwrap().to_vec()
    }
}

/// A queue of folios by head frame, in order, each at most once, with
/// removal from anywhere in constant time: a doubly linked list whose links
/// live in a map (Linux's `list_head` in the folio).
#[derive(Debug, Default)]
pub struct SplitQueue {
    /// Each queued folio's neighbours: (previous, next).
    links: HashMap<Pfn, (Option<Pfn>, Option<Pfn>)>,
    head: Option<Pfn>,
    tail: Option<Pfn>,
}

impl SplitQueue {
    /// Appends `p` at the tail unless it is queued already.
    pub fn push_back(&mut self, p: Pfn) {
        if self.links.contains_key(&p) {
            return;
        }
        self.links.insert(p, (self.tail, None));
        match self.tail {
            Some(t) => self.links.get_mut(&t).expect("the tail is linked").1 = Some(p),
            None => self.head = Some(p),
        }
        self.tail = Some(p);
    }

    /// Takes `p` off the queue if it is on it (`list_del_init`).
    pub fn remove(&mut self, p: Pfn) {
        let Some((prev, next)) = self.links.remove(&p) else { return };
        match prev {
            Some(q) => self.links.get_mut(&q).expect("linked").1 = next,
            None => self.head = next,
        }
        match next {
            Some(q) => self.links.get_mut(&q).expect("linked").0 = prev,
            None => self.tail = prev,
        }
    }

    /// Takes the head off the queue.
    pub fn pop_front(&mut self) -> Option<Pfn> {
        let h = self.head?;
        self.remove(h);
        Some(h)
    }

    /// The queued folios, from the head.
    pub fn to_vec(&self) -> Vec<Pfn> {
        let mut out = Vec::with_capacity(self.links.len());
        let mut at = self.head;
        while let Some(p) = at {
            out.push(p);
            at = self.links[&p].1;
        }
        out
    }
}

/// An empty queue.
pub(super) fn new_queue() -> crate::sync::Mutex<SplitQueue> {
    crate::sync::Mutex::new(SplitQueue::default())
}

#[cfg(test)]
mod tests {
    use super::SplitQueue;

    #[test]
    fn the_queue_keeps_its_order_and_drops_from_anywhere() {
        let mut q = SplitQueue::default();
        for p in [10, 20, 30, 40, 20] {
            q.push_back(p);
        }
        assert_eq!(q.to_vec(), [10, 20, 30, 40], "queued once each, in order");
        q.remove(30);
        q.remove(10);
        q.remove(99);
        assert_eq!(q.to_vec(), [20, 40]);
        q.push_back(10);
        assert_eq!((q.pop_front(), q.pop_front(), q.to_vec()), (Some(20), Some(40), vec![10]));
        q.remove(10);
        assert_eq!((q.pop_front(), q.to_vec()), (None, vec![]));
        q.push_back(5);
        assert_eq!(q.to_vec(), [5]);
    }
}
