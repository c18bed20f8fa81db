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
//! Differs from Linux: one free list whose pages know their node, and no
//! per-node counts (`nr_hugepages` per node, per-node surplus); no cgroup
//! accounting, no surplus 1 GiB pages (Linux allows them only with a CMA
//! area; here `nr_overcommit_hugepages` of the 1 GiB pool is ignored as
//! well).
#![warn(missing_docs)]

use crate::arch::{Pfn, PAGE_SIZE, PMD_ORDER, PUD_ORDER};
use crate::folio::Folio;
use crate::phys::{pg, Placement};
use crate::sync::atomic::Ordering::Relaxed;
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
    fault_mutexes: Vec<Mutex<()>>,
}

impl Default for HugePool {
    fn default() -> HugePool {
        HugePool { pools: Default::default(), fault_mutexes: (0..FAULT_MUTEXES).map(|_| Mutex::new(())).collect() }
    }
}

/// Fault mutexes: a power of two (Linux: 8 per possible CPU, rounded up).
const FAULT_MUTEXES: usize = 64;

#[derive(Default)]
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
        let mut pool = self.pool(size);
        while pool.surplus > 0 && pool.total - pool.surplus < want {
            pool.surplus -= 1;
        }
        while pool.total - pool.surplus < want {
            let Some(f) = self.alloc_pool_folio(size, &mut pool.next_nid[0]) else { break };
            f.head().set(pg::HUGETLB);
            f.head().refcount.store(0, Relaxed);
            pool.free.push(f.pfn);
            pool.total += 1;
        }
        while pool.total - pool.surplus > want && pool.free.len() as u64 > pool.resv {
            let pfn = self.remove_pool_folio(&mut pool);
            let f = Folio::from_head(&self.phys, pfn);
            f.head().clear(pg::HUGETLB);
            f.head().refcount.store(1, Relaxed);
            self.folio_put_refs(f, 1);
            pool.total -= 1;
        }
        // adjust_pool_surplus(): any page may turn surplus, a free one
        // kept for its promise too.
        while pool.total - pool.surplus > want && pool.surplus < pool.total {
            pool.surplus += 1;
        }
        pool.total - pool.surplus
    }

    /// `alloc_pool_huge_folio`: a page of `size` from the next node in turn
    /// that has one (`for_each_node_mask_to_alloc`), `next` moving past it.
    fn alloc_pool_folio(&self, size: HugeSize, next: &mut usize) -> Option<Folio<'_>> {
        let nodes = self.phys.nr_nodes();
        (0..nodes).find_map(|_| {
            let nid = *next % nodes;
            *next = nid + 1;
            self.alloc_folio_placed(Placement::this_node(nid), size.order()).ok()
        })
    }

    /// `remove_pool_hugetlb_folio`: takes a free page off the list, from
    /// the next node in turn that has one (`for_each_node_mask_to_free`).
    fn remove_pool_folio(&self, pool: &mut Pool) -> Pfn {
        let nodes = self.phys.nr_nodes();
        for _ in 0..nodes {
            let nid = pool.next_nid[1] % nodes;
            pool.next_nid[1] = nid + 1;
            if let Some(pfn) = take_free(pool, &self.phys, Placement::this_node(nid)) {
                return pfn;
            }
        }
        pool.free.pop().expect("a free page beyond the reserved ones")
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
        let Ok(f) = self.alloc_folio_placed(place, PMD_ORDER) else { return false };
        f.head().set(pg::HUGETLB);
        f.head().refcount.store(0, Relaxed);
        pool.free.push(f.pfn);
        (pool.total, pool.surplus) = (pool.total + 1, pool.surplus + 1);
        true
    }

    /// Gives free surplus pages back to the buddy allocator while there are
    /// more free pages than promised (`return_unused_surplus_pages`).
    fn return_unused_surplus(&self, pool: &mut Pool) {
        while pool.surplus > 0 && pool.free.len() as u64 > pool.resv {
            let f = Folio::from_head(&self.phys, pool.free.pop().expect("a free page"));
            (pool.total, pool.surplus) = (pool.total - 1, pool.surplus - 1);
            f.head().clear(pg::HUGETLB);
            self.free_folio(f);
        }
    }

    /// `hugetlb_acct_memory(delta > 0)`: promises `n` free pages of `size`
    /// to a mapping, adding surplus pages if the pool has too few
    /// (`gather_surplus_pages`, all or none); ENOMEM if they cannot be had.
    /// `gather_surplus_pages` counts what it needs as a signed number: a
    /// count wrapped below zero (see [`Kernel::hugetlb_unreserve`]) needs
    /// nothing more.
    pub fn hugetlb_reserve(&self, size: HugeSize, n: u64) -> Result<(), Errno> {
        let mut pool = self.pool(size);
        while (pool.resv.wrapping_add(n) as i64) > pool.free.len() as i64 {
            if !self.alloc_surplus(&mut pool, Placement::LOCAL) {
                self.return_unused_surplus(&mut pool);
                return Err(Errno::ENOMEM);
            }
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
        self.return_unused_surplus(&mut pool);
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
                let f = self.alloc_folio_placed(Placement::this_node(nid), size.order())?;
                f.head().set(pg::HUGETLB | pg::HUGETLB_TEMPORARY);
                pool.total += 1;
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
        if temporary {
            pool.total -= 1;
            head.clear(pg::HUGETLB);
            self.free_folio(f);
            return;
        }
        pool.free.push(f.pfn);
        // A surplus page goes back to the buddy allocator.
        self.return_unused_surplus(&mut pool);
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
