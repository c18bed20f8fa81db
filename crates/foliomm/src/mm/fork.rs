//! kernel/fork.c `dup_mmap`: the child's VMAs and, through
//! [`crate::memory::copy_page_range`], its page tables.

use crate::kernel::Stats;
use crate::memory::copy_page_range::CopyVma;
use crate::memory::hugetlb_fork::copy_hugetlb_page_range;
use crate::mm_types::{vm, Mm};
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::Arc;
use crate::Result;

impl Mm {
    /// `fork()`'s `dup_mmap`: a child MM (on the same MM list) with copies of
    /// the VMAs (except `VM_DONTCOPY`) and, for VMAs with an anon_vma, of
    /// their page tables (`copy_page_range`). On failure the half-built
    /// child is torn down.
    pub fn fork(&self) -> Result<Arc<Mm>> {
        crate::sync::sim::work(crate::sync::sim::Work::Fork);
        let k = &*self.kernel;
        let vmas = self.mmap_write_lock();
        let child = Mm::new(&self.kernel, &self.mmlist)?;
        // khugepaged_fork(): the child gets a slot if the parent has one.
        child.khugepaged.store(self.khugepaged.load(Relaxed), Relaxed);
        super::ksm::ksm_fork(self, &child);
        let result = (|| {
            let mut cvmas = child.mmap_write_lock();
            for v in vmas.iter().filter(|v| v.flags() & vm::DONTCOPY == 0) {
                // copy_page_range() write-protects the parent's PTEs: no
                // fault may run in the VMA meanwhile.
                vmas.start_write(v);
                let c = cvmas.dup(v);
                // hugetlb_dup_vma_private(): the child owns no reservation,
                // and has had no page taken back.
                c.set_hugetlb_resv(None);
                // dup_mmap(): nor any mlock; dup_userfaultfd() without
                // UFFD_FEATURE_EVENT_FORK: nor any userfaultfd registration.
                c.set_flags(c.flags() & !(vm::HUGETLB_RESV_UNMAPPED | vm::LOCKED | vm::UFFD_FLAGS));
                c.set_userfaultfd_ctx(None);
                // Linked (to its file) before its PTEs exist, after the
                // parent's VMA, as dup_mmap does.
                cvmas.insert(c.clone());
                // copy_page_range() → vma_needs_copy(): only a VMA with an
                // anon_vma; the rest refault. Hugetlb VMAs too from 6.0
                // (bcd51a3c679d, "hugetlb: lazy page table copies in
                // fork()", in linux-next from June 2022, so also under the
                // seed 002 kernels of every hugetlb_sync design).
                if v.anon_vma() != 0 {
                    // anon_vma_fork(): the child's chain (cloned with the
                    // VMA) holds the parent's anon_vmas, and its own new one.
                    c.anon_vma.fork(child.mmlist.new_anon_vma(k, Some(v.anon_vma.root())));
                    c.set_flags(c.flags() | vm::ANON_PARENTS);
                    if v.is_hugetlb() {
                        copy_hugetlb_page_range(k, &child, self, &c, v)?;
                    } else {
                        CopyVma { k, dst: &child, src: self, src_vma: v, dst_vma: &c }.copy_page_range()?;
                    }
                }
            }
            Ok(())
        })();
        Stats::inc(&k.stats.fork);
        // dup_mmap(): the parent's PTEs were write-protected; its TLBs must
        // forget the writable translations before anyone writes again.
        if !k.config.debug.skip_fork_flush {
            self.tlb.flush_all(&k.stats);
        }
        drop(vmas);
        match result {
            Ok(()) => Ok(child),
            Err(e) => {
                child.exit();
                Err(e)
            }
        }
    }
}
