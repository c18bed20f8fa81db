//! A virtual memory area (`struct vm_area_struct`, include/linux/mm_types.h)
//! and its flags.
//!
//! Each VMA is allocated on its own and shared (`Arc`): the VMA tree holds
//! one reference, and a fault holds another while it works, so a VMA outlives
//! its removal from the tree for as long as someone still looks at it (what
//! Linux gets from RCU-freed VMAs). Its bounds and flags are atomics changed
//! in place by writers holding the mmap_lock for write (`vma_set_range`,
//! `vm_flags_reset`), as Linux changes them with the VMA write-locked; readers
//! hold the mmap_lock (or, with the coming per-VMA locks, the VMA's lock).

use crate::arch::PAGE_SIZE;
use crate::rmap::AnonVmaSlot;
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use crate::sync::Arc;

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

/// A virtual memory area.
#[derive(Debug)]
pub struct Vma {
    start: AtomicU64,
    end: AtomicU64,
    flags: AtomicU32,
    /// `vm_pgoff`: for anonymous memory the page index of the original start.
    pgoff: AtomicU64,
    pub anon_vma: AnonVmaSlot,
}

impl Vma {
    /// A new VMA (`vm_area_alloc` + `vma_set_range`).
    pub fn new(start: u64, end: u64, flags: u32, pgoff: u64, anon_vma: u64) -> Arc<Vma> {
        Arc::new(Vma {
            start: AtomicU64::new(start),
            end: AtomicU64::new(end),
            flags: AtomicU32::new(flags),
            pgoff: AtomicU64::new(pgoff),
            anon_vma: AnonVmaSlot::new(anon_vma),
        })
    }

    /// A copy with the same range, flags, pgoff and anon_vma (`vm_area_dup`).
    pub fn dup(&self) -> Arc<Vma> {
        Vma::new(self.start(), self.end(), self.flags(), self.pgoff(), self.anon_vma())
    }

    pub fn start(&self) -> u64 {
        self.start.load(Relaxed)
    }
    pub fn end(&self) -> u64 {
        self.end.load(Relaxed)
    }
    pub fn flags(&self) -> u32 {
        self.flags.load(Relaxed)
    }
    pub fn pgoff(&self) -> u64 {
        self.pgoff.load(Relaxed)
    }
    pub fn anon_vma(&self) -> u64 {
        self.anon_vma.get()
    }
    pub fn readable(&self) -> bool {
        self.flags() & (vm::READ | vm::WRITE) != 0
    }
    pub fn writable(&self) -> bool {
        self.flags() & vm::WRITE != 0
    }
    pub fn contains(&self, addr: u64) -> bool {
        self.start() <= addr && addr < self.end()
    }

    /// `vma_set_range`: new bounds and pgoff; the caller holds the mmap_lock
    /// for write and keeps the tree's key (the start) in step.
    pub fn set_range(&self, start: u64, end: u64, pgoff: u64) {
        self.start.store(start, Relaxed);
        self.end.store(end, Relaxed);
        self.pgoff.store(pgoff, Relaxed);
    }

    /// `vm_flags_reset`; the caller holds the mmap_lock for write.
    pub fn set_flags(&self, flags: u32) {
        self.flags.store(flags, Relaxed);
    }

    /// `is_mergeable_vma` + `is_mergeable_anon_vma` for `self` followed by `next`.
    pub fn can_merge_with(&self, next: &Vma) -> bool {
        let (a, b) = (self.anon_vma(), next.anon_vma());
        self.end() == next.start()
            && self.flags() == next.flags()
            && self.pgoff() + (self.end() - self.start()) / PAGE_SIZE == next.pgoff()
            && (a == 0 || b == 0 || a == b)
    }
}
