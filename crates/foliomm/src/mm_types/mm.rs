//! The address space (`struct mm_struct`, include/linux/mm_types.h) and the
//! list of every address space of a machine.
#![warn(missing_docs)]

use std::collections::HashMap;

use super::mmap_lock::{MmapLock, MmapReadGuard, MmapWriteGuard};
use super::VmaCache;
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::{MmId, RmapMm};
use crate::rmap::AnonVma;
use crate::shmem::{Inode, Mount};
use crate::sync::atomic::{AtomicBool, AtomicI64, Ordering::*};
use crate::sync::cacheline::{self, Structure};
use crate::sync::{Arc, Mutex, Weak};
use crate::tlb::MmTlb;
use crate::Result;

/// One address space.
///
/// Line-aligned (as the kernel's slab caches of it are), so that which of
/// its words share a line does not depend on where the allocator put it:
/// the simulated coherence costs are the same on every run.
#[repr(align(64))]
pub struct Mm {
    /// The kernel context of the machine this MM belongs to.
    pub kernel: Arc<Kernel>,
    /// The list this MM is on; fork puts the child there too.
    pub(crate) mmlist: Arc<MmList>,
    /// `mm->mm_id`.
    pub id: MmId,
    /// The ID with the rmap sub-IDs seed 000 keeps in `mm_struct`
    /// (computed once, from `id`).
    pub rmap: RmapMm,
    /// A number no other MM of the machine ever has (what `vm_mm`, a
    /// pointer in Linux, compares).
    pub serial: u64,
    /// `mm->pgd`: the frame of the top-level table of the 4-level page tables.
    pub pgd: Pfn,
    /// `mm->mmap_lock` with `mm_lock_seq`, guarding the VMA tree.
    pub(super) mmap_lock: MmapLock,
    /// `mm->page_table_lock`: guards populating upper-level tables.
    pub page_table_lock: Mutex<()>,
    /// PTE tables deposited for PMD-mapped THPs (`pgtable_trans_huge_deposit`),
    /// keyed by the PMD's address.
    pub deposits: Mutex<HashMap<u64, Pfn>>,
    /// `MM_ANONPAGES`: anonymous pages mapped.
    pub rss_anon: AtomicI64,
    /// `MM_SHMEMPAGES`: shmem pages mapped.
    pub rss_shmem: AtomicI64,
    /// `MM_SWAPENTS`: swap entries in this MM's page tables.
    pub rss_swap: AtomicI64,
    /// `mm->hugetlb_usage`: pages of huge pages this MM mapped by its own
    /// faults and fork copies, less those it zapped (`hugetlb_count_add` /
    /// `_sub`); a PMD table it shares with other MMs adds nothing.
    pub hugetlb_usage: AtomicI64,
    /// TLB flush state shared with every CPU that runs this MM.
    pub tlb: MmTlb,
    /// `MMF_HAS_PINNED`: a page of this MM was ever pinned with FOLL_PIN.
    pub has_pinned: AtomicBool,
    /// `MMF_VM_HUGEPAGE`: khugepaged has a slot for this MM and scans it
    /// (see `crate::memory::khugepaged::khugepaged_enter_vma`).
    pub khugepaged: AtomicBool,
    /// `MMF_VM_MERGEABLE`: ksmd has a slot for this MM (`__ksm_enter`).
    pub ksm: AtomicBool,
    /// `mm_users` as threads count it: the tasks sharing this address
    /// space (1 at creation; a caller that starts or ends a thread of it
    /// says so). The NUMA scan asks whether it is 1.
    pub users: crate::sync::atomic::AtomicU32,
    exited: AtomicBool,
}

impl Mm {
    /// A new empty address space (`mm_alloc`): an MM ID and a PGD, on `list`.
    pub fn new(kernel: &Arc<Kernel>, list: &Arc<MmList>) -> Result<Arc<Mm>> {
        let id = kernel.mm_ids.alloc()?;
        let pgd = kernel.alloc_table().inspect_err(|_| kernel.mm_ids.free(id))?;
        let serial = kernel.new_serial();
        let mm = Arc::new(Mm {
            kernel: kernel.clone(),
            mmlist: list.clone(),
            id,
            rmap: RmapMm::new(id),
            serial,
            pgd,
            mmap_lock: MmapLock::new(serial, list.vma_cache.clone()),
            page_table_lock: Mutex::new(()),
            deposits: Mutex::new(HashMap::new()),
            rss_anon: AtomicI64::new(0),
            rss_shmem: AtomicI64::new(0),
            rss_swap: AtomicI64::new(0),
            hugetlb_usage: AtomicI64::new(0),
            tlb: MmTlb::new(serial),
            has_pinned: AtomicBool::new(false),
            khugepaged: AtomicBool::new(false),
            ksm: AtomicBool::new(false),
            users: crate::sync::atomic::AtomicU32::new(1),
            exited: AtomicBool::new(false),
        });
        kernel.design.mm_created(&mm.rmap);
        list.add(&mm);
        kernel.phys.mm_changed(serial);
        Ok(mm)
    }

    /// `add_mm_counter(mm, MM_ANONPAGES, n)`: a per-CPU counter in Linux
    /// (accounted so), one shared atomic here.
    pub fn add_anon_rss(&self, n: i64) {
        cacheline::percpu_add(Structure::MmCounters, &self.rss_anon, n);
        self.rss_anon.fetch_add(n, Relaxed);
    }

    /// `add_mm_counter(mm, MM_SWAPENTS, n)`.
    pub fn add_swap_rss(&self, n: i64) {
        cacheline::percpu_add(Structure::MmCounters, &self.rss_swap, n);
        self.rss_swap.fetch_add(n, Relaxed);
    }

    /// `add_mm_counter(mm, mm_counter(folio), n)`: `MM_ANONPAGES` for an
    /// anon folio, `MM_SHMEMPAGES` for a shmem one; for hugetlb no RSS
    /// counter but `hugetlb_usage` (`hugetlb_count_add`).
    pub fn add_rss(&self, f: Folio, n: i64) {
        if f.head().test(crate::phys::pg::HUGETLB) {
            self.hugetlb_usage.fetch_add(n, Relaxed);
        } else if f.test_anon() {
            self.add_anon_rss(n);
        } else {
            cacheline::percpu_add(Structure::MmCounters, &self.rss_shmem, n);
            self.rss_shmem.fetch_add(n, Relaxed);
        }
    }

    /// A read section for walking this MM's page tables without the
    /// tables' locks (`pte_offset_map`'s `rcu_read_lock`): no PTE table
    /// reached inside it is freed before it ends.
    pub fn pt_read(&self) -> crate::tlb::table_rcu::TableReadGuard<'_> {
        self.tlb.tables.read(&self.kernel)
    }

    /// `anon_vma_prepare` for `vma` of this MM: its anon_vma, made now if
    /// it has none (a write of the VMA's `anon_vma`, which every
    /// anonymous fault reads).
    pub fn anon_vma_prepare(&self, vma: &super::Vma) -> u64 {
        let mut made = false;
        let id = vma.anon_vma.prepare(|| {
            made = true;
            self.mmlist.new_anon_vma(&self.kernel, None)
        });
        vma.account(&[super::vma_layout::Member::AnonVma], made);
        id
    }

    /// `mmap_read_lock`.
    pub fn mmap_read_lock(&self) -> MmapReadGuard<'_> {
        self.mmap_lock.read()
    }

    /// `mmap_read_trylock`.
    pub fn mmap_read_trylock(&self) -> Option<MmapReadGuard<'_>> {
        self.mmap_lock.try_read()
    }

    /// `mmap_write_lock`; VMAs to change are then write-locked with
    /// `Vmas::start_write` (insert and remove do it themselves).
    pub fn mmap_write_lock(&self) -> MmapWriteGuard<'_> {
        self.kernel.phys.mm_changed(self.serial);
        self.mmap_lock.write()
    }

    /// Returns true once [`Mm::exit`] has begun tearing the MM down
    /// (`exit_mmap`); it then holds no VMAs.
    pub fn has_exited(&self) -> bool {
        self.exited.load(Acquire)
    }

    /// Marks the MM exited (`MMF_OOM_SKIP`-like); returns whether it already was.
    pub(crate) fn set_exited(&self) -> bool {
        self.exited.swap(true, AcqRel)
    }

    /// A copy of the VMA list, each VMA as it is now.
    pub fn vmas(&self) -> Vec<Arc<super::Vma>> {
        self.mmap_read_lock().iter().cloned().collect()
    }
}

/// Every address space of a machine, for walkers such as the checker (the
/// model's counterpart of `init_mm.mmlist`): weak, so an MM goes away when
/// its last user drops it; the VMA cache they share; every shmem inode
/// (the superblock's inode list), weak too; and every anon_vma by identity,
/// weak (the VMAs' chains hold them), for an rmap walk from a folio's
/// `folio->mapping`.
pub struct MmList {
    /// Each MM by serial.
    mms: Mutex<Vec<(u64, Weak<Mm>)>>,
    /// The VMA allocator its MMs share (`vm_area_cachep`).
    pub vma_cache: Arc<VmaCache>,
    inodes: Mutex<Vec<(u64, Weak<Inode>)>>,
    anon_vmas: Mutex<HashMap<u64, Weak<AnonVma>>>,
    /// KSM's stable tree and ksmd's memory of the pages it scanned.
    pub ksm: crate::rmap::ksm::Ksm,
}

impl MmList {
    /// An empty list whose MMs take VMAs from `vma_cache`.
    pub fn new(vma_cache: VmaCache) -> MmList {
        MmList {
            mms: Mutex::default(),
            vma_cache: Arc::new(vma_cache),
            inodes: Mutex::default(),
            anon_vmas: Mutex::default(),
            ksm: Default::default(),
        }
    }

    /// `anon_vma_alloc`: a new anon_vma with no VMA, of the family of
    /// `root` (for a fork child) or a root itself, found again by its
    /// identity until its last chain lets it go.
    pub fn new_anon_vma(&self, k: &Kernel, root: Option<u64>) -> Arc<AnonVma> {
        let av = Arc::new(AnonVma::new(k.new_anon_vma(), root));
        let mut all = self.anon_vmas.lock().unwrap();
        if all.len().is_power_of_two() && all.len() >= 64 {
            all.retain(|_, w| w.strong_count() > 0);
        }
        all.insert(av.id, Arc::downgrade(&av));
        av
    }

    /// The anon_vma `id` names (`folio_anon_vma`), if a VMA still holds it.
    pub fn anon_vma(&self, id: u64) -> Option<Arc<AnonVma>> {
        self.anon_vmas.lock().unwrap().get(&id).and_then(Weak::upgrade)
    }

    /// A new shmem inode of `size` bytes on `mount`, on the list
    /// ([`Inode::new`]).
    pub fn new_inode(&self, k: &Arc<Kernel>, size: u64, mount: Mount) -> Result<Arc<Inode>> {
        let inode = Inode::new(k, size, mount)?;
        let mut inodes = self.inodes.lock().unwrap();
        inodes.retain(|(_, w)| w.strong_count() > 0);
        inodes.push((inode.ino, Arc::downgrade(&inode)));
        Ok(inode)
    }

    /// Every shmem inode still alive.
    pub fn inodes(&self) -> Vec<Arc<Inode>> {
        self.inodes.lock().unwrap().iter().filter_map(|(_, w)| w.upgrade()).collect()
    }

    /// The shmem inode numbered `ino`, if still alive (`folio->mapping`'s
    /// host). Only that one is upgraded: letting go of another could drop
    /// its last reference here, under the caller's locks.
    pub fn inode(&self, ino: u64) -> Option<Arc<Inode>> {
        let inodes = self.inodes.lock().unwrap();
        inodes.iter().find(|(i, _)| *i == ino).and_then(|(_, w)| w.upgrade())
    }

    fn add(&self, mm: &Arc<Mm>) {
        let mut mms = self.mms.lock().unwrap();
        // Dropped MMs leave the list when it doubles: constant time per MM.
        if mms.len().is_power_of_two() {
            mms.retain(|(_, w)| w.strong_count() > 0);
        }
        mms.push((mm.serial, Arc::downgrade(mm)));
    }

    /// The address space with serial `serial`, if still alive.
    pub fn get(&self, serial: u64) -> Option<Arc<Mm>> {
        // Only that one is upgraded: letting go of another could drop its
        // last reference here.
        let mms = self.mms.lock().unwrap();
        mms.iter().find(|(s, _)| *s == serial).and_then(|(_, w)| w.upgrade())
    }

    /// Every address space still alive (exited ones too, until dropped).
    pub fn alive(&self) -> Vec<Arc<Mm>> {
        self.mms.lock().unwrap().iter().filter_map(|(_, w)| w.upgrade()).collect()
    }
}
