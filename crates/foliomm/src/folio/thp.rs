//! Transparent huge page policy, as `/sys/kernel/mm/transparent_hugepage/`
//! presents it: a top-level `enabled` mode and a mode per folio size, with the
//! per-VMA `MADV_HUGEPAGE` / `MADV_NOHUGEPAGE` flags. Models
//! `thp_vma_allowable_orders()` for anonymous VMAs (mm/huge_memory.c,
//! include/linux/huge_mm.h) without prctl or hardware cases, and
//! the shmem settings that [`shmem_policy`] applies.
#![warn(missing_docs)]

pub mod khugepaged;
pub mod shmem_policy;

use crate::arch::{MAX_PAGE_ORDER, PMD_ORDER};
use crate::sync::atomic::{AtomicU8, Ordering::Relaxed};
use crate::Errno;

/// A THP mode (`always`, `madvise`, `never`, and per size also `inherit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ThpMode {
    /// Faults may use the size (top level: the `inherit` sizes) in any VMA
    /// not marked `MADV_NOHUGEPAGE`.
    Always = 0,
    /// As `Always`, but only in `MADV_HUGEPAGE` (`VM_HUGEPAGE`) VMAs.
    Madvise = 1,
    /// Anonymous faults never use the size (top level: the `inherit` sizes).
    Never = 2,
    /// Per size only: follow the top-level `enabled` mode.
    Inherit = 3,
}

impl ThpMode {
    /// The mode with sysfs name `s`, or `None` for an unknown name.
    pub fn parse(s: &str) -> Option<ThpMode> {
        Some(match s {
            "always" => ThpMode::Always,
            "madvise" => ThpMode::Madvise,
            "never" => ThpMode::Never,
            "inherit" => ThpMode::Inherit,
            _ => return None,
        })
    }
    /// The mode's sysfs name, as `parse` reads it.
    pub fn name(self) -> &'static str {
        ["always", "madvise", "never", "inherit"][self as usize]
    }
    fn from_u8(v: u8) -> ThpMode {
        [ThpMode::Always, ThpMode::Madvise, ThpMode::Never, ThpMode::Inherit][v as usize]
    }
}

/// A sysfs mode enum: its variants in order with their sysfs names, `ALL`,
/// `parse` and `name`.
macro_rules! sysfs_modes {
    ($(#[$doc:meta])* $t:ident { $($(#[$vdoc:meta])* $v:ident = $n:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $t {
            $($(#[$vdoc])* $v,)*
        }

        impl $t {
            const ALL: &'static [$t] = &[$($t::$v),*];

            /// The mode with sysfs name `s`, or `None` for an unknown name.
            pub fn parse(s: &str) -> Option<$t> {
                Self::ALL.iter().copied().find(|m| m.name() == s)
            }
            /// The mode's sysfs name, as `parse` reads it.
            pub fn name(self) -> &'static str {
                match self {
                    $($t::$v => $n,)*
                }
            }
        }
    };
}

sysfs_modes! {
    /// The top-level shmem mode (`transparent_hugepage/shmem_enabled`), also
    /// a tmpfs superblock's `huge=` setting (`SHMEM_HUGE_*`).
    ShmemHuge {
        /// Huge folios whenever possible: any file order for a write, the
        /// PMD size for a fault.
        Always = "always",
        /// Only a block that ends within the file size (or the write);
        /// else as `advise`.
        WithinSize = "within_size",
        /// Only for a fault in a `MADV_HUGEPAGE` VMA.
        Advise = "advise",
        /// No huge folios.
        Never = "never",
        /// sysfs only: no huge folios on any shmem mount, whatever its setting.
        Deny = "deny",
        /// sysfs only: the PMD size on every shmem mount, whatever its setting.
        Force = "force",
    }
}

sysfs_modes! {
    /// A per-size shmem mode (`hugepages-<N>kB/shmem_enabled`), for faults
    /// in anonymous shmem VMAs.
    ShmemMode {
        /// The size may be used in any VMA not marked `MADV_NOHUGEPAGE`.
        Always = "always",
        /// Only if the aligned block of that size ends within the file.
        WithinSize = "within_size",
        /// Only in a `MADV_HUGEPAGE` VMA.
        Advise = "advise",
        /// The size is not used.
        Never = "never",
        /// Follow the top-level `shmem_enabled` (the PMD size's default).
        Inherit = "inherit",
    }
}

/// Orders a shmem file may use: 1..=PMD_ORDER (`THP_ORDERS_ALL_FILE_DEFAULT`).
pub fn file_orders() -> impl DoubleEndedIterator<Item = u32> {
    1..=PMD_ORDER
}

/// Orders that anonymous memory may use: 2..=PMD_ORDER (`THP_ORDERS_ALL_ANON`).
pub fn anon_orders() -> impl DoubleEndedIterator<Item = u32> {
    2..=PMD_ORDER
}

/// The THP sysfs settings of one machine; readable and changeable at any time.
pub struct ThpSettings {
    enabled: AtomicU8,
    per_order: [AtomicU8; MAX_PAGE_ORDER as usize + 1],
    shmem: AtomicU8,
    shmem_order: [AtomicU8; MAX_PAGE_ORDER as usize + 1],
    /// khugepaged's tunables (`transparent_hugepage/khugepaged/`).
    pub khugepaged: khugepaged::KhugepagedSettings,
}

impl Default for ThpSettings {
    /// Linux's defaults on this host: `enabled=madvise`, the PMD size
    /// `inherit`, every other size `never`.
    fn default() -> Self {
        let s = ThpSettings {
            enabled: AtomicU8::new(ThpMode::Madvise as u8),
            per_order: Default::default(),
            shmem: AtomicU8::new(ShmemHuge::Never as u8),
            shmem_order: Default::default(),
            khugepaged: Default::default(),
        };
        for o in 0..=MAX_PAGE_ORDER {
            let m = if o == PMD_ORDER { ThpMode::Inherit } else { ThpMode::Never };
            s.per_order[o as usize].store(m as u8, Relaxed);
            let m = if o == PMD_ORDER { ShmemMode::Inherit } else { ShmemMode::Never };
            s.shmem_order[o as usize].store(m as u8, Relaxed);
        }
        s
    }
}

impl ThpSettings {
    /// The top-level anonymous mode (`transparent_hugepage/enabled`).
    pub fn enabled(&self) -> ThpMode {
        ThpMode::from_u8(self.enabled.load(Relaxed))
    }

    /// Sets the top-level mode; `inherit` is not valid there.
    pub fn set_enabled(&self, mode: ThpMode) -> Result<(), Errno> {
        if mode == ThpMode::Inherit {
            return Err(Errno::EINVAL);
        }
        self.enabled.store(mode as u8, Relaxed);
        Ok(())
    }

    /// The mode of anonymous folio order `order` (`hugepages-<N>kB/enabled`).
    pub fn order_mode(&self, order: u32) -> ThpMode {
        ThpMode::from_u8(self.per_order[order as usize].load(Relaxed))
    }

    /// Sets the mode of one anonymous folio order (`hugepages-<N>kB/enabled`).
    pub fn set_order(&self, order: u32, mode: ThpMode) -> Result<(), Errno> {
        if !anon_orders().any(|o| o == order) {
            return Err(Errno::EINVAL);
        }
        self.per_order[order as usize].store(mode as u8, Relaxed);
        Ok(())
    }

    /// The top-level shmem mode (`transparent_hugepage/shmem_enabled`).
    pub fn shmem_enabled(&self) -> ShmemHuge {
        ShmemHuge::ALL[self.shmem.load(Relaxed) as usize]
    }

    /// Sets `shmem_enabled`.
    pub fn set_shmem_enabled(&self, mode: ShmemHuge) {
        self.shmem.store(mode as u8, Relaxed);
    }

    /// The shmem mode of folio order `order` (`hugepages-<N>kB/shmem_enabled`).
    pub fn shmem_order_mode(&self, order: u32) -> ShmemMode {
        ShmemMode::ALL[self.shmem_order[order as usize].load(Relaxed) as usize]
    }

    /// Sets the shmem mode of one folio order (`hugepages-<N>kB/shmem_enabled`).
    pub fn set_shmem_order(&self, order: u32, mode: ShmemMode) -> Result<(), Errno> {
        if !file_orders().any(|o| o == order) {
            return Err(Errno::EINVAL);
        }
        self.shmem_order[order as usize].store(mode as u8, Relaxed);
        Ok(())
    }

    /// Bitmask of orders a fault in a VMA may use, before the range checks
    /// (`thp_vma_allowable_orders` with `TVA_PAGEFAULT` for an anonymous VMA).
    pub fn allowable_orders(&self, vma_hugepage: bool, vma_nohugepage: bool) -> u32 {
        if vma_nohugepage {
            return 0;
        }
        let top = self.enabled();
        let mut mask = 0;
        for o in anon_orders() {
            let allowed = match self.order_mode(o) {
                ThpMode::Always => true,
                ThpMode::Madvise => vma_hugepage,
                ThpMode::Inherit => top == ThpMode::Always || (vma_hugepage && top == ThpMode::Madvise),
                ThpMode::Never => false,
            };
            if allowed {
                mask |= 1 << o;
            }
        }
        mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_allow_pmd_only_with_madvise() {
        let s = ThpSettings::default();
        assert_eq!(s.allowable_orders(false, false), 0);
        assert_eq!(s.allowable_orders(true, false), 1 << PMD_ORDER);
        assert_eq!(s.allowable_orders(true, true), 0);
        s.set_order(4, ThpMode::Always).unwrap();
        assert_eq!(s.allowable_orders(false, false), 1 << 4);
        assert_eq!(s.set_order(1, ThpMode::Always), Err(Errno::EINVAL));
        assert_eq!(s.set_enabled(ThpMode::Inherit), Err(Errno::EINVAL));
    }
}
