//! `move_pages(2)` on one's own address space (mm/migrate.c
//! `kernel_move_pages`, `do_pages_move`, `add_folio_for_migration`,
//! `do_pages_stat_array`): where each page is, or a move of each to a node,
//! with a status per page as Linux writes it.
//!
//! Differs from Linux: the task may use every node (no cpuset), and
//! `CAP_SYS_NICE` is held (the model's processes are root's), so
//! `MPOL_MF_MOVE_ALL` is never EPERM.

use crate::folio::Folio;
use crate::kernel::{Consumer, Kernel};
use crate::memory::migrate::{isolate_folio, migrate_pages, Reason};
use crate::mm_types::Mm;
use crate::pgtable::{leaf_slot, pte_lockptr};
use crate::rmap;
use crate::{Errno, Result};

/// What `move_pages` wrote and returned: the status of each page (`None`
/// where it wrote nothing: a batch that failed, or pages after an error)
/// and its result (the number of pages not migrated, or the errno).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovePages {
    pub result: Result<u64>,
    pub status: Vec<Option<i32>>,
}

/// `vma_lookup` + `folio_walk_start(FW_ZEROPAGE)` under the mmap_lock: the
/// folio mapped at `addr` and the page of it, under the table's lock
/// while `visit` runs; EFAULT outside any VMA, ENOENT where nothing is
/// mapped (none or a swap entry) — before 6.12 EFAULT for an anonymous
/// VMA's none entry ([`crate::release::KernelVersion::move_pages_enoent_for_unfaulted_anon`]).
fn with_folio_at<'k, T>(mm: &'k Mm, addr: u64, visit: impl FnOnce(Result<(Folio<'k>, u64)>) -> T) -> T {
    let k = &*mm.kernel;
    let vmas = mm.mmap_read_lock();
    let Some(vma) = vmas.find(addr) else { return visit(Err(Errno::EFAULT)) };
    let unfaulted = match vma.file().is_none() && !k.config.release().move_pages_enoent_for_unfaulted_anon() {
        true => Errno::EFAULT,
        false => Errno::ENOENT,
    };
    let _walk = mm.pt_read();
    let Some(slot) = leaf_slot(&k.phys, mm.pgd, addr) else { return visit(Err(unfaulted)) };
    let _ptl = pte_lockptr(&k.phys, slot.table).lock();
    let e = slot.load(&k.phys);
    if e.is_none() {
        return visit(Err(unfaulted));
    }
    if !e.present() {
        return visit(Err(Errno::ENOENT));
    }
    let pfn = slot.page_pfn(e, addr);
    let f = Folio::containing(&k.phys, pfn);
    visit(Ok((f, pfn - f.pfn)))
}

/// `-errno` as a status.
fn status_of(e: Errno) -> i32 {
    -e.number()
}

impl Mm {
    /// `move_pages(0, pages, nodes, status, flags)`: without `nodes`, the
    /// node of each page (`-ENOENT` where none is mapped, `-EFAULT` for the
    /// zero page or outside any VMA); with `nodes`, each page moved to its
    /// node, consecutive pages for one node in one batch. A page already
    /// there, or one it may not move, gets its status at once: `-EACCES`
    /// if (maybe) mapped shared without `move_all` (the release's question,
    /// [`rmap::page_maybe_mapped_shared`]), `-EBUSY` if it cannot be
    /// isolated, `-EFAULT`, `-ENOENT` as above; a batch that migrates
    /// writes its node into its pages' statuses. Returns the pages not
    /// migrated, or ENODEV for a node that has no memory (the pages before
    /// it done).
    pub fn move_pages(&self, pages: &[u64], nodes: Option<&[i32]>, move_all: bool) -> MovePages {
        let mut status = vec![None; pages.len()];
        let result = match nodes {
            None => {
                for (s, &addr) in status.iter_mut().zip(pages) {
                    *s = Some(self.page_node(addr));
                }
                Ok(0)
            }
            Some(nodes) => self.pages_move(pages, nodes, move_all, &mut status),
        };
        MovePages { result, status }
    }

    /// `do_pages_stat_array` for one address.
    fn page_node(&self, addr: u64) -> i32 {
        with_folio_at(self, addr, |found| match found {
            Ok((f, _)) if f.is_zero_page() => status_of(Errno::EFAULT),
            Ok((f, _)) => self.kernel.phys.nid(f.pfn) as i32,
            Err(e) => status_of(e),
        })
    }

    /// `do_pages_move`.
    fn pages_move(&self, pages: &[u64], nodes: &[i32], move_all: bool, status: &mut [Option<i32>]) -> Result<u64> {
        let k = &*self.kernel;
        let _batches_off = k.lru_cache_disable();
        let mut list: Vec<Folio> = Vec::new();
        let (mut current, mut start) = (None::<usize>, 0);
        for (i, (&addr, &node)) in pages.iter().zip(nodes).enumerate() {
            let nid = match usize::try_from(node) {
                Ok(n) if n < k.phys.nr_nodes() => n,
                _ => {
                    // The batch so far still moves; the call fails anyway.
                    let _ = self.flush_batch(current, &mut list, status, (start, i), pages.len());
                    return Err(Errno::ENODEV);
                }
            };
            match current {
                None => (current, start) = (Some(nid), i),
                Some(c) if c != nid => {
                    let n = self.flush_batch(current, &mut list, status, (start, i), pages.len())?;
                    if n > 0 {
                        return Ok(n);
                    }
                    (current, start) = (Some(nid), i);
                }
                Some(_) => {}
            }
            match self.add_folio_for_migration(addr, nid, move_all, &mut list) {
                Ok(true) => continue,
                Ok(false) => status[i] = Some(nid as i32),
                Err(e) => status[i] = Some(status_of(e)),
            }
            let n = self.flush_batch(current, &mut list, status, (start, i), pages.len())?;
            if n > 0 {
                return Ok(n - 1);
            }
            current = None;
        }
        self.flush_batch(current, &mut list, status, (start, pages.len()), pages.len())
    }

    /// `move_pages_and_store_status`: migrates the batch on `list` to
    /// `node`, and on success writes the node into the statuses of
    /// `[start, i)`; a failed batch counts the pages not yet tried too.
    fn flush_batch(
        &self,
        node: Option<usize>,
        list: &mut Vec<Folio>,
        status: &mut [Option<i32>],
        (start, i): (usize, usize),
        nr_pages: usize,
    ) -> Result<u64> {
        let Some(node) = node.filter(|_| !list.is_empty()) else { return Ok(0) };
        let k = &*self.kernel;
        match migrate_pages(k, &self.mmlist, std::mem::take(list), node, Reason::Syscall)? {
            0 => {
                status[start..i].iter_mut().for_each(|s| *s = Some(node as i32));
                Ok(0)
            }
            failed => Ok(failed + (nr_pages - i) as u64),
        }
    }

    /// `add_folio_for_migration`: the folio at `addr` isolated onto `list`
    /// (true), or already on `nid` (false), or why not.
    fn add_folio_for_migration<'k>(
        &'k self,
        addr: u64,
        nid: usize,
        all: bool,
        list: &mut Vec<Folio<'k>>,
    ) -> Result<bool> {
        let k: &'k Kernel = &self.kernel;
        with_folio_at(self, addr, |found| {
            let (f, i) = found?;
            if f.is_zero_page() {
                return Err(Errno::EFAULT);
            }
            if k.phys.nid(f.pfn) == nid {
                return Ok(false);
            }
            let shared = rmap::page_maybe_mapped_shared(k, f, i);
            if f.is_large() {
                k.decided(Consumer::Migrate, f, shared);
            }
            if shared && !all {
                return Err(Errno::EACCES);
            }
            if !isolate_folio(k, f) {
                return Err(Errno::EBUSY);
            }
            list.push(f);
            Ok(true)
        })
    }
}
