//! The batch `folio_mark_lazyfree` adds to (mm/swap.c `cpu_fbatches`'s
//! `lru_lazyfree`, `folio_batch_add_and_move`, `lru_lazyfree`,
//! `lru_add_drain`). A small folio `MADV_FREE` lets go waits in the batch,
//! with a reference, until the batch is full (`PAGEVEC_SIZE`) or drained;
//! only then does it lose `PG_swapbacked`, so smaps counts it `LazyFree`
//! and reclaim may drop it. A large folio goes through at once
//! (`folio_may_be_lru_cached`).
//!
//! Differs from Linux: one batch for the machine, where Linux has one per
//! CPU (a scenario's processes run on one CPU at a time on the host too,
//! mostly); no other LRU batch is modelled (folios reach their lists at
//! once, see [`super::lru`]).

use super::lru::LruList;
use super::{Kernel, Stats};
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::phys::pg;
use crate::sync::Mutex;

/// The folios waiting to become lazily freed, by head frame.
#[derive(Debug, Default)]
pub struct LazyfreeBatch {
    pending: Mutex<Vec<Pfn>>,
}

impl Kernel {
    /// `folio_mark_lazyfree`: an anon, swap-backed folio on the LRU, not in
    /// the swap cache, joins the batch with a reference (`folio_get`); a
    /// full batch, or a large folio, moves at once.
    pub fn folio_mark_lazyfree(&self, f: Folio) {
        let h = f.head();
        if !f.test_anon() || !h.test(pg::SWAPBACKED) || !h.test(pg::LRU) || self.folio_swap(f).is_some() {
            return;
        }
        f.ref_add(1);
        let full = {
            let mut pending = self.lazyfree_batch.pending.lock().unwrap();
            pending.push(f.pfn);
            pending.len() >= self.config.release().folio_batch_size() || f.is_large()
        };
        if full {
            self.lru_add_drain();
        }
    }

    /// `lru_add_drain` of the lazyfree batch: each folio in it that still
    /// qualifies and is still on the LRU loses `PG_swapbacked`, `PG_active`
    /// and `PG_referenced` and goes to the head of the inactive list
    /// (`lru_lazyfree`, counted in `pglazyfree`, pages); the batch's
    /// references are dropped.
    pub fn lru_add_drain(&self) {
        let pending = std::mem::take(&mut *self.lazyfree_batch.pending.lock().unwrap());
        for pfn in pending {
            let f = Folio::from_head(&self.phys, pfn);
            let h = f.head();
            let qualifies = h.test(pg::SWAPBACKED) && self.folio_swap(f).is_none();
            if qualifies && self.lru.isolate(f) {
                h.clear(pg::SWAPBACKED | pg::ACTIVE | pg::REFERENCED);
                self.lru.putback(f, LruList::Inactive);
                self.folio_put_refs(f, 1);
                Stats::add(&self.stats.pglazyfree, f.nr_pages());
            }
            self.folio_put_refs(f, 1);
        }
    }

    /// The references the lazyfree batch holds on the folio at `head`.
    pub fn lazyfree_batch_refs(&self, head: Pfn) -> u64 {
        self.lazyfree_batch.pending.lock().unwrap().iter().filter(|&&p| p == head).count() as u64
    }
}
