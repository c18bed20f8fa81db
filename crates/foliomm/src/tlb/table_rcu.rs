//! Page tables freed after a grace period (mm/mmu_gather.c
//! `tlb_remove_table` with `CONFIG_MMU_GATHER_RCU_TABLE_FREE`, which
//! PT_RECLAIM selects), and the read side that walkers take
//! (`pte_offset_map`'s `rcu_read_lock`).
//!
//! Software walkers (faults, GUP, zaps, `/proc` readers) hold a PTE table's
//! frame number between reading the PMD and taking the table's lock. Once
//! `MADV_DONTNEED` may empty and free a PTE table while only the mmap_lock
//! for read (or a VMA lock) is held, such a walker can find its table gone:
//! it rechecks the PMD under the table's lock ([`crate::pgtable::pte_lock_checked`])
//! and retries. Until it has, the frame must stay a page table: a table
//! freed here goes back to the allocator only once no walker of the MM is
//! inside a read section.
//!
//! Differs from Linux: the grace period is per MM and ends when the MM's
//! walker count drops to zero (a quiescent state of that MM), not per CPU,
//! so threads that fault without pause keep freed tables waiting longer;
//! the CPU's hardware-like walker is covered by the TLB shootdown instead,
//! as on x86 without RCU table freeing.

use crate::arch::Pfn;
use crate::kernel::Kernel;
use crate::sync::atomic::{fence, AtomicU64, Ordering::SeqCst};
use crate::sync::Mutex;

/// The walkers inside read sections and the tables waiting for them.
pub struct TableRcu {
    readers: AtomicU64,
    /// How many tables `pending` holds: the last walker out looks at the
    /// list only when there is one (a fault's exit takes no lock).
    waiting: AtomicU64,
    pending: Mutex<Vec<Pfn>>,
}

impl Default for TableRcu {
    fn default() -> TableRcu {
        TableRcu { readers: AtomicU64::new(0), waiting: AtomicU64::new(0), pending: Mutex::new(Vec::new()) }
    }
}

impl TableRcu {
    /// No walker inside a section, nothing pending.
    pub fn new() -> TableRcu {
        TableRcu::default()
    }

    /// `rcu_read_lock` for page-table walkers: tables freed from now on stay
    /// allocated until [`TableRcu::read_unlock`] of every open section.
    pub fn read_lock(&self) {
        self.readers.fetch_add(1, SeqCst);
        // Ordered before the walker's PMD loads, against `free`'s fence.
        fence(SeqCst);
    }

    /// A read section that ends when the guard drops, freeing tables
    /// through `k`'s allocator.
    pub fn read<'a>(&'a self, k: &'a Kernel) -> TableReadGuard<'a> {
        self.read_lock();
        TableReadGuard { rcu: self, k }
    }

    /// Closes a read section; the last one out hands every pending table to
    /// `free`.
    pub fn read_unlock(&self, free: impl FnMut(Pfn)) {
        // Against `free`: its count goes up before it looks at the readers,
        // the readers go down before this looks at the count, so one of
        // the two sees the other and drains.
        if self.readers.fetch_sub(1, SeqCst) != 1 {
            return;
        }
        fence(SeqCst);
        if self.waiting.load(SeqCst) > 0 {
            self.drain(free);
        }
    }

    /// `tlb_remove_table` → `call_rcu`: `table`, already unlinked from every
    /// PMD and flushed from the TLBs, goes to `free` now if no walker is
    /// inside a section, else when the last one leaves.
    pub fn free(&self, table: Pfn, free: impl FnMut(Pfn)) {
        {
            let mut pending = self.pending.lock().unwrap();
            pending.push(table);
            self.waiting.fetch_add(1, SeqCst);
        }
        // The PMD store that unlinked `table` is ordered before the check.
        fence(SeqCst);
        self.drain(free);
    }

    /// Frees the pending tables if no section is open. A walker entering
    /// after the check reads the PMDs after the tables were unlinked (they
    /// were pending before the check), so it cannot reach them.
    fn drain(&self, free: impl FnMut(Pfn)) {
        let mut pending = self.pending.lock().unwrap();
        if self.readers.load(SeqCst) == 0 {
            self.waiting.fetch_sub(pending.len() as u64, SeqCst);
            pending.drain(..).for_each(free);
        }
    }

    /// Tables waiting for a grace period (for tests and the checker).
    pub fn pending(&self) -> usize {
        self.pending.lock().unwrap().len()
    }
}

/// An open read section of a [`TableRcu`] (see [`TableRcu::read`]).
pub struct TableReadGuard<'a> {
    rcu: &'a TableRcu,
    k: &'a Kernel,
}

impl Drop for TableReadGuard<'_> {
    fn drop(&mut self) {
        self.rcu.read_unlock(|t| self.k.free_table(t));
    }
}

/// Loom: a walker that read a PTE table's frame from the PMD inside a read
/// section never sees it freed before the section ends, whatever the
/// reclaimer does meanwhile; and the table is freed once both are done.
#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;

    use super::TableRcu;
    use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    use crate::sync::thread;

    const TABLE: u64 = 7;

    /// One walker against one reclaim; `grace` false frees at once (no
    /// grace period), which the walker must catch.
    fn walker_against_reclaim(grace: bool) {
        loom::model(move || {
            let rcu = Arc::new(TableRcu::new());
            let pmd = Arc::new(AtomicU64::new(TABLE));
            let freed = Arc::new(AtomicBool::new(false));
            let walker = {
                let (rcu, pmd, freed) = (rcu.clone(), pmd.clone(), freed.clone());
                thread::spawn(move || {
                    rcu.read_lock();
                    let t = pmd.load(SeqCst);
                    if t == TABLE {
                        // Taking the table's lock and rechecking the PMD.
                        assert!(!freed.load(SeqCst), "a walker's PTE table was freed under it");
                    }
                    rcu.read_unlock(|_| freed.store(true, SeqCst));
                })
            };
            pmd.store(0, SeqCst);
            if grace {
                rcu.free(TABLE, |_| freed.store(true, SeqCst));
            } else {
                freed.store(true, SeqCst);
            }
            walker.join().unwrap();
            assert!(freed.load(SeqCst), "the reclaimed table was never freed");
            assert_eq!(rcu.pending(), 0);
        });
    }

    #[test]
    fn loom_table_rcu_keeps_a_walkers_table() {
        walker_against_reclaim(true);
    }

    #[test]
    #[should_panic(expected = "freed under it")]
    fn loom_table_freed_without_grace_period_is_caught() {
        walker_against_reclaim(false);
    }
}
