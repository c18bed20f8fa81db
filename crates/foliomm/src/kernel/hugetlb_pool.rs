//! The pools of huge pages, one per size (mm/hugetlb.c `struct hstate`:
//! 2 MiB, `HPAGE_PMD_ORDER`, and 1 GiB, `PUD_ORDER`): `nr_hugepages`
//! folios taken from the page allocator (1 GiB ones as contiguous runs,
//! `alloc_contig_pages`) and kept on a free list, the part of the free ones promised to mappings
//! (`resv_huge_pages`), and the folios handed out. A hugetlb folio whose
//! last reference goes returns to the pool (`free_huge_folio`), not to the
//! buddy allocator.
//!
//! Beyond `nr_hugepages`, up to `nr_overcommit_hugepages` surplus pages
//! come from the buddy allocator when a reservation or an unreserved
//! allocation finds the pool short, and go back to it when freed or no
//! longer promised.
//!
//! Pages come from the nodes in turn (`next_nid_to_alloc`) and go back in
//! turn (`next_nid_to_free`); an allocation takes the most recently freed
//! page of the first node its placement allows (`dequeue_hugetlb_folio_nodemask`).
//! Migration may take a temporary page from the buddy allocator when the
//! target node has none free (`alloc_migrate_hugetlb_folio`).
//!
//! Each node has its count of pages and of surplus pages
//! (`nr_huge_pages_node`, `surplus_huge_pages_node`): a page freed on a
//! node with surplus pages goes back to the buddy allocator, one freed
//! elsewhere stays in the pool (`free_huge_folio`).
//!
//! Differs from Linux: one free list whose pages know their node; a freed
//! surplus page a restored reservation needs stays in the pool; no cgroup
//! accounting, no surplus 1 GiB pages (Linux allows them only with a CMA
//! area; here `nr_overcommit_hugepages` of the 1 GiB pool is ignored as
//! well).
#![warn(missing_docs)]

use crate::arch::{Pfn, PAGE_SIZE, PMD_ORDER, PUD_ORDER};
use crate::folio::Folio;
use crate::phys::{pg, Placement, MAX_NUMNODES};
use crate::sync::atomic::{AtomicBool, Ordering::Relaxed};
use crate::sync::cacheline::Aligned;
use crate::sync::Mutex;
use crate::Errno;

use super::Kernel;

/// The pool's counts, as `/proc/meminfo`'s `HugePages_*` show them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HugeCounts {
    /// `HugePages_Total` (`nr_hugepages`).
    pub total: u64,
    /// `HugePages_Free`.
    pub free: u64,
    /// `HugePages_Rsvd`: free pages promised to mappings.
    pub resv: u64,
    /// `HugePages_Surp`: pages beyond `nr_hugepages`, taken from the buddy
    /// allocator on demand (up to `nr_overcommit_hugepages`) and given
    /// back when freed.
    pub surplus: u64,
}

/// A huge page size (which `struct hstate`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum HugeSize {
    /// 2 MiB pages, mapped by PMD entries (the default size).
    #[default]
    Pmd,
    /// 1 GiB pages, mapped by PUD entries.
    Pud,
}

impl HugeSize {
    /// Both sizes.
    pub const ALL: [HugeSize; 2] = [HugeSize::Pmd, HugeSize::Pud];

    /// The folio order of a page of this size.
    pub fn order(self) -> u32 {
        match self {
            HugeSize::Pmd => PMD_ORDER,
            HugeSize::Pud => PUD_ORDER,
        }
    }

    /// Base pages in a page of this size.
    pub fn pages(self) -> u64 {
        1 << self.order()
    }

    /// Bytes in a page of this size.
    pub fn bytes(self) -> u64 {
        self.pages() * PAGE_SIZE
    }

    /// The size of a folio of `order`, if a huge page has it.
    pub fn of_order(order: u32) -> Option<HugeSize> {
        HugeSize::ALL.into_iter().find(|s| s.order() == order)
    }

    /// The size with `bytes` bytes (2 MiB or 1 GiB), if any.
    pub fn of_bytes(bytes: u64) -> Option<HugeSize> {
        HugeSize::ALL.into_iter().find(|s| s.bytes() == bytes)
    }

    /// `2M` or `1G`, as scenarios write it.
    pub fn name(self) -> &'static str {
        match self {
            HugeSize::Pmd => "2M",
            HugeSize::Pud => "1G",
        }
    }
}

/// The pools; see the module documentation.
pub struct HugePool {
    /// One pool per [`HugeSize`], in the order of [`HugeSize::ALL`].
    pools: [Mutex<Pool>; 2],
    /// `hugetlb_fault_mutex_table`: faults, allocations and removals of one
    /// file page are serialized by the mutex its (mapping, index) hashes to.
    /// Differs from Linux: a line per mutex (Linux's 32-byte mutexes share
    /// lines in pairs), so that the simulated costs do not depend on where
    /// the allocator put the table.
    fault_mutexes: Vec<Aligned<Mutex<()>>>,
    /// `vm.hugetlb_optimize_vmemmap` (see `hugetlb_vmemmap`).
    pub(super) optimize_vmemmap: AtomicBool,
}

impl Default for HugePool {
    fn default() -> HugePool {
        HugePool {
            pools: Default::default(),
            fault_mutexes: (0..FAULT_MUTEXES).map(|_| Aligned(crate::sync::new_mutex(()))).collect(),
            optimize_vmemmap: AtomicBool::new(false),
        }
    }
}

/// Fault mutexes: a power of two (Linux: 8 per possible CPU, rounded up).
const FAULT_MUTEXES: usize = 64;

struct Pool {
    total: u64,
    free: Vec<Pfn>,
    resv: u64,
    surplus: u64,
    /// `nr_overcommit_hugepages`: the most surplus pages there may be.
    overcommit: u64,
    /// `next_nid_to_alloc`, `next_nid_to_free`: where the pool grows and
    /// shrinks next.
    next_nid: [usize; 2],
    /// `nr_huge_pages_node`, `surplus_huge_pages_node`.
    total_node: [u64; MAX_NUMNODES],
    surplus_node: [u64; MAX_NUMNODES],
}

impl Default for Pool {
    fn default() -> Pool {
        Pool {
            total: 0,
            free: Vec::new(),
            resv: 0,
            surplus: 0,
            overcommit: 0,
            next_nid: [0; 2],
            total_node: [0; MAX_NUMNODES],
            surplus_node: [0; MAX_NUMNODES],
        }
    }
}

impl Pool {
    /// `account_new_hugetlb_folio`: a new page on node `nid`, a surplus one
    /// if `surplus`.
    fn add(&mut self, nid: usize, surplus: bool) {
        (self.total, self.total_node[nid]) = (self.total + 1, self.total_node[nid] + 1);
        if surplus {
            (self.surplus, self.surplus_node[nid]) = (self.surplus + 1, self.surplus_node[nid] + 1);
        }
    }

    /// `remove_hugetlb_folio`: a page of node `nid` leaves the pool, as a
    /// surplus one if `surplus`.
    fn remove(&mut self, nid: usize, surplus: bool) {
        (self.total, self.total_node[nid]) = (self.total - 1, self.total_node[nid] - 1);
        if surplus {
            (self.surplus, self.surplus_node[nid]) = (self.surplus - 1, self.surplus_node[nid] - 1);
        }
    }

    /// `adjust_pool_surplus(delta)`: one page turns persistent (-1: of a
    /// node with surplus pages, in allocation turn) or surplus (+1: of a
    /// node with persistent pages, in freeing turn); false if none can.
    fn adjust_surplus(&mut self, nodes: usize, delta: i64) -> bool {
        let Pool { next_nid, total_node, surplus_node, .. } = self;
        let (next, ok): (_, &dyn Fn(usize) -> bool) = match delta < 0 {
            true => (&mut next_nid[0], &|n| surplus_node[n] > 0),
            false => (&mut next_nid[1], &|n| surplus_node[n] < total_node[n]),
        };
        let Some(nid) = in_turn(next, nodes, |n| ok(n).then_some(n)) else { return false };
        self.surplus = self.surplus.wrapping_add_signed(delta);
        self.surplus_node[nid] = self.surplus_node[nid].wrapping_add_signed(delta);
        true
    }
}

/// `for_each_node_mask_to_alloc` / `_to_free` over `nodes` nodes: the
/// first answer of `f` from node `*next` on, `*next` moved past each node
/// asked.
fn in_turn<T>(next: &mut usize, nodes: usize, mut f: impl FnMut(usize) -> Option<T>) -> Option<T> {
    (0..nodes).find_map(|_| {
        let nid = *next % nodes;
        *next = nid + 1;
        f(nid)
    })
}

impl Kernel {
    /// Writes `nr_hugepages` (`set_max_huge_pages`): the pool's persistent
    /// pages (all but the surplus ones) become `want`. Surplus pages in use
    /// turn persistent first; then 2 MiB folios come from the buddy
    /// allocator while it can. Shrinking frees free pages not promised to a
    /// mapping, and the pages beyond `want` still in use or promised turn
    /// into surplus pages, freed when released (`adjust_pool_surplus`). Returns the
    /// pool's total (`nr_hugepages` as read back, surplus included), which
    /// may fall short as in Linux.
    pub fn set_nr_hugepages(&self, size: HugeSize, want: u64) -> u64 {
        let (mut pool, nodes) = (self.pool(size), self.phys.nr_nodes());
        while pool.surplus > 0 && pool.total - pool.surplus < want && pool.adjust_surplus(nodes, -1) {}
        while pool.total - pool.surplus < want {
            let Some(f) = self.alloc_pool_folio(size, &mut pool.next_nid[0]) else { break };
            f.head().refcount.store(0, Relaxed);
            pool.free.push(f.pfn);
            pool.add(self.phys.nid(f.pfn), false);
        }
        // Free pages not promised go back, persistent ones first.
        let (persistent, free) = (pool.total - pool.surplus, pool.free.len() as u64);
        let persistent_free = if free > persistent { free.saturating_sub(pool.surplus) } else { free };
        // Unsigned as in Linux: a reserved count wrapped below zero (a
        // leaked promise, see shmem::hugetlbfs) keeps every page.
        let min_count = want.max(pool.resv.wrapping_add(persistent).wrapping_sub(persistent_free));
        while min_count < pool.total - pool.surplus {
            let Some(pfn) = self.remove_pool_folio(&mut pool, false) else { break };
            self.update_and_free_hugetlb_folio(Folio::from_head(&self.phys, pfn));
        }
        // adjust_pool_surplus(): pages in use or promised turn surplus.
        while want < pool.total - pool.surplus && pool.adjust_surplus(nodes, 1) {}
        pool.total - pool.surplus
    }

    /// `alloc_pool_huge_folio`: a page of `size` from the next node in turn
    /// that has one (`for_each_node_mask_to_alloc`), `next` moving past it.
    fn alloc_pool_folio(&self, size: HugeSize, next: &mut usize) -> Option<Folio<'_>> {
        in_turn(next, self.phys.nr_nodes(), |nid| self.alloc_fresh_hugetlb_folio(Placement::this_node(nid), size).ok())
    }

    /// `remove_pool_hugetlb_folio`: takes a free page off the list, the
    /// most recently freed of the next node in turn that has one (and, with
    /// `surplus`, surplus pages), out of the pool's counts.
    fn remove_pool_folio(&self, pool: &mut Pool, surplus: bool) -> Option<Pfn> {
        let mut next = pool.next_nid[1];
        let found = in_turn(&mut next, self.phys.nr_nodes(), |nid| {
            let ok = !surplus || pool.surplus_node[nid] > 0;
            ok.then(|| take_free(pool, &self.phys, Placement::this_node(nid))).flatten().map(|pfn| (nid, pfn))
        });
        pool.next_nid[1] = next;
        let (nid, pfn) = found?;
        pool.remove(nid, surplus);
        Some(pfn)
    }

    /// Writes `nr_overcommit_hugepages` of the 2 MiB pool (the 1 GiB
    /// pool has no surplus pages).
    pub fn set_nr_overcommit_hugepages(&self, n: u64) {
        self.pool(HugeSize::Pmd).overcommit = n;
    }

    /// The pool of `size`, locked.
    fn pool(&self, size: HugeSize) -> crate::sync::MutexGuard<'_, Pool> {
        self.hugetlb.pools[size as usize].lock().unwrap()
    }

    /// The counts of the pool of `size`.
    pub fn huge_counts(&self, size: HugeSize) -> HugeCounts {
        let pool = self.pool(size);
        HugeCounts { total: pool.total, free: pool.free.len() as u64, resv: pool.resv, surplus: pool.surplus }
    }

    /// `alloc_surplus_hugetlb_folio`: one more free page, a surplus one
    /// from the buddy allocator, if the overcommit limit and memory allow.
    fn alloc_surplus(&self, pool: &mut Pool, place: Placement) -> bool {
        if pool.surplus >= pool.overcommit {
            return false;
        }
        // Only the 2 MiB pool has an overcommit limit above 0.
        let Ok(f) = self.alloc_fresh_hugetlb_folio(place, HugeSize::Pmd) else { return false };
        f.head().refcount.store(0, Relaxed);
        pool.free.push(f.pfn);
        pool.add(self.phys.nid(f.pfn), true);
        true
    }

    /// `return_unused_surplus_pages`: gives up to `n` free surplus pages
    /// back to the buddy allocator, each from the next node in turn with
    /// surplus and free pages, until none has.
    fn return_unused_surplus(&self, pool: &mut Pool, n: u64) {
        for _ in 0..n.min(pool.surplus) {
            let Some(pfn) = self.remove_pool_folio(pool, true) else { return };
            self.update_and_free_hugetlb_folio(Folio::from_head(&self.phys, pfn));
        }
    }

    /// `hugetlb_acct_memory(delta > 0)`: promises `n` free pages of `size`
    /// to a mapping, adding surplus pages if the pool has too few
    /// (`gather_surplus_pages`, all or none); ENOMEM if they cannot be had.
    /// `gather_surplus_pages` counts what it needs as a signed number: a
    /// count wrapped below zero (see [`Kernel::hugetlb_unreserve`]) needs
    /// nothing more; then `allowed_mems_nr` still refuses more promises
    /// than there are free pages (on every node: foliomm has no cpusets
    /// and no task memory policy to narrow them).
    pub fn hugetlb_reserve(&self, size: HugeSize, n: u64) -> Result<(), Errno> {
        let (mut pool, mut allocated) = (self.pool(size), 0);
        while (pool.resv.wrapping_add(n) as i64) > pool.free.len() as i64 {
            if !self.alloc_surplus(&mut pool, Placement::local()) {
                self.return_unused_surplus(&mut pool, allocated);
                return Err(Errno::ENOMEM);
            }
            allocated += 1;
        }
        if n > pool.free.len() as u64 {
            // return_unused_surplus_pages(h, delta): any free surplus pages,
            // not only those just gathered.
            self.return_unused_surplus(&mut pool, n);
            return Err(Errno::ENOMEM);
        }
        pool.resv = pool.resv.wrapping_add(n);
        Ok(())
    }

    /// Takes back `n` promises (`hugetlb_acct_memory(delta < 0)`); free
    /// surplus pages go back to the buddy allocator. The count wraps below
    /// zero where Linux's does (see `memory::hugetlb_resv`).
    pub fn hugetlb_unreserve(&self, size: HugeSize, n: u64) {
        let mut pool = self.pool(size);
        pool.resv = pool.resv.wrapping_sub(n);
        self.return_unused_surplus(&mut pool, n);
    }

    /// `folio_zero_user` of a new huge folio: its pages cleared, with
    /// the reschedule point Linux has between them (`process_huge_page`'s
    /// `cond_resched`; one here, not one per page).
    pub fn zero_huge_folio(&self, f: Folio<'_>) {
        self.phys.clear_frames(f.pfn, f.nr_pages());
        crate::sync::cond_resched();
    }

    /// `alloc_hugetlb_folio`: a free huge folio of `size` with one
    /// reference, its bytes not cleared, from the first node `place`
    /// allows that has one (the VMA's policy, `dequeue_hugetlb_folio_vma`);
    /// `reserved` consumes a promise made earlier, otherwise only an
    /// unpromised page will do, a surplus one if the overcommit limit
    /// allows. ENOMEM if none.
    pub fn alloc_hugetlb_folio(&self, size: HugeSize, reserved: bool, place: Placement) -> Result<Folio<'_>, Errno> {
        let mut pool = self.pool(size);
        let unpromised = (pool.free.len() as u64).wrapping_sub(pool.resv);
        if !reserved && unpromised == 0 && !self.alloc_surplus(&mut pool, place) {
            return Err(Errno::ENOMEM);
        }
        // The allowed nodes may have none free where others have: a surplus
        // page from the buddy allocator there, if the overcommit limit
        // allows, reserved or not (`alloc_buddy_hugetlb_folio_with_mpol`).
        let pfn = match take_free(&mut pool, &self.phys, place) {
            None if self.alloc_surplus(&mut pool, place) => take_free(&mut pool, &self.phys, place),
            pfn => pfn,
        };
        let pfn = pfn.ok_or(Errno::ENOMEM)?;
        if reserved {
            pool.resv = pool.resv.wrapping_sub(1);
        }
        let f = Folio::from_head(&self.phys, pfn);
        f.head().refcount.store(1, Relaxed);
        Ok(f)
    }

    /// `alloc_hugetlb_folio_nodemask` for a migration to node `nid`
    /// (`alloc_migration_target`, `__GFP_THISNODE`): an unpromised free
    /// page there, else (2 MiB pages only) a temporary one from the buddy
    /// allocator on that node (`alloc_migrate_hugetlb_folio`), counted in
    /// the pool until freed but never surplus. ENOMEM if neither.
    pub fn alloc_hugetlb_migration_target(&self, size: HugeSize, nid: usize) -> Result<Folio<'_>, Errno> {
        let mut pool = self.pool(size);
        let unpromised = (pool.free.len() as u64).wrapping_sub(pool.resv) as i64 > 0;
        let f = match unpromised.then(|| take_free(&mut pool, &self.phys, Placement::this_node(nid))).flatten() {
            Some(pfn) => Folio::from_head(&self.phys, pfn),
            None if size == HugeSize::Pmd => {
                let f = self.alloc_fresh_hugetlb_folio(Placement::this_node(nid), size)?;
                f.head().set(pg::HUGETLB_TEMPORARY);
                pool.add(nid, false);
                return Ok(f);
            }
            None => return Err(Errno::ENOMEM),
        };
        f.head().refcount.store(1, Relaxed);
        Ok(f)
    }

    /// `free_huge_folio`: a hugetlb folio whose last reference went back
    /// on the free list of its node, its mapping and flags but the
    /// compound and hugetlb ones cleared; a temporary page goes back to the
    /// buddy allocator.
    pub(super) fn free_huge_folio(&self, f: Folio) {
        let head = f.head();
        let restore = head.test(pg::HUGETLB_RESTORE_RESERVE);
        let temporary = head.test(pg::HUGETLB_TEMPORARY);
        head.flags.store(pg::HEAD | pg::HUGETLB, Relaxed);
        head.link.store(0, Relaxed);
        let size = HugeSize::of_order(f.order()).expect("a hugetlb folio has a huge page's order");
        let mut pool = self.pool(size);
        if restore {
            pool.resv = pool.resv.wrapping_add(1);
        }
        let nid = self.phys.nid(f.pfn);
        // A surplus page goes back to the buddy allocator, unless a
        // restored promise needs it.
        let surplus = pool.surplus_node[nid] > 0 && pool.free.len() as i64 >= pool.resv as i64;
        if temporary || surplus {
            pool.remove(nid, !temporary);
            return self.update_and_free_hugetlb_folio(f);
        }
        pool.free.push(f.pfn);
    }

    /// `move_hugetlb_state` of a temporary target page: a surplus page the
    /// migration took from node `from` counts on node `to` now.
    pub fn hugetlb_move_surplus(&self, size: HugeSize, from: usize, to: usize) {
        let mut pool = self.pool(size);
        if from != to && pool.surplus_node[from] > 0 {
            pool.surplus_node[from] -= 1;
            pool.surplus_node[to] += 1;
        }
    }

    /// The counts of node `nid` in the pool of `size` (its
    /// `nr_hugepages`, `free_hugepages`, `surplus_hugepages` in sysfs).
    pub fn huge_counts_node(&self, size: HugeSize, nid: usize) -> HugeCounts {
        let pool = self.pool(size);
        let free = pool.free.iter().filter(|&&pfn| self.phys.nid(pfn) == nid).count() as u64;
        HugeCounts { total: pool.total_node[nid], free, resv: 0, surplus: pool.surplus_node[nid] }
    }

    /// `hugetlb_fault_mutex_hash` + the table: the mutex of page `index`
    /// of the file with inode number `ino`.
    pub fn hugetlb_fault_mutex(&self, ino: u64, index: u64) -> &Mutex<()> {
        let h = (ino.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ index).wrapping_mul(0xff51_afd7_ed55_8ccd);
        &self.hugetlb.fault_mutexes[(h >> 58) as usize % FAULT_MUTEXES]
    }

    /// Whether `pfn` heads a free pool page (for the checker).
    pub fn is_free_huge_page(&self, pfn: Pfn) -> bool {
        HugeSize::ALL.into_iter().any(|size| self.pool(size).free.contains(&pfn))
    }
}

/// `dequeue_hugetlb_folio_nodemask`: the most recently freed page of the
/// first node of `place`'s zonelist that has one, taken off the list.
fn take_free(pool: &mut Pool, phys: &crate::phys::PhysMem, place: Placement) -> Option<Pfn> {
    let at = phys.zonelist(place).find_map(|nid| pool.free.iter().rposition(|&pfn| phys.nid(pfn) == nid))?;
    Some(pool.free.remove(at))
}
