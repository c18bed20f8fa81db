//! The page-table entry format of arch/x86/include/asm/pgtable_types.h, the
//! same at every level (`pte_t`, `pmd_t`, ...), with the bits foliomm uses.

use super::{Pfn, PAGE_SHIFT};

/// A page-table entry at any level (`pte_t`, `pmd_t`, ...).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Pte(pub u64);

impl Pte {
    pub const PRESENT: u64 = 1 << 0;
    pub const RW: u64 = 1 << 1;
    pub const USER: u64 = 1 << 2;
    pub const ACCESSED: u64 = 1 << 5;
    pub const DIRTY: u64 = 1 << 6;
    /// `_PAGE_PSE`: a huge leaf at PMD level.
    pub const PSE: u64 = 1 << 7;
    /// `_PAGE_PROTNONE` (reuses the global bit while PRESENT is clear).
    pub const PROTNONE: u64 = 1 << 8;
    /// `_PAGE_SPECIAL`: no struct page semantics (the zero pages).
    pub const SPECIAL: u64 = 1 << 9;
    pub const PFN_MASK: u64 = 0x000f_ffff_ffff_f000;

    pub const NONE: Pte = Pte(0);

    pub fn new(pfn: Pfn, flags: u64) -> Pte {
        Pte((pfn << PAGE_SHIFT) | flags)
    }
    pub fn pfn(self) -> Pfn {
        (self.0 & Self::PFN_MASK) >> PAGE_SHIFT
    }
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
    /// `pte_present`: mapped, possibly PROT_NONE.
    pub fn present(self) -> bool {
        self.0 & (Self::PRESENT | Self::PROTNONE) != 0
    }
    /// Whether the MMU may use the entry (PRESENT bit set).
    pub fn hw_present(self) -> bool {
        self.0 & Self::PRESENT != 0
    }
    pub fn write(self) -> bool {
        self.0 & Self::RW != 0
    }
    pub fn dirty(self) -> bool {
        self.0 & Self::DIRTY != 0
    }
    pub fn huge(self) -> bool {
        self.0 & Self::PSE != 0
    }
    pub fn special(self) -> bool {
        self.0 & Self::SPECIAL != 0
    }
    pub fn with(self, bits: u64) -> Pte {
        Pte(self.0 | bits)
    }
    pub fn without(self, bits: u64) -> Pte {
        Pte(self.0 & !bits)
    }
    /// The entry for the next page (`pte_advance_pfn` by one).
    pub fn next_pfn(self, n: u64) -> Pte {
        Pte(self.0 + (n << PAGE_SHIFT))
    }

    /// `pte_modify` as `change_protection` applies it: PRESENT if `readable`
    /// (else PROTNONE, which keeps the entry present to the kernel but not to
    /// the MMU), RW only if `writable`; every other bit kept.
    pub fn modify_prot(self, readable: bool, writable: bool) -> Pte {
        let base = self.without(Pte::PRESENT | Pte::PROTNONE | Pte::RW);
        let base = base.with(if readable { Pte::PRESENT } else { Pte::PROTNONE });
        if writable {
            base.with(Pte::RW)
        } else {
            base
        }
    }
}
