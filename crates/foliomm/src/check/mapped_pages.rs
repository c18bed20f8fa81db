//! `NR_ANON_MAPPED` and `NR_FILE_MAPPED` ([`crate::kernel::MappedPages`])
//! against the page tables: what the rmap updates reported as newly mapped
//! and unmapped must add up to the pages mapped now.

use std::collections::BTreeMap;

use super::{Subject, Violation, ViolationKind};
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::mapcount::FolioTruth;
use crate::phys::pg;
use crate::sync::atomic::Ordering::Relaxed;

/// Checks both gauges against `truth`: a page counts when a PTE maps it or a
/// PMD maps its folio; under `CONFIG_NO_PAGE_MAPCOUNT` a large folio counts
/// whole while anything maps it. hugetlb folios count in neither.
pub(super) fn check_mapped_pages(m: &Kernel, truth: &BTreeMap<Pfn, FolioTruth>, bad: &mut Vec<Violation>) {
    let (mut anon, mut file) = (0i64, 0i64);
    for (&head, t) in truth {
        let f = Folio::from_head(&m.phys, head);
        if f.head().test(pg::HUGETLB) {
            continue;
        }
        let whole = f.is_large() && m.design.page_mapcount(f, 0).is_none();
        let pages = match (whole || t.pmd > 0, t.total() > 0) {
            (true, true) => f.nr_pages() as i64,
            _ => t.pte.iter().filter(|&&n| n > 0).count() as i64,
        };
        *if f.test_anon() { &mut anon } else { &mut file } += pages;
    }
    let gauges = &m.stats.mapped;
    for (name, have, want) in [("NR_ANON_MAPPED", &gauges.anon, anon), ("NR_FILE_MAPPED", &gauges.file, file)] {
        let have = have.load(Relaxed);
        if have != want {
            let what = format!("{name} is {have}, page tables map {want} such pages");
            bad.push(Violation::new(ViolationKind::Vmstat, Subject::Machine, what));
        }
    }
}
