//! Address spaces (`struct mm_struct`) and their VMAs: mmap, munmap,
//! mprotect, madvise, mremap, fork and exit (mm/mmap.c, mm/vma.c,
//! mm/mprotect.c, mm/madvise.c, mm/mremap.c, kernel/fork.c).
//!
//! The VMA tree is a `BTreeMap` guarded by an `RwLock` that plays the
//! `mmap_lock`: faults and accesses take it for read, everything that changes
//! VMAs takes it for write. Only private anonymous mappings exist so far.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::folio::Folio;
use crate::machine::Machine;
use crate::mapcount::MmId;
use crate::memory;
use crate::mmu_gather::MmuGather;
use crate::pgtable::{self, walk_pmd, Pte, PMD_SIZE, TASK_SIZE};
use crate::phys::{Pfn, PAGE_SIZE};
use crate::rmap;
use crate::stats::Stats;
use crate::tlb::MmTlb;
use crate::{huge_memory, Errno, Result};

/// Mapping protection (`PROT_*` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Prot(pub u32);

impl Prot {
    pub const NONE: Prot = Prot(0);
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const EXEC: u32 = 4;
    pub const RW: Prot = Prot(Self::READ | Self::WRITE);

    /// Parses `r`, `rw`, `rwx`, `none`, ...
    pub fn parse(s: &str) -> Option<Prot> {
        if s == "none" {
            return Some(Prot::NONE);
        }
        let mut p = 0;
        for c in s.chars() {
            p |= match c {
                'r' => Self::READ,
                'w' => Self::WRITE,
                'x' => Self::EXEC,
                _ => return None,
            };
        }
        Some(Prot(p))
    }
}

/// `vm_flags` bits foliomm uses.
pub mod vm {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const EXEC: u32 = 4;
    /// `VM_HUGEPAGE` (MADV_HUGEPAGE).
    pub const HUGEPAGE: u32 = 1 << 8;
    /// `VM_NOHUGEPAGE` (MADV_NOHUGEPAGE).
    pub const NOHUGEPAGE: u32 = 1 << 9;
    /// `VM_DONTCOPY` (MADV_DONTFORK).
    pub const DONTCOPY: u32 = 1 << 10;
    pub const PROT_MASK: u32 = READ | WRITE | EXEC;
}

/// A virtual memory area (`struct vm_area_struct`).
#[derive(Debug)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub flags: u32,
    /// `vm_pgoff`: for anonymous memory the page index of the original start.
    pub pgoff: u64,
    /// Identity of the `anon_vma`, 0 until the first write fault
    /// (`anon_vma_prepare`).
    pub anon_vma: AtomicU64,
}

impl Clone for Vma {
    fn clone(&self) -> Vma {
        Vma {
            start: self.start,
            end: self.end,
            flags: self.flags,
            pgoff: self.pgoff,
            anon_vma: AtomicU64::new(self.anon_vma()),
        }
    }
}

impl Vma {
    pub fn anon_vma(&self) -> u64 {
        self.anon_vma.load(Acquire)
    }
    pub fn readable(&self) -> bool {
        self.flags & (vm::READ | vm::WRITE) != 0
    }
    pub fn writable(&self) -> bool {
        self.flags & vm::WRITE != 0
    }
    /// `is_mergeable_vma` + `is_mergeable_anon_vma` for `self` followed by `next`.
    fn can_merge_with(&self, next: &Vma) -> bool {
        let (a, b) = (self.anon_vma(), next.anon_vma());
        self.end == next.start
            && self.flags == next.flags
            && self.pgoff + (self.end - self.start) / PAGE_SIZE == next.pgoff
            && (a == 0 || b == 0 || a == b)
    }
}

/// The VMA tree of one MM (the maple tree), keyed by start address.
#[derive(Default)]
pub struct Vmas(BTreeMap<u64, Vma>);

impl Vmas {
    /// The VMA containing `addr` (`vma_lookup`).
    pub fn find(&self, addr: u64) -> Option<&Vma> {
        self.0.range(..=addr).next_back().map(|(_, v)| v).filter(|v| addr < v.end)
    }
    /// Whether any VMA intersects `[start, end)`.
    pub fn any_in(&self, start: u64, end: u64) -> bool {
        self.overlapping(start, end).next().is_some()
    }
    /// VMAs intersecting `[start, end)`, in address order.
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = &Vma> {
        let first = self.find(start).map(|v| v.start).unwrap_or(start);
        self.0.range(first..end).map(|(_, v)| v).filter(move |v| v.end > start)
    }
    pub fn iter(&self) -> impl Iterator<Item = &Vma> {
        self.0.values()
    }
    /// Whether `[start, end)` is covered by VMAs without holes.
    fn covers(&self, start: u64, end: u64) -> bool {
        let mut at = start;
        for v in self.overlapping(start, end) {
            if v.start > at {
                return false;
            }
            at = v.end;
        }
        at >= end
    }
    fn insert(&mut self, v: Vma) {
        self.0.insert(v.start, v);
    }
}

/// Flags of [`Mm::mmap`].
#[derive(Clone, Copy, Debug, Default)]
pub struct MmapFlags {
    /// `MAP_FIXED`: place exactly at the address, replacing what is there.
    pub fixed: bool,
    /// `MAP_FIXED_NOREPLACE`: place exactly, fail with EEXIST if taken.
    pub noreplace: bool,
    /// `MAP_POPULATE`: fault every page in now.
    pub populate: bool,
}

/// `madvise` advice foliomm models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Advice {
    DontNeed,
    HugePage,
    NoHugePage,
    DontFork,
    DoFork,
}

impl Advice {
    pub fn parse(s: &str) -> Option<Advice> {
        Some(match s {
            "dontneed" => Advice::DontNeed,
            "hugepage" => Advice::HugePage,
            "nohugepage" => Advice::NoHugePage,
            "dontfork" => Advice::DontFork,
            "dofork" => Advice::DoFork,
            _ => return None,
        })
    }
}

/// Lowest address mmap hands out (`mmap_min_addr`).
pub const MMAP_MIN_ADDR: u64 = 0x10000;
/// Top of the top-down mmap area (`mm->mmap_base`, without randomisation).
pub const MMAP_BASE: u64 = 0x7f00_0000_0000;

/// One address space.
pub struct Mm {
    pub machine: Arc<Machine>,
    /// `mm->mm_id`.
    pub id: MmId,
    pub(crate) pgd: Pfn,
    mmap_lock: RwLock<Vmas>,
    /// `mm->page_table_lock`: guards populating upper-level tables.
    pub(crate) page_table_lock: Mutex<()>,
    /// PTE tables deposited for PMD-mapped THPs (`pgtable_trans_huge_deposit`),
    /// keyed by the PMD's address.
    pub(crate) deposits: Mutex<HashMap<u64, Pfn>>,
    /// `MM_ANONPAGES`: anonymous pages mapped.
    pub rss_anon: AtomicI64,
    /// TLB flush state shared with every CPU that runs this MM.
    pub tlb: MmTlb,
    /// `MMF_HAS_PINNED`: a page of this MM was ever pinned with FOLL_PIN.
    pub has_pinned: AtomicBool,
    exited: AtomicBool,
}

fn page_align(len: u64) -> Result<u64> {
    len.checked_add(PAGE_SIZE - 1).map(|l| l & !(PAGE_SIZE - 1)).ok_or(Errno::ENOMEM)
}

fn range_end(start: u64, len: u64) -> Result<u64> {
    if !start.is_multiple_of(PAGE_SIZE) {
        return Err(Errno::EINVAL);
    }
    let end = start.checked_add(page_align(len)?).ok_or(Errno::ENOMEM)?;
    if end > TASK_SIZE {
        return Err(Errno::ENOMEM);
    }
    Ok(end)
}

impl Mm {
    /// A new empty address space (`mm_alloc`): a PGD and an MM ID.
    pub fn new(machine: &Arc<Machine>) -> Result<Arc<Mm>> {
        let id = machine.alloc_mm_id()?;
        let pgd = machine.alloc_table().inspect_err(|_| machine.free_mm_id(id))?;
        let mm = Arc::new(Mm {
            machine: machine.clone(),
            id,
            pgd,
            mmap_lock: RwLock::new(Vmas::default()),
            page_table_lock: Mutex::new(()),
            deposits: Mutex::new(HashMap::new()),
            rss_anon: AtomicI64::new(0),
            tlb: MmTlb::new(machine.new_serial()),
            has_pinned: AtomicBool::new(false),
            exited: AtomicBool::new(false),
        });
        machine.register_mm(&mm);
        Ok(mm)
    }

    /// `mmap_read_lock`.
    pub fn read_lock(&self) -> RwLockReadGuard<'_, Vmas> {
        self.mmap_lock.read().unwrap()
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, Vmas> {
        self.mmap_lock.write().unwrap()
    }

    pub fn has_exited(&self) -> bool {
        self.exited.load(Acquire)
    }

    /// A copy of the VMA list.
    pub fn vmas(&self) -> Vec<Vma> {
        self.read_lock().iter().cloned().collect()
    }

    /// `mmap(addr, len, prot, MAP_PRIVATE|MAP_ANONYMOUS|flags)`. Without
    /// `MAP_FIXED` the address is a hint; with no hint, a length that is a
    /// multiple of 2 MiB gets a 2 MiB-aligned address (`__get_unmapped_area`
    /// → `thp_get_unmapped_area_vmflags`).
    pub fn mmap(&self, addr: u64, len: u64, prot: Prot, flags: MmapFlags) -> Result<u64> {
        if len == 0 || prot.0 & !(Prot::READ | Prot::WRITE | Prot::EXEC) != 0 {
            return Err(Errno::EINVAL);
        }
        let len = page_align(len)?;
        if len > TASK_SIZE {
            return Err(Errno::ENOMEM);
        }
        let mut vmas = self.write_lock();
        let start = if flags.fixed || flags.noreplace {
            let end = range_end(addr, len)?;
            if addr < MMAP_MIN_ADDR {
                return Err(Errno::EINVAL);
            }
            if vmas.any_in(addr, end) {
                if flags.noreplace {
                    return Err(Errno::EEXIST);
                }
                self.do_munmap(&mut vmas, addr, end)?;
            }
            addr
        } else {
            let hint = addr & !(PAGE_SIZE - 1);
            let hint_ok =
                hint >= MMAP_MIN_ADDR && hint.checked_add(len).is_some_and(|e| e <= TASK_SIZE && !vmas.any_in(hint, e));
            if hint != 0 && hint_ok {
                hint
            } else {
                let align = if hint == 0 && len % PMD_SIZE == 0 { PMD_SIZE } else { PAGE_SIZE };
                get_unmapped_area(&vmas, len, align)?
            }
        };
        let vma = Vma {
            start,
            end: start + len,
            flags: prot.0 & vm::PROT_MASK,
            pgoff: start / PAGE_SIZE,
            anon_vma: AtomicU64::new(0),
        };
        vmas.insert(vma);
        merge_around(&mut vmas, start, start + len);
        if flags.populate {
            self.populate(&vmas, start, start + len)?;
        }
        Ok(start)
    }

    /// `populate_vma_page_range`: faults in every page, for write if the VMA
    /// is writable.
    fn populate(&self, vmas: &Vmas, start: u64, end: u64) -> Result<()> {
        let m = &self.machine;
        let mut addr = start;
        while addr < end {
            let vma = vmas.find(addr).ok_or(Errno::EFAULT)?;
            if vma.readable() && !self.translates(addr, vma.writable()) {
                crate::fault::handle_mm_fault(m, self, vma, addr, vma.writable())?;
            }
            addr += PAGE_SIZE;
        }
        Ok(())
    }

    /// Whether `addr` has a present translation allowing the access.
    fn translates(&self, addr: u64, write: bool) -> bool {
        leaf_pte(self, addr).is_some_and(|leaf| leaf.hw_present() && (!write || leaf.write()))
    }

    /// `munmap(addr, len)`.
    pub fn munmap(&self, addr: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = range_end(addr, len).map_err(|_| Errno::EINVAL)?;
        let mut vmas = self.write_lock();
        self.do_munmap(&mut vmas, addr, end)
    }

    /// `do_vmi_munmap`: splits the VMAs at the range's edges, removes those
    /// inside, zaps their pages and frees page tables no VMA needs any more.
    fn do_munmap(&self, vmas: &mut Vmas, start: u64, end: u64) -> Result<()> {
        if !vmas.any_in(start, end) {
            return Ok(());
        }
        self.split_vma(vmas, start);
        self.split_vma(vmas, end);
        let starts: Vec<u64> = vmas.overlapping(start, end).map(|v| v.start).collect();
        let removed: Vec<Vma> = starts.iter().filter_map(|s| vmas.0.remove(s)).collect();
        let m = &self.machine;
        let mut tlb = MmuGather::new(m, self, false);
        for v in &removed {
            memory::zap_range(m, self, &mut tlb, v.start, v.end);
        }
        memory::free_pgtables(m, self, vmas, &mut tlb, start, end);
        Ok(())
    }

    /// `split_vma` at `addr` if a VMA straddles it; first splits a huge PMD
    /// that straddles the new boundary (`vma_adjust_trans_huge`).
    fn split_vma(&self, vmas: &mut Vmas, addr: u64) {
        let Some(v) = vmas.find(addr).filter(|v| v.start < addr) else {
            return;
        };
        if !addr.is_multiple_of(PMD_SIZE) {
            huge_memory::split_huge_pmd(&self.machine, self, addr);
        }
        let mut tail = v.clone();
        tail.pgoff += (addr - v.start) / PAGE_SIZE;
        tail.start = addr;
        let start = v.start;
        vmas.0.get_mut(&start).unwrap().end = addr;
        vmas.insert(tail);
    }

    /// `mprotect(addr, len, prot)`. Differs from Linux: a range with a hole
    /// fails with ENOMEM before anything changes (Linux changes the VMAs up
    /// to the hole first).
    pub fn mprotect(&self, addr: u64, len: u64, prot: Prot) -> Result<()> {
        let end = range_end(addr, len)?;
        if addr == end {
            return Ok(());
        }
        let mut vmas = self.write_lock();
        if !vmas.covers(addr, end) {
            return Err(Errno::ENOMEM);
        }
        self.split_vma(&mut vmas, addr);
        self.split_vma(&mut vmas, end);
        let starts: Vec<u64> = vmas.overlapping(addr, end).map(|v| v.start).collect();
        let mut changed = false;
        for s in starts {
            let v = vmas.0.get_mut(&s).unwrap();
            let flags = (v.flags & !vm::PROT_MASK) | (prot.0 & vm::PROT_MASK);
            if flags != v.flags {
                v.flags = flags;
                changed |= memory::change_protection(&self.machine, self, v);
            }
        }
        if changed {
            self.tlb.flush_range(&self.machine.stats, addr, end);
        }
        merge_around(&mut vmas, addr, end);
        Ok(())
    }

    /// `madvise(addr, len, advice)`. As in Linux, a range with holes is
    /// handled where mapped and then fails with ENOMEM.
    pub fn madvise(&self, addr: u64, len: u64, advice: Advice) -> Result<()> {
        let end = range_end(addr, len)?;
        if advice == Advice::DontNeed {
            // MADV_DONTNEED needs only the mmap_lock for read.
            let vmas = self.read_lock();
            let m = &self.machine;
            let mut tlb = MmuGather::new(m, self, false);
            for v in vmas.overlapping(addr, end) {
                memory::zap_range(m, self, &mut tlb, v.start.max(addr), v.end.min(end));
            }
            return if vmas.covers(addr, end) { Ok(()) } else { Err(Errno::ENOMEM) };
        }
        let (set, clear) = match advice {
            Advice::HugePage => (vm::HUGEPAGE, vm::NOHUGEPAGE),
            Advice::NoHugePage => (vm::NOHUGEPAGE, vm::HUGEPAGE),
            Advice::DontFork => (vm::DONTCOPY, 0),
            Advice::DoFork => (0, vm::DONTCOPY),
            Advice::DontNeed => unreachable!(),
        };
        let mut vmas = self.write_lock();
        let covered = vmas.covers(addr, end);
        self.split_vma(&mut vmas, addr);
        self.split_vma(&mut vmas, end);
        let starts: Vec<u64> = vmas.overlapping(addr, end).map(|v| v.start).collect();
        for s in starts {
            let v = vmas.0.get_mut(&s).unwrap();
            v.flags = (v.flags | set) & !clear;
        }
        merge_around(&mut vmas, addr, end);
        if covered {
            Ok(())
        } else {
            Err(Errno::ENOMEM)
        }
    }

    /// `mremap(old, old_len, new_len, flags, new_addr)` for private
    /// anonymous memory: shrink in place, grow in place when the space after
    /// the VMA is free, else move (`MREMAP_MAYMOVE`), or move to `fixed`
    /// (`MREMAP_FIXED`). Page tables move without touching rmap
    /// (`move_page_tables`); a huge PMD moves whole when both addresses are
    /// PMD-aligned, else it is split first.
    pub fn mremap(&self, old: u64, old_len: u64, new_len: u64, maymove: bool, fixed: Option<u64>) -> Result<u64> {
        if !old.is_multiple_of(PAGE_SIZE) || new_len == 0 || old_len == 0 || (fixed.is_some() && !maymove) {
            return Err(Errno::EINVAL);
        }
        let old_len = page_align(old_len)?;
        let new_len = page_align(new_len)?;
        let old_end = range_end(old, old_len)?;
        // check_mremap_params(): the target is validated before any VMA lookup.
        if let Some(new) = fixed {
            let new_end = range_end(new, new_len)?;
            if new < MMAP_MIN_ADDR || (new < old_end && old < new_end) {
                return Err(Errno::EINVAL);
            }
        }
        let mut vmas = self.write_lock();
        let (vma_start, vma_end) = vmas.find(old).map(|v| (v.start, v.end)).ok_or(Errno::EFAULT)?;
        if old_end > vma_end {
            return Err(Errno::EFAULT);
        }
        if let Some(new) = fixed {
            let new_end = new + new_len;
            self.do_munmap(&mut vmas, new, new_end)?;
            let moved_len = old_len.min(new_len);
            self.do_munmap(&mut vmas, old + moved_len, old_end)?;
            self.move_vma(&mut vmas, old, moved_len, new, new_len)?;
            return Ok(new);
        }
        if new_len <= old_len {
            self.do_munmap(&mut vmas, old + new_len, old_end)?;
            return Ok(old);
        }
        let grow_end = old.checked_add(new_len).filter(|&e| e <= TASK_SIZE);
        if let Some(grow_end) = grow_end.filter(|&e| vma_end == old_end && !vmas.any_in(old_end, e)) {
            vmas.0.get_mut(&vma_start).unwrap().end = grow_end;
            merge_around(&mut vmas, old, grow_end);
            return Ok(old);
        }
        if !maymove {
            return Err(Errno::ENOMEM);
        }
        let align = if new_len % PMD_SIZE == 0 { PMD_SIZE } else { PAGE_SIZE };
        let new = get_unmapped_area(&vmas, new_len, align)?;
        self.move_vma(&mut vmas, old, old_len, new, new_len)?;
        Ok(new)
    }

    /// `move_vma`: a new VMA at `new` with the old one's flags, pgoff and
    /// anon_vma; page tables moved; the old range unmapped.
    fn move_vma(&self, vmas: &mut Vmas, old: u64, old_len: u64, new: u64, new_len: u64) -> Result<()> {
        self.split_vma(vmas, old);
        self.split_vma(vmas, old + old_len);
        let src = vmas.0.remove(&old).expect("mremap source VMA");
        memory::move_page_tables(&self.machine, self, old, new, old_len)?;
        let moved = Vma { start: new, end: new + new_len, ..src.clone() };
        vmas.insert(moved);
        let mut tlb = MmuGather::new(&self.machine, self, false);
        memory::free_pgtables(&self.machine, self, vmas, &mut tlb, old, old + old_len);
        drop(tlb);
        merge_around(vmas, new, new + new_len);
        Ok(())
    }

    /// `fork()`'s `dup_mmap`: a child MM with copies of the VMAs (except
    /// `VM_DONTCOPY`) and, for VMAs with an anon_vma, of their page tables
    /// (`copy_page_range`). On failure the half-built child is torn down.
    pub fn fork(&self) -> Result<Arc<Mm>> {
        let m = &self.machine;
        let vmas = self.write_lock();
        let child = Mm::new(m)?;
        let result = (|| {
            let mut cvmas = child.write_lock();
            for v in vmas.iter().filter(|v| v.flags & vm::DONTCOPY == 0) {
                let c = v.clone();
                if v.anon_vma() != 0 {
                    c.anon_vma.store(m.new_anon_vma(), Relaxed);
                    memory::copy_page_range(m, &child, self, v, &c)?;
                }
                cvmas.insert(c);
            }
            Ok(())
        })();
        Stats::inc(&m.stats.fork);
        // dup_mmap(): the parent's PTEs were write-protected; its TLBs must
        // forget the writable translations before anyone writes again.
        if !m.config.debug.skip_fork_flush {
            self.tlb.flush_all(&m.stats);
        }
        drop(vmas);
        match result {
            Ok(()) => Ok(child),
            Err(e) => {
                child.exit();
                Err(e)
            }
        }
    }

    /// `exit_mmap`: unmaps everything and frees all page tables but the PGD.
    pub fn exit(&self) {
        if self.exited.swap(true, AcqRel) {
            return;
        }
        let mut vmas = self.write_lock();
        let all: Vec<Vma> = std::mem::take(&mut vmas.0).into_values().collect();
        let m = &self.machine;
        let mut tlb = MmuGather::new(m, self, true);
        for v in &all {
            memory::zap_range(m, self, &mut tlb, v.start, v.end);
        }
        memory::free_pgtables(m, self, &vmas, &mut tlb, 0, TASK_SIZE);
    }

    /// What `/proc/self/pagemap` and `/proc/kpageflags` say of the page at
    /// `addr`, plus the model's fields; the precision report (when on)
    /// judges its "shared" answers as one observation.
    pub fn page_info(&self, addr: u64) -> PageInfo {
        self.page_state(addr, true)
    }

    fn page_state(&self, addr: u64, judge: bool) -> PageInfo {
        let _vmas = self.read_lock();
        let m = &self.machine;
        let phys = &m.phys;
        let mut info = PageInfo::default();
        let Some(pmd) = walk_pmd(phys, self.pgd, addr) else {
            return info;
        };
        let e = pmd.load(phys);
        let (leaf, pfn) = if e.huge() {
            (e, e.pfn() + pgtable::pte_index(addr) as u64)
        } else if e.is_none() {
            return info;
        } else {
            let p = pgtable::load(phys, e.pfn(), pgtable::pte_index(addr));
            (p, p.pfn())
        };
        if !leaf.present() {
            return info;
        }
        let f = Folio::containing(phys, pfn);
        info.present = true;
        info.pfn = pfn;
        info.pmd_mapped = e.huge();
        info.writable = leaf.write();
        info.zero_page = f.is_zero_page();
        info.folio_order = f.order();
        if !info.zero_page {
            let i = pfn - f.pfn;
            info.anon_exclusive = f.anon_exclusive(if e.huge() { 0 } else { i });
            info.mapcount = rmap::page_mapcount(m, f, i).unwrap_or(0);
            info.folio_mapcount = rmap::folio_mapcount(m, f);
            info.refcount = f.refcount() as u64;
            // pagemap_pmd_range_thp() asks about pmd_page(), the head, for
            // every subpage of a PMD mapping; pte_to_pagemap_entry() about
            // the page itself (__folio_page_mapped_exclusively).
            let judged = if e.huge() { 0 } else { i };
            info.exclusive = rmap::page_mapcount(m, f, judged) == Some(1);
            info.maybe_shared = rmap::folio_maybe_mapped_shared(m, f);
            info.likely_shared = rmap::folio_likely_mapped_shared(m, f, i);
            if judge && f.is_large() {
                crate::precision::judge_answer(m, f, info.maybe_shared);
                crate::precision::judge_guess(m, f, info.likely_shared);
            }
        }
        info
    }

    /// What `/proc/self/smaps` would sum for `[start, end)`.
    pub fn range_info(&self, start: u64, end: u64) -> RangeInfo {
        let mut r = RangeInfo::default();
        let mut addr = start & !(PAGE_SIZE - 1);
        while addr < end {
            let p = self.page_state(addr, false);
            // smaps_pte_entry(): the zero pages have no vm_normal_page and
            // are not counted at all.
            if p.present && !p.zero_page {
                r.rss_kb += 4;
                r.anonymous_kb += 4;
                if p.pmd_mapped {
                    r.anon_huge_kb += 4;
                }
                // Shared/private as pagemap's exclusive bit says, which both
                // backends can tell; smaps counts per page and differs for a
                // PMD-mapped THP whose head alone is shared.
                if !p.exclusive {
                    r.shared_kb += 4;
                } else {
                    r.private_kb += 4;
                }
            }
            addr += PAGE_SIZE;
        }
        r
    }
}

impl Drop for Mm {
    /// `__mmdrop`: frees the PGD and the MM ID after `exit_mmap`.
    fn drop(&mut self) {
        self.exit();
        self.machine.free_table(self.pgd);
        self.machine.free_mm_id(self.id);
    }
}

/// One page as pagemap/kpageflags report it, plus model-only fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PageInfo {
    pub present: bool,
    pub pfn: Pfn,
    pub zero_page: bool,
    pub pmd_mapped: bool,
    pub writable: bool,
    pub folio_order: u32,
    /// `PM_MMAP_EXCLUSIVE`: the precise mapcount is 1 of the page, or of the
    /// head page for every page of a PMD mapping (as Linux 6.18 reports it).
    pub exclusive: bool,
    /// `PageAnonExclusive` (of the head page when PMD-mapped).
    pub anon_exclusive: bool,
    pub mapcount: u64,
    pub folio_mapcount: u64,
    pub refcount: u64,
    pub maybe_shared: bool,
    /// The era's policy guess "mapped shared" (`folio_likely_mapped_shared`).
    pub likely_shared: bool,
}

/// smaps-style sums over a range, in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RangeInfo {
    pub rss_kb: u64,
    pub anonymous_kb: u64,
    pub anon_huge_kb: u64,
    pub shared_kb: u64,
    pub private_kb: u64,
}

/// Top-down search for a free range of `len` bytes aligned to `align`
/// (`unmapped_area_topdown`).
fn get_unmapped_area(vmas: &Vmas, len: u64, align: u64) -> Result<u64> {
    let fit = |lo: u64, hi: u64| -> Option<u64> {
        let a = hi.checked_sub(len)? & !(align - 1);
        (a >= lo.max(MMAP_MIN_ADDR)).then_some(a)
    };
    let mut hi = MMAP_BASE;
    for v in vmas.0.values().rev() {
        if v.end <= hi {
            if let Some(a) = fit(v.end, hi) {
                return Ok(a);
            }
        }
        hi = hi.min(v.start);
    }
    fit(MMAP_MIN_ADDR, hi).ok_or(Errno::ENOMEM)
}

/// `vma_merge`: merges neighbouring compatible VMAs whose shared boundary lies
/// in `[start, end]`.
fn merge_around(vmas: &mut Vmas, start: u64, end: u64) {
    let lo = vmas.0.range(..start).next_back().map(|(s, _)| *s).unwrap_or(start);
    let mut cur = lo;
    loop {
        let Some(next_start) = vmas.0.get(&cur).map(|v| v.end) else {
            match vmas.0.range((Bound::Excluded(cur), Bound::Included(end))).next() {
                Some((s, _)) => {
                    cur = *s;
                    continue;
                }
                None => return,
            }
        };
        if next_start > end {
            return;
        }
        let mergeable = match (vmas.0.get(&cur), vmas.0.get(&next_start)) {
            (Some(a), Some(b)) => a.can_merge_with(b),
            _ => false,
        };
        if mergeable {
            let b = vmas.0.remove(&next_start).unwrap();
            let a = vmas.0.get_mut(&cur).unwrap();
            a.end = b.end;
            if a.anon_vma() == 0 {
                a.anon_vma.store(b.anon_vma(), Relaxed);
            }
        } else if vmas.0.contains_key(&next_start) {
            cur = next_start;
        } else {
            match vmas.0.range((Bound::Excluded(cur), Bound::Included(end))).next() {
                Some((s, _)) => cur = *s,
                None => return,
            }
        }
    }
}

/// The leaf entry of `addr` in `mm` (PTE, or huge PMD), for callers holding
/// the mmap_lock.
fn leaf_pte(mm: &Mm, addr: u64) -> Option<Pte> {
    let phys = &mm.machine.phys;
    let pmd = walk_pmd(phys, mm.pgd, addr)?;
    let e = pmd.load(phys);
    if e.huge() || e.is_none() {
        return (!e.is_none()).then_some(e);
    }
    Some(pgtable::load(phys, e.pfn(), pgtable::pte_index(addr)))
}
