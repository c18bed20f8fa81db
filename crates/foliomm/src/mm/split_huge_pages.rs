//! The kernel's debugfs interface for splitting the large folios mapped in
//! a range of a process (mm/huge_memory.c `split_huge_pages_pid`, written
//! as `PID,START,END[,ORDER[,IN_FOLIO_OFFSET]]` to
//! `/sys/kernel/debug/split_huge_pages`), which the kernel's
//! `split_huge_page_test` drives.

use crate::arch::{pte_index, PAGE_SIZE, PMD_ORDER};
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::memory::split::{folio_split, split_folio_to_order};
use crate::mm_types::{vm, Mm, MmList};
use crate::pgtable::{load, walk_pmd};
use crate::rmap;
use crate::{Errno, Result};

impl Mm {
    /// `split_huge_pages_pid`: under the mmap_lock for read, page by page
    /// over `[start, end)` until a hole: each large anon or shmem folio
    /// mapped there of an order above `new_order` that nothing but its
    /// mappings (and the page cache) holds (`can_split_folio`) is split to
    /// `new_order` with a reference taken
    /// (`split_folio_to_order`), or from 6.15, given an offset `at` inside
    /// the folio, split non-uniformly around that page (`folio_split`; the
    /// walk goes on page by page, so the halves it reaches later are split
    /// again, uniformly where they are smaller than `at`); hugetlb VMAs are
    /// passed over; before 6.8 the order is ignored (pages). Returns how
    /// many folios it tried and how many it split (the kernel only logs
    /// them). A failed split counts `thp_split_page_failed` / `split_failed`.
    pub fn split_huge_pages(&self, start: u64, end: u64, new_order: u32, at: Option<u64>) -> Result<(u64, u64)> {
        let k = &*self.kernel;
        if new_order >= PMD_ORDER {
            return Err(Errno::EINVAL);
        }
        let new_order = if k.config.release().split_huge_pages_takes_an_order() { new_order } else { 0 };
        let vmas = self.mmap_read_lock();
        let _tables = self.pt_read();
        let (mut tried, mut split) = (0, 0);
        let mut addr = start & !(PAGE_SIZE - 1);
        while addr < end {
            let Some(vma) = vmas.find(addr) else { break };
            if vma.flags() & vm::HUGETLB != 0 {
                addr = vma.end();
                continue;
            }
            let f = self.folio_at(addr);
            addr += PAGE_SIZE;
            let shmem = |f: &Folio| crate::shmem::in_page_cache(*f);
            let Some(f) = f.filter(|f| f.is_large() && (f.test_anon() || shmem(f)) && f.order() > new_order) else {
                continue;
            };
            tried += 1;
            let cache = if shmem(&f) { crate::shmem::cache_refs(f) as u64 } else { 0 };
            if f.refcount() as u64 != rmap::folio_mapcount(k, f) + cache || !f.try_get() {
                continue;
            }
            split += split_held(k, &self.mmlist, f, new_order, at) as u64;
        }
        Ok((tried, split))
    }

    /// `folio_walk_start`: the folio mapped at `addr` (by a huge PMD or a
    /// present, normal PTE), if any.
    fn folio_at(&self, addr: u64) -> Option<Folio<'_>> {
        let phys = &self.kernel.phys;
        let pmd = walk_pmd(phys, self.pgd, addr)?;
        let e = pmd.load(phys);
        if e.is_none() || e.special() {
            return None;
        }
        if e.huge() {
            return Some(Folio::from_head(phys, e.pfn()));
        }
        let pte = load(phys, e.pfn(), pte_index(addr));
        (pte.present() && !pte.special()).then(|| Folio::containing(phys, pte.pfn()))
    }
}

/// `split_huge_pages_in_file` (written as `PATH,START,END[,ORDER[,OFFSET]]`,
/// offsets in pages): each large folio of `inode`'s page cache from page
/// `start` to `end`, of an order above `new_order`, split to `new_order`
/// (`split_folio_to_order`), or from 6.15 around its page `at` if it has
/// one (`folio_split`); the walk steps over a whole folio at a time, so
/// its pieces are not split again. Mapped folios are unmapped and remapped
/// as for a process's range; before 6.8 the order is ignored (pages).
/// Returns the folios tried and split.
pub fn split_huge_pages_in_file(
    k: &Kernel,
    mmlist: &MmList,
    inode: &crate::shmem::Inode,
    (start, end): (u64, u64),
    new_order: u32,
    at: Option<u64>,
) -> (u64, u64) {
    let new_order = if k.config.release().split_huge_pages_takes_an_order() { new_order } else { 0 };
    let (mut tried, mut split, mut index) = (0, 0, start);
    while index < end {
        // filemap_get_folio(): the reference taken under the cache's lock.
        let held = {
            let pages = inode.pages.lock().unwrap();
            let f = pages.get(&index).map(|&p| Folio::containing(&k.phys, p));
            f.filter(|f| f.is_large() && f.try_get())
        };
        let Some(f) = held else {
            index += 1;
            continue;
        };
        tried += 1;
        index = f.index() + f.nr_pages();
        if f.order() > new_order {
            split += split_held(k, mmlist, f, new_order, at) as u64;
        } else {
            k.folio_put_refs(f, 1);
        }
    }
    (tried, split)
}

/// Splits `f`, on which the caller holds a reference that this puts, to
/// `new_order`, around page `at` from 6.15 if it has one; returns whether
/// it did. A failure other than EINVAL counts `thp_split_page_failed` /
/// `split_failed`.
fn split_held(k: &Kernel, mmlist: &MmList, f: Folio, new_order: u32, at: Option<u64>) -> bool {
    let order = f.order();
    let at = at.filter(|&a| a < f.nr_pages() && k.config.release().splits_folios_in_buddies());
    let done = match at {
        Some(at) => folio_split(k, mmlist, f, new_order, at, 1),
        None => split_folio_to_order(k, mmlist, f, new_order, 1, None),
    };
    match done {
        Ok(()) => k.folio_put_refs(Folio::containing(&k.phys, f.pfn), 1),
        Err(e) => {
            if e != Errno::EINVAL {
                if order == PMD_ORDER {
                    Stats::inc(&k.stats.thp_split_page_failed);
                }
                Stats::inc(&k.stats.split_failed[order as usize]);
            }
            k.folio_put_refs(f, 1);
        }
    }
    done.is_ok()
}
