//! The NUMA scan of a task's address space (kernel/sched/fair.c
//! `task_numa_work`), run on demand: each VMA it may balance gets its
//! entries made PROT_NONE ([`crate::memory::numa_balancing`]), so that the
//! next access traps and may move the page.
//!
//! Differs from Linux: the whole range at once, when asked, instead of a
//! window of `numa_balancing_scan_size_mb` every scan period.

use crate::memory::numa_balancing::change_prot_numa;
use crate::mm_types::Mm;

impl Mm {
    /// One `task_numa_work` pass over the VMAs in `[start, end)`: those it
    /// skips are hugetlb VMAs, inaccessible ones (`PROT_NONE`), and
    /// read-only file mappings (shared libraries, "cache replicated");
    /// returns the pages made PROT_NONE (`numa_pte_updates`).
    pub fn numa_scan(&self, start: u64, end: u64) -> u64 {
        let k = &*self.kernel;
        let vmas = self.mmap_read_lock();
        let mut updated = 0;
        for v in vmas.overlapping(start, end) {
            let read_only_file = v.with_file(|f| f.is_some()) && !v.writable();
            if v.is_hugetlb() || !v.readable() || read_only_file {
                continue;
            }
            updated += change_prot_numa(k, self, v, v.start().max(start), v.end().min(end));
        }
        updated
    }
}
