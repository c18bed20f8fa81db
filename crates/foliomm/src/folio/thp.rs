//! Transparent huge page policy, as `/sys/kernel/mm/transparent_hugepage/`
//! presents it: a top-level `enabled` mode and a mode per folio size, with the
//! per-VMA `MADV_HUGEPAGE` / `MADV_NOHUGEPAGE` flags. Models
//! `thp_vma_allowable_orders()` for anonymous VMAs (mm/huge_memory.c,
//! include/linux/huge_mm.h) without prctl or hardware cases, and
//! the shmem settings that [`shmem_policy`] applies.

pub mod shmem_policy;

use crate::arch::{MAX_PAGE_ORDER, PMD_ORDER};
use crate::sync::atomic::{AtomicU8, Ordering::Relaxed};
use crate::Errno;

/// A THP mode (`always`, `madvise`, `never`, and per size also `inherit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ThpMode {
    Always = 0,
    Madvise = 1,
    Never = 2,
    Inherit = 3,
}

impl ThpMode {
    pub fn parse(s: &str) -> Option<ThpMode> {
        Some(match s {
            "always" => ThpMode::Always,
            "madvise" => ThpMode::Madvise,
            "never" => ThpMode::Never,
            "inherit" => ThpMode::Inherit,
            _ => return None,
        })
    }
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
    ($(#[$doc:meta])* $t:ident { $($v:ident = $n:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub enum $t {
            $($v,)*
        }

        impl $t {
            const ALL: &'static [$t] = &[$($t::$v),*];

            pub fn parse(s: &str) -> Option<$t> {
                Self::ALL.iter().copied().find(|m| m.name() == s)
            }
            pub fn name(self) -> &'static str {
                match self {
                    $($t::$v => $n,)*
                }
            }
        }
    };
}

sysfs_modes! {
    /// The top-level shmem mode (`transparent_hugepage/shmem_enabled`).
    ShmemHuge { Always = "always", WithinSize = "within_size", Advise = "advise", Never = "never", Deny = "deny", Force = "force" }
}

sysfs_modes! {
    /// A per-size shmem mode (`hugepages-<N>kB/shmem_enabled`).
    ShmemMode { Always = "always", WithinSize = "within_size", Advise = "advise", Never = "never", Inherit = "inherit" }
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

    pub fn shmem_enabled(&self) -> ShmemHuge {
        ShmemHuge::ALL[self.shmem.load(Relaxed) as usize]
    }

    /// Sets `shmem_enabled`.
    pub fn set_shmem_enabled(&self, mode: ShmemHuge) {
        self.shmem.store(mode as u8, Relaxed);
    }

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
