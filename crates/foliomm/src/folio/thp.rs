//! Transparent huge page policy, as `/sys/kernel/mm/transparent_hugepage/`
//! presents it: a top-level `enabled` mode and a mode per folio size, with the
//! per-VMA `MADV_HUGEPAGE` / `MADV_NOHUGEPAGE` flags. Models
//! `thp_vma_allowable_orders()` for anonymous VMAs (mm/huge_memory.c,
//! include/linux/huge_mm.h) without prctl, hardware or file-backed cases.

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

/// Orders that anonymous memory may use: 2..=PMD_ORDER (`THP_ORDERS_ALL_ANON`).
pub fn anon_orders() -> impl DoubleEndedIterator<Item = u32> {
    2..=PMD_ORDER
}

/// The THP sysfs settings of one machine; readable and changeable at any time.
pub struct ThpSettings {
    enabled: AtomicU8,
    per_order: [AtomicU8; MAX_PAGE_ORDER as usize + 1],
}

impl Default for ThpSettings {
    /// Linux's defaults on this host: `enabled=madvise`, the PMD size
    /// `inherit`, every other size `never`.
    fn default() -> Self {
        let s = ThpSettings { enabled: AtomicU8::new(ThpMode::Madvise as u8), per_order: Default::default() };
        for o in 0..=MAX_PAGE_ORDER {
            let m = if o == PMD_ORDER { ThpMode::Inherit } else { ThpMode::Never };
            s.per_order[o as usize].store(m as u8, Relaxed);
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
