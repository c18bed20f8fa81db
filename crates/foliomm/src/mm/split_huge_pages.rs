//! The kernel's debugfs interface for splitting the large folios mapped in
//! a range of a process (mm/huge_memory.c `split_huge_pages_pid`, written
//! as `PID,START,END[,ORDER[,IN_FOLIO_OFFSET]]` to
//! `/sys/kernel/debug/split_huge_pages`), which the kernel's
//! `split_huge_page_test` drives.

use crate::arch::{pte_index, PAGE_SIZE, PMD_ORDER};
use crate::folio::Folio;
use crate::kernel::Stats;
use crate::memory::split::{folio_split, split_folio_to_order};
use crate::mm_types::{vm, Mm};
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
    /// passed over. Returns how
    /// many folios it tried and how many it split (the kernel only logs
    /// them). A failed split counts `thp_split_page_failed` / `split_failed`.
    pub fn split_huge_pages(&self, start: u64, end: u64, new_order: u32, at: Option<u64>) -> Result<(u64, u64)> {
        let k = &*self.kernel;
        if new_order >= PMD_ORDER {
            return Err(Errno::EINVAL);
        }
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
            let order = f.order();
            let at = at.filter(|&a| a < f.nr_pages() && k.config.release().splits_folios_in_buddies());
            let done = match at {
                Some(at) => folio_split(k, &self.mmlist, f, new_order, at, 1),
                None => split_folio_to_order(k, &self.mmlist, f, new_order, 1, None),
            };
            match done {
                Ok(()) => {
                    split += 1;
                    k.folio_put_refs(Folio::containing(&k.phys, f.pfn), 1);
                }
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
