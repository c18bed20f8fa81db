//! Seed 003's compound lock (`lock_compound_mapcounts`, 6.2-rc mm-unstable):
//! the bit spinlock on `PG_locked` of a large folio's first tail page that
//! serialises every update of its `_mapcount`s, `compound_mapcount` and
//! `subpages_mapcount`, and the two other ways the thread weighed: none (the
//! series' racy predecessor) and a sleeping lock (the PREEMPT_RT question).
#![warn(missing_docs)]

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
