//! The VMA tree of one MM (the maple tree, lib/maple_tree.c, as mm/vma.c
//! uses it), keyed by start address and holding shared [`Vma`]s.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::Vma;
use crate::sync::Arc;

/// The VMAs of one address space, in address order.
#[derive(Default)]
pub struct Vmas(BTreeMap<u64, Arc<Vma>>);

impl Vmas {
    /// The VMA containing `addr` (`vma_lookup`).
    pub fn find(&self, addr: u64) -> Option<&Arc<Vma>> {
        self.0.range(..=addr).next_back().map(|(_, v)| v).filter(|v| addr < v.end())
    }
    /// The VMA starting at `start`.
    pub fn get(&self, start: u64) -> Option<&Arc<Vma>> {
        self.0.get(&start)
    }
    /// Whether any VMA intersects `[start, end)`.
    pub fn any_in(&self, start: u64, end: u64) -> bool {
        self.overlapping(start, end).next().is_some()
    }
    /// VMAs intersecting `[start, end)`, in address order.
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = &Arc<Vma>> {
        let first = self.find(start).map(|v| v.start()).unwrap_or(start);
        self.0.range(first..end).map(|(_, v)| v).filter(move |v| v.end() > start)
    }
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Arc<Vma>> {
        self.0.values()
    }
    /// The VMA before `addr` (`vma_prev`), by start address.
    pub fn prev(&self, addr: u64) -> Option<&Arc<Vma>> {
        self.0.range(..addr).next_back().map(|(_, v)| v)
    }
    /// The first VMA starting in `(after, until]`.
    pub fn next_starting(&self, after: u64, until: u64) -> Option<&Arc<Vma>> {
        self.0.range((Bound::Excluded(after), Bound::Included(until))).next().map(|(_, v)| v)
    }
    /// Whether `[start, end)` is covered by VMAs without holes.
    pub fn covers(&self, start: u64, end: u64) -> bool {
        let mut at = start;
        for v in self.overlapping(start, end) {
            if v.start() > at {
                return false;
            }
            at = v.end();
        }
        at >= end
    }
    /// Adds `v` under its start (`vma_iter_store`).
    pub fn insert(&mut self, v: Arc<Vma>) {
        self.0.insert(v.start(), v);
    }
    /// Removes the VMA starting at `start` (`vma_iter_clear`).
    pub fn remove(&mut self, start: u64) -> Option<Arc<Vma>> {
        self.0.remove(&start)
    }
    /// Removes every VMA.
    pub fn take_all(&mut self) -> Vec<Arc<Vma>> {
        std::mem::take(&mut self.0).into_values().collect()
    }
}
