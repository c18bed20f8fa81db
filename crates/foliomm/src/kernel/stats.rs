//! Event counters of one [`super::Kernel`], named after `/proc/vmstat` and
//! the mTHP `stats/` files where Linux has a counter for the same event.

use crate::arch::MAX_PAGE_ORDER;
use crate::sync::atomic::{AtomicU64, Ordering::Relaxed};

const ORDERS: usize = MAX_PAGE_ORDER as usize + 1;

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// Machine-wide event counters.
        #[derive(Default)]
        pub struct Stats {
            $($(#[doc = $doc])* pub $name: AtomicU64,)*
            /// Anonymous folios allocated by faults, per order (`anon_fault_alloc`).
            pub anon_fault_alloc: [AtomicU64; ORDERS],
            /// Fallbacks from an order whose allocation failed (`anon_fault_fallback`).
            pub anon_fault_fallback: [AtomicU64; ORDERS],
            /// Anon folios queued for deferred split (`split_deferred`).
            pub split_deferred: [AtomicU64; ORDERS],
            /// Large folios split, per order before the split (the mTHP `split` stat).
            pub split: [AtomicU64; ORDERS],
            /// Large folios a split failed on, per order (the mTHP `split_failed` stat).
            pub split_failed: [AtomicU64; ORDERS],
            /// Large folios written to swap whole, per order (the mTHP `swpout` stat).
            pub swpout: [AtomicU64; ORDERS],
            /// Large folios split for want of a run of swap slots, per order (`swpout_fallback`).
            pub swpout_fallback: [AtomicU64; ORDERS],
            /// Large folios read from swap whole, per order (the mTHP `swpin` stat).
            pub swpin: [AtomicU64; ORDERS],
            /// Folios allocated, per order.
            pub folio_alloc: [AtomicU64; ORDERS],
            /// Folios freed, per order.
            pub folio_free: [AtomicU64; ORDERS],
            /// "Mapped shared?" decisions per consumer (see
            /// [`super::Consumer`]): made, wrongly "shared" (one MM maps
            /// the folio: work missed), wrongly "exclusive" (more than one
            /// does); judged by the precision report.
            pub decisions: [[AtomicU64; 3]; super::Consumer::ALL.len()],
            /// Collapse attempts per result (`SCAN_*`, see
            /// [`super::ScanResult`]), as `collapse_scan[name]`.
            pub collapse_scan: [AtomicU64; super::ScanResult::ALL.len()],
        }

        impl Stats {
            /// Every scalar counter with its name, in declaration order.
            pub fn scalars(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Relaxed)),)*]
            }
        }
    };
}

counters! {
    /// Page faults handled (`pgfault`).
    pgfault,
    /// Read faults that mapped the shared zero page.
    zero_page_map,
    /// Read faults that mapped the huge zero folio with a PMD.
    huge_zero_map,
    /// PMD-sized anonymous faults served by a THP (`thp_fault_alloc`).
    thp_fault_alloc,
    /// PMD-sized anonymous faults that fell back to PTEs (`thp_fault_fallback`).
    thp_fault_fallback,
    /// PMD-sized shmem folios allocated (`thp_file_alloc`).
    thp_file_alloc,
    /// PMD-sized shmem allocations that fell back to smaller folios (`thp_file_fallback`).
    thp_file_fallback,
    /// shmem folios mapped by a PMD (`thp_file_mapped`).
    thp_file_mapped,
    /// PMD mappings split into PTE mappings (`thp_split_pmd`).
    thp_split_pmd,
    /// PMD-sized folios split (`thp_split_page`).
    thp_split_page,
    /// PMD-sized folios a split failed on (`thp_split_page_failed`).
    thp_split_page_failed,
    /// PMD-sized anon folios queued for deferred split (`thp_deferred_split_page`).
    thp_deferred_split_page,
    /// Underused THPs the deferred split shrinker split (`thp_underused_split_page`).
    thp_underused_split_page,
    /// PMD-sized folios allocated to collapse a range into (`thp_collapse_alloc`).
    thp_collapse_alloc,
    /// Collapses that found no PMD-sized folio (`thp_collapse_alloc_failed`).
    thp_collapse_alloc_failed,
    /// khugepaged scans stopped by `max_ptes_none` (`thp_scan_exceed_none_pte`).
    thp_scan_exceed_none_pte,
    /// khugepaged scans stopped by `max_ptes_swap` (`thp_scan_exceed_swap_pte`).
    thp_scan_exceed_swap_pte,
    /// khugepaged scans stopped by `max_ptes_shared` (`thp_scan_exceed_shared_pte`).
    thp_scan_exceed_shared_pte,
    /// Full passes of khugepaged over every MM (`khugepaged/full_scans`).
    khugepaged_full_scans,
    /// Ranges khugepaged collapsed (`khugepaged/pages_collapsed`).
    khugepaged_pages_collapsed,
    /// Pages migrated (`pgmigrate_success`).
    pgmigrate_success,
    /// Pages a migration failed on (`pgmigrate_fail`).
    pgmigrate_fail,
    /// PMD-sized folios migrated whole (`thp_migration_success`).
    thp_migration_success,
    /// PMD-sized folios a migration failed on (`thp_migration_fail`).
    thp_migration_fail,
    /// PMD-sized folios split to be migrated (`thp_migration_split`).
    thp_migration_split,
    /// Pages the NUMA scan made PROT_NONE (`numa_pte_updates`).
    numa_pte_updates,
    /// Huge PMDs the NUMA scan made PROT_NONE (`numa_huge_pte_updates`).
    numa_huge_pte_updates,
    /// NUMA hinting faults (`numa_hint_faults`).
    numa_hint_faults,
    /// Hinting faults on a folio of the faulting CPU's node (`numa_hint_faults_local`).
    numa_hint_faults_local,
    /// Pages migrated by hinting faults (`numa_pages_migrated`).
    numa_pages_migrated,
    /// Hinting faults classified `TNF_SHARED` for `task_numa_fault` (model-only).
    numa_shared_faults,
    /// Write faults that reused the mapped page (`pgreuse`).
    pgreuse,
    /// Pages written to swap (`pswpout`).
    pswpout,
    /// Pages read from swap (`pswpin`).
    pswpin,
    /// Swap entries zap freed.
    zap_swap_entries,
    /// Batches of consecutive swap entries zap freed (`free_swap_and_cache_nr` calls).
    zap_swap_batches,
    /// PMD-sized folios written to swap whole (`thp_swpout`).
    thp_swpout,
    /// PMD-sized folios split for want of a run of swap slots (`thp_swpout_fallback`).
    thp_swpout_fallback,
    /// Folios `MADV_PAGEOUT` or `MADV_COLD` passed over as (maybe) mapped shared.
    pageout_skipped_shared,
    /// Allocations that entered direct reclaim (`allocstall_*` summed).
    allocstall,
    /// Reclaim runs started under the low watermark (`pageoutrun`, kswapd's).
    pageoutrun,
    /// Anon folios reclaim looked at on the inactive list (`pgscan_anon`, in folios).
    pgscan_anon,
    /// Anon folios reclaim freed (`pgsteal_anon`, in folios).
    pgsteal_anon,
    /// Folios moved to the active list (`pgactivate`, in folios).
    pgactivate,
    /// Folios moved to the inactive list (`pgdeactivate`, in folios).
    pgdeactivate,
    /// Write faults that copied a page (or the zero page) into a new folio.
    cow_copy,
    /// Write faults on a PMD-mapped THP that reused it in place.
    thp_reuse_pmd,
    /// `folio_add_new_anon_rmap` calls.
    rmap_add_new,
    /// `folio_add_anon_rmap_*` calls (PMD split).
    rmap_add,
    /// `folio_try_dup_anon_rmap_*` calls (fork), one per batch.
    rmap_dup,
    /// `folio_remove_rmap_*` calls, one per batch.
    rmap_remove,
    /// Zap batches of a file folio under a dirty PTE whose rmap removal
    /// waited for the TLB flush (seed 001's delayed rmap).
    rmap_delayed,
    /// PTEs copied by fork.
    fork_ptes,
    /// PTE batches copied by fork.
    fork_batches,
    /// Pages fork copied for the child because they may be pinned (`copy_present_page`).
    fork_copy_pinned,
    /// PTEs cleared by zap.
    zap_ptes,
    /// PTE batches zapped.
    zap_batches,
    /// TLB flushes requested (`flush_tlb_mm_range` calls).
    tlb_flush,
    /// Flushes a CPU applied that dropped entries from its TLB.
    tlb_shootdown,
    /// TLB entries dropped by flushes.
    tlb_entries_dropped,
    /// Page-table pages allocated.
    pgtable_alloc,
    /// Page-table pages freed.
    pgtable_free,
    /// Fork calls.
    fork,
    /// Atomic read-modify-writes the mapcount design performed (as its
    /// kernel code does them: a bit-spinlock unlock is a plain store).
    rmap_atomic_rmw,
    /// Lock acquisitions by the mapcount design (bit spinlocks, seqcount entries).
    rmap_locks,
    /// Rounds spun waiting for them.
    rmap_lock_spins,
    /// Exclusive rmap-seqcount entries lost to another writer (seed 000).
    rmap_seq_lost,
    /// Distinct memmap cache lines (64-byte descriptors) the design touched.
    rmap_cache_lines,
    /// Answers "exclusive" (or COW reuses) while two MMs map the folio: must be 0.
    precision_wrong_exclusive,
    /// Answers "shared"/"maybe shared" while one MM maps the folio.
    precision_missed_reuse,
    /// "Maybe shared" answers given because rmap writers were at work
    /// (seed 000's reader stops early instead of retrying).
    precision_reader_busy,
    /// COW copies the ground truth would have avoided by reusing.
    precision_avoidable_copy,
    /// Policy guesses "likely exclusive" while two MMs map the folio.
    precision_guess_exclusive_wrong,
    /// Policy guesses "likely shared" while one MM maps the folio.
    precision_guess_shared_wrong,
    /// Errors returned as ENOMEM.
    oom,
    /// Faults handled under a per-VMA lock alone (`VMA_LOCK_SUCCESS`).
    vma_lock_success,
    /// Per-VMA lock attempts given up for the mmap_lock: no VMA, VMA being
    /// written, or revalidation failed (`VMA_LOCK_ABORT`).
    vma_lock_abort,
    /// Faults begun under a per-VMA lock and redone under the mmap_lock
    /// (`VMA_LOCK_RETRY`).
    vma_lock_retry,
    /// Lookups that found a VMA detached after the walk and walked again
    /// (`VMA_LOCK_MISS`).
    vma_lock_miss,
}

impl Stats {
    /// Every counter, scalars then per-order arrays as `name[order]`, omitting
    /// per-order entries that are zero.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self.scalars().into_iter().map(|(n, v)| (n.to_string(), v)).collect();
        let arrays = [
            ("anon_fault_alloc", &self.anon_fault_alloc),
            ("anon_fault_fallback", &self.anon_fault_fallback),
            ("split_deferred", &self.split_deferred),
            ("split", &self.split),
            ("split_failed", &self.split_failed),
            ("swpout", &self.swpout),
            ("swpout_fallback", &self.swpout_fallback),
            ("swpin", &self.swpin),
            ("folio_alloc", &self.folio_alloc),
            ("folio_free", &self.folio_free),
        ];
        for (name, arr) in arrays {
            for (order, c) in arr.iter().enumerate() {
                let v = c.load(Relaxed);
                if v != 0 {
                    out.push((format!("{name}[{}K]", 4u64 << order), v));
                }
            }
        }
        for (result, c) in super::ScanResult::ALL.iter().zip(&self.collapse_scan) {
            let v = c.load(Relaxed);
            if v != 0 {
                out.push((format!("collapse_scan[{}]", result.name()), v));
            }
        }
        for (consumer, counts) in super::Consumer::ALL.iter().zip(&self.decisions) {
            for (what, c) in ["decided", "wrong_shared", "wrong_exclusive"].iter().zip(counts) {
                let v = c.load(Relaxed);
                if v != 0 {
                    out.push((format!("{what}[{}]", consumer.name()), v));
                }
            }
        }
        out
    }

    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}
