//! mm/mmap.c: `mmap` of anonymous memory and of shmem files, private or
//! shared, with `MAP_POPULATE`; `get_unmapped_area`, and `exit_mmap` /
//! `__mmdrop`.
#![warn(missing_docs)]

use super::vma::merge_around;
use super::{page_align, range_end};
use crate::arch::{PAGE_SIZE, PMD_SIZE, TASK_SIZE};
use crate::kernel::HugeSize;
use crate::memory::handle_mm_fault;
use crate::memory::zap::{free_pgtables, unmap_vma_range, ZapDetails};
use crate::mm_types::{vm, Mm, Prot, Vmas};
use crate::pgtable::leaf_slot;
use crate::shmem::{Inode, Mount, PrivateResv};
use crate::sync::Arc;
use crate::tlb::MmuGather;
use crate::{Errno, Result};

/// Flags of [`Mm::mmap`].
#[derive(Clone, Copy, Debug, Default)]
pub struct MmapFlags {
    /// `MAP_FIXED`: place exactly at the address, replacing what is there.
    pub fixed: bool,
    /// `MAP_FIXED_NOREPLACE`: place exactly, fail with EEXIST if taken.
    pub noreplace: bool,
    /// `MAP_POPULATE`: fault every page in now.
    pub populate: bool,
    /// `MAP_SHARED` (else `MAP_PRIVATE`): writes reach the file and every
    /// other mapping of it; anonymous shared memory is a new shmem file.
    pub shared: bool,
    /// `MAP_HUGETLB` with its page size (`MAP_HUGE_2MB`, `MAP_HUGE_1GB`):
    /// anonymous memory of hugetlb pages (a new hugetlbfs file); ignored
    /// for a file, whose own pages decide.
    pub hugetlb: Option<HugeSize>,
    /// `MAP_NORESERVE`: a shared hugetlb mapping promises no pages at
    /// mmap; its faults fail (SIGBUS) when the pool has none.
    pub noreserve: bool,
    /// `MAP_LOCKED`: `VM_LOCKED` (as `mlock`; not on hugetlb), and every
    /// page faulted in now (`mm_populate`).
    pub locked: bool,
}

/// Lowest address mmap hands out (`mmap_min_addr`).
pub const MMAP_MIN_ADDR: u64 = 0x10000;
/// Top of the top-down mmap area (`mm->mmap_base`, without randomisation).
pub const MMAP_BASE: u64 = 0x7f00_0000_0000;

/// How far below [`MMAP_BASE`] the top-down area starts in eras that do not
/// align anonymous THP mappings: there a randomized base is page-aligned
/// only, so mappings land at any page (6.1 placed an `mmap(4M)` at
/// 0x...067000); a fixed odd offset keeps runs reproducible.
const UNALIGNED_BASE_GAP: u64 = 0x67000;

impl Mm {
    /// `mm->mmap_base` of this MM's era (see [`UNALIGNED_BASE_GAP`]).
    pub(super) fn mmap_base(&self) -> u64 {
        match self.kernel.config.release().aligns_anon_thp() {
            true => MMAP_BASE,
            false => MMAP_BASE - UNALIGNED_BASE_GAP,
        }
    }

    /// `mmap(addr, len, prot, MAP_ANONYMOUS|flags)`. Without `MAP_FIXED`
    /// the address is a hint; with no hint, a length that is a multiple of
    /// 2 MiB gets a 2 MiB-aligned address (`__get_unmapped_area` →
    /// `thp_get_unmapped_area_vmflags`). `MAP_SHARED` anonymous memory is a
    /// new shmem file of `len` bytes (`shmem_zero_setup`).
    pub fn mmap(&self, addr: u64, len: u64, prot: Prot, flags: MmapFlags) -> Result<u64> {
        self.mmap_file(addr, len, prot, flags, None)
    }

    /// `mmap(addr, len, prot, flags, fd, offset)` of a shmem `file` from byte
    /// `offset` (a page multiple), or of anonymous memory without one (see
    /// [`Mm::mmap`]). The mapping may reach past the end of the file;
    /// accesses there fail with SIGBUS.
    pub fn mmap_file(
        &self,
        addr: u64,
        len: u64,
        prot: Prot,
        flags: MmapFlags,
        file: Option<(&Arc<Inode>, u64)>,
    ) -> Result<u64> {
        crate::sync::sim::work(crate::sync::sim::Work::Syscall);
        if len == 0 || prot.0 & !(Prot::READ | Prot::WRITE | Prot::EXEC) != 0 {
            return Err(Errno::EINVAL);
        }
        let len = page_align(len)?;
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        // hugetlb: whole huge pages at huge-page-aligned addresses and
        // offsets (hugetlbfs_file_mmap, hugetlb_get_unmapped_area).
        let huge_size = match file {
            Some((f, _)) => f.huge_size(),
            None => flags.hugetlb,
        };
        let huge = huge_size.is_some();
        let unit = huge_size.map_or(PAGE_SIZE, HugeSize::bytes);
        let len = len.checked_next_multiple_of(unit).ok_or(Errno::ENOMEM)?;
        if (flags.fixed || flags.noreplace) && !addr.is_multiple_of(unit) {
            return Err(Errno::EINVAL);
        }
        let anon_inode = match (file.is_none(), huge, flags.shared) {
            (true, true, _) => Some(self.mmlist.new_inode(&self.kernel, len, Mount::Hugetlbfs(huge_size.unwrap()))?),
            (true, false, true) => Some(self.mmlist.new_inode(&self.kernel, len, Mount::Shm)?),
            _ => None,
        };
        let file = file.or(anon_inode.as_ref().map(|inode| (inode, 0)));
        if let Some((_, offset)) = file {
            if offset % unit != 0 || offset.checked_add(len).is_none_or(|e| e > crate::shmem::MAX_FILE_SIZE) {
                return Err(Errno::EINVAL);
            }
        }
        // memfd_check_seals_mmap(): a write-sealed file refuses shared
        // writable mappings and takes VM_MAYWRITE from shared ones.
        let no_maywrite = match file {
            Some((inode, _)) if anon_inode.is_none() => inode.mmap_seals(flags.shared, prot.0 & Prot::WRITE != 0)?,
            _ => false,
        };
        let mut vmas = self.mmap_write_lock();
        // do_mmap(): "too many mappings?" (`>`, so the count may reach one
        // past the limit; Linux checks before the anonymous inode is made).
        if vmas.len() > self.kernel.config.max_map_count {
            return Err(Errno::ENOMEM);
        }
        let start = self.mmap_address(&mut vmas, addr, len, flags, file, anon_inode.is_some())?;
        let shared = if flags.shared { vm::SHARED } else { 0 };
        let locked = if flags.locked && !huge { vm::LOCKED } else { 0 };
        let no_maywrite = if no_maywrite { vm::NO_MAYWRITE } else { 0 };
        let flags_vm = prot.0 & vm::PROT_MASK | shared | locked | no_maywrite | if huge { vm::HUGETLB } else { 0 };
        // __mmap_complete(): a new mapping is soft-dirty as a whole, merged or not.
        let flags_vm = flags_vm | if self.kernel.config.soft_dirty { vm::SOFTDIRTY } else { 0 };
        // hugetlb_reserve_pages(): the huge pages of the mapping are
        // promised now, or the mmap fails: a shared mapping's in the
        // file's reservation map, a private one's (file or anonymous) by a
        // map of its own, which makes it the owner of its reservations.
        let private_resv = match file.filter(|_| huge && !flags.noreserve) {
            Some((inode, offset)) if flags.shared => {
                inode.hugetlb_reserve(offset / PAGE_SIZE, (offset + len) / PAGE_SIZE)?;
                None
            }
            Some((inode, _)) => {
                let size = inode.huge_size().expect("a hugetlbfs file");
                self.kernel.hugetlb_reserve(size, len / size.bytes())?;
                Some(Arc::new(PrivateResv::new(size)))
            }
            None => None,
        };
        // hugetlbfs_file_mmap(): a writable mapping grows the file to cover it.
        if let Some((inode, offset)) = file.filter(|(f, _)| f.is_hugetlbfs() && prot.0 & Prot::WRITE != 0) {
            if inode.size() < offset + len {
                inode.set_size(offset + len)?;
            }
        }
        let vma = match file {
            Some((inode, offset)) => vmas.alloc(start, start + len, flags_vm, offset / PAGE_SIZE, Some(inode.clone())),
            None => vmas.alloc(start, start + len, flags_vm, start / PAGE_SIZE, None),
        };
        vma.set_hugetlb_resv(private_resv);
        crate::memory::khugepaged::khugepaged_enter_vma(&self.kernel, self, &vma, vma.flags());
        vmas.insert(vma);
        merge_around(&mut vmas, start, start + len, self.kernel.config.release(), &[start]);
        // mm_populate() ignores errors: the mapping stands, populated as
        // far as it went.
        if flags.populate || flags.locked {
            let _ = self.populate(&vmas, start, start + len);
        }
        Ok(start)
    }

    /// Where `mmap_file` places `len` bytes: exactly at `addr` for
    /// `MAP_FIXED` (unmapping what is there) or `MAP_FIXED_NOREPLACE`
    /// (EEXIST if taken), else at the hint if free, else where
    /// `get_unmapped_area` finds room with the alignment the file (shmem,
    /// hugetlbfs) or the release's THP alignment asks. Models the address
    /// part of `do_mmap` and `__get_unmapped_area`.
    fn mmap_address(
        &self,
        vmas: &mut Vmas,
        addr: u64,
        len: u64,
        flags: MmapFlags,
        file: Option<(&Arc<Inode>, u64)>,
        anon_shared: bool,
    ) -> Result<u64> {
        let huge_size = file.and_then(|(f, _)| f.huge_size());
        let (huge, unit) = (huge_size.is_some(), huge_size.map_or(PAGE_SIZE, HugeSize::bytes));
        if flags.fixed || flags.noreplace {
            let end = range_end(addr, len)?;
            if addr < MMAP_MIN_ADDR {
                return Err(Errno::EINVAL);
            }
            if vmas.any_in(addr, end) {
                if flags.noreplace {
                    return Err(Errno::EEXIST);
                }
                self.do_munmap(vmas, addr, end)?;
            }
            return Ok(addr);
        }
        // hugetlb_get_unmapped_area() rounds a hint up to a huge page.
        let hint = if huge { addr.checked_next_multiple_of(unit).unwrap_or(0) } else { addr & !(PAGE_SIZE - 1) };
        let hint_ok =
            hint >= MMAP_MIN_ADDR && hint.checked_add(len).is_some_and(|e| e <= TASK_SIZE && !vmas.any_in(hint, e));
        if hint != 0 && hint_ok {
            return Ok(hint);
        }
        // shmem_get_unmapped_area() for shmem; for anonymous memory
        // thp_get_unmapped_area() when no hint was given and the release
        // aligns a mapping of this length.
        let thp_align = self.kernel.config.release().aligns_anon_mapping(len, PMD_SIZE);
        let (align, offset) = match file {
            Some(_) if huge => (unit, 0),
            Some((inode, off)) => {
                inode.unmapped_area_alignment(anon_shared, off / PAGE_SIZE, len).unwrap_or((PAGE_SIZE, 0))
            }
            None if thp_align && hint == 0 => (PMD_SIZE, 0),
            None => (PAGE_SIZE, 0),
        };
        get_unmapped_area(vmas, self.mmap_base(), len, align, offset)
    }

    /// `populate_vma_page_range`: faults in every page, for write if the VMA
    /// is private and writable (to break COW; a shared mapping is not
    /// dirtied for nothing), for read otherwise, and touches it
    /// (`FOLL_TOUCH`: a write marks a folio behind a clean entry dirty); a
    /// PMD mapping is stepped over whole, as GUP does. Then this CPU's LRU
    /// batches move (`lru_add_drain`), also after an error stopped it.
    pub(super) fn populate(&self, vmas: &Vmas, start: u64, end: u64) -> Result<()> {
        let result = self.fault_in(vmas, start, end);
        // The folios faulted in leave this CPU's batches (mlock's too),
        // however far it went.
        self.kernel.lru_add_drain();
        result
    }

    /// [`Mm::populate`]'s faults (`__get_user_pages`).
    fn fault_in(&self, vmas: &Vmas, start: u64, end: u64) -> Result<()> {
        let mut addr = start;
        while addr < end {
            let vma = vmas.find(addr).ok_or(Errno::EFAULT)?;
            let write = vma.writable() && !vma.shared();
            if vma.readable() && self.translates(addr, write).is_none() {
                handle_mm_fault(self, vma, addr, write)?;
            }
            if vma.readable() && write {
                // follow_page_pte()'s FOLL_TOUCH: a write through a clean
                // entry dirties the folio (a lazyfree one is kept then).
                self.touch_dirty(addr);
            }
            addr = match self.translates(addr, false) {
                Some(true) => (addr | (PMD_SIZE - 1)) + 1,
                _ => addr + PAGE_SIZE,
            };
        }
        Ok(())
    }

    /// Marks the folio mapped at `addr` dirty unless its entry is dirty
    /// already (a GUP write through an entry that allows it, `FOLL_TOUCH`
    /// in `follow_page_pte`). Differs from Linux for a clean huge entry,
    /// which `touch_pmd` marks dirty instead of the folio.
    pub(super) fn touch_dirty(&self, addr: u64) {
        let (phys, _walk) = (&self.kernel.phys, self.pt_read());
        let Some(slot) = leaf_slot(phys, self.pgd, addr) else { return };
        let e = slot.load(phys);
        if e.present() && !e.special() && !e.dirty() {
            crate::folio::Folio::containing(phys, slot.page_pfn(e, addr)).head().set(crate::phys::pg::DIRTY);
        }
    }

    /// Whether `addr` has a present translation allowing the access, and
    /// then whether it is a PMD mapping.
    pub(super) fn translates(&self, addr: u64, write: bool) -> Option<bool> {
        let (phys, _walk) = (&self.kernel.phys, self.pt_read());
        let slot = leaf_slot(phys, self.pgd, addr)?;
        let e = slot.load(phys);
        (e.hw_present() && (!write || e.write())).then_some(slot.huge())
    }

    /// `exit_mmap`: unmaps everything (draining this CPU's LRU batches
    /// first, before 6.14) and frees all page tables but the PGD.
    pub fn exit(&self) {
        if self.set_exited() {
            return;
        }
        crate::sync::sim::work(crate::sync::sim::Work::Syscall);
        let mut vmas = self.mmap_write_lock();
        let all = vmas.take_all();
        let k = &*self.kernel;
        k.zap_drain();
        let mut tlb = MmuGather::new(k, &self.tlb, true);
        for v in &all {
            unmap_vma_range(k, self, &mut tlb, v, (v.start(), v.end()), ZapDetails::default());
        }
        free_pgtables(k, self, &vmas, &mut tlb, 0, TASK_SIZE);
        drop(tlb);
        for v in all {
            crate::memory::hugetlb_resv::vm_op_close(k, &v);
            vmas.free(v);
        }
    }
}

impl Drop for Mm {
    /// `__mmdrop`: frees the PGD and the MM ID after `exit_mmap`.
    fn drop(&mut self) {
        self.exit();
        self.kernel.free_table(self.pgd);
        self.kernel.mm_ids.free(self.id);
        crate::sync::cacheline::freed(self);
    }
}

/// Top-down search for a free range of `len` bytes that starts `offset`
/// bytes past a multiple of `align` (`unmapped_area_topdown` with
/// `align_mask` and `align_offset`).
pub(super) fn get_unmapped_area(vmas: &Vmas, base: u64, len: u64, align: u64, offset: u64) -> Result<u64> {
    let fit = |lo: u64, hi: u64| -> Option<u64> {
        let top = hi.checked_sub(len)?;
        let a = (top.checked_sub(offset)? & !(align - 1)) + offset;
        (a >= lo.max(MMAP_MIN_ADDR)).then_some(a)
    };
    let mut hi = base;
    for v in vmas.iter().rev() {
        if v.end() <= hi {
            if let Some(a) = fit(v.end(), hi) {
                return Ok(a);
            }
        }
        hi = hi.min(v.start());
    }
    fit(MMAP_MIN_ADDR, hi).ok_or(Errno::ENOMEM)
}
