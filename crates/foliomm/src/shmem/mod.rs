//! shmem files (mm/shmem.c): an inode with a size and a page cache of
//! folios (`struct address_space`'s `i_pages`), made by `memfd_create`, by
//! a tmpfs path, or behind `MAP_SHARED|MAP_ANONYMOUS`.
//!
//! The page cache maps a page index to the folio holding it; a folio of
//! `2^order` pages occupies the aligned index range it covers, as the
//! xarray's multi-index entries do. A folio in the cache holds one
//! reference per page (`filemap_add_folio`), is swap-backed and not anon,
//! and its `mapping` (the head's `link`) names the inode.
//!
//! Differs from Linux: no LRU, no writeback; the inode's bytes live in its
//! folios and, for pages swapped out ([`swap`]), in swap slots (holes read
//! as zeros).
#![warn(missing_docs)]

mod hugetlb_resv;
mod hugetlbfs;
mod i_mmap;
mod placement;
mod rw;
pub mod seals;
pub mod stat;
mod swap;
mod truncate;

pub use hugetlb_resv::PrivateResv;
pub use i_mmap::{Busy, HugetlbVmaLock, IMmap};
pub use swap::PageCache;

use crate::arch::{Pfn, PAGE_SIZE, PMD_ORDER};
use crate::folio::thp::shmem_policy::Asker;
use crate::folio::thp::ShmemHuge;
use crate::folio::Folio;
use crate::kernel::{HugeSize, Kernel, Stats};
use crate::phys::pg;
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use crate::sync::cacheline::{self, Structure};
use crate::sync::{Arc, Mutex};
use crate::{Errno, Result};

/// Largest file size (`MAX_LFS_FILESIZE`, rounded to pages).
pub const MAX_FILE_SIZE: u64 = 1 << 52;

/// The mount an inode lives on, whose `huge` setting decides its folio
/// sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mount {
    /// The kernel's internal `shm_mnt`, behind memfd and shared anonymous
    /// memory: its `huge` is `shmem_enabled`; its files have no name.
    Shm,
    /// A tmpfs mount with its `huge=` option (never, always, within_size,
    /// advise), and whether the file has a name (`i_nlink > 0`; an
    /// `O_TMPFILE` file has none).
    Tmpfs {
        /// The `huge=` option (`sbinfo->huge`).
        huge: ShmemHuge,
        /// Whether the file has a name.
        named: bool,
    },
    /// A hugetlbfs mount of pages of a size (`pagesize=`; behind
    /// `MAP_HUGETLB` and `memfd_create(MFD_HUGETLB)` with their size
    /// flags): folios come from the huge page pool of that size.
    Hugetlbfs(HugeSize),
}

/// The synthetic addresses of the inodes' `i_pages`: 256 MiB each (room
/// for 128 GiB of slots), 4,096 inodes before one reuses another's
/// addresses, each base a line further into the non-simulated owner
/// table than the last ([`crate::sync::cacheline`]).
const I_PAGES: usize = 0xffff_9000_0100_0000;
const I_PAGES_STRIDE: usize = (1 << 28) + 64;

/// A shmem inode and its page cache.
///
/// Line-aligned (as the kernel's slab caches of it are), so that which of
/// its words share a line does not depend on where the allocator put it:
/// the simulated coherence costs are the same on every run.
#[repr(align(64))]
pub struct Inode {
    pub(crate) k: Arc<Kernel>,
    /// The inode number; also the folios' `mapping` identity.
    pub ino: u64,
    /// `i_size` in bytes.
    size: AtomicU64,
    /// `i_pages`: page index to the pfn of the page at that index, or to
    /// its swap entry.
    pub(crate) pages: Mutex<PageCache>,
    /// `i_mmap`: the VMAs mapping the file.
    pub i_mmap: IMmap,
    /// The mount (superblock) the inode lives on.
    pub mount: Mount,
    /// `i_rwsem` (`inode_lock`): serializes writes, fallocate, truncation
    /// and hole punches.
    pub(crate) i_rwsem: Mutex<()>,
    /// hugetlbfs's `resv_map`: the first page index of each huge page
    /// reserved for, or instantiated in, the file.
    resv_map: Mutex<std::collections::BTreeSet<u64>>,
    /// The memfd seals (`shmem_inode_info.seals`, see [`seals`]).
    seals: AtomicU32,
    /// `i_nlink`: 1 while a named tmpfs file has its name, else 0.
    nlink: AtomicU32,
}

impl std::fmt::Debug for Inode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Inode({}, {} bytes)", self.ino, self.size())
    }
}

impl Inode {
    /// A new, empty shmem inode of `size` bytes on `mount` (`memfd_create`
    /// or `open(O_CREAT)` + `ftruncate`, or `shmem_zero_setup` for shared
    /// anonymous memory). EINVAL past [`MAX_FILE_SIZE`].
    pub fn new(k: &Arc<Kernel>, size: u64, mount: Mount) -> Result<Arc<Inode>> {
        if size > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        Ok(Arc::new(Inode {
            k: k.clone(),
            ino: k.new_serial(),
            size: AtomicU64::new(size),
            pages: Mutex::new(PageCache::default()),
            i_mmap: IMmap::default(),
            mount,
            i_rwsem: Mutex::new(()),
            resv_map: Mutex::default(),
            // A memfd (made with MFD_ALLOW_SEALING) starts unsealed; other
            // files with F_SEAL_SEAL (`shmem_get_inode`).
            seals: AtomicU32::new(if matches!(mount, Mount::Tmpfs { .. }) { seals::SEAL_SEAL } else { 0 }),
            nlink: AtomicU32::new(matches!(mount, Mount::Tmpfs { named: true, .. }) as u32),
        }))
    }

    /// The superblock's `huge` setting (`SHMEM_SB(sb)->huge`).
    fn sb_huge(&self) -> ShmemHuge {
        match self.mount {
            Mount::Shm => self.k.thp.shmem_enabled(),
            Mount::Tmpfs { huge, .. } => huge,
            Mount::Hugetlbfs(_) => ShmemHuge::Never,
        }
    }

    /// The folio orders a fault on page `index` in a VMA with flags
    /// (`VM_HUGEPAGE`, `VM_NOHUGEPAGE`) may allocate, before the VMA's
    /// range checks: the per-size knobs for a file without a name, the
    /// mount's setting for a named one (`shmem_allowable_huge_orders`).
    pub fn fault_orders(&self, vma: (bool, bool), index: u64) -> u32 {
        match self.mount {
            Mount::Tmpfs { named: true, .. } if !vma.1 => {
                let asker = Asker::Fault { vm_hugepage: vma.0 };
                self.k.thp.shmem_global_orders(self.sb_huge(), asker, index, self.nr_pages())
            }
            Mount::Tmpfs { named: true, .. } => 0,
            _ => self.k.thp.shmem_anon_orders(self.sb_huge(), vma, index, self.nr_pages()),
        }
    }

    /// The folio orders a write or fallocate ending at page `end_pages`
    /// may allocate for page `index`: the mount's setting, every file
    /// order (`shmem_allowable_huge_orders` without a VMA); before 6.14
    /// the PMD order only, as a fault without MADV_HUGEPAGE asks.
    fn write_orders(&self, index: u64, end_pages: u64) -> u32 {
        let asker = match self.k.config.release().writes_large_shmem_folios() {
            true => Asker::Write,
            false => Asker::Fault { vm_hugepage: false },
        };
        self.k.thp.shmem_global_orders(self.sb_huge(), asker, index, end_pages.max(self.nr_pages()))
    }

    /// Whether a write fills large folios (`mapping_large_folio_support`:
    /// from 6.14 on, on a mount whose `huge` is not never), and so goes in
    /// chunks of up to 2 MiB rather than of a page.
    fn writes_large_folios(&self) -> bool {
        self.k.config.release().writes_large_shmem_folios() && self.sb_huge() != ShmemHuge::Never
    }

    /// Whether the file is a named tmpfs file (mapped with `shmem_vm_ops`,
    /// not `shmem_anon_vm_ops`).
    pub fn named(&self) -> bool {
        matches!(self.mount, Mount::Tmpfs { named: true, .. })
    }

    /// `i_size`.
    pub fn size(&self) -> u64 {
        self.size.load(Relaxed)
    }

    /// Pages the file spans (`i_size` rounded up).
    pub fn nr_pages(&self) -> u64 {
        self.size().div_ceil(PAGE_SIZE)
    }

    /// The cached folio holding page `index`, with a reference, and the
    /// page's pfn (`filemap_map_pages`' `next_uptodate_folio`:
    /// `folio_try_get` under RCU); None for a hole or a folio not uptodate
    /// (fallocated, never written: `mincore` and fault-around skip those
    /// too). Once it is taken, the
    /// folio may still leave the cache: see [`in_page_cache`].
    pub fn get_cached(&self, index: u64) -> Option<(Folio<'_>, Pfn)> {
        self.account_i_pages(index, 1, false);
        let pages = self.pages.lock().unwrap();
        let &pfn = pages.get(&index)?;
        let f = Folio::containing(&self.k.phys, pfn);
        if !f.head().test(pg::UPTODATE) {
            return None;
        }
        f.ref_add(1);
        Some((f, pfn))
    }

    /// `shmem_get_folio(index, SGP_CACHE)` for a fault: the folio holding
    /// page `index`, allocated zeroed and added to the cache when absent,
    /// with one reference for the caller, and the pfn of the page. A new
    /// folio takes the highest order of `orders` whose aligned index range
    /// holds no cached page and can be allocated, else order 0
    /// (`shmem_suitable_orders`, `shmem_alloc_and_add_folio`). EINVAL
    /// (`SIGBUS`) at or past `i_size`; ENOMEM when no folio can be had.
    pub fn get_folio(&self, index: u64, orders: u32) -> Result<(Folio<'_>, Pfn)> {
        if index >= self.nr_pages() {
            return Err(Errno::EINVAL);
        }
        let mut pages = self.pages.lock().unwrap();
        let pfn = self.find_or_add(&mut pages, index, orders, false)?.1;
        let f = Folio::containing(&self.k.phys, pfn);
        f.ref_add(1);
        Ok((f, pfn))
    }

    /// The pfn of page `index` in the cache `pages`, after swapping it in
    /// if it was swapped out, or adding a new
    /// zeroed folio of one of `orders` (or order 0) if it was a hole
    /// (`shmem_alloc_and_add_folio` + `shmem_add_to_page_cache`, then
    /// `folio_add_lru`: shmem folios are swap-backed, on the anon lists); whether
    /// the folio is new. The folio is uptodate afterwards, unless new for
    /// a `fallocate` (`shmem_get_folio_gfp`'s `clear:`); a new one is clean
    /// until written, except that `fallocate` dirties every folio it meets
    /// (`shmem_fallocate`'s `folio_mark_dirty`).
    fn find_or_add(&self, pages: &mut PageCache, index: u64, orders: u32, falloc: bool) -> Result<(bool, Pfn)> {
        let dirty = if falloc { pg::DIRTY } else { 0 };
        if pages.swapped.contains_key(&index) {
            return Ok((false, self.swapin(pages, index)?));
        }
        self.account_i_pages(index, 1, false);
        if let Some(&pfn) = pages.get(&index) {
            Folio::containing(&self.k.phys, pfn).head().set(pg::UPTODATE | dirty);
            return Ok((false, pfn));
        }
        let f = self.alloc(pages, index, orders)?;
        if !falloc {
            f.head().set(pg::UPTODATE);
        }
        Ok((true, self.add_to_page_cache(pages, index, f, dirty)))
    }

    /// `shmem_add_to_page_cache` + `folio_add_lru` of the new folio `f` at
    /// `index`, with `flags` besides `SWAPBACKED`: the cache's references
    /// are the allocation's plus one per further page, the folio names its
    /// inode, and the cache has an entry per page it covers. Returns the
    /// pfn of page `index`.
    fn add_to_page_cache(&self, pages: &mut PageCache, index: u64, f: Folio, flags: u64) -> Pfn {
        f.ref_add(cache_refs(f) - 1);
        f.head().set(pg::SWAPBACKED | flags);
        f.head().link.store(self.ino, Relaxed);
        let first = index & !(f.nr_pages() - 1);
        f.set_index(first);
        self.account_i_pages(first, f.nr_pages(), true);
        for i in 0..f.nr_pages() {
            pages.insert(first + i, f.pfn + i);
        }
        self.k.folio_add_lru(f);
        f.pfn + (index - first)
    }

    /// Accounts `mapping->i_pages`' lines for a lookup (a read of the slots'
    /// lines: Linux walks the xarray under RCU) or a store of `nr` entries
    /// from `index` (a write of the `xa_lock`'s line and of the slots'). The
    /// lines: the lock's, then the slots, eight to a line, at a synthetic
    /// address per inode (the xarray nodes' headers left out). Faults,
    /// fault-around, `write` and `fallocate` (through the same lookup),
    /// new folios, reclaim and truncation (hugetlbfs' too) are accounted;
    /// `read`, collapse and migration are not.
    pub(crate) fn account_i_pages(&self, index: u64, nr: u64, write: bool) {
        if cacheline::accounting() {
            let base = I_PAGES + (self.ino as usize % 4096) * I_PAGES_STRIDE;
            if write {
                cacheline::access_at(Structure::PageCache, base, true);
            }
            for line in index / 8..=(index + nr - 1) / 8 {
                cacheline::access_at(Structure::PageCache, base + 64 * (1 + line as usize), write);
            }
        }
    }

    /// Whether the cache holds an entry for page `index`: a folio, uptodate
    /// or not, or a swap entry (`filemap_get_entry`, which userfaultfd's
    /// minor and missing checks ask).
    pub fn has_entry(&self, index: u64) -> bool {
        let pages = self.pages.lock().unwrap();
        pages.contains_key(&index) || pages.swapped.contains_key(&index)
    }

    /// `shmem_mfill_atomic_pte`'s folio: a new order-0 page holding
    /// `bytes` (or zeroes), uptodate but clean (only the entry mapping it
    /// is dirty), added to the cache at `index`, with a reference for the
    /// caller. EFAULT at or past `i_size`, EEXIST if the cache has an entry
    /// there, ENOMEM.
    pub fn add_filled_page(&self, index: u64, bytes: Option<&[u8]>) -> Result<(Folio<'_>, Pfn)> {
        if index >= self.nr_pages() {
            return Err(Errno::EFAULT);
        }
        let mut pages = self.pages.lock().unwrap();
        if pages.contains_key(&index) || pages.swapped.contains_key(&index) {
            return Err(Errno::EEXIST);
        }
        let f = self.k.alloc_folio_zeroed(0)?;
        if let Some(b) = bytes {
            self.k.phys.write_bytes(f.pfn, 0, b);
        }
        let pfn = self.add_to_page_cache(&mut pages, index, f, pg::UPTODATE);
        f.ref_add(1);
        Ok((f, pfn))
    }

    /// A zeroed folio for `index`: the highest order of `orders` whose
    /// aligned range is free of cached pages and can be allocated, else
    /// order 0. Counts `thp_file_alloc` / `thp_file_fallback`.
    fn alloc(&self, pages: &PageCache, index: u64, orders: u32) -> Result<Folio<'_>> {
        // A design that cannot hold folios of the smallest orders skips them.
        let min = self.k.design.min_large_order();
        for order in (min..=PMD_ORDER).rev().filter(|o| orders & (1 << o) != 0) {
            let first = index & !((1 << order) - 1);
            let swapped = pages.swapped.range(first..first + (1 << order)).next().is_some();
            if swapped || pages.range(first..first + (1 << order)).next().is_some() {
                continue;
            }
            match self.k.alloc_folio_on(crate::phys::Placement::local(), order, true) {
                Ok(f) => {
                    if order == PMD_ORDER {
                        Stats::inc(&self.k.stats.thp_file_alloc);
                    }
                    return Ok(f);
                }
                Err(_) if order == PMD_ORDER => Stats::inc(&self.k.stats.thp_file_fallback),
                Err(_) => {}
            }
        }
        self.k.alloc_folio_zeroed(0)
    }

    /// Every cached page as (index, pfn), in index order.
    pub fn cached(&self) -> Vec<(u64, Pfn)> {
        self.pages.lock().unwrap().iter().map(|(&i, &p)| (i, p)).collect()
    }

    /// The page the cache holds at `index`, if any (for the checker).
    pub fn cached_pfn(&self, index: u64) -> Option<Pfn> {
        self.pages.lock().unwrap().get(&index).copied()
    }

    /// Sets `i_size` (`i_size_write`); faults past it fail from now on.
    /// EINVAL past [`MAX_FILE_SIZE`].
    pub(crate) fn set_size(&self, size: u64) -> Result<()> {
        if size > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        self.size.store(size, Relaxed);
        Ok(())
    }
}

impl Drop for Inode {
    /// `shmem_evict_inode` / `hugetlbfs_evict_inode`: the last reference is
    /// gone; the cache is emptied and reservations given back.
    fn drop(&mut self) {
        self.undo_range(0, u64::MAX);
        crate::sync::cacheline::freed(self);
    }
}

/// The references the page cache holds on `f`: one per page, or one for a
/// hugetlb folio (`__filemap_add_folio`).
pub fn cache_refs(f: Folio) -> i32 {
    if f.head().test(pg::HUGETLB) {
        1
    } else {
        f.nr_pages() as i32
    }
}

/// Whether `f` is a file folio still in a page cache: not anon, and with a
/// mapping.
pub fn in_page_cache(f: Folio) -> bool {
    !f.test_anon() && f.head().link.load(Relaxed) != 0
}
