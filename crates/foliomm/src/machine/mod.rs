//! A [`Machine`]: the top of the model. It builds the [`Kernel`] context of
//! one configuration, owns the list of its address spaces and the checker's
//! [`Ledger`] (installed as the kernel's observer), creates MMs and CPUs, and
//! runs the invariant checker. Two machines with different designs can live
//! in one process.
#![warn(missing_docs)]

pub use crate::kernel::{
    Config, DebugSwitches, HugeCounts, HugeSize, HugetlbSync, VmaLayout, VmaLockDesign, ZapStrategy,
    DEFAULT_MAX_MAP_COUNT, MEMORY_RANGE,
};

use crate::check::{check_machine, Ledger, Scope, Tracker, Violation};
use crate::cpu::Cpu;
use crate::folio::thp::ShmemHuge;
use crate::ipc::ShmIds;
use crate::kernel::Kernel;
use crate::mm::gup::{unpin_user_pages, Pin};
use crate::mm_types::{Mm, MmList, VmaCache};
use crate::shmem::{Inode, Mount};
use crate::sync::{Arc, Mutex};
use crate::{Errno, Result};

/// One model machine.
pub struct Machine {
    /// The kernel context the machine's MMs and CPUs share: physical memory,
    /// the design, settings and counters (what Linux keeps in globals).
    pub kernel: Arc<Kernel>,
    /// Every address space of the machine.
    pub mms: Arc<MmList>,
    /// What the checker keeps beside the page tables.
    pub ledger: Arc<Ledger>,
    /// The System V shared memory segments.
    pub shm: ShmIds,
    /// What the checker saw last, for [`Machine::check_changed`].
    tracker: Mutex<Tracker>,
}

impl std::ops::Deref for Machine {
    type Target = Kernel;

    /// The machine's kernel context (memory, design, counters, settings).
    fn deref(&self) -> &Kernel {
        &self.kernel
    }
}

impl Machine {
    /// Builds a machine; EINVAL or ENOMEM when its memory cannot be had.
    pub fn new(config: Config) -> Result<Arc<Machine>> {
        let ledger = Arc::new(Ledger::new(config.precision));
        let mms = Arc::new(MmList::new(VmaCache::new(config.vma_lock).with_layout(config.vma_layout)));
        let kernel = Arc::new(Kernel::new(config, Some(ledger.clone()))?);
        Ok(Arc::new(Machine { kernel, mms, ledger, shm: ShmIds::default(), tracker: Mutex::default() }))
    }

    /// `shmget` by `mm` (see [`ShmIds::shmget`]).
    pub fn shmget(&self, mm: &Mm, size: u64, huge: Option<HugeSize>) -> Result<u64> {
        self.shm.shmget(&self.kernel, &self.mms, mm.serial, size, huge)
    }

    /// A new empty address space (`mm_alloc`).
    pub fn new_mm(&self) -> Result<Arc<Mm>> {
        Mm::new(&self.kernel, &self.mms)
    }

    /// A new simulated CPU, with an empty TLB.
    pub fn new_cpu(&self) -> Cpu {
        Cpu::new(&self.kernel)
    }

    /// Every address space still alive (exited ones too, until dropped).
    pub fn mms(&self) -> Vec<Arc<Mm>> {
        self.mms.alive()
    }

    /// (FOLL_PIN, FOLL_GET) references held on the folio headed by `head`.
    pub fn gups_of(&self, head: crate::arch::Pfn) -> (u32, u32) {
        self.ledger.gups_of(head)
    }

    /// Releases the references of a GUP call (`unpin_user_pages`).
    pub fn unpin_user_pages(&self, pin: Pin) {
        unpin_user_pages(&self.kernel, pin)
    }

    /// A new shmem file of `size` bytes (`memfd_create` + `ftruncate`).
    pub fn memfd_create(&self, size: u64) -> Result<Arc<Inode>> {
        self.mms.new_inode(&self.kernel, size, Mount::Shm)
    }

    /// A new file of `size` bytes on a tmpfs mount with option `huge=`
    /// (`open(O_CREAT)`, or `O_TMPFILE` when not `named`, + `ftruncate`).
    /// EINVAL for a setting a mount cannot have (`deny`, `force`).
    pub fn tmpfs_create(&self, size: u64, huge: ShmemHuge, named: bool) -> Result<Arc<Inode>> {
        if matches!(huge, ShmemHuge::Deny | ShmemHuge::Force) {
            return Err(Errno::EINVAL);
        }
        self.mms.new_inode(&self.kernel, size, Mount::Tmpfs { huge, named })
    }

    /// A new hugetlbfs file of `size` bytes with pages of `page`
    /// (`memfd_create(MFD_HUGETLB | MFD_HUGE_2MB or _1GB)` + `ftruncate`);
    /// EINVAL unless `size` is a multiple of the page size.
    pub fn hugetlbfs_create(&self, size: u64, page: HugeSize) -> Result<Arc<Inode>> {
        if !size.is_multiple_of(page.bytes()) {
            return Err(Errno::EINVAL);
        }
        self.mms.new_inode(&self.kernel, size, Mount::Hugetlbfs(page))
    }

    /// `ftruncate(fd, size)` of a shmem file (see [`MmList::truncate`]).
    pub fn ftruncate(&self, inode: &Arc<Inode>, size: u64) -> Result<()> {
        self.mms.truncate(inode, size)
    }

    /// `fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, ...)` of a
    /// shmem file (see [`MmList::punch_hole`]).
    pub fn punch_hole(&self, inode: &Arc<Inode>, offset: u64, len: u64) -> Result<()> {
        self.mms.punch_hole(inode, offset, len)
    }

    /// Runs the invariant checker ([`crate::check`]); every violation
    /// found. Call it at a quiescent point.
    pub fn check(&self) -> Vec<Violation> {
        check_machine(&self.kernel, &self.mms(), &self.mms.inodes(), &self.ledger)
    }

    /// The checker over as much as `scope` says (see [`Tracker`]): a full
    /// check becomes the base of the checks of what changed after it.
    pub fn check_scope(&self, scope: Scope) -> Vec<Violation> {
        self.tracker.lock().unwrap().check(scope, &self.kernel, &self.mms, &self.mms.inodes(), &self.ledger)
    }

    /// [`Machine::check_scope`] over everything.
    pub fn check_all(&self) -> Vec<Violation> {
        self.check_scope(Scope::Base)
    }

    /// [`Machine::check_scope`] over what changed since the last check.
    pub fn check_changed(&self) -> Vec<Violation> {
        self.check_scope(Scope::Changed)
    }
}

/// The checker's view of a shared file mapping (`check::check_leaf`),
/// tried on a whole machine.
#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::Machine;
    use crate::{Config, MmapFlags, Prot};

    #[test]
    fn a_shared_mapping_of_a_page_the_cache_let_go_is_reported() {
        let m = Machine::new(Config { memory: 16 << 20, ..Config::default() }).unwrap();
        let f = m.memfd_create(8 << 10).unwrap();
        let mm = m.new_mm().unwrap();
        let flags = MmapFlags { shared: true, ..MmapFlags::default() };
        let a = mm.mmap_file(0, 8 << 10, Prot::RW, flags, Some((&f, 0))).unwrap();
        m.new_cpu().write(&mm, a + 4096, b"x").unwrap();
        assert!(m.check().is_empty());
        let pfn = f.pages.lock().unwrap().remove(&1).expect("page 1 cached");
        let bad: Vec<String> = m.check().iter().map(ToString::to_string).collect();
        f.pages.lock().unwrap().insert(1, pfn);
        let want = format!("maps pfn {pfn:#x}, which inode {} does not hold at index 1", f.ino);
        assert!(bad.iter().any(|v| v.contains(&want)), "{bad:?}");
        assert!(m.check().is_empty());
    }
}
