//! The VMA tree of one MM (the maple tree, lib/maple_tree.c, as mm/vma.c
//! uses it), keyed by start address and holding shared [`Vma`]s.
//!
//! Writers change it under the mmap_lock held for write ([`Vmas`] is what
//! that lock guards) and publish every change at once to lockless readers,
//! as the maple tree does in RCU mode: the published tree is a persistent
//! map ([imbl](https://docs.rs/imbl)'s B-tree, so a change copies one path,
//! and a lookup in a small tree allocates nothing) behind an
//! [arc-swap](https://docs.rs/arc-swap) pointer, whose load, like
//! `rcu_read_lock`, writes no shared cache line.

use arc_swap::ArcSwap;

use super::vma::VmaInit;
use super::{Vma, VmaCache};
use crate::shmem::Inode;
use crate::sync::Arc;

/// A tree of VMAs by start address.
pub(super) type VmaMap = imbl::OrdMap<u64, Arc<Vma>>;

/// The VMAs of one address space, in address order, as the mmap_lock
/// holder sees them; every change is published to lockless readers.
pub struct Vmas {
    map: VmaMap,
    /// The tree lockless readers walk (`mm->mm_mt` under RCU).
    published: Arc<ArcSwap<VmaMap>>,
    cache: Arc<VmaCache>,
    /// The owning MM's serial (`vm_mm` of its VMAs).
    mm: u64,
    /// The MM's odd `mm_lock_seq` while the mmap_lock is held for write; 0 otherwise.
    pub(super) write_seq: u64,
}

impl Vmas {
    pub(super) fn new(mm: u64, cache: Arc<VmaCache>, published: Arc<ArcSwap<VmaMap>>) -> Vmas {
        Vmas { map: VmaMap::new(), published, cache, mm, write_seq: 0 }
    }

    /// The VMA containing `addr` (`vma_lookup`).
    pub fn find(&self, addr: u64) -> Option<&Arc<Vma>> {
        find(&self.map, addr)
    }
    /// The VMA starting at `start`.
    pub fn get(&self, start: u64) -> Option<&Arc<Vma>> {
        self.map.get(&start)
    }
    /// Whether any VMA intersects `[start, end)`.
    pub fn any_in(&self, start: u64, end: u64) -> bool {
        self.overlapping(start, end).next().is_some()
    }
    /// VMAs intersecting `[start, end)`, in address order.
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = &Arc<Vma>> {
        let first = self.find(start).map(|v| v.start()).unwrap_or(start);
        self.map.range(first..end.max(first)).map(|(_, v)| v).filter(move |v| v.end() > start)
    }
    /// How many VMAs there are (`mm->map_count`).
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Arc<Vma>> {
        self.map.values()
    }
    /// The VMA before `addr` (`vma_prev`), by start address.
    pub fn prev(&self, addr: u64) -> Option<&Arc<Vma>> {
        self.map.range(..addr).next_back().map(|(_, v)| v)
    }
    /// The first VMA starting in `(after, until]`.
    pub fn next_starting(&self, after: u64, until: u64) -> Option<&Arc<Vma>> {
        if until <= after {
            return None;
        }
        self.map.range(after + 1..=until).next().map(|(_, v)| v)
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

    /// `vm_area_alloc`: a new detached VMA of this MM, mapping `file` (from
    /// page `pgoff`) or anonymous memory.
    pub fn alloc(&self, start: u64, end: u64, flags: u32, pgoff: u64, file: Option<Arc<Inode>>) -> Arc<Vma> {
        self.cache.alloc(VmaInit { mm: self.mm, start, end, flags, pgoff, file })
    }
    /// `vm_area_dup`: a detached copy of `v` (of this MM or, for fork, of the parent).
    pub fn dup(&self, v: &Vma) -> Arc<Vma> {
        self.cache.dup(self.mm, v)
    }
    /// `vm_area_free` of a VMA [`Self::remove`] returned, once nothing uses it.
    pub fn free(&self, v: Arc<Vma>) {
        self.cache.free(v)
    }

    /// `vma_start_write`: waits for the VMA's readers and keeps new ones
    /// out until the mmap_lock is released. Panics outside a write epoch.
    pub fn start_write(&self, v: &Vma) {
        assert!(self.write_seq & 1 == 1, "vma_start_write without the mmap_lock held for write");
        v.start_write(self.write_seq)
    }

    /// Adds `v` under its start, write-locked, attached and, for a file VMA,
    /// linked to the file (`vma_iter_store_new`: `vma_start_write` +
    /// `vma_mark_attached`; `vma_link_file`).
    pub fn insert(&mut self, v: Arc<Vma>) {
        self.start_write(&v);
        v.mark_attached();
        v.link_rmap();
        self.map.insert(v.start(), v);
        self.publish();
    }
    /// Removes the VMA starting at `start`, write-locked, unlinked from its
    /// file, and detaches it (`unlink_file_vma`, `vma_iter_clear` +
    /// `vma_mark_detached`); give it to [`Self::free`] after use. Its page
    /// tables may be freed from then on: no `i_mmap` walker finds it.
    pub fn remove(&mut self, start: u64) -> Option<Arc<Vma>> {
        let v = self.map.get(&start)?.clone();
        self.start_write(&v);
        v.unlink_rmap();
        self.map.remove(&start);
        self.publish();
        v.mark_detached();
        Some(v)
    }
    /// Removes every VMA, each detached (`exit_mmap`).
    pub fn take_all(&mut self) -> Vec<Arc<Vma>> {
        let starts: Vec<u64> = self.map.keys().copied().collect();
        starts.into_iter().filter_map(|s| self.remove(s)).collect()
    }

    fn publish(&self) {
        self.published.store(Arc::new(self.map.clone()));
    }
}

/// The VMA of `map` containing `addr` (`mas_walk`).
pub(super) fn find(map: &VmaMap, addr: u64) -> Option<&Arc<Vma>> {
    map.get_prev(&addr).map(|(_, v)| v).filter(|v| addr < v.end())
}
