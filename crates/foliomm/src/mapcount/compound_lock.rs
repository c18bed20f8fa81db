//! Seed 003's compound lock (`lock_compound_mapcounts`, 6.2-rc mm-unstable):
//! the bit spinlock on `PG_locked` of a large folio's first tail page that
//! serialises every update of its `_mapcount`s, `compound_mapcount` and
//! `subpages_mapcount`, and the two other ways the thread weighed: none (the
//! series' racy predecessor) and a sleeping lock (the PREEMPT_RT question).
#![warn(missing_docs)]

use super::eras::{PageMapcounts, DESIGNS};
use super::fields::field;
use super::{Design, MapcountDesign};
use crate::folio::Folio;
use crate::sync::cacheline::Structure;
use crate::sync::BitSpinLock;

named_enum! {
    /// How the `compound-locked` design serialises its updates (`set
    /// compound_lock NAME`, `--compound-lock NAME`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
    CompoundLock {
    /// The seed: `bit_spin_lock(PG_locked, page[1])` around each update.
    #[default]
    BitSpinlock = "bit-spinlock",
    /// A lock whose waiters sleep, as `folio_lock` does: the seed's answer
    /// to PREEMPT_RT ("it can be turned into a sleeping lock").
    Sleeping = "sleeping",
    /// No lock: the atomics of the series before the seed, whose decisions
    /// ("first PTE of a page not PMD-mapped", "last PMD: how many pages do
    /// PTEs still map") read one counter after changing another, so that
    /// concurrent PTE and PMD updates can both count, or both skip, the same
    /// page in `NR_ANON_MAPPED` / `NR_FILE_MAPPED`. Broken; kept to show the
    /// race the seed fixed.
    Unlocked = "unlocked",
    }
}

/// `compound-locked` with each way of locking, in [`CompoundLock::ALL`] order.
static VARIANTS: [PageMapcounts; 3] = {
    let base = DESIGNS[Design::CompoundLocked as usize];
    let mut out = [base; 3];
    out[1].f.compound_lock = Some(CompoundLock::Sleeping);
    out[2].f.compound_lock = Some(CompoundLock::Unlocked);
    out
};

impl CompoundLock {
    /// The way called `name`.
    pub fn parse(name: &str) -> Option<CompoundLock> {
        CompoundLock::ALL.iter().copied().find(|l| l.name() == name)
    }

    /// Every name, for error messages.
    pub fn names() -> String {
        CompoundLock::ALL.iter().map(|l| l.name()).collect::<Vec<_>>().join(", ")
    }

    /// The `compound-locked` design taking its lock this way.
    pub fn design(self) -> &'static dyn MapcountDesign {
        &VARIANTS[self as usize]
    }
}

impl PageMapcounts {
    /// Takes the compound lock around an update, for the design that has
    /// one (`lock_compound_mapcounts`); `None` for the others and for the
    /// unlocked variant.
    pub(super) fn lock<'a>(&self, f: Folio<'a>) -> Option<BitSpinLock<'a>> {
        let word = &f.page(1).flags;
        match self.f.compound_lock? {
            CompoundLock::BitSpinlock => Some(BitSpinLock::lock(Structure::Folio, word, field::COMPOUND_LOCK_BIT)),
            CompoundLock::Sleeping => {
                Some(BitSpinLock::lock_sleeping(Structure::Folio, word, field::COMPOUND_LOCK_BIT))
            }
            CompoundLock::Unlocked => None,
        }
    }

    /// Whether the design is seed 003's era: `subpages_mapcount` beside
    /// the compound mapcount, however it locks.
    pub(super) fn seed_003(&self) -> bool {
        self.f.compound_lock.is_some()
    }

    /// Whether every update takes a lock (for the cost counters).
    pub(super) fn takes_compound_lock(&self) -> bool {
        self.f.compound_lock.is_some_and(|l| l != CompoundLock::Unlocked)
    }
}
