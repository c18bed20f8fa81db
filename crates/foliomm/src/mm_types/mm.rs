//! The address space (`struct mm_struct`, include/linux/mm_types.h) and the
//! list of every address space of a machine.

use std::collections::HashMap;

use super::Vmas;
use crate::arch::Pfn;
use crate::kernel::Kernel;
use crate::mapcount::MmId;
use crate::sync::atomic::{AtomicBool, AtomicI64, Ordering::*};
use crate::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use crate::tlb::MmTlb;
use crate::Result;

/// One address space.
pub struct Mm {
    pub kernel: Arc<Kernel>,
    /// The list this MM is on; fork puts the child there too.
    pub(crate) mmlist: Arc<MmList>,
    /// `mm->mm_id`.
    pub id: MmId,
    pub pgd: Pfn,
    /// `mm->mmap_lock`, guarding the VMA tree.
    mmap_lock: RwLock<Vmas>,
    /// `mm->page_table_lock`: guards populating upper-level tables.
    pub page_table_lock: Mutex<()>,
    /// PTE tables deposited for PMD-mapped THPs (`pgtable_trans_huge_deposit`),
    /// keyed by the PMD's address.
    pub deposits: Mutex<HashMap<u64, Pfn>>,
    /// `MM_ANONPAGES`: anonymous pages mapped.
    pub rss_anon: AtomicI64,
    /// TLB flush state shared with every CPU that runs this MM.
    pub tlb: MmTlb,
    /// `MMF_HAS_PINNED`: a page of this MM was ever pinned with FOLL_PIN.
    pub has_pinned: AtomicBool,
    exited: AtomicBool,
}

impl Mm {
    /// A new empty address space (`mm_alloc`): an MM ID and a PGD, on `list`.
    pub fn new(kernel: &Arc<Kernel>, list: &Arc<MmList>) -> Result<Arc<Mm>> {
        let id = kernel.mm_ids.alloc()?;
        let pgd = kernel.alloc_table().inspect_err(|_| kernel.mm_ids.free(id))?;
        let mm = Arc::new(Mm {
            kernel: kernel.clone(),
            mmlist: list.clone(),
            id,
            pgd,
            mmap_lock: RwLock::new(Vmas::default()),
            page_table_lock: Mutex::new(()),
            deposits: Mutex::new(HashMap::new()),
            rss_anon: AtomicI64::new(0),
            tlb: MmTlb::new(kernel.new_serial()),
            has_pinned: AtomicBool::new(false),
            exited: AtomicBool::new(false),
        });
        list.add(&mm);
        Ok(mm)
    }

    /// `mmap_read_lock`.
    pub fn mmap_read_lock(&self) -> RwLockReadGuard<'_, Vmas> {
        self.mmap_lock.read().unwrap()
    }

    /// `mmap_write_lock`.
    pub fn mmap_write_lock(&self) -> RwLockWriteGuard<'_, Vmas> {
        self.mmap_lock.write().unwrap()
    }

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
/// its last user drops it.
#[derive(Default)]
pub struct MmList(Mutex<Vec<Weak<Mm>>>);

impl MmList {
    fn add(&self, mm: &Arc<Mm>) {
        let mut mms = self.0.lock().unwrap();
        mms.retain(|w| w.strong_count() > 0);
        mms.push(Arc::downgrade(mm));
    }

    /// Every address space still alive (exited ones too, until dropped).
    pub fn alive(&self) -> Vec<Arc<Mm>> {
        self.0.lock().unwrap().iter().filter_map(Weak::upgrade).collect()
    }
}
