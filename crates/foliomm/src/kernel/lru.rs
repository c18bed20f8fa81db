//! The anon LRU lists of each node (`struct lruvec`'s `LRU_INACTIVE_ANON`
//! and `LRU_ACTIVE_ANON`), which hold the swap-backed folios: anon and
//! shmem (`folio_is_file_lru` is false for both) (mm/swap.c `folio_add_lru`, `folio_deactivate`,
//! mm/vmscan.c `isolate_lru_folios`, `folio_isolate_lru`,
//! `move_folios_to_lru`). A folio is on the lists of the node its frames
//! are on (`folio_lruvec`), each node's under a lock of its own.
//!
//! A folio on a list has `PG_lru` (and `PG_active` on the active list),
//! changed only under the list lock (`lruvec->lru_lock`). New folios
//! start inactive, as since 5.9; reclaim takes folios from the inactive
//! list's tail (the oldest) and refills it from the active list's tail.
//!
//! New folios reach the lists through the per-CPU batches of
//! [`super::lru_batch`], a batch at a time under one hold of the lock.
//! On simulated CPUs, each folio moved on or off a list costs the
//! profile's `lru_folio` while the lock is held: with every CPU's faults
//! and frees on one node's lists, that hold is what page_fault1's
//! throughput meets from a dozen CPUs on.
//!
//! Differs from Linux: frees take the lock each, but on simulated CPUs its
//! cache line is accounted as Linux takes it, once per batch
//! ([`Lru::account_freed`]); no file lists and no unevictable list (an mlocked folio goes
//! back to the active list), no multi-gen LRU, no memcg; a list is ordered
//! by when a folio went on it, and a split folio's pieces stand where it
//! stood (`lru_add_split_folio`); reclaim takes the nodes' tails in node
//! order, where Linux reclaims each node on its own (`shrink_node`).

use crate::arch::Pfn;
use crate::folio::Folio;
use crate::phys::{pg, Page, PhysMem};
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::cacheline::{self, Aligned, Structure};
use crate::sync::sim::{self, Work};
use crate::sync::{Mutex, MutexGuard};

/// Which list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LruList {
    Inactive = 0,
    Active = 1,
}

impl LruList {
    /// The list a folio with `PG_lru` is on (`folio_lru_list`).
    pub(super) fn of(head: &Page) -> LruList {
        if head.test(pg::ACTIVE) {
            LruList::Active
        } else {
            LruList::Inactive
        }
    }
}

/// No neighbour: the folio is the newest or the oldest.
const NONE: u64 = u32::MAX as u64;

/// A folio's neighbours (`folio->lru`): in its head page's `ids` word,
/// which a head page does not otherwise use, the newer neighbour's pfn in
/// the high half and the older's in the low half (pfns fit 32 bits: model
/// RAM is far below 16 TiB).
fn links(phys: &PhysMem, pfn: Pfn) -> (u64, u64) {
    let w = phys.page(pfn).ids.load(Relaxed);
    (w >> 32, w & NONE)
}

fn set_links(phys: &PhysMem, pfn: Pfn, newer: u64, older: u64) {
    debug_assert!(pfn < NONE, "a pfn fits the LRU's 32-bit links");
    phys.page(pfn).ids.store(newer << 32 | older, Relaxed);
}

#[derive(Debug)]
struct List {
    newest: u64,
    oldest: u64,
    len: usize,
}

impl Default for List {
    fn default() -> List {
        List { newest: NONE, oldest: NONE, len: 0 }
    }
}

#[derive(Debug, Default)]
struct Lists([List; 2]);

impl Lists {
    /// Makes `newer` and `older` neighbours on `which`; NONE on a side
    /// makes the other the list's end there.
    fn join(&mut self, phys: &PhysMem, which: LruList, newer: u64, older: u64) {
        let l = &mut self.0[which as usize];
        match newer {
            NONE => l.newest = older,
            n => set_links(phys, n, links(phys, n).0, older),
        }
        match older {
            NONE => l.oldest = newer,
            o => set_links(phys, o, newer, links(phys, o).1),
        }
    }

    /// Links `pfn` into `which` between `newer` and `older`.
    fn link(&mut self, phys: &PhysMem, which: LruList, pfn: Pfn, newer: u64, older: u64) {
        self.join(phys, which, newer, pfn);
        self.join(phys, which, pfn, older);
        self.0[which as usize].len += 1;
    }

    /// Takes `f`, on a list, off it and clears its list flags.
    fn remove(&mut self, f: Folio) {
        let phys = f.phys();
        let which = LruList::of(f.head());
        let (newer, older) = links(phys, f.pfn);
        self.join(phys, which, newer, older);
        self.0[which as usize].len -= 1;
        set_links(phys, f.pfn, NONE, NONE);
        f.head().clear(pg::LRU | pg::ACTIVE);
    }

    /// Up to `nr` folios of `which` from the oldest.
    fn oldest(&self, phys: &PhysMem, which: LruList, nr: usize) -> Vec<Pfn> {
        let mut out = Vec::new();
        let mut at = self.0[which as usize].oldest;
        while at != NONE && out.len() < nr {
            out.push(at);
            at = links(phys, at).0;
        }
        out
    }
}

/// The lists and their lock, a pair per node (line-aligned, as each
/// node's `pglist_data` is its own).
#[derive(Debug)]
pub struct Lru {
    nodes: Box<[Aligned<Mutex<Lists>>]>,
    /// Frees per lock (`release_pages` relocks every `SWAP_CLUSTER_MAX`;
    /// from 6.9 `folios_put_refs` keeps it for a `folio_batch`).
    frees_per_lock: u32,
}

thread_local! {
    /// This CPU's frees since it last took the lists' lock for them.
    static FREED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Starts this thread's count of frees towards a lock afresh (tests).
#[cfg(all(test, not(any(loom, shuttle))))]
pub(crate) fn forget_freed() {
    FREED.set(0);
}

impl Lru {
    /// Empty lists for `nodes` nodes, freed into in `release`'s batches.
    pub fn new(release: crate::release::KernelVersion, nodes: usize) -> Lru {
        let adds = release.folio_batch_size() as u32;
        let nodes = (0..nodes.max(1)).map(|_| Aligned(Mutex::default())).collect();
        Lru { nodes, frees_per_lock: if adds == 15 { 32 } else { adds } }
    }

    /// The lists `f` goes on: its node's (`folio_lruvec`).
    fn lists_of(&self, f: Folio) -> &Mutex<Lists> {
        &self.nodes[f.phys().nid(f.pfn)]
    }

    /// Accounts the lock's line for a free as Linux takes it: once per
    /// batch of this CPU's. The counts are per OS thread: fresh for each
    /// simulated run's CPUs; threads that account as CPUs outside a
    /// simulation carry a partial batch from one run to the next. Differs
    /// from Linux: every free counts towards a batch, where a lone
    /// `folio_put` takes the lock at once.
    fn account_freed(&self, lists: &Mutex<Lists>) {
        if cacheline::accounting() {
            let freed = FREED.get() + 1;
            FREED.set(if freed >= self.frees_per_lock { 0 } else { freed });
            if freed >= self.frees_per_lock {
                cacheline::write(Structure::LruLock, lists);
            }
        }
    }

    /// `folio_batch_move_lru` with `lru_add`: puts `folios`, on no list,
    /// at the head of their lists in their order (the active list for one
    /// with `PG_active`, which reclaim's putback sets), under one hold of
    /// a node's lock for each run of folios of that node
    /// (`folio_lruvec_relock_irqsave`).
    pub fn add(&self, folios: &[Folio]) {
        for run in folios.chunk_by(|a, b| std::ptr::eq(self.lists_of(*a), self.lists_of(*b))) {
            let lists = self.lists_of(run[0]);
            cacheline::write(Structure::LruLock, lists);
            let mut l = lists.lock().unwrap();
            sim::work(Work::LruFolios(run.len() as u64));
            for &f in run {
                Self::link_newest(&mut l, f, LruList::of(f.head()));
            }
        }
    }

    /// Puts `f`, on no list, at the head of `which` (`move_folios_to_lru`).
    pub fn putback(&self, f: Folio, which: LruList) {
        let lists = self.lists_of(f);
        cacheline::write(Structure::LruLock, lists);
        let mut l = lists.lock().unwrap();
        sim::work(Work::LruFolios(1));
        Self::link_newest(&mut l, f, which);
    }

    fn link_newest(l: &mut Lists, f: Folio, which: LruList) {
        let newest = l.0[which as usize].newest;
        l.link(f.phys(), which, f.pfn, NONE, newest);
        f.head().set(pg::LRU | if which == LruList::Active { pg::ACTIVE } else { 0 });
    }

    /// Takes `f` off its list as it is freed (`__page_cache_release` →
    /// `lruvec_del_folio`); nothing if it is on none.
    pub fn del(&self, f: Folio) {
        if f.head().test(pg::LRU) {
            let lists = self.lists_of(f);
            self.account_freed(lists);
            let mut l = lists.lock().unwrap();
            if f.head().test(pg::LRU) {
                sim::work(Work::LruFolios(1));
                l.remove(f);
            }
        }
    }

    /// `folio_isolate_lru`: takes `f` off its list with a reference; false
    /// if it is on none (isolated by someone else, or not yet added).
    pub fn isolate(&self, f: Folio) -> bool {
        let lists = self.lists_of(f);
        if f.head().test(pg::LRU) {
            cacheline::write(Structure::LruLock, lists);
        }
        let mut l = lists.lock().unwrap();
        if !f.head().test(pg::LRU) || !f.try_get() {
            return false;
        }
        sim::work(Work::LruFolios(1));
        l.remove(f);
        true
    }

    /// `isolate_lru_folios`: up to `nr` folios from the tails of `which`,
    /// node by node, each taken off with a reference (a folio being freed
    /// is passed over).
    pub fn isolate_tail<'k>(&self, phys: &'k PhysMem, which: LruList, nr: usize) -> Vec<Folio<'k>> {
        let mut out = Vec::new();
        for lists in self.nodes.iter().map(|n| &**n) {
            if out.len() == nr {
                break;
            }
            cacheline::write(Structure::LruLock, lists);
            let mut l = lists.lock().unwrap();
            for pfn in l.oldest(phys, which, nr - out.len()) {
                let f = Folio::from_head(phys, pfn);
                if f.try_get() {
                    sim::work(Work::LruFolios(1));
                    l.remove(f);
                    out.push(f);
                }
            }
        }
        out
    }

    /// Locks the lists for the split of `f`, which is on one
    /// (`folio_lruvec_lock` in `__folio_split`): its place is kept while
    /// its descriptors are rebuilt.
    pub fn lock_for_split<'l>(&'l self, f: Folio) -> SplitLock<'l> {
        let lists = self.lists_of(f);
        cacheline::write(Structure::LruLock, lists);
        let lists = lists.lock().unwrap();
        debug_assert!(f.head().test(pg::LRU), "folio {:#x} splits off the LRU", f.pfn);
        SplitLock { lists, which: LruList::of(f.head()), links: links(f.phys(), f.pfn) }
    }

    /// The number of folios on each list (inactive, active), over the nodes.
    pub fn sizes(&self) -> (usize, usize) {
        self.nodes.iter().fold((0, 0), |(i, a), n| {
            let l = n.lock().unwrap();
            (i + l.0[0].len, a + l.0[1].len)
        })
    }

    /// Every folio on `which`, node by node, each node's from the oldest
    /// (for the checker); a list whose links loop stops one past its length.
    pub fn snapshot(&self, phys: &PhysMem, which: LruList) -> Vec<Pfn> {
        let mut out = Vec::new();
        for n in self.nodes.iter() {
            let l = n.lock().unwrap();
            out.extend(l.oldest(phys, which, l.0[which as usize].len + 1));
        }
        out
    }
}

/// The lists locked across the split of a folio on one of them.
pub struct SplitLock<'l> {
    lists: MutexGuard<'l, Lists>,
    which: LruList,
    /// The folio's neighbours when the split began.
    links: (u64, u64),
}

impl SplitLock<'_> {
    /// `lru_add_split_folio`: the pieces (`(head, order)`, sorted, the old
    /// head first) stand where the folio stood, in pfn order from the
    /// oldest, with the list's flags.
    pub fn split(mut self, phys: &PhysMem, pieces: &[(Pfn, u32)]) {
        // The old head is linked again where it stood (its descriptor was
        // rebuilt), then each piece just newer than the one before.
        let (newer, mut older) = self.links;
        self.lists.0[self.which as usize].len -= 1;
        for &(pfn, _) in pieces {
            self.lists.link(phys, self.which, pfn, newer, older);
            older = pfn;
        }
        for &(pfn, _) in pieces {
            phys.page(pfn).set(pg::LRU | if self.which == LruList::Active { pg::ACTIVE } else { 0 });
        }
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;

    /// A split folio's pieces stand where it stood, in pfn order from the
    /// oldest, and the links survive the split's rebuilt descriptors.
    #[test]
    fn split_pieces_stand_where_the_folio_stood() {
        let phys = PhysMem::new(4 << 20, false).unwrap();
        let lru = Lru::new(crate::release::KernelVersion::NEWEST, 1);
        let [a, b, c] = [0, 2, 0].map(|order| phys.alloc_pages(order).unwrap());
        for pfn in [a, b, c] {
            phys.page(pfn).refcount.store(1, Relaxed);
            lru.add(&[Folio::from_head(&phys, pfn)]);
        }
        assert_eq!(lru.snapshot(&phys, LruList::Inactive), [a, b, c]);
        let lock = lru.lock_for_split(Folio::from_head(&phys, b));
        phys.page(b).ids.store(0, Relaxed);
        phys.page(b).flags.store(0, Relaxed);
        lock.split(&phys, &[(b, 0), (b + 1, 0), (b + 2, 1)]);
        assert_eq!(lru.snapshot(&phys, LruList::Inactive), [a, b, b + 1, b + 2, c]);
        assert_eq!(lru.sizes(), (5, 0));
        assert!((1..3).all(|i| phys.page(b + i).test(pg::LRU)), "the pieces carry PG_lru");
        phys.page(b + 1).refcount.store(1, Relaxed);
        let taken: Vec<Pfn> = lru.isolate_tail(&phys, LruList::Inactive, 3).iter().map(|f| f.pfn).collect();
        assert_eq!(taken, [a, b, b + 1], "reclaim takes the oldest first");
        lru.putback(Folio::from_head(&phys, a), LruList::Active);
        assert_eq!(lru.snapshot(&phys, LruList::Inactive), [b + 2, c]);
        assert_eq!(lru.snapshot(&phys, LruList::Active), [a]);
        lru.del(Folio::from_head(&phys, c));
        assert_eq!(lru.snapshot(&phys, LruList::Inactive), [b + 2]);
        assert_eq!(lru.sizes(), (1, 1));
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod node_tests {
    use super::*;

    /// Each folio goes on its own node's lists; reclaim takes the nodes'
    /// tails node by node.
    #[test]
    fn folios_go_on_their_nodes_lists() {
        let phys = PhysMem::new_numa(12 << 20, 2, false).unwrap();
        let lru = Lru::new(crate::release::KernelVersion::NEWEST, 2);
        let place = |nid| crate::phys::Placement::this_node(nid);
        let alloc = |nid| phys.alloc_pages_on(place(nid), 0, crate::phys::MigrateType::Movable).unwrap();
        let [a, b, c] = [1, 0, 1].map(alloc);
        let folios = [a, b, c].map(|pfn| {
            phys.page(pfn).refcount.store(1, Relaxed);
            Folio::from_head(&phys, pfn)
        });
        lru.add(&folios);
        assert_eq!(lru.snapshot(&phys, LruList::Inactive), [b, a, c], "node 0's list, then node 1's");
        assert_eq!(lru.sizes(), (3, 0));
        let taken: Vec<Pfn> = lru.isolate_tail(&phys, LruList::Inactive, 2).iter().map(|f| f.pfn).collect();
        assert_eq!(taken, [b, a]);
        lru.del(folios[2]);
        assert_eq!(lru.sizes(), (0, 0));
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
            let lru = Arc::new(Lru::new(crate::release::KernelVersion::NEWEST, 1));
            let pfn = phys.alloc_pages(0).unwrap();
            let f = Folio::from_head(&phys, pfn);
            f.head().refcount.store(1, Relaxed);
            lru.add(&[f]);
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
