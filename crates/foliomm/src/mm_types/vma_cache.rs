//! The VMA slab cache of a machine (`vm_area_cachep`; kernel/fork.c
//! `vm_area_alloc`, `vm_area_dup`, `vm_area_free`).
//!
//! Under `vma-refcount` the cache is `SLAB_TYPESAFE_BY_RCU`: a freed VMA is
//! handed out again at once (last freed, first reused), possibly to another
//! MM, while a lockless reader may still be looking at it, so readers must
//! revalidate what they locked. Under the other designs a freed VMA is
//! dropped, and lives on only while a reader still holds it (what
//! `call_rcu` freeing gives Linux).

use super::vma::VmaInit;
use super::Vma;
use crate::kernel::{VmaLayout, VmaLockDesign};
use crate::sync::atomic::{AtomicU64, Ordering::Relaxed};
use crate::sync::{Arc, Mutex};

/// Free VMAs kept for reuse at most; more are dropped.
const KEEP: usize = 1024;

/// Where a machine's VMAs come from and go back to.
#[derive(Debug)]
pub struct VmaCache {
    design: VmaLockDesign,
    layout: VmaLayout,
    /// VMAs made so far (each one's slot in the `vm_lock` slab).
    made: AtomicU64,
    free: Mutex<Vec<Arc<Vma>>>,
}

impl VmaCache {
    pub fn new(design: VmaLockDesign) -> VmaCache {
        VmaCache { design, layout: VmaLayout::Design, made: AtomicU64::new(0), free: Mutex::new(Vec::new()) }
    }

    /// The cache with its VMAs laid out as `layout` says.
    pub fn with_layout(self, layout: VmaLayout) -> VmaCache {
        VmaCache { layout, ..self }
    }

    /// The VMA-lock design the cache's VMAs carry.
    pub fn design(&self) -> VmaLockDesign {
        self.design
    }

    /// A detached VMA made as `init` says (`vm_area_alloc` +
    /// `vma_set_range`): a freed one when the cache is type-safe and has one.
    pub fn alloc(&self, init: VmaInit) -> Arc<Vma> {
        let reused = self.free.lock().unwrap().pop();
        let vma = reused
            .unwrap_or_else(|| Arc::new(Vma::new(self.design, self.layout, self.made.fetch_add(1, Relaxed) as usize)));
        vma.init(init);
        vma
    }

    /// A detached copy of `v` for MM `mm` (`vm_area_dup`).
    pub fn dup(&self, mm: u64, v: &Vma) -> Arc<Vma> {
        let (start, end, flags, pgoff) = (v.start(), v.end(), v.flags(), v.pgoff());
        let dup = self.alloc(VmaInit { mm, start, end, flags, pgoff, file: v.file() });
        dup.set_hugetlb_resv(v.hugetlb_resv());
        dup.set_policy(v.policy());
        dup.set_userfaultfd_ctx(v.userfaultfd_ctx());
        dup.anon_vma.clone_from(&v.anon_vma);
        dup
    }

    /// `vm_area_free` of a detached VMA.
    pub fn free(&self, v: Arc<Vma>) {
        v.note_freed();
        debug_assert!(self.design == VmaLockDesign::MmapLock || v.lock.is_detached(), "freeing an attached VMA");
        v.clear_file();
        v.anon_vma.reset();
        if self.design == VmaLockDesign::VmaRefcount {
            let mut free = self.free.lock().unwrap();
            if free.len() < KEEP {
                free.push(v);
            }
        }
    }
}
