//! The mappings of a file (`address_space.i_mmap` under `i_mmap_rwsem`,
//! mm/vma.c `vma_link_file` / `unlink_file_vma` / `vma_prepare`): an
//! [`RmapTree`] of the VMAs mapping it, with the hugetlb VMA locks of the
//! shared hugetlb ones, and the walk that takes both against the lock
//! order (seed 002: a VMA's hugetlb lock comes before `i_mmap_rwsem`).

use std::collections::HashMap;
use std::ops::Deref;

use crate::rmap::{RmapTree, VmaRecord};
use crate::sync::cacheline::Aligned;
use crate::sync::{Arc, Mutex, RwLock};

/// The hugetlb VMA lock (`struct hugetlb_vma_lock`'s `rw_sema`) of a
/// shared hugetlb VMA, alone in its line wherever it is allocated (the
/// simulated coherence costs are the same on every run).
pub type HugetlbVmaLock = Arc<Aligned<RwLock<()>>>;

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
            self.1.lock().unwrap().insert(m.vma, Arc::new(Aligned(RwLock::new(()))));
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

/// What a walk under `i_mmap_rwsem` for write does with a VMA whose
/// hugetlb lock is busy, which it may only try to take there.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Busy {
    /// Leave it (`hugetlb_vmdelete_list`).
    Skip,
    /// Let go of `i_mmap_rwsem`, wait for the VMA's lock, take
    /// `i_mmap_rwsem` again, act on the VMA if it still has that lock and
    /// is still wanted, then walk again from the start
    /// (`hugetlb_unmap_file_folio`).
    BackOut,
}

impl IMmap {
    /// Calls `act` on each linked VMA that `wants`, in walk order, under
    /// `i_mmap_rwsem` for write and, with `vma_locks` (the `vma-lock`
    /// design), with the VMA's hugetlb lock held for write, tried and
    /// handled as `busy` says when a fault holds it. Returns how many times
    /// it backed out.
    pub fn walk_vma_locked(
        &self,
        vma_locks: bool,
        busy: Busy,
        mut wants: impl FnMut(&VmaRecord) -> bool,
        mut act: impl FnMut(&VmaRecord),
    ) -> u64 {
        let lock_of = |vma: usize| self.vma_lock(vma).filter(|_| vma_locks);
        let mut backed_out = 0;
        let mut records = self.write();
        loop {
            let mut contended = None;
            for m in records.iter().filter(|m| wants(m)) {
                let vma_lock = lock_of(m.vma);
                let busy_now = match vma_lock.as_ref().map(|l| l.try_write()).transpose() {
                    Ok(_held) => {
                        act(m);
                        false
                    }
                    Err(_) => true,
                };
                if busy_now && busy == Busy::BackOut {
                    contended = vma_lock.map(|l| (l, m.vma));
                    break;
                }
            }
            drop(records);
            let Some((vma_lock, vma)) = contended else { return backed_out };
            backed_out += 1;
            // In the lock order: the VMA's lock, then i_mmap_rwsem.
            let _held = vma_lock.write().unwrap();
            records = self.write();
            let attached = lock_of(vma).is_some_and(|l| Arc::ptr_eq(&l, &vma_lock));
            if let Some(m) = records.iter().find(|m| m.vma == vma && attached && wants(m)) {
                act(m);
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};
    use crate::sync::thread;

    /// Seed 002's lock order against a hugetlb fault, which holds the VMA's
    /// lock for read and then takes `i_mmap_rwsem` for read (to share a PMD
    /// table): a walk that meets the VMA while the fault holds its lock never
    /// deadlocks with it (taking the VMA's lock for write under
    /// `i_mmap_rwsem` would); backing out, it acts on the VMA once, after
    /// the fault (at most once); skipping, never when it was busy. The walk
    /// starts once the fault holds the lock: loom 0.7 takes a reader's
    /// arrival during a failing `try_write` for a wait, and reports a
    /// deadlock that is not one.
    #[test]
    fn loom_a_walk_against_the_lock_order_backs_out_or_skips() {
        for busy in [Busy::BackOut, Busy::Skip] {
            loom::model(move || {
                let i_mmap = Arc::new(IMmap::default());
                let record =
                    VmaRecord { vma: 1, mm: 1, start: 0, pgoff: 0, pages: 512, flags: 0, shared_maywrite: true };
                i_mmap.link(record, true);
                let (held, fault_done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
                let fault = {
                    let (i_mmap, held, fault_done) = (i_mmap.clone(), held.clone(), fault_done.clone());
                    thread::spawn(move || {
                        let vma_lock = i_mmap.vma_lock(1).unwrap();
                        let _held = vma_lock.read().unwrap();
                        held.store(true, Release);
                        drop(i_mmap.read());
                        fault_done.store(true, Release);
                    })
                };
                while !held.load(Acquire) {
                    thread::yield_now();
                }
                let acted = AtomicU32::new(0);
                let act = |_: &VmaRecord| {
                    assert!(fault_done.load(Acquire), "acted while the fault held the VMA's lock");
                    acted.fetch_add(1, Relaxed);
                };
                let backed_out = i_mmap.walk_vma_locked(true, busy, |_| acted.load(Relaxed) == 0, act);
                fault.join().unwrap();
                let acted = acted.load(Relaxed);
                match busy {
                    Busy::BackOut => assert!(acted == 1 && backed_out <= 1, "acted {acted}, backed out {backed_out}"),
                    Busy::Skip => assert!(acted <= 1 && backed_out == 0, "acted {acted}, backed out {backed_out}"),
                }
                BACKED_OUT.fetch_add(backed_out, std::sync::atomic::Ordering::Relaxed);
            });
        }
        // Some execution met the fault holding the lock and backed out.
        assert!(BACKED_OUT.load(std::sync::atomic::Ordering::Relaxed) > 0);
    }

    /// Back-outs over every execution (outside loom's model).
    static BACKED_OUT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
}
