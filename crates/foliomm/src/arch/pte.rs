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
    /// `_PAGE_UFFD_WP` (`_PAGE_BIT_SOFTW2`): userfaultfd write-protects the
    /// page; a write faults to the handler (`pte_uffd_wp`, `pmd_uffd_wp`).
    pub const UFFD_WP: u64 = 1 << 10;
    /// `_PAGE_SOFT_DIRTY` (`_PAGE_BIT_SOFTW3`): written since the last
    /// `clear_refs` of soft-dirty bits. Software sets it with the dirty bit
    /// ([`Pte::MKDIRTY`]); the MMU's own dirty bit never does, which is why
    /// tracking write-protects the entries it clears.
    pub const SOFT_DIRTY: u64 = 1 << 11;
    /// What x86's `pte_mkdirty`/`pmd_mkdirty` set: dirty and soft-dirty.
    pub const MKDIRTY: u64 = Self::DIRTY | Self::SOFT_DIRTY;
    pub const PFN_MASK: u64 = 0x000f_ffff_ffff_f000;
    /// `_PAGE_SWP_EXCLUSIVE` (`_PAGE_PWT`) of a swap entry: the page was
    /// `PageAnonExclusive` when it was unmapped for swap-out.
    pub const SWP_EXCLUSIVE: u64 = 1 << 3;
    /// `_PAGE_SWP_UFFD_WP` (`_PAGE_USER`) of a swap entry: userfaultfd
    /// write-protected the page, and does again when it is swapped in.
    pub const SWP_UFFD_WP: u64 = 1 << 2;
    /// `_PAGE_SWP_SOFT_DIRTY` (`_PAGE_RW`) of a swap entry: the page was
    /// soft-dirty when it was unmapped, and is again when it comes back.
    pub const SWP_SOFT_DIRTY: u64 = 1 << 1;

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
    /// `pte_uffd_wp` of a present entry.
    pub fn uffd_wp(self) -> bool {
        self.present() && self.0 & Self::UFFD_WP != 0
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

/// Bits of a swap entry's type, at the top (x86-64 `SWP_TYPE_BITS`).
const SWP_TYPE_BITS: u32 = 5;
/// The first bit of the offset (`SWP_OFFSET_FIRST_BIT`, above PROTNONE).
const SWP_OFFSET_SHIFT: u32 = 9;
/// The offset's bits (`SWP_OFFSET_BITS`, 50).
const SWP_OFFSET_MASK: u64 = (1 << (64 - SWP_TYPE_BITS - SWP_OFFSET_SHIFT)) - 1;

/// A swap entry (`swp_entry_t`): a device (`type`) and a slot on it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct SwpEntry {
    pub kind: u32,
    pub offset: u64,
}

impl Pte {
    /// The non-present entry of a swapped-out page (`swp_entry_to_pte`,
    /// `pte_swp_mkexclusive`), laid out as x86-64 does it: the type in the
    /// top 5 bits, the offset inverted above PROTNONE (so that the entry
    /// never names a real frame, the L1TF mitigation), PRESENT and PROTNONE
    /// clear. The soft-dirty and uffd-wp bits are set apart
    /// ([`Pte::swp_bits_of`]).
    pub fn swap(e: SwpEntry, exclusive: bool) -> Pte {
        let offset = (!e.offset & SWP_OFFSET_MASK) << SWP_OFFSET_SHIFT;
        let excl = if exclusive { Pte::SWP_EXCLUSIVE } else { 0 };
        Pte(((e.kind as u64) << (64 - SWP_TYPE_BITS)) | offset | excl)
    }

    /// Whether this is a swap entry (`is_swap_pte`: not none, not present).
    pub fn is_swap(self) -> bool {
        !self.is_none() && !self.present()
    }

    /// The swap entry of a swap PTE (`pte_to_swp_entry`).
    pub fn swp_entry(self) -> SwpEntry {
        debug_assert!(self.is_swap());
        let offset = !(self.0 >> SWP_OFFSET_SHIFT) & SWP_OFFSET_MASK;
        SwpEntry { kind: (self.0 >> (64 - SWP_TYPE_BITS)) as u32, offset }
    }

    /// `pte_swp_exclusive`.
    pub fn swp_exclusive(self) -> bool {
        self.0 & Pte::SWP_EXCLUSIVE != 0
    }

    /// `pte_swp_uffd_wp`.
    pub fn swp_uffd_wp(self) -> bool {
        self.is_swap() && self.0 & Pte::SWP_UFFD_WP != 0
    }

    /// Whether userfaultfd write-protects the entry, present or swapped
    /// (`pte_uffd_wp`, `pte_swp_uffd_wp`; pagemap's `PM_UFFD_WP`).
    pub fn any_uffd_wp(self) -> bool {
        self.uffd_wp() || self.swp_uffd_wp()
    }

    /// Whether the entry is soft-dirty, present or swapped (`pte_soft_dirty`,
    /// `pte_swp_soft_dirty`); pagemap's `PM_SOFT_DIRTY` adds the VMA's
    /// `VM_SOFTDIRTY`.
    pub fn any_soft_dirty(self) -> bool {
        match self {
            p if p.present() => p.0 & Pte::SOFT_DIRTY != 0,
            p if p.is_swap() => p.0 & Pte::SWP_SOFT_DIRTY != 0,
            _ => false,
        }
    }

    /// The entry as `clear_soft_dirty` leaves it: a present one
    /// write-protected without its soft-dirty bit (`pte_wrprotect`,
    /// `pte_clear_soft_dirty`), a swapped one without its own
    /// (`pte_swp_clear_soft_dirty`); dirty and accessed stay.
    pub fn clear_soft_dirty(self) -> Pte {
        match self {
            p if p.present() => p.without(Pte::RW | Pte::SOFT_DIRTY),
            p if p.is_swap() => p.without(Pte::SWP_SOFT_DIRTY),
            p => p,
        }
    }

    /// The entry made soft-dirty, present or swapped (`move_soft_dirty_pte`
    /// of mremap: a moved page looks written at its new place).
    pub fn mksoft_dirty(self) -> Pte {
        match self {
            p if p.present() => p.with(Pte::SOFT_DIRTY),
            p if p.is_swap() => p.with(Pte::SWP_SOFT_DIRTY),
            p => p,
        }
    }

    /// The swap-entry bits a present entry's state becomes when its page
    /// is unmapped for swap-out (`pte_swp_mksoft_dirty`,
    /// `pte_swp_mkuffd_wp` in `try_to_unmap_one`).
    pub fn swp_bits_of(self) -> u64 {
        let sd = if self.0 & Pte::SOFT_DIRTY != 0 { Pte::SWP_SOFT_DIRTY } else { 0 };
        sd | if self.uffd_wp() { Pte::SWP_UFFD_WP } else { 0 }
    }

    /// The entry without its uffd-wp bit, present or swapped
    /// (`pte_clear_uffd_wp`, `pte_swp_clear_uffd_wp`).
    pub fn clear_uffd_wp(self) -> Pte {
        match self {
            p if p.present() => p.without(Pte::UFFD_WP),
            p if p.is_swap() => p.without(Pte::SWP_UFFD_WP),
            p => p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_entry_round_trips_and_is_never_present() {
        for (kind, offset) in [(0, 1), (0, 2), (3, 0x1234_5678), (31, SWP_OFFSET_MASK)] {
            for excl in [false, true] {
                let e = SwpEntry { kind, offset };
                let pte = Pte::swap(e, excl);
                assert!(pte.is_swap() && !pte.present() && !pte.hw_present(), "{pte:?}");
                assert_eq!((pte.swp_entry(), pte.swp_exclusive()), (e, excl));
            }
        }
        assert!(!Pte::NONE.is_swap() && !Pte::new(5, Pte::PROTNONE).is_swap());
    }
}
