//! A VMA's `anon_vma` and its `anon_vma_chain` (mm/rmap.c
//! `anon_vma_prepare`, `anon_vma_clone`, `anon_vma_fork`,
//! `unlink_anon_vmas`): every anon folio names the anon_vma it was first
//! mapped under (`folio->mapping`); that anon_vma's tree holds every VMA
//! that may map it (the VMA it was created in, and those of fork
//! children, whose chains hold their parents' anon_vmas), so that an rmap
//! walk finds every mapping of the folio without looking anywhere else.
//!
//! Differs from Linux: the chain is a list of the anon_vmas a VMA is
//! linked to, without `anon_vma_chain` nodes; each tree holds records of its
//! VMAs ([`VmaRecord`]); there is no root anon_vma, no `degree` and no
//! reuse of an anon_vma a fork child could share (`anon_vma_clone`'s
//! reuse), so a child's own folios always go to a new anon_vma.

use super::vma_record::{RmapTree, VmaRecord};
use crate::sync::atomic::{AtomicU64, Ordering::*};
use crate::sync::{Arc, Mutex};

/// `struct anon_vma`: its identity (what anon folios record), its root's
/// (the anon_vma of the first ancestor, whose tree every descendant's VMA
/// joins) and the tree of the VMAs linked to it.
///
/// Line-aligned (as the kernel's slab caches of it are), so that which of
/// its words share a line does not depend on where the allocator put it:
/// the simulated coherence costs are the same on every run.
#[derive(Debug)]
#[repr(align(64))]
pub struct AnonVma {
    pub id: u64,
    pub root: u64,
    pub tree: RmapTree,
}

impl AnonVma {
    /// A new anon_vma with no VMA (`anon_vma_alloc`), of the family whose
    /// root is `root` (a fork child's), or a root of its own.
    pub fn new(id: u64, root: Option<u64>) -> AnonVma {
        AnonVma { id, root: root.unwrap_or(id), tree: RmapTree::anon() }
    }
}

impl Drop for AnonVma {
    /// `anon_vma_free`: its lines leave the simulated caches.
    fn drop(&mut self) {
        crate::sync::cacheline::freed(self);
    }
}

/// The anon_vmas of a VMA and, while it is in its MM's tree, its record in
/// each of them.
#[derive(Debug, Default)]
struct Chain {
    anon_vmas: Vec<Arc<AnonVma>>,
    linked: Option<VmaRecord>,
}

impl Chain {
    /// Adds `av` to the chain (linking the VMA to it if the VMA is in its
    /// MM's tree), unless it is there already.
    fn add(&mut self, av: Arc<AnonVma>) {
        if self.anon_vmas.iter().any(|a| a.id == av.id) {
            return;
        }
        if let Some(rec) = self.linked {
            av.tree.link(rec);
        }
        self.anon_vmas.push(av);
    }
}

/// `vma->anon_vma` and `vma->anon_vma_chain`: the identity of the VMA's
/// anon_vma (0 until its first anonymous folio is mapped) and its chain.
#[derive(Debug, Default)]
pub struct AnonVmaSlot {
    id: AtomicU64,
    chain: Mutex<Chain>,
}

impl AnonVmaSlot {
    /// The anon_vma's identity, 0 if none yet.
    pub fn get(&self) -> u64 {
        self.id.load(Acquire)
    }

    /// `anon_vma_prepare`: gives the VMA an anon_vma from `new` before its
    /// first anon folio, if it has none; two faults racing agree on one
    /// (the chain's lock stands for `mm->page_table_lock`). Returns it.
    pub fn prepare(&self, new: impl FnOnce() -> Arc<AnonVma>) -> u64 {
        let cur = self.get();
        if cur != 0 {
            return cur;
        }
        let mut chain = self.chain.lock().unwrap();
        if self.get() == 0 {
            let av = new();
            self.id.store(av.id, Release);
            chain.add(av);
        }
        self.get()
    }

    /// `anon_vma_fork`'s own anon_vma for a child VMA whose chain
    /// ([`Self::clone_from`]) holds its parent's: new folios of the child
    /// go to `av`.
    pub fn fork(&self, av: Arc<AnonVma>) {
        let mut chain = self.chain.lock().unwrap();
        self.id.store(av.id, Release);
        chain.add(av);
    }

    /// `anon_vma_clone`: the VMA joins every anon_vma of `src`'s chain and
    /// takes `src`'s anon_vma (a split, a copy for mremap, a fork before
    /// [`Self::fork`], or a merge into a VMA that had none).
    pub fn clone_from(&self, src: &AnonVmaSlot) {
        let theirs = src.chain.lock().unwrap().anon_vmas.clone();
        let mut chain = self.chain.lock().unwrap();
        theirs.into_iter().for_each(|av| chain.add(av));
        self.id.store(src.get(), Release);
    }

    /// The VMA entered its MM's tree as `rec`: it joins the tree of every
    /// anon_vma of its chain.
    pub fn link(&self, rec: VmaRecord) {
        let mut chain = self.chain.lock().unwrap();
        chain.anon_vmas.iter().for_each(|av| av.tree.link(rec));
        chain.linked = Some(rec);
    }

    /// The VMA left its MM's tree: it leaves every anon_vma's tree (waiting
    /// for their walkers), keeping its chain.
    pub fn unlink(&self) {
        let mut chain = self.chain.lock().unwrap();
        if let Some(rec) = chain.linked.take() {
            chain.anon_vmas.iter().for_each(|av| av.tree.unlink(rec.vma));
        }
    }

    /// The linked VMA's range or flags changed (`vma_prepare` ..
    /// `vma_complete`): its record in every tree follows.
    pub fn update(&self, rec: VmaRecord) {
        let mut chain = self.chain.lock().unwrap();
        if chain.linked.is_some() {
            chain.linked = Some(rec);
            for av in &chain.anon_vmas {
                av.tree.update(rec.vma, rec.start, rec.pgoff, rec.pages);
                av.tree.update_flags(rec.vma, rec.flags);
            }
        }
    }

    /// `unlink_anon_vmas`: the VMA leaves every anon_vma's tree and has no
    /// anon_vma and no chain any more (if it stays in its MM's tree, an
    /// anon_vma it gets later links it again).
    pub fn reset(&self) {
        let mut chain = self.chain.lock().unwrap();
        if let Some(rec) = chain.linked {
            chain.anon_vmas.iter().for_each(|av| av.tree.unlink(rec.vma));
        }
        chain.anon_vmas.clear();
        self.id.store(0, Release);
    }

    /// `vma->anon_vma->root`: the anon_vma a folio that is not exclusive to
    /// this VMA records (`__folio_set_anon`), so that every VMA of the
    /// family may be walked; 0 if the VMA has no anon_vma.
    pub fn root(&self) -> u64 {
        let id = self.get();
        self.chain.lock().unwrap().anon_vmas.iter().find(|av| av.id == id).map_or(0, |av| av.root)
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::thread;

    fn record(start: u64, pgoff: u64) -> VmaRecord {
        VmaRecord { vma: 1, mm: 1, start, pgoff, pages: 4, flags: 0, shared_maywrite: false }
    }

    /// Two faults of a linked VMA without an anon_vma prepare one at once:
    /// both get the same, made once, and its tree holds the VMA once.
    #[test]
    fn racing_prepares_agree_and_link_once() {
        loom::model(|| {
            let slot = Arc::new(AnonVmaSlot::default());
            slot.link(record(0x1000, 1));
            let made = Arc::new(AtomicU64::new(0));
            let prepare = |slot: Arc<AnonVmaSlot>, made: Arc<AtomicU64>| {
                move || slot.prepare(|| Arc::new(AnonVma::new(made.fetch_add(1, Relaxed) + 1, None)))
            };
            let other = thread::spawn(prepare(slot.clone(), made.clone()));
            let mine = prepare(slot.clone(), made.clone())();
            assert_eq!(other.join().unwrap(), mine);
            assert_eq!(made.load(Relaxed), 1, "one anon_vma made");
            let chain = slot.chain.lock().unwrap();
            assert_eq!(chain.anon_vmas.len(), 1);
            assert_eq!(chain.anon_vmas[0].tree.snapshot(), vec![record(0x1000, 1)]);
        });
    }

    /// An rmap walker reading the tree while the VMA's range changes sees
    /// the record before or after, never a mix of the two.
    #[test]
    fn a_walker_sees_a_whole_record() {
        loom::model(|| {
            let slot = Arc::new(AnonVmaSlot::default());
            slot.link(record(0x1000, 1));
            slot.prepare(|| Arc::new(AnonVma::new(1, None)));
            let av = slot.chain.lock().unwrap().anon_vmas[0].clone();
            let s = slot.clone();
            let mover = thread::spawn(move || s.update(record(0x9000, 9)));
            let seen = av.tree.read().to_vec();
            mover.join().unwrap();
            assert!(seen == vec![record(0x1000, 1)] || seen == vec![record(0x9000, 9)], "{seen:?}");
        });
    }
}
