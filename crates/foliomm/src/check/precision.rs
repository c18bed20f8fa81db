//! The precision and safety report: at every COW decision on a large anon
//! folio and at every observation of a large folio, anon or shmem, the
//! design's answer to "mapped by this MM only?" is set beside the ground
//! truth, kept in a shadow table of mappings per folio and MM that the rmap
//! functions update and that no design reads.
//!
//! - wrong-exclusive: the design said "exclusive" (or reused) while another
//!   MM maps the folio. A correctness and security failure (a COW reuse of a
//!   shared page leaks data); it is also recorded as a violation, so the
//!   checker fails.
//! - missed reuse: the design said "shared"/"maybe" while one MM maps it.
//! - avoidable copy: a COW copied although the ground truth allowed reuse
//!   (one MM maps it and no other reference exists).
//!
//! On only when [`crate::kernel::Config::precision`] is set (it costs a lock
//! and a map update per rmap call); it hears of events through the
//! [`super::Ledger`], the kernel's observer.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::arch::Pfn;
use crate::folio::Folio;
use crate::kernel::{Consumer, Incident, Kernel, Stats};
use crate::mapcount::MmId;
use crate::sync::Mutex;

/// Mappings per MM of every mapped folio.
#[derive(Default)]
pub struct Shadow(Mutex<HashMap<Pfn, BTreeMap<MmId, i64>>>);

impl Shadow {
    /// Records `delta` mappings of folio `head` by `mm`.
    pub(crate) fn note(&self, head: Pfn, mm: MmId, delta: i64) {
        let mut map = self.0.lock().unwrap();
        let per_mm = map.entry(head).or_default();
        let n = per_mm.entry(mm).or_insert(0);
        *n += delta;
        if *n == 0 {
            per_mm.remove(&mm);
        }
        if per_mm.is_empty() {
            map.remove(&head);
        }
    }

    /// The only MM mapping `head`, if exactly one does.
    fn sole_mapper(&self, head: Pfn) -> Option<MmId> {
        let map = self.0.lock().unwrap();
        let per_mm = map.get(&head)?;
        (per_mm.len() == 1).then(|| *per_mm.keys().next().unwrap())
    }

    /// Mappings per MM of `head`, for the checker.
    pub fn of(&self, head: Pfn) -> BTreeMap<MmId, i64> {
        self.0.lock().unwrap().get(&head).cloned().unwrap_or_default()
    }

    /// Whether the shadow of `head` holds `want` mappings per MM: for
    /// every MM, or (with `only`) as many MMs, and the same count for each
    /// MM of `only`.
    pub fn agrees(&self, head: Pfn, want: &BTreeMap<MmId, u32>, only: Option<&BTreeSet<MmId>>) -> bool {
        let shadows = self.0.lock().unwrap();
        let empty = BTreeMap::new();
        let have = shadows.get(&head).unwrap_or(&empty);
        let same = |mm: &MmId| have.get(mm).copied().unwrap_or(0) == want.get(mm).map_or(0, |&n| n as i64);
        have.len() == want.len()
            && match only {
                Some(mms) => mms.iter().all(same),
                None => have.iter().zip(want).all(|((a, &x), (b, &y))| a == b && x == y as i64),
            }
    }
}

/// Judges a COW decision on a large anon folio that is not AnonExclusive:
/// `reused` is what the design decided for `mm`; counted as the
/// [`Consumer::CowReuse`] decisions too (a copy that could have been a
/// reuse is its wrong "shared").
pub(crate) fn judge_cow(m: &Kernel, shadow: &Shadow, f: Folio, mm: MmId, reused: bool) {
    let owner = shadow.sole_mapper(f.pfn);
    let mapcount = crate::rmap::folio_mapcount(m, f);
    let reusable = owner == Some(mm) && mapcount == f.refcount() as u64;
    let [made, wrong_shared, wrong_exclusive_count] = &m.stats.decisions[Consumer::CowReuse as usize];
    Stats::inc(made);
    if reused && owner != Some(mm) {
        Stats::inc(wrong_exclusive_count);
        wrong_exclusive(m, f, format!("COW reused folio {:#x} for MM {mm} while {:?} map it", f.pfn, shadow.of(f.pfn)));
    }
    if !reused && reusable {
        Stats::inc(wrong_shared);
        Stats::inc(&m.stats.precision_avoidable_copy);
    }
}

/// Counts a wrong-exclusive judgement and records it as a violation, so
/// the checker fails the run.
fn wrong_exclusive(m: &Kernel, f: Folio, what: String) {
    Stats::inc(&m.stats.precision_wrong_exclusive);
    let what = format!("{}: {what} (wrong-exclusive)", m.design.name());
    m.violations.lock().unwrap().push(Incident::WrongExclusive { folio: f.pfn, what });
}

/// Judges a consumer's decision that `f` is (`shared`) or is not mapped by
/// more than one MM: counted per consumer as made, wrongly "shared" (one MM
/// maps it), wrongly "exclusive" (more than one do). Not a violation here:
/// where correctness rests on the answer (COW reuse) [`judge_cow`] and
/// [`judge_answer`] make it one.
pub(crate) fn judge_decision(m: &Kernel, shadow: &Shadow, consumer: Consumer, f: Folio, shared: bool) {
    let mappers = shadow.of(f.pfn).len();
    let [made, wrong_shared, wrong_exclusive] = &m.stats.decisions[consumer as usize];
    Stats::inc(made);
    if shared && mappers == 1 {
        Stats::inc(wrong_shared);
    }
    if !shared && mappers > 1 {
        Stats::inc(wrong_exclusive);
    }
}

/// Judges the era's policy guess for `f`: counted, not a violation, since
/// policy code (madvise, NUMA balancing, khugepaged) only skips work on it.
pub(crate) fn judge_guess(m: &Kernel, shadow: &Shadow, f: Folio, likely_shared: bool) {
    let mappers = shadow.of(f.pfn).len();
    if !likely_shared && mappers > 1 {
        Stats::inc(&m.stats.precision_guess_exclusive_wrong);
    }
    if likely_shared && mappers == 1 {
        Stats::inc(&m.stats.precision_guess_shared_wrong);
    }
}

/// Judges the design's "maybe mapped shared?" answer for `f`.
pub(crate) fn judge_answer(m: &Kernel, shadow: &Shadow, f: Folio, maybe_shared: bool) {
    let exclusive = shadow.sole_mapper(f.pfn).is_some();
    if !maybe_shared && !exclusive && !shadow.of(f.pfn).is_empty() {
        wrong_exclusive(m, f, format!("answered exclusive for folio {:#x} mapped by {:?}", f.pfn, shadow.of(f.pfn)));
    }
    if maybe_shared && exclusive {
        Stats::inc(&m.stats.precision_missed_reuse);
    }
}
