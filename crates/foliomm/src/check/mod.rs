//! Ground truth and invariants. [`check_machine`] walks every address space's
//! page tables, rebuilds from scratch what each folio's counters must be, and
//! compares every field the model keeps (docs/KERNEL-REFERENCE.md §11):
//!
//! - per-folio and per-page mapcounts, entire mapcount, the design's fields and
//!   its "mapped shared" answer (never "exclusive" while two MMs map a folio);
//! - `refcount == mapcount + pin references` for every mapped anon folio (at
//!   a quiescent point no other references exist), `_pincount` = pins, and no
//!   allocated folio mapped nowhere unless pinned;
//! - a writable anon entry maps an AnonExclusive page; an AnonExclusive page
//!   is mapped by at most one MM; every mapping lies inside a VMA that allows it
//!   (and is soft-dirty if writable while soft-dirty tracking is on);
//! - RSS counters, `NR_ANON_MAPPED` and `NR_FILE_MAPPED`; PMD leaves map whole, aligned PMD-sized folios;
//! - hugetlb: a shared PMD table is reached by exactly 1 + its share count
//!   MMs; the pool's total and free counts match its folios, and its
//!   reservations do not exceed its free pages;
//! - shmem page caches hold allocated shmem folios of their inode, each
//!   once, with one reference per page; a mapped file folio is cached; a
//!   file's `i_mmap` holds exactly the VMAs that map it;
//! - every frame is free (in exactly one buddy list), a reachable page table,
//!   a zero page, or part of a mapped folio; free + allocated = total;
//! - swap ([`swap`](mod@swap)): slots' counts against the swap entries and
//!   the swap cache, `MM_SWAPENTS`;
//! - [`anon_rmap`]: an rmap walk reaches every anon mapping; the LRU lists
//!   hold exactly the mapped anon folios' and others flagged on them;
//! - no "bad page" was reported when a folio was freed, and no CPU used a
//!   TLB entry whose frame had been freed since it was filled.
//!
//! [`reference`](mod@reference) is the plain byte model every read is compared against;
//! [`ledger`] keeps what the page tables cannot tell (GUP references, the
//! precision report's shadow, [`precision`]).

mod anon_rmap;
mod frames;
mod hugetlb;
mod incremental;
pub mod ledger;
mod mapped_pages;
mod page_cache;
pub mod precision;
mod ref_file;
mod ref_lazy;
mod ref_page;
mod ref_remove;
pub mod reference;
mod swap;
pub mod violation;
mod vma;

pub use incremental::{Scope, Tracker};
pub use ledger::Ledger;
pub use violation::{Subject, Violation, ViolationKind};

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::arch::{Pfn, Pte, PAGE_SHIFT, PMD_ORDER, PUD_ORDER};
use crate::folio::Folio;
use crate::kernel::{Incident, Kernel};
use crate::mapcount::{FolioTruth, MmId, RmapMm};
use crate::mm_types::{Mm, Vmas};
use crate::pgtable::{pt_share_count, walk_all, Visit};
use crate::phys::pg;
use crate::rmap;
use crate::shmem::{self, Inode};
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::Arc;
use ViolationKind::*;

/// The folios page caches hold: head -> (inode, index).
type Cached = HashMap<Pfn, (u64, u64)>;

/// One leaf mapping found by the walk.
struct Leaf {
    mm: MmId,
    addr: u64,
    pte: Pte,
    /// Base pages the entry maps: 1 for a PTE, more for a huge PMD or PUD.
    pages: u64,
}

impl Leaf {
    fn huge(&self) -> bool {
        self.pages > 1
    }
}

/// Runs every check over the kernel `m`, its address spaces `mms` and the
/// `ledger` of what the page tables cannot tell; returns every violation
/// (none when all hold). Call it at a quiescent point: no thread may be
/// inside an operation.
pub fn check_machine(m: &Kernel, mms: &[Arc<Mm>], inodes: &[Arc<Inode>], ledger: &Ledger) -> Vec<Violation> {
    let mut bad = Vec::new();
    let cached = page_cache::check_page_caches(m, inodes, &mut bad);
    let mut walked = Walked::default();
    let mut linked = HashSet::new();
    let mut mapped_anon = HashSet::new();
    for mm in mms {
        check_mm(m, mm, &mut walked, &mut linked, &mut mapped_anon, &mut bad);
    }
    vma::check_i_mmap(inodes, &linked, &mut bad);
    hugetlb::check_shared_tables(m, &walked.tables, &walked.shared, &mut bad);
    swap::check_swap_map(m, &walked.swaps, inodes, &mut bad);
    anon_rmap::check_lru(m, &mapped_anon, inodes, &mut bad);
    let (tables, leaves) = (walked.tables, walked.leaves);
    let truth = build_truth(m, &leaves, &mut bad);
    mapped_pages::check_mapped_pages(m, &truth, &mut bad);
    check_folios(m, ledger, &truth, (&cached, None), &mut bad);
    frames::check_frames(m, ledger, &truth, &cached, &tables, &mut bad);
    report_incidents(m, &mut bad);
    bad
}

/// The bad pages reported when folios were freed and the incidents seen
/// during operations (a use after free, a wrong "exclusive").
fn report_incidents(m: &Kernel, bad: &mut Vec<Violation>) {
    for (pfn, what) in m.bad_pages.lock().unwrap().iter() {
        bad.push(Violation::new(BadPage, Subject::Folio(*pfn), format!("bad page: folio {pfn:#x}: {what}")));
    }
    for incident in m.violations.lock().unwrap().iter() {
        bad.push(match incident {
            Incident::UseAfterFree { mm, addr, what } => Violation::new(
                UseAfterFree,
                Subject::Mm { mm: *mm, addr: Some(*addr) },
                format!("use after free: {what}"),
            ),
            Incident::WrongExclusive { folio, what } => Violation::new(Exclusive, Subject::Folio(*folio), what.clone()),
        });
    }
}

/// The checks of one MM: its VMA tree (the VMAs it links to files go in
/// `linked`), its deposited tables, a walk of its tables into `walked`,
/// its swap entries, each leaf, its anon mappings' rmap (the folios go in
/// `mapped_anon`) and its RSS counters.
fn check_mm(
    m: &Kernel,
    mm: &Mm,
    walked: &mut Walked,
    linked: &mut HashSet<(u64, rmap::VmaRecord)>,
    mapped_anon: &mut HashSet<Pfn>,
    bad: &mut Vec<Violation>,
) {
    let vmas = mm.mmap_read_lock();
    // Seed 000's CONFIG_DEBUG_VM check (patch 15, `rmap_id_init`): the
    // sub-IDs the MM keeps are `calc_rmap_subid`'s.
    if mm.rmap != RmapMm::new(mm.id) {
        let what = format!("mm {}: precomputed rmap sub-IDs {:?} are not its ID's", mm.id, mm.rmap);
        bad.push(Violation::new(Mapcount, Subject::Mm { mm: mm.id, addr: None }, what));
    }
    vma::check_vma_tree(mm, &vmas, linked, bad);
    walked.tables.insert(mm.pgd);
    for (&haddr, &t) in mm.deposits.lock().unwrap().iter() {
        if !walked.tables.insert(t) {
            let at = Subject::Mm { mm: mm.id, addr: Some(haddr) };
            let what = format!("mm {}: deposited table {t:#x} at {haddr:#x} is also used elsewhere", mm.id);
            bad.push(Violation::new(PageTable, at, what));
        }
    }
    let (before, swaps_before) = (walked.leaves.len(), walked.swaps.len());
    walk_tables(m, mm, walked, bad);
    swap::check_mm_swap(mm, &vmas, &walked.swaps[swaps_before..], bad);
    let (mut anon, mut shmem, mut links) = (0i64, 0i64, anon_rmap::Links::new());
    for leaf in &walked.leaves[before..] {
        check_leaf(m, &vmas, leaf, bad);
        let f = Folio::containing(&m.phys, leaf.pte.pfn());
        if !leaf.pte.special() && f.test_anon() && !f.head().test(pg::HUGETLB) {
            let page = if leaf.pages > 1 { 0 } else { leaf.pte.pfn() - f.pfn };
            anon_rmap::check_anon_mapping(mm, &vmas, (f, page, leaf.addr), &mut links, bad);
            mapped_anon.insert(f.pfn);
        }
        // hugetlb pages count in no RSS counter.
        if !leaf.pte.special() && !f.head().test(pg::HUGETLB) {
            let n = leaf.pages as i64;
            match f.test_anon() {
                true => anon += n,
                false => shmem += n,
            }
        }
    }
    for (name, have, want) in [("MM_ANONPAGES", &mm.rss_anon, anon), ("MM_SHMEMPAGES", &mm.rss_shmem, shmem)] {
        let have = have.load(Relaxed);
        if have != want {
            let what = format!("mm {}: {name} is {have}, page tables map {want} such pages", mm.id);
            bad.push(Violation::new(Rss, Subject::Mm { mm: mm.id, addr: None }, what));
        }
    }
}

/// Walks one MM's tables, recording every table frame and every leaf. A
/// PMD table shared with MMs walked before (hugetlb PMD sharing) is
/// counted in `shared`, not walked again: its leaves are one set of
/// mappings, however many MMs reach them.
fn walk_tables(m: &Kernel, mm: &Mm, walked: &mut Walked, bad: &mut Vec<Violation>) {
    let phys = &m.phys;
    walk_all(phys, mm.pgd, |visit| match visit {
        Visit::Table(t) => {
            let at = Subject::Mm { mm: mm.id, addr: None };
            if !phys.page(t).test(pg::TABLE) {
                let what = format!("mm {}: frame {t:#x} used as a page table lacks PageTable", mm.id);
                bad.push(Violation::new(PageTable, at, what));
            }
            if walked.tables.insert(t) {
                return true;
            }
            if pt_share_count(phys, t).load(Relaxed) > 0 {
                *walked.shared.entry(t).or_insert(1) += 1;
            } else {
                bad.push(Violation::new(PageTable, at, format!("mm {}: table {t:#x} reachable twice", mm.id)));
            }
            false
        }
        Visit::HugePmd { addr, pte } => {
            walked.leaves.push(Leaf { mm: mm.id, addr, pte, pages: 1 << PMD_ORDER });
            let f = Folio::containing(phys, pte.pfn());
            let deposit = pte.special() || (f.test_anon() && !f.head().test(pg::HUGETLB));
            if deposit != mm.deposits.lock().unwrap().contains_key(&addr) {
                let what = format!("mm {}: huge PMD at {addr:#x}: a deposited table if and only if anon THP", mm.id);
                bad.push(Violation::new(PageTable, Subject::Mm { mm: mm.id, addr: Some(addr) }, what));
            }
            true
        }
        Visit::HugePud { addr, pte } => {
            walked.leaves.push(Leaf { mm: mm.id, addr, pte, pages: 1 << PUD_ORDER });
            true
        }
        Visit::Pte { addr, pte } => {
            walked.leaves.push(Leaf { mm: mm.id, addr, pte, pages: 1 });
            true
        }
        Visit::Swap { addr, pte } => {
            walked.swaps.push(swap::SwapLeaf { mm: mm.id, addr, pte });
            true
        }
    });
}

/// What the walks of every MM found: table frames, leaves, and each
/// shared PMD table with the number of MMs that reach it.
#[derive(Default)]
struct Walked {
    tables: BTreeSet<Pfn>,
    leaves: Vec<Leaf>,
    swaps: Vec<swap::SwapLeaf>,
    shared: HashMap<Pfn, i32>,
}

fn check_leaf(m: &Kernel, vmas: &Vmas, leaf: &Leaf, bad: &mut Vec<Violation>) {
    let phys = &m.phys;
    let (mm, addr, pte) = (leaf.mm, leaf.addr, leaf.pte);
    let size = leaf.pages << PAGE_SHIFT;
    let mut push = |kind, what| bad.push(Violation::new(kind, Subject::Mm { mm, addr: Some(addr) }, what));
    match vmas.find(addr) {
        None => push(Vma, format!("mm {mm}: {addr:#x} is mapped outside any VMA")),
        Some(v) if addr + size > v.end() => {
            push(Vma, format!("mm {mm}: huge entry at {addr:#x} crosses the VMA end {:#x}", v.end()))
        }
        Some(v) => {
            if pte.write() && !v.writable() {
                push(Vma, format!("mm {mm}: {addr:#x} is writable in a VMA without VM_WRITE"));
            }
            if pte.hw_present() && !v.readable() {
                push(Vma, format!("mm {mm}: {addr:#x} is accessible in a PROT_NONE VMA"));
            }
            // Soft-dirty tracking: a write must fault first and mark the
            // entry, unless clear_refs left the entry of a pinned page alone.
            let pinned = || Folio::containing(phys, pte.pfn()).maybe_dma_pinned();
            if pte.write() && v.needs_soft_dirty_wp(m.config.soft_dirty, pte.any_soft_dirty()) && !pinned() {
                push(Vma, format!("mm {mm}: {addr:#x} is writable but not soft-dirty while writes are tracked"));
            }
        }
    }
    if !pte.present() {
        push(PageTable, format!("mm {mm}: {addr:#x} holds a non-present entry {:#x}", pte.0));
        return;
    }
    if pte.special() {
        let ok = if leaf.huge() { m.huge_zero_pfn() == Some(pte.pfn()) } else { pte.pfn() == m.zero_pfn };
        if !ok || pte.write() {
            push(PageTable, format!("mm {mm}: special entry at {addr:#x} is not a read-only zero page"));
        }
        return;
    }
    let f = Folio::containing(phys, pte.pfn());
    if leaf.huge() && (f.pfn != pte.pfn() || f.nr_pages() != leaf.pages) {
        push(
            PageTable,
            format!("mm {mm}: huge entry at {addr:#x} maps pfn {:#x}, not the head of a folio of its size", pte.pfn()),
        );
    }
    let page = if leaf.huge() { 0 } else { pte.pfn() - f.pfn };
    if pte.write() && f.test_anon() && !f.anon_exclusive(page) {
        push(Exclusive, format!("mm {mm}: {addr:#x} is writable but page {:#x} is not AnonExclusive", pte.pfn()));
    }
    // A shared file mapping maps the file's own page: one the cache let go
    // would take writes the file never sees.
    if let Some((inode, index)) =
        vmas.find(addr).and_then(|v| Some((v.file().filter(|_| v.shared())?, v.page_index(addr))))
    {
        if inode.cached_pfn(index) != Some(pte.pfn()) {
            push(PageCache, format!("mm {mm}: {addr:#x} of a shared mapping maps pfn {:#x}, which inode {} does not hold at index {index}", pte.pfn(), inode.ino));
        }
    }
}

/// Whether `f`, which `leaf` maps, is an allocated folio (else a violation).
fn allocated(f: Folio, leaf: &Leaf, bad: &mut Vec<Violation>) -> bool {
    if f.refcount() <= 0 || f.head().test(pg::BUDDY) || f.head().test(pg::TABLE) {
        let (mm, addr, pfn) = (leaf.mm, leaf.addr, leaf.pte.pfn());
        let what = format!("mm {mm}: {addr:#x} maps pfn {pfn:#x}, which is not an allocated folio");
        bad.push(Violation::new(PageTable, Subject::Mm { mm, addr: Some(addr) }, what));
        return false;
    }
    true
}

fn build_truth(m: &Kernel, leaves: &[Leaf], bad: &mut Vec<Violation>) -> BTreeMap<Pfn, FolioTruth> {
    let phys = &m.phys;
    let mut truth: BTreeMap<Pfn, FolioTruth> = BTreeMap::new();
    // The MMs mapping each page by PTE, and each folio mapped by a huge
    // entry (whose AnonExclusive flag is its head's).
    let mut page_mms: HashMap<Pfn, BTreeSet<MmId>> = HashMap::new();
    let mut huge_mms: HashMap<Pfn, BTreeSet<MmId>> = HashMap::new();
    for leaf in leaves.iter().filter(|l| !l.pte.special()) {
        let f = Folio::containing(phys, leaf.pte.pfn());
        if !allocated(f, leaf, bad) {
            continue;
        }
        let t = truth
            .entry(f.pfn)
            .or_insert_with(|| FolioTruth { pte: vec![0; f.nr_pages() as usize], ..Default::default() });
        *t.per_mm.entry(leaf.mm).or_default() += 1;
        if leaf.huge() {
            t.pmd += 1;
            huge_mms.entry(f.pfn).or_default().insert(leaf.mm);
        } else {
            t.pte[(leaf.pte.pfn() - f.pfn) as usize] += 1;
            page_mms.entry(leaf.pte.pfn()).or_default().insert(leaf.mm);
        }
    }
    let mut exclusive_flags: Vec<(Pfn, BTreeSet<MmId>)> = Vec::new();
    for (pfn, mms) in page_mms {
        let head = Folio::containing(phys, pfn).pfn;
        match huge_mms.get_mut(&head) {
            Some(huge) => huge.extend(mms),
            None => exclusive_flags.push((pfn, mms)),
        }
    }
    for (pfn, mms) in exclusive_flags.into_iter().chain(huge_mms) {
        if mms.len() > 1 && phys.page(pfn).test(pg::ANON_EXCLUSIVE) {
            let what = format!("page {pfn:#x} is AnonExclusive but mapped by MMs {mms:?}");
            bad.push(Violation::new(Exclusive, Subject::Frame(pfn), what));
        }
    }
    truth
}

/// Checks each folio of `truth` (head, mappings the page tables hold)
/// against its counters, references and page cache; the precision shadow
/// of only the MMs `mms` (and its number of MMs), or of all.
fn check_folios<'a>(
    m: &Kernel,
    ledger: &Ledger,
    truth: impl IntoIterator<Item = (&'a Pfn, &'a FolioTruth)>,
    (cached, mms): (&Cached, Option<&BTreeSet<MmId>>),
    bad: &mut Vec<Violation>,
) {
    let phys = &m.phys;
    for (&head, t) in truth {
        let f = Folio::from_head(phys, head);
        let total = t.total() as u64;
        let at = Subject::Folio(head);
        if f.is_large() {
            let design = m.design.name();
            for v in m.design.verify(f, t) {
                bad.push(Violation::new(Mapcount, at, format!("folio {head:#x} ({design}): {v}")));
            }
            if t.per_mm.len() > 1 && !m.design.maybe_mapped_shared(f).maybe_shared() {
                let n = t.per_mm.len();
                let what = format!(
                    "folio {head:#x} ({design}): answered exclusive while {n} MMs map the folio (wrong-exclusive)"
                );
                bad.push(Violation::new(Exclusive, at, what));
            }
        } else {
            let mc = rmap::folio_mapcount(m, f);
            if mc != total {
                bad.push(Violation::new(
                    Mapcount,
                    at,
                    format!("folio {head:#x}: mapcount {mc}, page tables say {total}"),
                ));
            }
        }
        check_references(ledger, f, total + held_by_caches(m, f, cached).unwrap_or(0), bad);
        if let Some(shadow) = ledger.shadow.as_ref().filter(|_| !f.head().test(pg::HUGETLB)) {
            if !shadow.agrees(head, &t.per_mm, mms) {
                let want: BTreeMap<MmId, i64> = t.per_mm.iter().map(|(&k, &v)| (k, v as i64)).collect();
                let have = shadow.of(head);
                let what = format!("folio {head:#x}: precision shadow {have:?}, page tables say {want:?}");
                bad.push(Violation::new(Precision, at, what));
            }
        }
        if !f.test_anon() && !cached.contains_key(&head) && ledger.gups_of(head) == (0, 0) {
            bad.push(Violation::new(
                PageCache,
                at,
                format!("folio {head:#x}: a file folio mapped but in no page cache"),
            ));
        }
    }
}

/// `refcount` = one per mapping (and per page a page cache holds) + the
/// pins' references + one per FOLL_GET; `_pincount` = pins.
fn check_references(ledger: &Ledger, f: Folio, mappings: u64, bad: &mut Vec<Violation>) {
    let (pins, gets) = ledger.gups_of(f.pfn);
    let (pins, gets) = (pins as u64, gets as u64);
    let per_pin = if f.is_large() { 1 } else { crate::folio::GUP_PIN_COUNTING_BIAS as u64 };
    let rc = f.refcount() as u64;
    let mut push = |what| bad.push(Violation::new(Refcount, Subject::Folio(f.pfn), what));
    if rc != mappings + pins * per_pin + gets {
        push(format!("folio {:#x}: refcount {rc} != {mappings} mappings + {pins} pins + {gets} gets", f.pfn));
    }
    if f.is_large() && f.pincount() as u64 != pins {
        push(format!("folio {:#x}: _pincount {} != {pins} pins", f.pfn, f.pincount()));
    }
}

/// The references a page cache, the swap cache or the CPUs' LRU batches
/// hold on `f`, if one holds it.
fn held_by_caches(m: &Kernel, f: Folio, cached: &HashMap<Pfn, (u64, u64)>) -> Option<u64> {
    let page_cache = cached.contains_key(&f.pfn).then(|| shmem::cache_refs(f) as u64);
    let caches = page_cache.or(swap::cache_refs(f));
    match (caches, m.lru_batch_refs(f.pfn)) {
        (None, 0) => None,
        (c, batch) => Some(c.unwrap_or(0) + batch),
    }
}
