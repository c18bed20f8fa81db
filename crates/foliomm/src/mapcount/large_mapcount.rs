//! The large mapcount and what travels with it: `folio_add_return_large_mapcount`
//! and `folio_sub_return_large_mapcount` with the MM-ID slots of 6.15+
//! (docs/KERNEL-REFERENCE.md §2.5), or seed 000's rmap-ID sums under the atomic
//! seqcount.

use super::construction::Construction;
use super::eras::PageMapcounts;
use super::fields::{bump, field, set_shared, set_slot_id, slot_id, w};
use super::stage::RmapIdStage;
use super::{Level, MapcountDesign, MmId, RmapMm, SharedAnswer};
use crate::folio::Folio;
use crate::phys::pg;
use crate::sync::atomic::Ordering::*;
use crate::sync::cacheline::Structure;
use crate::sync::{AtomicSeqcount, BitSpinLock, SeqWrite};

/// How an update of the large mapcount got in: alone in the rmap seqcount
/// (the plain-update fast path), what entering cost, and the rounds it spun
/// on locks.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Entered {
    pub exclusive: bool,
    pub spins: u64,
    /// Atomic RMWs of entering the rmap seqcount (1, or 2 after a lost race).
    pub rmw: u64,
    /// An exclusive entry lost to another writer.
    pub lost: bool,
    /// The per-page and entire mapcounts and `_nr_pages_mapped` were
    /// updated with plain stores inside the section (seed 000's patch 20).
    pub plain_pages: bool,
    /// `_large_mapcount` after the update (biased by -1), as
    /// `folio_add_return_large_mapcount` returns it; 0 for designs without,
    /// and at stage `all-merged`, where the section's end makes it.
    pub after: i32,
    /// rmap-id: the locked operations on the rmap sums
    /// ([`PageMapcounts::add_sums`]): one per sum changed (all of them,
    /// but at stage `all-skip-zero` those of a zero sub-ID), at
    /// `all-wide` one per pair and lost exchange; unused when exclusive.
    pub sums: u64,
}

impl PageMapcounts {
    /// The construction of the rmap sums as of the design's stage: the RFC's
    /// lookup tables before patch 11.
    pub(super) fn construction(&self) -> Option<Construction> {
        self.f.rmap_sums.map(|c| match c {
            Construction::SeedSubIds if self.f.stage < RmapIdStage::OneTwoThree => Construction::SeedSubIdsTables,
            c => c,
        })
    }

    /// The rmap seqcount (`folio->_rmap_atomic_seqcount`), entered as the
    /// stage enters it.
    pub(super) fn seqcount<'a>(&self, f: Folio<'a>) -> AtomicSeqcount<'a> {
        let seq = AtomicSeqcount::new(Structure::Folio, &f.page(1).link, self.f.stage.seq_entry());
        if self.merges() {
            seq.merged()
        } else {
            seq
        }
    }

    /// Whether the large mapcount lives in the rmap seqcount's word (stage
    /// `all-merged`).
    pub(super) fn merges(&self) -> bool {
        self.f.rmap_sums.is_some() && self.f.stage == RmapIdStage::AllMerged
    }

    /// What one mapping by `mm` adds to each rmap sum of `f`: from patch 11
    /// on, up to order 9, the sub-IDs the MM computed once
    /// (`get_rmap_subid_1/2/3`), or at stage `all-percpu` this CPU's copy
    /// of them; otherwise computed into `scratch` (the RFC's lookup tables).
    pub(super) fn rmap_values<'a>(
        &self,
        c: Construction,
        f: Folio,
        mm: &'a RmapMm,
        scratch: &'a mut Option<super::construction::Values>,
    ) -> &'a [u64] {
        match (c == Construction::SeedSubIds && f.order() <= 9, self.f.stage == RmapIdStage::AllPercpu) {
            (true, false) => mm.read_subids(f.order()),
            (true, true) => scratch.insert(super::mm_id::percpu_subids(mm, f.order())),
            (false, _) => scratch.insert(c.values(mm.id as u64, f.order())),
        }
    }

    /// The raw large mapcount (the mapcount less 1): `field::TOTAL`, or the
    /// seqcount's value where it is merged in.
    pub(super) fn large_raw(&self, f: Folio) -> i32 {
        if self.merges() {
            self.seqcount(f).merged_value() as i32
        } else {
            w(f, field::TOTAL).load(Relaxed)
        }
    }

    /// Opens the rmap seqcount around a whole rmap update when the stage puts
    /// every mapcount under it (patch 20, `__folio_add_rmap_range`); None
    /// otherwise, and for designs without rmap sums.
    pub(super) fn begin_all(&self, f: Folio) -> Option<SeqWrite> {
        (self.tracks(f) && self.f.stage >= RmapIdStage::All).then(|| self.seqcount(f).write_begin())
    }

    /// Whether an update at `level` leaves the rmap sums alone: a PMD's at
    /// stage `all-skip-entire`.
    pub(super) fn skips_entire(&self, level: Level) -> bool {
        level == Level::Pmd && self.f.stage == RmapIdStage::AllSkipEntire
    }

    /// Whether the rmap sums say nothing about `f`: it was given up (stage
    /// `all-give-up`), or a PMD maps it at stage `all-skip-entire`. Read
    /// inside the seqcount.
    fn blind(&self, f: Folio) -> bool {
        untracked(f) || (self.f.stage == RmapIdStage::AllSkipEntire && self.entire_mapcount(f) > 0)
    }

    /// Whether `mm` holds every mapping of `f`, for COW reuse: the sole
    /// owner by the sums; where they leave a PMD out, or the stage does not
    /// track `f`, a folio mapped once (by the faulting `mm`).
    pub(super) fn owned_by(&self, f: Folio, mm: MmId) -> bool {
        let selected_out = !self.tracks(f);
        if selected_out || (self.f.stage == RmapIdStage::AllSkipEntire && self.entire_mapcount(f) > 0) {
            return self.mapcount(f) == 1;
        }
        self.sole_owner(f) == Some(mm)
    }

    /// Whether `f` has rmap sums under the seqcount: under a design with
    /// them, unless the stage selects folios (`all-anon`: anon ones;
    /// `all-pmd`: PMD-sized ones) and `f` is not one it selects.
    pub(super) fn tracks(&self, f: Folio) -> bool {
        self.f.rmap_sums.is_some()
            && match self.f.stage {
                RmapIdStage::AllAnon => f.test_anon(),
                RmapIdStage::AllPmd => f.order() >= crate::arch::PMD_ORDER,
                _ => true,
            }
    }

    /// `folio_likely_mapped_shared` as 6.7 to 6.14 guess it: more than one
    /// mapping, and a PMD among them, more mappings than pages, or the
    /// first page mapped twice. Wrong for a folio whose first page one MM
    /// maps once while others map the rest.
    pub(super) fn guess_shared(&self, f: Folio) -> bool {
        let m = self.mapcount(f);
        m > 1 && (self.entire_mapcount(f) > 0 || m > f.nr_pages() || f.page(0).mapcount.load(Relaxed) > 0)
    }

    /// The mapcount and the rmap sums, read without the seqcount.
    fn snapshot(&self, c: Construction, f: Folio) -> (u64, Vec<u64>) {
        let m = (self.large_raw(f) + 1) as u64;
        (m, (0..c.count(f.order()) as u64).map(|i| self.sum(f, i)).collect())
    }

    /// Closes what [`PageMapcounts::begin_all`] opened, for an update that
    /// changed the mapcount by `d` (added as it closes where merged).
    pub(super) fn end_all(&self, f: Folio, section: Option<SeqWrite>, d: i32) {
        if let Some(w) = section {
            self.seqcount(f).write_end_adding(w, if self.merges() { d as i64 } else { 0 });
        }
    }
}

impl PageMapcounts {
    /// `folio_add_return_large_mapcount`: raw large mapcount += d and, with
    /// MM-IDs, the slot bookkeeping of docs/KERNEL-REFERENCE.md §2.5.
    /// `section` is the write section [`PageMapcounts::begin_all`] opened.
    pub(super) fn add_large(&self, f: Folio, d: i32, level: Level, mm: RmapMm, section: Option<SeqWrite>) -> Entered {
        if let Some(c) = self.construction().filter(|_| self.tracks(f)) {
            return self.update_sums(c, f, d, self.skips_entire(level), mm, section);
        }
        if !self.f.mm_ids {
            return Entered { after: w(f, field::TOTAL).fetch_add(d, Relaxed) + d, ..Entered::default() };
        }
        let mm = mm.id;
        let lock = BitSpinLock::lock(Structure::Folio, &f.page(1).ids, field::LOCK_BIT);
        let large = w(f, field::TOTAL);
        let t = large.load(Relaxed) + d;
        large.store(t, Relaxed);
        let entered = Entered { spins: lock.spins(), after: t, ..Entered::default() };
        let ids = f.page(1).ids.load(Relaxed);
        for s in 0..2 {
            if slot_id(ids, s) == mm {
                w(f, field::SLOT0 + s).fetch_add(d, Relaxed);
                return entered;
            }
        }
        if slot_id(ids, 0) == 0 {
            set_slot_id(f, 0, mm);
            w(f, field::SLOT0).store(d - 1, Relaxed);
            if t != d - 1 {
                set_shared(f, true);
            }
        } else if slot_id(ids, 1) == 0 {
            set_slot_id(f, 1, mm);
            w(f, field::SLOT0 + 1).store(d - 1, Relaxed);
            set_shared(f, true);
        }
        // Else: both slots belong to other MMs; this MM is untracked and the
        // shared bit is necessarily set already.
        entered
    }

    /// `folio_sub_return_large_mapcount`.
    pub(super) fn sub_large(&self, f: Folio, d: i32, level: Level, mm: RmapMm, section: Option<SeqWrite>) -> Entered {
        if let Some(c) = self.construction().filter(|_| self.tracks(f)) {
            return self.update_sums(c, f, -d, self.skips_entire(level), mm, section);
        }
        if !self.f.mm_ids {
            return Entered { after: w(f, field::TOTAL).fetch_sub(d, Relaxed) - d, ..Entered::default() };
        }
        let mm = mm.id;
        let lock = BitSpinLock::lock(Structure::Folio, &f.page(1).ids, field::LOCK_BIT);
        let large = w(f, field::TOTAL);
        let t = large.load(Relaxed) - d;
        large.store(t, Relaxed);
        let entered = Entered { spins: lock.spins(), after: t, ..Entered::default() };
        let ids = f.page(1).ids.load(Relaxed);
        for s in 0..2 {
            if slot_id(ids, s) == mm {
                let c = w(f, field::SLOT0 + s);
                let v = c.load(Relaxed) - d;
                if v >= 0 {
                    c.store(v, Relaxed);
                    return entered;
                }
                c.store(-1, Relaxed);
                set_slot_id(f, s, 0);
                break;
            }
        }
        if w(f, field::SLOT0).load(Relaxed) == t || w(f, field::SLOT0 + 1).load(Relaxed) == t {
            set_shared(f, false);
        }
        entered
    }

    /// rmap-id: large mapcount += d and each rmap sum += d·value(mm), inside
    /// the atomic seqcount (`folio_add_large_mapcount` and its `_exclusive`
    /// twin): plain updates when the writer is alone, atomic adds otherwise.
    /// Inside `section` when one is open, else in a section of its own; no
    /// sum when `no_sums` (a PMD's update at stage `all-skip-entire`).
    /// Differs from patch 17: its exclusive path for order <= 2 adds the
    /// sub-ID without multiplying by `d` (so an unmap would add); foliomm
    /// multiplies, as every other case of the RFC does.
    fn update_sums(
        &self,
        c: Construction,
        f: Folio,
        d: i32,
        no_sums: bool,
        mm: RmapMm,
        section: Option<SeqWrite>,
    ) -> Entered {
        debug_assert!((mm.id as u64) < 1 << 24, "rmap IDs are 24-bit");
        let mut scratch = None;
        let values = self.rmap_values(c, f, &mm, &mut scratch);
        let seq = self.seqcount(f);
        let sec = section.unwrap_or_else(|| seq.write_begin());
        // Merged: the mapcount changes as the section ends, and `after` is
        // unknown here; the rmap-ID designs decide nothing from it (their
        // per-page mapcounts do), so nothing reads the word again for it.
        debug_assert!(!self.merges() || self.f.page_mapcounts, "a merged mapcount's callers need no 'after'");
        let after = match self.merges() {
            true => 0,
            false => bump(w(f, field::TOTAL), d, sec.exclusive) + d,
        };
        let skip_zero = self.f.stage == RmapIdStage::AllSkipZero;
        // A writer that met another gives the folio up for "always mapped
        // shared" (seed 000's idea), and nobody keeps its sums any more.
        let contended = !sec.exclusive && (sec.spins > 0 || sec.lost);
        if self.f.stage == RmapIdStage::AllGiveUp && contended {
            f.page(1).set(pg::RMAP_UNTRACKED);
        }
        let untracked = untracked(f) || no_sums;
        let mut deltas = [(0, 0); super::construction::MAX_VALUES];
        let mut n = 0;
        for (i, &v) in values.iter().enumerate().filter(|&(_, &v)| (v != 0 || !skip_zero) && !untracked) {
            deltas[n] = (i as u64, (d as i64 as u64).wrapping_mul(v));
            n += 1;
        }
        let sums = self.add_sums(f, &deltas[..n], sec.exclusive);
        if section.is_none() {
            seq.write_end_adding(sec, if self.merges() { d as i64 } else { 0 });
        }
        Entered {
            exclusive: sec.exclusive,
            spins: sec.spins as u64,
            rmw: sec.rmw as u64,
            lost: sec.lost,
            plain_pages: section.is_some() && sec.exclusive,
            after,
            sums,
        }
    }

    /// Stage `all-give-up`: an unmapped folio given up leaves with its sums
    /// zeroed and tracked again, as its next user expects.
    pub(super) fn reset_untracked(&self, f: Folio) {
        if let Some(c) = self.construction().filter(|_| untracked(f)) {
            (0..c.count(f.order()) as u64).for_each(|i| self.set_sum(f, i, 0));
            f.page(1).clear(pg::RMAP_UNTRACKED);
        }
    }

    /// rmap-id: a consistent mapcount and rmap sums.
    pub(super) fn sums(&self, c: Construction, f: Folio) -> (u64, Vec<u64>) {
        self.seqcount(f).read(|| self.snapshot(c, f))
    }

    /// rmap-id: the MM that maps every mapping of the folio, if one does
    /// (`__folio_has_large_matching_rmap_val` for every candidate at once).
    pub(super) fn sole_owner(&self, f: Folio) -> Option<MmId> {
        let c = self.construction().filter(|_| self.tracks(f))?;
        // The mark is read inside the section: a writer sets it before it
        // skips its sums, and leaves the section after.
        let (given_up, (n, sums)) = self.seqcount(f).read(|| (self.blind(f), self.snapshot(c, f)));
        if given_up {
            return None;
        }
        owner(c, f, n, &sums)
    }

    /// rmap-id's `folio_mapped_shared()` for policy code, reading the
    /// seqcount once: exclusive for at most one mapping or a sole owner;
    /// maybe shared for more mappings than pages (obviously shared, without
    /// the seqcount) or several owners; [`SharedAnswer::Busy`] when a
    /// writer is inside or one passed during the read. Patch 9's reader
    /// retries instead and notes that it "could stop earlier and just
    /// return shared"; the cover letter wants callers that "stop early ...
    /// and indicate maybe mapped shared". Stopping at the first sign of a
    /// writer is foliomm's reading; COW reuse still retries ([`Self::sole_owner`]).
    pub(super) fn mapped_shared_once(&self, c: Construction, f: Folio) -> SharedAnswer {
        let total = (self.large_raw(f) + 1) as u64;
        if total <= 1 {
            return SharedAnswer::Exclusive;
        }
        if total > f.nr_pages() || !self.tracks(f) {
            return SharedAnswer::MaybeShared;
        }
        match self.seqcount(f).try_read(|| (self.blind(f), self.snapshot(c, f))) {
            None => SharedAnswer::Busy,
            Some((false, (n, sums))) if n <= 1 || owner(c, f, n, &sums).is_some() => SharedAnswer::Exclusive,
            Some(_) => SharedAnswer::MaybeShared,
        }
    }
}

/// Whether `f` was given up for "always assumed mapped shared" (stage
/// `all-give-up`): its rmap sums mean nothing.
pub(super) fn untracked(f: Folio) -> bool {
    f.page(1).test(pg::RMAP_UNTRACKED)
}

/// The MM owning all `n` mappings with these sums, if one does; none when
/// there are more mappings than pages (obviously shared).
fn owner(c: Construction, f: Folio, n: u64, sums: &[u64]) -> Option<MmId> {
    if n > f.nr_pages() {
        return None;
    }
    c.owner(n, sums, f.order()).map(|a| a as MmId)
}

#[cfg(test)]
mod tests {
    use super::super::eras::RMAP_ID_STAGES;
    use super::super::{Design, Level, MapcountDesign, RmapIdStage, RmapMm, SharedAnswer};
    use crate::sync::Arc;
    use crate::{Config, Machine};

    /// A small machine of the rmap-id design.
    fn rmap_id_machine() -> Arc<Machine> {
        Machine::new(Config { memory: 16 << 20, mapcount: Design::RmapId, ..Config::default() }).unwrap()
    }

    #[test]
    fn a_busy_reader_answers_maybe_shared() {
        let m = rmap_id_machine();
        let d = &RMAP_ID_STAGES[0][RmapIdStage::All as usize];
        let f = m.alloc_folio(9).unwrap();
        let (a, b) = (RmapMm::new(3), RmapMm::new(4));
        d.add(f, 0, 512, Level::Pte, a);
        assert_eq!(d.maybe_mapped_shared(f), SharedAnswer::Exclusive, "512 mappings by MM 3");
        let seq = d.seqcount(f);
        let writer = seq.write_begin();
        assert_eq!(d.maybe_mapped_shared(f), SharedAnswer::Busy, "a writer is inside");
        seq.write_end(writer);
        assert_eq!(d.maybe_mapped_shared(f), SharedAnswer::Exclusive);
        d.add(f, 7, 1, Level::Pte, b);
        assert_eq!(d.maybe_mapped_shared(f), SharedAnswer::MaybeShared, "more mappings than pages");
        d.remove(f, 0, 2, Level::Pte, a);
        assert_eq!(d.maybe_mapped_shared(f), SharedAnswer::MaybeShared, "two owners");
        d.remove(f, 7, 1, Level::Pte, b);
        d.remove(f, 2, 510, Level::Pte, a);
        assert_eq!(d.maybe_mapped_shared(f), SharedAnswer::Exclusive, "unmapped");
        m.folio_put_refs(f, 1);
    }

    /// Stage `all-give-up`: a writer that had to wait for another inside
    /// the seqcount marks the folio, whose sums are then left alone and
    /// which then reads as maybe shared, never as one MM's.
    #[test]
    fn a_contended_folio_is_given_up_as_always_shared() {
        let m = rmap_id_machine();
        let d = &RMAP_ID_STAGES[0][RmapIdStage::AllGiveUp as usize];
        let f = m.alloc_folio(9).unwrap();
        let a = RmapMm::new(3);
        d.add(f, 0, 2, Level::Pte, a);
        assert_eq!(d.sole_owner(f), Some(3), "uncontended: tracked");
        let seq = d.seqcount(f);
        let holder = seq.write_begin();
        assert!(holder.exclusive);
        std::thread::scope(|s| {
            let writer = s.spawn(|| d.add(f, 2, 1, Level::Pte, a));
            std::thread::sleep(std::time::Duration::from_millis(50));
            seq.write_end(holder);
            writer.join().unwrap();
        });
        assert!(super::untracked(f), "the writer that waited gave the folio up");
        assert_eq!(d.sole_owner(f), None);
        assert_eq!(d.maybe_mapped_shared(f), SharedAnswer::MaybeShared, "3 mappings, untracked");
        d.remove(f, 0, 3, Level::Pte, a);
        m.folio_put_refs(f, 1);
    }

    /// Stage `all-wide`: a shared writer changes an order-9 folio's three
    /// sums with two 128-bit exchanges where `all` takes three RMWs, and
    /// both leave the same sums, which name the owner.
    #[test]
    fn a_shared_writer_changes_two_sums_with_one_wide_exchange() {
        use crate::sync::{structure::Structure, AtomicSeqcount, SeqEntry};
        let mut seen = Vec::new();
        for stage in [RmapIdStage::All, RmapIdStage::AllWide] {
            let config =
                Config { memory: 16 << 20, mapcount: Design::RmapId, rmap_id_stage: stage, ..Config::default() };
            let m = Machine::new(config).unwrap();
            let d = &RMAP_ID_STAGES[0][stage as usize];
            let f = m.alloc_folio(9).unwrap();
            let owner = RmapMm::new(0x01_0203);
            d.add(f, 0, 2, Level::Pte, owner);
            // Another writer inside makes this one shared: atomics, no plain stores.
            let other = AtomicSeqcount::new(Structure::Folio, &f.page(1).link, SeqEntry::SharedOnly);
            let held = other.write_begin();
            let cost = d.add(f, 2, 1, Level::Pte, owner).cost;
            other.write_end(held);
            let sums: Vec<u64> = (0..3).map(|i| d.sum(f, i)).collect();
            assert_eq!(d.sole_owner(f), Some(0x01_0203), "{stage}: 3 mappings, all MM 0x10203's");
            seen.push((cost.rmw, sums));
            d.remove(f, 0, 3, Level::Pte, owner);
            m.folio_put_refs(f, 1);
        }
        assert!(seen[0].1.iter().all(|&s| s != 0), "every digit of the ID is non-zero");
        assert_eq!(seen[0].1, seen[1].1, "the same sums in words and in pairs");
        assert_eq!(seen[0].0, seen[1].0 + 1, "3 sums: 3 RMWs in words, 2 exchanges in pairs");
    }
}
