//! The pool of 2 MiB huge pages (mm/hugetlb.c `struct hstate` for
//! `HPAGE_PMD_ORDER`): `nr_hugepages` folios taken from the buddy allocator
//! and kept on a free list, the part of the free ones promised to mappings
//! (`resv_huge_pages`), and the folios handed out. A hugetlb folio whose
//! last reference goes returns to the pool (`free_huge_folio`), not to the
//! buddy allocator.
//!
//! Differs from Linux: one pool (2 MiB; no 1 GiB pages, no per-node
//! pools), no surplus pages (`nr_overcommit_hugepages` is 0), no cgroup
//! accounting.

use crate::arch::{Pfn, PMD_ORDER};
use crate::folio::Folio;
use crate::phys::pg;
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
}

/// The pool; see the module documentation.
pub struct HugePool {
    pool: Mutex<Pool>,
    /// `hugetlb_fault_mutex_table`: faults, allocations and removals of one
    /// file page are serialized by the mutex its (mapping, index) hashes to.
    fault_mutexes: Vec<Mutex<()>>,
}

impl Default for HugePool {
    fn default() -> HugePool {
        HugePool { pool: Mutex::default(), fault_mutexes: (0..FAULT_MUTEXES).map(|_| Mutex::new(())).collect() }
    }
}

/// Fault mutexes: a power of two (Linux: 8 per possible CPU, rounded up).
const FAULT_MUTEXES: usize = 64;

#[derive(Default)]
struct Pool {
    total: u64,
    free: Vec<Pfn>,
    resv: u64,
}

impl Kernel {
    /// Writes `nr_hugepages` (`set_max_huge_pages`): grows the pool with
    /// 2 MiB folios from the buddy allocator while it can, or shrinks it by
    /// freeing free pages not promised to a mapping. Returns the size
    /// reached, which may fall short as in Linux.
    pub fn set_nr_hugepages(&self, want: u64) -> u64 {
        let mut pool = self.hugetlb.pool.lock().unwrap();
        while pool.total < want {
            let Ok(f) = self.alloc_folio(PMD_ORDER) else { break };
            f.head().set(pg::HUGETLB);
            f.head().refcount.store(0, Relaxed);
            pool.free.push(f.pfn);
            pool.total += 1;
        }
        while pool.total > want && pool.free.len() as u64 > pool.resv {
            let pfn = pool.free.pop().expect("a free page beyond the reserved ones");
            let f = Folio::from_head(&self.phys, pfn);
            f.head().clear(pg::HUGETLB);
            f.head().refcount.store(1, Relaxed);
            self.folio_put_refs(f, 1);
            pool.total -= 1;
        }
        pool.total
    }

    /// The pool's counts.
    pub fn huge_counts(&self) -> HugeCounts {
        let pool = self.hugetlb.pool.lock().unwrap();
        HugeCounts { total: pool.total, free: pool.free.len() as u64, resv: pool.resv }
    }

    /// `hugetlb_acct_memory(delta > 0)`: promises `n` free pages to a
    /// mapping; ENOMEM if fewer than `n` free pages are unpromised.
    pub fn hugetlb_reserve(&self, n: u64) -> Result<(), Errno> {
        let mut pool = self.hugetlb.pool.lock().unwrap();
        if (pool.free.len() as u64) < pool.resv + n {
            return Err(Errno::ENOMEM);
        }
        pool.resv += n;
        Ok(())
    }

    /// Takes back `n` promises (`hugetlb_acct_memory(delta < 0)`).
    pub fn hugetlb_unreserve(&self, n: u64) {
        let mut pool = self.hugetlb.pool.lock().unwrap();
        assert!(n <= pool.resv, "unreserving {n} of {} reserved huge pages", pool.resv);
        pool.resv -= n;
    }

    /// `alloc_hugetlb_folio`: a free huge folio with one reference, its
    /// bytes not cleared; `reserved` consumes a promise made earlier,
    /// otherwise only an unpromised page will do. ENOMEM if none.
    pub fn alloc_hugetlb_folio(&self, reserved: bool) -> Result<Folio<'_>, Errno> {
        let mut pool = self.hugetlb.pool.lock().unwrap();
        let unpromised = pool.free.len() as u64 - pool.resv;
        if !reserved && unpromised == 0 {
            return Err(Errno::ENOMEM);
        }
        let pfn = pool.free.pop().ok_or(Errno::ENOMEM)?;
        if reserved {
            pool.resv -= 1;
        }
        let f = Folio::from_head(&self.phys, pfn);
        f.head().refcount.store(1, Relaxed);
        Ok(f)
    }

    /// `free_huge_folio`: a hugetlb folio whose last reference went back
    /// on the free list, its mapping and flags but the compound and
    /// hugetlb ones cleared.
    pub(super) fn free_huge_folio(&self, f: Folio) {
        let head = f.head();
        head.flags.store(pg::HEAD | pg::HUGETLB, Relaxed);
        head.link.store(0, Relaxed);
        self.hugetlb.pool.lock().unwrap().free.push(f.pfn);
    }

    /// `hugetlb_fault_mutex_hash` + the table: the mutex of page `index`
    /// of the file with inode number `ino`.
    pub fn hugetlb_fault_mutex(&self, ino: u64, index: u64) -> &Mutex<()> {
        let h = (ino.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ index).wrapping_mul(0xff51_afd7_ed55_8ccd);
        &self.hugetlb.fault_mutexes[(h >> 58) as usize % FAULT_MUTEXES]
    }

    /// Whether `pfn` heads a free pool page (for the checker).
    pub fn is_free_huge_page(&self, pfn: Pfn) -> bool {
        self.hugetlb.pool.lock().unwrap().free.contains(&pfn)
    }
}
