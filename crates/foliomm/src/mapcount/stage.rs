//! Seed 000's code stages: the points in the RFC series its benchmark
//! tables measured, as a setting of the rmap-ID designs.
#![warn(missing_docs)]

use super::Design;
use crate::sync::SeqEntry;

named_enum! {
    /// How far into seed 000's series the rmap-ID designs go (`set
    /// rmap_id_stage NAME`, `--rmap-id-stage NAME`); each stage includes
    /// the ones before it, but `all-shared`, which is `all` without the
    /// exclusive entry, `all-32bit`, `all` with 32-bit sums, and
    /// `all-auto`, `all` switching the exclusive entry off at run time
    /// where atomics are cheap, `all-locked`, `all` under a bit spinlock and
    /// an ordinary seqcount, `all-skip-zero`, `all` leaving out the update
    /// of a sum whose sub-ID is 0, `all-give-up`, `all` giving a
    /// contended folio up for "always mapped shared", `all-anon`, `all`
    /// tracking anon folios only, `all-skip-entire`, `all` leaving PMD
    /// mappings out of the sums, `all-pmd`, `all` tracking PMD-sized
    /// folios only, `all-packed`, `all` with two sums to a cache line,
    /// `all-merged`, `all` with the mapcount in the seqcount's word,
    /// `all-wide`, `all` updating two sums with one 128-bit atomic, and
    /// `all-percpu`, `all` reading the sub-IDs from a per-CPU copy. Only
    /// `rmap-id` and `rmap-id-powersum` read it.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
    RmapIdStage {
    /// After patch 3: a total mapcount and `folio_mapped_shared()` (a
    /// guess: more mappings than pages, or the first page mapped twice),
    /// no rmap IDs, always copy on COW; the large-mapcount design on the
    /// seed's v6.7, whose PMD split adds its rmap page by page.
    Mapcount = "mapcount",
    /// After patch 10: rmap-ID tracking and COW reuse. 4, 5 or 6 rmap
    /// values by folio order from lookup tables; every writer enters the
    /// seqcount shared and updates with atomic RMWs; a PMD split adds its
    /// 512 PTE mappings page by page.
    RmapId = "rmap-id",
    /// After patch 11: 1, 2 or 3 values for orders up to 9, from the
    /// sub-IDs each MM computed once ([`super::RmapMm`]).
    OneTwoThree = "123",
    /// After patch 14: a PMD split adds its PTE mappings in one batch
    /// (`__split_huge_pmd_locked`).
    Batch = "batch",
    /// After patch 17: a writer alone in the seqcount enters exclusively by
    /// a compare-exchange and updates the mapcount and values with plain
    /// stores.
    Exclusive = "exclusive",
    /// After patch 18: the exclusive entry is an add-return that backs off
    /// to a shared one when it finds another writer.
    NoCmpxchg = "nocmpxchg",
    /// After patch 20 (the default): the per-page `_mapcount`, the entire
    /// mapcount and `_nr_pages_mapped` are updated under the seqcount too,
    /// with plain stores when exclusive.
    #[default]
    All = "all",
    /// `all` without patch 17's exclusive entry: every writer enters the
    /// seqcount shared and updates with atomic RMWs, the per-page counts
    /// still under it, so no writer ever spins on another (the seed's answer
    /// for PREEMPT_RT: "If we disable the 'exclusive' path for the atomic
    /// seqcount, we wouldn't have to spin on the writer's side").
    AllShared = "all-shared",
    /// `all` with the seed's option for 32-bit architectures ("We would
    /// only want to use 32bit atomics. With 64k rmap IDs we could support
    /// order-15 folios with a maximum of 8x 32bit rmap values"): 64K MM
    /// IDs and the sub-ID construction of 32-bit sums
    /// ([`super::construction::Construction::SeedSubIds32`]), for both
    /// rmap-ID designs.
    All32 = "all-32bit",
    /// `all` with the exclusive entry switched off at run time on a CPU
    /// whose atomic RMWs cost no more than plain stores, the seed's advice
    /// for AMD EPYC ("disable that optimization at runtime when we detect
    /// CPUs that can handle atomic RMW operations that efficiently"). On
    /// simulated CPUs the profile tells ([`crate::sync::sim::atomics_are_cheap`]);
    /// elsewhere foliomm does not know the CPU, and the entry stays on.
    AllAuto = "all-auto",
    /// `all` with the alternative the seed's Q/A weighs and rejects ("a bit
    /// spinlock + ordinary seqcount instead of the atomic seqcount ... the
    /// performance hit during the vm-scalability benchmarks is much more
    /// extreme"): every writer takes the bit spinlock and updates with
    /// plain stores; concurrent writers of one folio wait in turn.
    AllLocked = "all-locked",
    /// `all` with one of the seed's ideas: "If a sub-ID is 0, we could just
    /// optimize out the atomic RMW operation. This would primarily help for
    /// smallish rmap IDs." The sums of a zero sub-ID are neither read nor
    /// written by an update (the cost's cache lines still count their
    /// lines).
    AllSkipZero = "all-skip-zero",
    /// `all` with another of the seed's ideas: "Once we detect heavy
    /// contention -- many concurrent writers -- we could stop the rmap ID
    /// tracking and mark the folio as 'always assumed mapped shared'." A
    /// writer that enters the seqcount shared after waiting for or racing
    /// another marks the folio; from then on no writer updates its sums,
    /// every reader answers "maybe shared" when it has more than one
    /// mapping, and COW never reuses it.
    AllGiveUp = "all-give-up",
    /// `all` with the seed's idea of tracking "only selected folios (e.g.,
    /// anon)": a file folio (shmem, page cache) keeps only its large
    /// mapcount, updated with one atomic outside the seqcount as 6.10's
    /// large-mapcount design does, and is "always assumed mapped shared"
    /// once mapped more than once (the seed's other idea for executables
    /// and shared libraries).
    AllAnon = "all-anon",
    /// `all` with the seed's idea "We could not do the rmap ID tracking for
    /// 'entire mappings' and never look at the rmap ID values once we have
    /// any 'entire' mapping": a PMD map or unmap changes the large and
    /// entire mapcounts but no sum, and while a PMD maps the folio readers
    /// answer "maybe shared" for more than one mapping (a single mapping is
    /// its mapper's, and COW reuses it).
    AllSkipEntire = "all-skip-entire",
    /// `all` with the seed's idea of tracking only "selected folio sizes":
    /// folios smaller than a PMD (mTHP) keep only their large mapcount,
    /// updated with one atomic outside the seqcount: they are "maybe shared"
    /// once mapped more than once, policy code (pageout, NUMA balancing,
    /// khugepaged) asks the guess it had before the series (6.7's
    /// `folio_likely_mapped_shared`: a PMD, more mappings than pages, or
    /// the first page mapped twice), and COW reuses one only while it has
    /// a single mapping. PMD-sized folios are tracked as at `all`.
    AllPmd = "all-pmd",
    /// `all` with the seed's question "Maybe squeezing the data into less
    /// cachelines helps [but that's hard]?" (its experiments found that
    /// spreading the sums over more lines did not help): the first sum
    /// shares page 1's line with the seqcount and the mapcount, the others
    /// go two to a tail page's line, where `all` gives each its own
    /// ([`super::eras::PageMapcounts::sum`]).
    AllPacked = "all-packed",
    /// `all` with the seed's idea "Finding ways of merging the total
    /// mapcount with the seqcount": the large mapcount lives in the rmap
    /// seqcount's word ([`crate::sync::AtomicSeqcount::merged`]) and changes
    /// in the RMW that leaves the write section, so a shared writer saves
    /// the mapcount's own RMW and a reader gets both in one load. The new
    /// mapcount is known only after the section; the rmap-ID designs decide
    /// nothing from it inside (they keep per-page mapcounts and
    /// `_nr_pages_mapped`), so nothing has to move.
    AllMerged = "all-merged",
    /// `all` with the seed's idea "Using 128bit/256bit/512bit atomics might
    /// help": the sums go two to a 16-byte pair in a tail page
    /// ([`crate::phys::WidePair`]), and a shared writer changes each pair
    /// with one 128-bit compare-exchange loop (`cmpxchg16b`; no CPU has a
    /// 128-bit atomic add), which reads the line before it writes it and
    /// fails when another writer got in between (on simulated CPUs it never
    /// does: no CPU runs between the load and the exchange; the reread
    /// line is the cost seen there). A pair needs a tail page's free
    /// 16 bytes, so an order-2 folio's one sum moves from page 1's line
    /// to page 2's, a line more per update. Folios of two pages keep
    /// `all`'s words (they have no tail page for a pair). 256- and 512-bit
    /// atomics are not modelled: no x86-64 or arm64 instruction performs
    /// a read-modify-write that wide.
    AllWide = "all-wide",
    /// `all` with the seed's question "Does pre-calculating the sub-IDs
    /// (e.g., either in the MM or in a pcpu variable) help? Some early
    /// experiments indicate: no": every other stage from 123 on reads them
    /// from the MM, where `mm_alloc_rmap_id` wrote them on the forking CPU;
    /// this one from a copy of the CPU's own, refilled by
    /// `calc_rmap_subid` when it holds another MM's
    /// ([`super::mm_id::percpu_subids`]).
    AllPercpu = "all-percpu",
    }
}

impl RmapIdStage {
    /// The design whose answers `design` gives at this stage, for
    /// expectations per design: at the mapcount stage an rmap-ID design is
    /// nr-mapped's v6.7 with a total mapcount (no sums, always copy, the
    /// deferred split queue of 6.7); otherwise `design` itself.
    pub fn answers_as(self, design: Design) -> Design {
        if self == RmapIdStage::Mapcount && design.has_stages() {
            Design::NrMapped
        } else {
            design
        }
    }

    /// How a writer enters the rmap seqcount at this stage.
    pub fn seq_entry(self) -> SeqEntry {
        match self {
            RmapIdStage::AllShared => SeqEntry::SharedOnly,
            s if s < RmapIdStage::Exclusive => SeqEntry::SharedOnly,
            RmapIdStage::Exclusive => SeqEntry::Cmpxchg,
            RmapIdStage::AllAuto if crate::sync::sim::atomics_are_cheap() => SeqEntry::SharedOnly,
            RmapIdStage::AllLocked => SeqEntry::Locked,
            _ => SeqEntry::AddReturn,
        }
    }
}

impl std::fmt::Display for RmapIdStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;
    use crate::sync::sim::{self, Profile};

    #[test]
    fn all_auto_turns_the_exclusive_entry_off_where_atomics_are_cheap() {
        assert_eq!(RmapIdStage::AllAuto.seq_entry(), SeqEntry::AddReturn, "outside a simulation");
        for (profile, want) in
            [(Profile::two_socket_server(), SeqEntry::AddReturn), (Profile::cheap_atomics(), SeqEntry::SharedOnly)]
        {
            let (got, _) = sim::run(2, profile, 1, 0, |_| RmapIdStage::AllAuto.seq_entry());
            assert_eq!(got, [want, want]);
        }
    }
}
