//! The anon LRU lists of the one node (`struct lruvec`'s `LRU_INACTIVE_ANON`
//! and `LRU_ACTIVE_ANON`), which hold the swap-backed folios: anon and
//! shmem (`folio_is_file_lru` is false for both) (mm/swap.c `folio_add_lru`, `folio_deactivate`,
//! mm/vmscan.c `isolate_lru_folios`, `folio_isolate_lru`,
//! `move_folios_to_lru`).
//!
//! A folio on a list has `PG_lru` (and `PG_active` on the active list),
//! changed only under the list lock (`lruvec->lru_lock`). New folios
//! start inactive, as since 5.9; reclaim takes folios from the inactive
//! list's tail (the oldest) and refills it from the active list's tail.
//!
//! Differs from Linux: no per-CPU `folio_batch`es (a folio is on its list
//! at once, each add and free taking the lists' lock), no file lists and no unevictable list (an mlocked folio goes
//! back to the active list), no multi-gen LRU, no memcg; a list is ordered
//! by when a folio went on it, and a split folio's pieces stand where it
//! stood (`lru_add_split_folio`).

use std::collections::{BTreeSet, HashMap};

use crate::arch::Pfn;
use crate::folio::Folio;
use crate::phys::pg;
use crate::sync::Mutex;

/// Which list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LruList {
    Inactive = 0,
    Active = 1,
}

#[derive(Debug, Default)]
struct List {
    /// (age, head) from the oldest; the same age for a split folio's pieces.
    order: BTreeSet<(u64, Pfn)>,
    age: HashMap<Pfn, u64>,
}

#[derive(Debug, Default)]
struct Lists {
    lists: [List; 2],
    clock: u64,
}

impl Lists {
    fn insert(&mut self, which: LruList, pfn: Pfn, age: u64) {
        let l = &mut self.lists[which as usize];
        l.order.insert((age, pfn));
        l.age.insert(pfn, age);
    }

    /// Takes `pfn` off its list; returns the list and its age there.
    fn remove(&mut self, f: Folio) -> Option<(LruList, u64)> {
        let which = if f.head().test(pg::ACTIVE) { LruList::Active } else { LruList::Inactive };
        let l = &mut self.lists[which as usize];
        let age = l.age.remove(&f.pfn)?;
        l.order.remove(&(age, f.pfn));
        f.head().clear(pg::LRU | pg::ACTIVE);
        Some((which, age))
    }
}

/// The lists and their lock.
#[derive(Debug, Default)]
pub struct Lru(Mutex<Lists>);

impl Lru {
    /// `folio_add_lru`: puts `f`, on no list, at the head of the inactive
    /// list.
    pub fn add(&self, f: Folio) {
        self.putback(f, LruList::Inactive);
    }

    /// Puts `f`, on no list, at the head of `which` (`move_folios_to_lru`).
    pub fn putback(&self, f: Folio, which: LruList) {
        let mut l = self.0.lock().unwrap();
        l.clock += 1;
        let age = l.clock;
        l.insert(which, f.pfn, age);
        f.head().set(pg::LRU | if which == LruList::Active { pg::ACTIVE } else { 0 });
    }

    /// Takes `f` off its list as it is freed (`__page_cache_release` →
    /// `lruvec_del_folio`); nothing if it is on none.
    pub fn del(&self, f: Folio) {
        if f.head().test(pg::LRU) {
            self.0.lock().unwrap().remove(f);
        }
    }

    /// `folio_isolate_lru`: takes `f` off its list with a reference; false
    /// if it is on none (isolated by someone else, or not yet added).
    pub fn isolate(&self, f: Folio) -> bool {
        let mut l = self.0.lock().unwrap();
        if !f.head().test(pg::LRU) || !f.try_get() {
            return false;
        }
        l.remove(f);
        true
    }

    /// `isolate_lru_folios`: up to `nr` folios from the tail of `which`,
    /// each taken off with a reference (a folio being freed is passed over).
    pub fn isolate_tail<'k>(&self, phys: &'k crate::phys::PhysMem, which: LruList, nr: usize) -> Vec<Folio<'k>> {
        let mut l = self.0.lock().unwrap();
        let tail: Vec<Pfn> = l.lists[which as usize].order.iter().take(nr).map(|&(_, pfn)| pfn).collect();
        let mut out = Vec::new();
        for pfn in tail {
            let f = Folio::from_head(phys, pfn);
            if f.try_get() {
                l.remove(f);
                out.push(f);
            }
        }
        out
    }

    /// `lru_add_split_folio`: the pieces (`(head, order)`, `head` among
    /// them) of a folio that stood on a list at `head` stand there too.
    pub fn split(&self, phys: &crate::phys::PhysMem, head: Pfn, pieces: &[(Pfn, u32)]) {
        let mut l = self.0.lock().unwrap();
        for which in [LruList::Inactive, LruList::Active] {
            let Some(&age) = l.lists[which as usize].age.get(&head) else { continue };
            for &(pfn, _) in pieces.iter().filter(|p| p.0 != head) {
                l.insert(which, pfn, age);
            }
            for &(pfn, _) in pieces {
                phys.page(pfn).set(pg::LRU | if which == LruList::Active { pg::ACTIVE } else { 0 });
            }
        }
    }

    /// The number of folios on each list (inactive, active).
    pub fn sizes(&self) -> (usize, usize) {
        let l = self.0.lock().unwrap();
        (l.lists[0].age.len(), l.lists[1].age.len())
    }

    /// Every folio on `which`, from the oldest (for the checker).
    pub fn snapshot(&self, which: LruList) -> Vec<Pfn> {
        self.0.lock().unwrap().lists[which as usize].order.iter().map(|&(_, p)| p).collect()
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::phys::PhysMem;
    use crate::sync::atomic::Ordering::Relaxed;
    use crate::sync::{thread, Arc};

    /// Reclaim taking the inactive tail races the owner dropping the last
    /// reference and taking the folio off its list as it is freed: either
    /// reclaim holds it (and the owner's put was not the last) or passes it
    /// over; the lists end empty either way.
    #[test]
    fn isolating_the_tail_races_a_free() {
        loom::model(|| {
            let phys = Arc::new(PhysMem::new(4 << 20, false).unwrap());
            let lru = Arc::new(Lru::default());
            let pfn = phys.alloc_pages(0).unwrap();
            let f = Folio::from_head(&phys, pfn);
            f.head().refcount.store(1, Relaxed);
            lru.add(f);
            let (p, l) = (phys.clone(), lru.clone());
            let reclaim = thread::spawn(move || l.isolate_tail(&p, LruList::Inactive, 1).len());
            let last = f.put_refs(1);
            if last {
                lru.del(f);
            }
            let isolated = reclaim.join().unwrap();
            assert_eq!(isolated == 1, !last, "reclaim holds the folio exactly when the owner's put was not the last");
            assert_eq!(lru.sizes(), (0, 0));
            assert!(!f.head().test(pg::LRU));
        });
    }
}
