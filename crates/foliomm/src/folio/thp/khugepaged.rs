//! khugepaged's tunables (`/sys/kernel/mm/transparent_hugepage/khugepaged/`,
//! mm/khugepaged.c `khugepaged_max_ptes_none` and friends): how many none,
//! swapped-out and shared PTEs a PMD range may hold and still be collapsed,
//! and how many pages one wake-up scans.

use crate::arch::PMD_ORDER;
use crate::sync::atomic::{AtomicU32, Ordering::Relaxed};
use crate::Errno;

/// PTEs in a PMD range (`HPAGE_PMD_NR`).
const HPAGE_PMD_NR: u32 = 1 << PMD_ORDER;

/// One of khugepaged's tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum KhugepagedKnob {
    /// `max_ptes_none`: none or zero-page PTEs allowed (default 511).
    MaxPtesNone,
    /// `max_ptes_swap`: swap PTEs allowed, swapped in first (default 64).
    MaxPtesSwap,
    /// `max_ptes_shared`: PTEs of folios (maybe) mapped shared allowed
    /// (default 256).
    MaxPtesShared,
    /// `pages_to_scan`: pages one wake-up scans (default 4096).
    PagesToScan,
}

impl KhugepagedKnob {
    /// Every knob, in sysfs order.
    pub const ALL: [KhugepagedKnob; 4] = [Self::MaxPtesNone, Self::MaxPtesSwap, Self::MaxPtesShared, Self::PagesToScan];

    /// The sysfs file's name.
    pub fn name(self) -> &'static str {
        ["max_ptes_none", "max_ptes_swap", "max_ptes_shared", "pages_to_scan"][self as usize]
    }

    /// The knob of that sysfs name.
    pub fn parse(s: &str) -> Option<KhugepagedKnob> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether the store accepts `v`: at most 511 for the `max_ptes_*`
    /// (`max_ptes_none_store`...), at least 1 for `pages_to_scan`.
    pub fn valid(self, v: u32) -> bool {
        match self {
            Self::PagesToScan => v > 0,
            _ => v < HPAGE_PMD_NR,
        }
    }
}

/// khugepaged's tunables of one machine, changeable at any time.
pub struct KhugepagedSettings {
    values: [AtomicU32; 4],
}

impl Default for KhugepagedSettings {
    /// Linux's defaults (`khugepaged_init`): 511, 64, 256 and 4096.
    fn default() -> Self {
        let d = [HPAGE_PMD_NR - 1, HPAGE_PMD_NR / 8, HPAGE_PMD_NR / 2, HPAGE_PMD_NR * 8];
        KhugepagedSettings { values: d.map(AtomicU32::new) }
    }
}

impl KhugepagedSettings {
    /// The knob's value.
    pub fn get(&self, knob: KhugepagedKnob) -> u32 {
        self.values[knob as usize].load(Relaxed)
    }

    /// Sets the knob; EINVAL for a value its sysfs store refuses.
    pub fn set(&self, knob: KhugepagedKnob, v: u32) -> Result<(), Errno> {
        if !knob.valid(v) {
            return Err(Errno::EINVAL);
        }
        self.values[knob as usize].store(v, Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_limits_are_linuxs() {
        let s = KhugepagedSettings::default();
        assert_eq!(KhugepagedKnob::ALL.map(|k| s.get(k)), [511, 64, 256, 4096]);
        assert_eq!(s.set(KhugepagedKnob::MaxPtesShared, 512), Err(Errno::EINVAL));
        assert_eq!(s.set(KhugepagedKnob::PagesToScan, 0), Err(Errno::EINVAL));
        s.set(KhugepagedKnob::MaxPtesNone, 0).unwrap();
        assert_eq!(s.get(KhugepagedKnob::MaxPtesNone), 0);
        assert_eq!(KhugepagedKnob::parse("max_ptes_swap"), Some(KhugepagedKnob::MaxPtesSwap));
    }
}
