//! The mappings of a file (`address_space.i_mmap` under `i_mmap_rwsem`,
//! mm/vma.c `vma_link_file` / `unlink_file_vma` / `vma_prepare`): an
//! [`RmapTree`] of the VMAs mapping it, with the hugetlb VMA locks of the
//! shared hugetlb ones.

use std::collections::HashMap;
use std::ops::Deref;

use crate::rmap::{RmapTree, VmaRecord};
use crate::sync::{Arc, Mutex, RwLock};

/// The hugetlb VMA lock (`struct hugetlb_vma_lock`'s `rw_sema`) of a
/// shared hugetlb VMA.
pub type HugetlbVmaLock = Arc<RwLock<()>>;

/// `i_mmap` and `i_mmap_rwsem`, with the hugetlb VMA locks of the linked
/// shared hugetlb VMAs (`vm_private_data` in Linux, kept here beside the
/// records for want of the VMA).
#[derive(Debug, Default)]
pub struct IMmap(RmapTree, Mutex<HashMap<usize, HugetlbVmaLock>>);

impl Deref for IMmap {
    type Target = RmapTree;
    fn deref(&self) -> &RmapTree {
        &self.0
    }
}

impl IMmap {
    /// `vma_link_file`: adds a VMA, after every VMA linked before it; with
    /// `vma_lock`, a new hugetlb VMA lock for it (`hugetlb_vma_lock_alloc`).
    pub fn link(&self, m: VmaRecord, vma_lock: bool) {
        if vma_lock {
            self.1.lock().unwrap().insert(m.vma, Arc::new(RwLock::new(())));
        }
        self.0.link(m);
    }

    /// `unlink_file_vma`: removes the VMA `vma` and its VMA lock (which a
    /// holder keeps alive); waits for every walker.
    pub fn unlink(&self, vma: usize) {
        self.0.unlink(vma);
        self.1.lock().unwrap().remove(&vma);
    }

    /// The hugetlb VMA lock of the linked VMA `vma`, if it has one.
    pub fn vma_lock(&self, vma: usize) -> Option<HugetlbVmaLock> {
        self.1.lock().unwrap().get(&vma).cloned()
    }
}
