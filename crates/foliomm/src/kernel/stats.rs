//! Event counters of one [`super::Kernel`], named after `/proc/vmstat` and
//! the mTHP `stats/` files where Linux has a counter for the same event.

use crate::arch::MAX_PAGE_ORDER;
use crate::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

const ORDERS: usize = MAX_PAGE_ORDER as usize + 1;

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        /// Machine-wide event counters.
        #[derive(Default)]
        pub struct Stats {
            $($(#[doc = $doc])* pub $name: AtomicU64,)*
            /// Per-order families: see [`PER_ORDER`] for what each counts.
            pub anon_fault_alloc: [AtomicU64; ORDERS],
            pub anon_fault_fallback: [AtomicU64; ORDERS],
            pub split_deferred: [AtomicU64; ORDERS],
            pub split: [AtomicU64; ORDERS],
            pub split_failed: [AtomicU64; ORDERS],
            pub swpout: [AtomicU64; ORDERS],
            pub swpout_fallback: [AtomicU64; ORDERS],
            pub swpin: [AtomicU64; ORDERS],
            pub folio_alloc: [AtomicU64; ORDERS],
            pub folio_free: [AtomicU64; ORDERS],
            /// "Mapped shared?" decisions per consumer (see
            /// [`super::Consumer`]): made, wrongly "shared" (one MM maps
            /// the folio: work missed), wrongly "exclusive" (more than one
            /// does); judged by the precision report.
            pub decisions: [[AtomicU64; 3]; super::Consumer::ALL.len()],
            /// Collapse attempts per result (`SCAN_*`, see
            /// [`super::ScanResult`]), as `collapse_scan[name]`.
            pub collapse_scan: [AtomicU64; super::ScanResult::ALL.len()],
            /// Pages mapped now, per kind: gauges, not events.
            pub mapped: MappedPages,
        }

        impl Stats {
            /// Every scalar counter with its name, in declaration order.
            pub fn scalars(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Relaxed)),)*]
            }
        }

        /// Every scalar counter's name and doc comment, in declaration order.
        const SCALAR_DOCS: &[(&str, &str)] = &[$((stringify!($name), concat!($($doc, "\n"),*)),)*];
    };
}

/// Pages that page tables map, as each rmap update reports them
/// (`__folio_mod_stat`): `NR_ANON_MAPPED` (`nr_anon_pages` in
/// `/proc/vmstat`, `AnonPages` in `/proc/meminfo`) and `NR_FILE_MAPPED`
/// (`nr_mapped`, `Mapped`). hugetlb pages count in neither. Under
/// `CONFIG_NO_PAGE_MAPCOUNT` a large folio counts whole while any page of
/// it is mapped. Differs from Linux: machine-wide, not per node and memcg.
#[derive(Debug, Default)]
pub struct MappedPages {
    pub anon: AtomicI64,
    pub file: AtomicI64,
}

impl MappedPages {
    /// Adds `delta` pages of `anon` or file memory.
    pub fn add(&self, anon: bool, delta: i64) {
        if delta != 0 {
            if anon { &self.anon } else { &self.file }.fetch_add(delta, Relaxed);
        }
    }

    /// The gauges with their `/proc/vmstat` names; may be negative only
    /// under a design that miscounts (`set compound_lock unlocked`).
    pub fn snapshot(&self) -> [(&'static str, i64); 2] {
        [("nr_anon_pages", self.anon.load(Relaxed)), ("nr_mapped", self.file.load(Relaxed))]
    }
}

/// The per-order families, named `NAME[SIZE]` by [`Stats::snapshot`]: each
/// name and what it counts.
pub const PER_ORDER: [(&str, &str); 10] = [
    ("anon_fault_alloc", "Anonymous folios allocated by faults, per size (`anon_fault_alloc`)."),
    ("anon_fault_fallback", "Fallbacks from a size whose allocation failed (`anon_fault_fallback`)."),
    ("split_deferred", "Anon folios queued for deferred split, per size (`split_deferred`)."),
    ("split", "Large folios split, per size before the split (`split`)."),
    ("split_failed", "Large folios a split failed on, per size (`split_failed`)."),
    ("swpout", "Large folios written to swap whole, per size (`swpout`). Needs: set swap."),
    (
        "swpout_fallback",
        "Large folios split for want of a run of swap slots, per size (`swpout_fallback`). Needs: set swap.",
    ),
    ("swpin", "Large folios read from swap whole, per size (`swpin`). Needs: set swap."),
    ("folio_alloc", "Folios allocated, per size."),
    ("folio_free", "Folios freed, per size."),
];

/// The three counts of each consumer's decisions, named `NAME[CONSUMER]`
/// by [`Stats::snapshot`], with what each counts.
const DECISIONS: [(&str, &str); 3] = [
    ("decided", "\"Mapped shared?\" decisions CONSUMER made"),
    ("wrong_shared", "Decisions of CONSUMER that said shared while one MM mapped the folio (work missed)"),
    ("wrong_exclusive", "Decisions of CONSUMER that said exclusive while more than one MM mapped the folio: must be 0"),
];

/// What the glossary says of one counter (`foliomm counters`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct CounterDoc {
    /// As [`Stats::snapshot`] names it; `NAME[SIZE]` for a family.
    pub name: String,
    /// What it counts.
    pub meaning: String,
    /// The Linux counter of the same event (`/proc/vmstat`, an mTHP stat),
    /// if there is one.
    pub linux: Option<String>,
    /// The settings or designs without which it stays 0, if any.
    pub needs: Option<String>,
}

impl CounterDoc {
    /// The entry for `name` from its doc text: a backquoted name alone in
    /// the first parentheses, "(`pgfault`)", is the Linux counter; a
    /// trailing `Needs: ...` sentence, what it needs.
    pub fn new(name: String, doc: &str) -> CounterDoc {
        let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        let (meaning, needs) = match doc.split_once(" Needs: ") {
            Some((m, n)) => (m.to_string(), Some(n.trim_end_matches('.').to_string())),
            None => (doc.clone(), None),
        };
        let linux = meaning.split_once("(`").and_then(|(_, rest)| rest.split_once("`)")).map(|(n, _)| n.to_string());
        let linux = linux.filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric() || "_/*".contains(c)));
        CounterDoc { name, meaning, linux, needs }
    }
}

/// Every counter [`Stats::snapshot`] can give, with what it counts.
pub fn glossary() -> Vec<CounterDoc> {
    let mut out: Vec<CounterDoc> = SCALAR_DOCS.iter().map(|(n, d)| CounterDoc::new(n.to_string(), d)).collect();
    out.extend(PER_ORDER.iter().map(|(n, d)| CounterDoc::new(format!("{n}[SIZE]"), d)));
    let results: Vec<&str> = super::ScanResult::ALL.iter().map(|r| r.name()).collect();
    let collapse = format!(
        "Collapse attempts (khugepaged and MADV_COLLAPSE) that ended in RESULT (`SCAN_*`): {}.",
        results.join(", ")
    );
    out.push(CounterDoc::new("collapse_scan[RESULT]".into(), &collapse));
    let consumers: Vec<&str> = super::Consumer::ALL.iter().map(|c| c.name()).collect();
    for (name, what) in DECISIONS {
        let doc = format!("{what}; CONSUMER is one of {}.", consumers.join(", "));
        out.push(CounterDoc::new(format!("{name}[CONSUMER]"), &doc));
    }
    out
}

counters! {
    /// Page faults handled (`pgfault`).
    pgfault,
    /// Read faults that mapped the shared zero page.
    zero_page_map,
    /// Read faults that mapped the huge zero folio with a PMD.
    /// Needs: PMD-sized THP allowed for the mapping (set thp).
    huge_zero_map,
    /// PMD-sized anonymous faults served by a THP (`thp_fault_alloc`).
    /// Needs: PMD-sized THP allowed for the mapping (set thp).
    thp_fault_alloc,
    /// PMD-sized anonymous faults that fell back to PTEs (`thp_fault_fallback`).
    /// Needs: PMD-sized THP allowed for the mapping (set thp).
    thp_fault_fallback,
    /// PMD-sized shmem folios allocated (`thp_file_alloc`).
    /// Needs: shmem THP allowed (set shmem).
    thp_file_alloc,
    /// PMD-sized shmem allocations that fell back to smaller folios (`thp_file_fallback`).
    /// Needs: shmem THP allowed (set shmem).
    thp_file_fallback,
    /// shmem folios mapped by a PMD (`thp_file_mapped`).
    /// Needs: shmem THP allowed (set shmem).
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
    /// Needs: khugepaged or madvise collapse.
    thp_collapse_alloc,
    /// Collapses that found no PMD-sized folio (`thp_collapse_alloc_failed`).
    /// Needs: khugepaged or madvise collapse.
    thp_collapse_alloc_failed,
    /// khugepaged scans stopped by `max_ptes_none` (`thp_scan_exceed_none_pte`).
    /// Needs: khugepaged.
    thp_scan_exceed_none_pte,
    /// khugepaged scans stopped by `max_ptes_swap` (`thp_scan_exceed_swap_pte`).
    /// Needs: khugepaged and set swap.
    thp_scan_exceed_swap_pte,
    /// khugepaged scans stopped by `max_ptes_shared` (`thp_scan_exceed_shared_pte`).
    /// Needs: khugepaged.
    thp_scan_exceed_shared_pte,
    /// Full passes of khugepaged over every MM (`khugepaged/full_scans`).
    /// Needs: khugepaged.
    khugepaged_full_scans,
    /// Ranges khugepaged collapsed (`khugepaged/pages_collapsed`).
    /// Needs: khugepaged.
    khugepaged_pages_collapsed,
    /// Full passes of ksmd over every MM with a KSM slot (`ksm/full_scans`).
    /// Needs: madvise ... mergeable, then ksmd.
    ksm_full_scans,
    /// Copies of a KSM page made by a write to it (`cow_ksm`).
    /// Needs: a write to a page ksmd merged.
    cow_ksm,
    /// Pages migrated (`pgmigrate_success`).
    /// Needs: set nodes 2 or more, and move_pages, mbind or numa_scan.
    pgmigrate_success,
    /// Pages a migration failed on (`pgmigrate_fail`).
    /// Needs: set nodes 2 or more, and move_pages, mbind or numa_scan.
    pgmigrate_fail,
    /// PMD-sized folios migrated whole (`thp_migration_success`).
    /// Needs: set nodes 2 or more, and move_pages, mbind or numa_scan.
    thp_migration_success,
    /// PMD-sized folios a migration failed on (`thp_migration_fail`).
    /// Needs: set nodes 2 or more, and move_pages, mbind or numa_scan.
    thp_migration_fail,
    /// PMD-sized folios split to be migrated (`thp_migration_split`).
    /// Needs: set nodes 2 or more, and move_pages, mbind or numa_scan.
    thp_migration_split,
    /// Pages the NUMA scan made PROT_NONE (`numa_pte_updates`).
    /// Needs: numa_scan.
    numa_pte_updates,
    /// Huge PMDs the NUMA scan made PROT_NONE (`numa_huge_pte_updates`).
    /// Needs: numa_scan on a PMD-mapped THP.
    numa_huge_pte_updates,
    /// NUMA hinting faults (`numa_hint_faults`).
    /// Needs: numa_scan.
    numa_hint_faults,
    /// Hinting faults on a folio of the faulting CPU's node (`numa_hint_faults_local`).
    /// Needs: numa_scan.
    numa_hint_faults_local,
    /// Pages migrated by hinting faults (`numa_pages_migrated`).
    /// Needs: set nodes 2 or more and numa_scan.
    numa_pages_migrated,
    /// Hinting faults classified `TNF_SHARED` for `task_numa_fault` (model-only).
    /// Needs: numa_scan.
    numa_shared_faults,
    /// Write faults that reused the mapped page (`pgreuse`).
    pgreuse,
    /// Pages written to swap (`pswpout`).
    /// Needs: set swap.
    pswpout,
    /// Pages read from swap (`pswpin`).
    /// Needs: set swap.
    pswpin,
    /// Swap entries zap freed.
    /// Needs: set swap.
    zap_swap_entries,
    /// Batches of consecutive swap entries zap freed (`free_swap_and_cache_nr` calls).
    /// Needs: set swap.
    zap_swap_batches,
    /// PMD-sized folios written to swap whole (`thp_swpout`).
    /// Needs: set swap.
    thp_swpout,
    /// PMD-sized folios split for want of a run of swap slots (`thp_swpout_fallback`).
    /// Needs: set swap.
    thp_swpout_fallback,
    /// Folios `MADV_PAGEOUT` or `MADV_COLD` passed over as (maybe) mapped shared.
    /// Needs: madvise pageout or cold.
    pageout_skipped_shared,
    /// Allocations that entered direct reclaim, summed over zones (`allocstall_*`).
    /// Needs: set swap (without a device anon memory is not reclaimed).
    allocstall,
    /// Reclaim runs started under the low watermark, kswapd's (`pageoutrun`).
    /// Needs: set swap (without a device anon memory is not reclaimed).
    pageoutrun,
    /// Anon folios reclaim looked at on the inactive list, in folios where Linux counts pages (`pgscan_anon`).
    /// Needs: set swap, or madvise pageout.
    pgscan_anon,
    /// Anon folios reclaim freed, in folios where Linux counts pages (`pgsteal_anon`).
    /// Needs: set swap, or madvise pageout.
    pgsteal_anon,
    /// Folios moved to the active list, in folios where Linux counts pages (`pgactivate`).
    /// Needs: set swap, or madvise pageout.
    pgactivate,
    /// Pages moved from the active to the inactive list (`pgdeactivate`).
    /// Needs: set swap, or madvise cold.
    pgdeactivate,
    /// Pages `MADV_FREE` made lazily freed (`pglazyfree`).
    /// Needs: madvise free.
    pglazyfree,
    /// Lazily freed pages reclaim dropped without writing them (`pglazyfreed`).
    /// Needs: madvise free, then madvise pageout or memory pressure.
    pglazyfreed,
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
    /// Needs: file or shmem folios and set zap batched.
    rmap_delayed,
    /// PTEs copied by fork.
    fork_ptes,
    /// PTE batches copied by fork.
    fork_batches,
    /// Pages fork copied for the child because they may be pinned (in `copy_present_page`).
    /// Needs: a pin (pin ... longterm) on the page before fork.
    fork_copy_pinned,
    /// PTEs cleared by zap.
    zap_ptes,
    /// PTE batches zapped.
    zap_batches,
    /// Reschedule points (`cond_resched`) between the chunks an mmu_gather
    /// frees its pages in (`tlb_batch_pages_flush`): the work between two is
    /// the latency seed 001's thread worried about.
    zap_resched,
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
    /// Needs: set mapcount compound-locked, rmap-id, rmap-id-powersum or mm-id.
    rmap_locks,
    /// Rounds spun waiting for them.
    /// Needs: a design that locks (set mapcount compound-locked, rmap-id, rmap-id-powersum or mm-id) and threads.
    rmap_lock_spins,
    /// Exclusive rmap-seqcount entries lost to another writer (seed 000).
    /// Needs: set mapcount rmap-id or rmap-id-powersum, and threads.
    rmap_seq_lost,
    /// Distinct memmap cache lines (64-byte descriptors) the design touched.
    rmap_cache_lines,
    /// Answers "exclusive" (or COW reuses) while two MMs map the folio: must be 0.
    precision_wrong_exclusive,
    /// Answers "shared"/"maybe shared" while one MM maps the folio.
    precision_missed_reuse,
    /// "Maybe shared" answers given because rmap writers were at work
    /// (seed 000's reader stops early instead of retrying).
    /// Needs: set mapcount rmap-id or rmap-id-powersum, and threads.
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
    /// Needs: set vma_lock vma-rwsem or vma-refcount.
    vma_lock_success,
    /// Per-VMA lock attempts given up for the mmap_lock: no VMA, VMA being
    /// written, or revalidation failed (`VMA_LOCK_ABORT`).
    /// Needs: set vma_lock vma-rwsem or vma-refcount.
    vma_lock_abort,
    /// Faults begun under a per-VMA lock and redone under the mmap_lock
    /// (`VMA_LOCK_RETRY`).
    /// Needs: set vma_lock vma-rwsem or vma-refcount.
    vma_lock_retry,
    /// Lookups that found a VMA detached after the walk and walked again
    /// (`VMA_LOCK_MISS`).
    /// Needs: set vma_lock vma-rwsem or vma-refcount, and threads.
    vma_lock_miss,
    /// hugetlbfs page removals that met a VMA whose hugetlb lock a fault
    /// held, let go of `i_mmap_rwsem` and waited for it
    /// (`hugetlb_unmap_file_folio`'s back-out, seed 002's lock order).
    /// Needs: set hugetlb_sync vma-lock, threads, and a truncation or hole punch.
    hugetlb_unmap_backed_out,
    /// Faults on a none entry of a range registered for missing faults,
    /// handed to the userfaultfd's handler (`handle_userfault` with
    /// `VM_UFFD_MISSING`).
    /// Needs: a range registered with uffd ... missing.
    uffd_missing_fault,
    /// Write faults on a page userfaultfd write-protects, handed to the
    /// handler (`handle_userfault` with `VM_UFFD_WP`).
    /// Needs: a range registered with uffd ... wp.
    uffd_wp_fault,
    /// Faults on a page the page cache holds, in a range registered for
    /// minor faults, handed to the handler (`VM_UFFD_MINOR`).
    /// Needs: a shmem or hugetlb range registered with uffd ... minor.
    uffd_minor_fault,
    /// Faults handed to a userfaultfd that asked for SIGBUS instead
    /// (`UFFD_FEATURE_SIGBUS`).
    /// Needs: a range registered with uffd ... sigbus.
    uffd_sigbus,
    /// Pages `UFFDIO_COPY` filled (`mfill_atomic_pte_copy`).
    /// Needs: uffd_copy, or a handler that copies.
    uffd_copy,
    /// Pages `UFFDIO_MOVE` moved (`move_pages`; a THP moved by its PMD
    /// counts its pages).
    /// Needs: uffd_move (Linux 6.8 on).
    uffd_move,
    /// Pages `UFFDIO_ZEROPAGE` mapped (`mfill_atomic_pte_zeropage`).
    /// Needs: uffd_zeropage, or a handler that maps the zero page.
    uffd_zeropage,
}

impl Stats {
    /// Every counter, scalars then per-order arrays as `name[order]`, omitting
    /// per-order entries that are zero.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self.scalars().into_iter().map(|(n, v)| (n.to_string(), v)).collect();
        for ((name, _), arr) in PER_ORDER.iter().zip(self.per_order()) {
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
            for ((what, _), c) in DECISIONS.iter().zip(counts) {
                let v = c.load(Relaxed);
                if v != 0 {
                    out.push((format!("{what}[{}]", consumer.name()), v));
                }
            }
        }
        out
    }

    /// The per-order families, in [`PER_ORDER`]'s order.
    fn per_order(&self) -> [&[AtomicU64; ORDERS]; PER_ORDER.len()] {
        [
            &self.anon_fault_alloc,
            &self.anon_fault_fallback,
            &self.split_deferred,
            &self.split,
            &self.split_failed,
            &self.swpout,
            &self.swpout_fallback,
            &self.swpin,
            &self.folio_alloc,
            &self.folio_free,
        ]
    }

    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}
