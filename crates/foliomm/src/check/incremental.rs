//! The checker after a step, at the cost of what the step could have
//! changed. [`Tracker`] keeps what the last check saw of each MM (its leaves
//! and tables) and the mappings per folio those leaves add up to; physical
//! memory records the page tables written and the blocks allocated or
//! freed meanwhile, and the MMs created or write-locked
//! ([`crate::phys::Changed`]). A check after a step re-walks only those
//! MMs and the ones whose tables were written or freed, updates the
//! mappings by the difference, and checks the folios whose mappings
//! changed, the blocks that changed hands, and the folios GUP holds.
//!
//! What it leaves to the full check ([`super::check_machine`], which runs
//! when due ([`Scope::Due`]), every N steps if the caller asks, and after
//! the last step): the file rmap (`i_mmap`),
//! shared hugetlb PMD tables (a step that meets one falls back to the full
//! check), the swap map, the LRU and deferred split lists, the hugetlb
//! pools and the frame totals, folio fields that change without a
//! mapping or GUP change (an accessed bit, a flag set by reclaim), and an
//! RSS counter that changes with no page table written.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{
    check_folios, check_mm, frames::check_unmapped, held_by_caches, page_cache, report_incidents, Ledger, Subject,
    Violation, ViolationKind::*, Walked,
};
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::{FolioTruth, MmId};
use crate::mm_types::{Mm, MmList};
use crate::pgtable::pt_share_count;
use crate::phys::pg;
use crate::shmem::Inode;
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::Arc;

/// What the last check saw of one MM.
struct SeenMm {
    id: MmId,
    /// Its leaves that map folios: (head, page, base pages, folio pages)
    /// as they were when seen.
    leaves: Vec<(Pfn, Pfn, u64, u64)>,
    tables: Vec<Pfn>,
}

/// The checker's memory between checks (see the module's doc).
#[derive(Default)]
pub struct Tracker {
    /// By MM serial.
    mms: HashMap<u64, SeenMm>,
    /// The MMs (serials) whose walk reached each table.
    owners: HashMap<Pfn, Vec<u64>>,
    /// Mappings per folio head.
    truth: HashMap<Pfn, FolioTruth>,
    /// The MMs mapping each page of a large folio by PTE, or each folio by
    /// a huge entry (keyed by its head, `true`); a small folio's are its
    /// truth's `per_mm`.
    sharers: HashMap<(Pfn, bool), BTreeMap<MmId, u32>>,
    /// Whether the record is a full check's (else the next check is full).
    seeded: bool,
    /// Leaves the last full check walked, and the checks since have.
    full_size: usize,
    walked_since: usize,
}

/// How much a check looks at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scope {
    /// Everything, as the base of the checks of changes after it.
    Base,
    /// What changed since the last check.
    Changed,
    /// What changed, or everything once the checks of changes since the
    /// last full one have walked twice as many leaves as it did: full
    /// checks then cost about half what the step checks cost together.
    Due,
    /// Everything, keeping no record (`run --check=full`, and the check
    /// after the last step).
    Full,
}

impl Tracker {
    /// Runs the full check, then records what it saw as the base of the
    /// checks that follow and starts tracking changes.
    fn check_all(&mut self, m: &Kernel, mms: &[Arc<Mm>], inodes: &[Arc<Inode>], ledger: &Ledger) -> Vec<Violation> {
        m.phys.track_changes(true);
        let _ = m.phys.take_changes();
        let bad = super::check_machine(m, mms, inodes, ledger);
        *self = Tracker { seeded: true, ..Tracker::default() };
        let mut ignored = Vec::new();
        for mm in mms {
            let mut walked = Walked::default();
            super::walk_tables(m, mm, &mut walked, &mut ignored);
            walked.tables.extend(mm.deposits.lock().unwrap().values());
            walked.tables.insert(mm.pgd);
            let leaves = seen_leaves(m, &walked, &mut ignored);
            self.record(mm, leaves, walked.tables, &mut BTreeSet::new());
        }
        self.full_size = std::mem::take(&mut self.walked_since);
        bad
    }

    /// Checks as much as `scope` says: what changed since the last check
    /// (the full check when there was none, or when a walk meets a shared
    /// PMD table), or everything.
    pub fn check(
        &mut self,
        scope: Scope,
        m: &Kernel,
        list: &MmList,
        inodes: &[Arc<Inode>],
        ledger: &Ledger,
    ) -> Vec<Violation> {
        if scope == Scope::Full {
            *self = Tracker::default();
            m.phys.track_changes(false);
            let _ = m.phys.take_changes();
            return super::check_machine(m, &list.alive(), inodes, ledger);
        }
        let due = scope == Scope::Due && self.walked_since >= 2 * self.full_size.max(1);
        if !self.seeded || scope == Scope::Base || due {
            return self.check_all(m, &list.alive(), inodes, ledger);
        }
        let changed = m.phys.take_changes();
        if changed.overflowed {
            return self.check_all(m, &list.alive(), inodes, ledger);
        }
        let frames = || changed.blocks.iter().flat_map(|&(pfn, order)| pfn..pfn + (1 << order));
        let tables = changed.tables.iter().copied().chain(frames());
        let mut dirty: BTreeSet<u64> = tables.filter_map(|t| self.owners.get(&t)).flatten().copied().collect();
        dirty.extend(changed.mms);
        // The MMs that mapped a folio of a block that changed hands or shape.
        let mappers: BTreeSet<MmId> =
            frames().filter_map(|p| self.truth.get(&p)).flat_map(|t| t.per_mm.keys()).copied().collect();
        if !mappers.is_empty() {
            dirty.extend(self.mms.iter().filter(|(_, s)| mappers.contains(&s.id)).map(|(&serial, _)| serial));
        }
        let alive: HashMap<u64, Arc<Mm>> = dirty.iter().filter_map(|&s| Some((s, list.get(s)?))).collect();
        let (mut touched, mut ids, mut bad) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
        for serial in &dirty {
            let seen = self.mms.remove(serial);
            let Some(mm) = alive.get(serial) else {
                if let Some(seen) = seen {
                    ids.insert(seen.id);
                    self.forget(*serial, seen, &mut touched);
                }
                continue;
            };
            let mut walked = Walked::default();
            check_mm(m, mm, &mut walked, &mut HashSet::new(), &mut HashSet::new(), &mut bad);
            if walked.tables.iter().any(|&t| pt_share_count(&m.phys, t).load(Relaxed) > 0) {
                return self.check_all(m, &list.alive(), inodes, ledger);
            }
            // Entries rewritten with the same pages (fork's write
            // protection of the parent, a COW reuse) change no folio's
            // mappings; their folios are checked still.
            let leaves = seen_leaves(m, &walked, &mut bad);
            ids.insert(mm.id);
            match seen {
                Some(seen) if seen.id == mm.id && seen.leaves == leaves => {
                    for &(head, pfn, pages, _) in &leaves {
                        touched.insert((head, false));
                        touched.insert(if pages > 1 { (head, true) } else { (pfn, false) });
                    }
                    self.set_tables(mm.serial, &seen.tables, &walked.tables);
                    let tables = walked.tables.into_iter().collect();
                    self.mms.insert(mm.serial, SeenMm { tables, ..seen });
                }
                seen => {
                    if let Some(seen) = seen {
                        ids.insert(seen.id);
                        self.forget(*serial, seen, &mut touched);
                    }
                    if !self.record(mm, leaves, walked.tables, &mut touched) {
                        return self.check_all(m, &list.alive(), inodes, ledger);
                    }
                }
            }
        }
        let cached = page_cache::check_page_caches(m, inodes, &mut bad);
        let heads: BTreeSet<Pfn> = touched.iter().map(|&(p, _)| p).chain(ledger.gupped()).chain(frames()).collect();
        self.check_frames(m, ledger, &heads, &cached, &mut bad);
        check_folios(
            m,
            ledger,
            heads.iter().filter_map(|h| self.truth.get_key_value(h)),
            (&cached, Some(&ids)),
            &mut bad,
        );
        for key in touched {
            // A small folio's one page has the folio's sharers.
            let small = || self.truth.get(&key.0).filter(|t| t.pte.len() == 1 && !key.1).map(|t| &t.per_mm);
            let Some(mms) = self.sharers.get(&key).or_else(small).filter(|s| s.len() > 1) else { continue };
            if m.phys.page(key.0).test(pg::ANON_EXCLUSIVE) {
                let mms: BTreeSet<&MmId> = mms.keys().collect();
                let what = format!("page {:#x} is AnonExclusive but mapped by MMs {mms:?}", key.0);
                bad.push(Violation::new(Exclusive, Subject::Frame(key.0), what));
            }
        }
        report_incidents(m, &mut bad);
        bad
    }

    /// Adds what a walk of `mm` found: its `leaves` ([`seen_leaves`]) and
    /// `tables`; false if a folio changed its size under mappings the
    /// record keeps (the caller checks in full).
    fn record(
        &mut self,
        mm: &Mm,
        leaves: Vec<(Pfn, Pfn, u64, u64)>,
        tables: BTreeSet<Pfn>,
        touched: &mut BTreeSet<(Pfn, bool)>,
    ) -> bool {
        for &(head, pfn, pages, folio_pages) in &leaves {
            let t = self
                .truth
                .entry(head)
                .or_insert_with(|| FolioTruth { pte: vec![0; folio_pages as usize], ..Default::default() });
            if t.pte.len() as u64 != folio_pages {
                return false;
            }
            add(t, &mut self.sharers, mm.id, (head, pfn, pages), touched);
        }
        for &t in &tables {
            self.owners.entry(t).or_default().push(mm.serial);
        }
        self.walked_since += leaves.len() + 1;
        self.mms.insert(mm.serial, SeenMm { id: mm.id, leaves, tables: tables.into_iter().collect() });
        true
    }

    /// The MM `serial` reaches `now` instead of the tables `before`.
    fn set_tables(&mut self, serial: u64, before: &[Pfn], now: &BTreeSet<Pfn>) {
        for &t in before.iter().filter(|t| !now.contains(t)) {
            self.disown(serial, t);
        }
        let before: BTreeSet<&Pfn> = before.iter().collect();
        for &t in now.iter().filter(|t| !before.contains(t)) {
            self.owners.entry(t).or_default().push(serial);
        }
    }

    /// The MM `serial` no longer reaches table `t`.
    fn disown(&mut self, serial: u64, t: Pfn) {
        if let Some(o) = self.owners.get_mut(&t) {
            o.retain(|&s| s != serial);
            if o.is_empty() {
                self.owners.remove(&t);
            }
        }
    }

    /// Takes what the record holds of one MM back out.
    fn forget(&mut self, serial: u64, seen: SeenMm, touched: &mut BTreeSet<(Pfn, bool)>) {
        for &t in &seen.tables {
            self.disown(serial, t);
        }
        for (head, pfn, pages, folio_pages) in seen.leaves {
            let key = if pages > 1 { (head, true) } else { (pfn, false) };
            touched.insert((head, false));
            touched.insert(key);
            if let Some(t) = self.truth.get_mut(&head) {
                match pages > 1 {
                    true => t.pmd -= 1,
                    false => t.pte[(pfn - head) as usize] -= 1,
                }
                decrement(&mut t.per_mm, seen.id);
                if t.per_mm.is_empty() {
                    self.truth.remove(&head);
                }
            }
            if let Some(s) = self.sharers.get_mut(&key).filter(|_| folio_pages > 1) {
                decrement(s, seen.id);
                if s.is_empty() {
                    self.sharers.remove(&key);
                }
            }
        }
    }

    /// Checks each frame of `heads` that no mapping holds: a free frame
    /// must be in no table and no leaf, an allocated folio must be held by
    /// a cache, a pin or the hugetlb pool, an allocated table reachable.
    fn check_frames(
        &self,
        m: &Kernel,
        ledger: &Ledger,
        heads: &BTreeSet<Pfn>,
        cached: &super::Cached,
        bad: &mut Vec<Violation>,
    ) {
        let zero: BTreeSet<Pfn> = m.zero_frames().collect();
        for &pfn in heads.iter().filter(|&&p| m.phys.vmemmap_optimized(p) && !m.phys.page(p).test(pg::TAIL)) {
            let f = Folio::from_head(&m.phys, pfn);
            super::hugetlb::check_vmemmap(m, f, f.head().test(pg::HUGETLB), bad);
        }
        for &pfn in heads.iter().filter(|p| !self.truth.contains_key(p) && !zero.contains(p)) {
            let p = m.phys.page(pfn);
            if p.test(pg::TABLE) {
                if !self.owners.contains_key(&pfn) {
                    let what = format!("page table {pfn:#x} is allocated but reachable from no MM (leak)");
                    bad.push(Violation::new(Leak, Subject::Frame(pfn), what));
                }
                continue;
            }
            let f = Folio::from_head(&m.phys, pfn);
            let free_huge = p.test(pg::HUGETLB) && m.is_free_huge_page(pfn);
            let free = p.test(pg::BUDDY) || (f.refcount() == 0 && !p.test(pg::HUGETLB));
            if self.owners.contains_key(&pfn) {
                let what = format!("frame {pfn:#x}, a table an MM reached, is no longer a page table");
                bad.push(Violation::new(Allocator, Subject::Frame(pfn), what));
            } else if !free && !p.test(pg::TAIL) {
                check_unmapped(ledger, f, free_huge, held_by_caches(m, f, cached), bad);
            }
        }
    }
}

/// The leaves of a walk that map folios, as the record keeps them (head,
/// page, base pages, folio pages); a leaf that maps no allocated folio is a
/// violation, and left out.
fn seen_leaves(m: &Kernel, walked: &Walked, bad: &mut Vec<Violation>) -> Vec<(Pfn, Pfn, u64, u64)> {
    let leaves = walked.leaves.iter().filter(|l| !l.pte.special());
    let folios = leaves.map(|l| (l, Folio::containing(&m.phys, l.pte.pfn())));
    let allocated = folios.filter(|&(l, f)| super::allocated(f, l, bad));
    allocated.map(|(l, f)| (f.pfn, l.pte.pfn(), l.pages, f.nr_pages())).collect()
}

/// Adds one leaf's mapping (head, page, base pages) to its folio's truth
/// `t` and sharers.
fn add(
    t: &mut FolioTruth,
    sharers: &mut HashMap<(Pfn, bool), BTreeMap<MmId, u32>>,
    mm: MmId,
    (head, pfn, pages): (Pfn, Pfn, u64),
    touched: &mut BTreeSet<(Pfn, bool)>,
) {
    *t.per_mm.entry(mm).or_default() += 1;
    let key = match pages > 1 {
        true => {
            t.pmd += 1;
            (head, true)
        }
        false => {
            t.pte[(pfn - head) as usize] += 1;
            (pfn, false)
        }
    };
    if t.pte.len() > 1 {
        *sharers.entry(key).or_default().entry(mm).or_default() += 1;
    }
    touched.insert((head, false));
    touched.insert(key);
}

/// Takes one from `k`'s count, dropping it at zero.
fn decrement<K: Ord>(map: &mut BTreeMap<K, u32>, k: K) {
    if let Some(n) = map.get_mut(&k) {
        *n -= 1;
        if *n == 0 {
            map.remove(&k);
        }
    }
}
