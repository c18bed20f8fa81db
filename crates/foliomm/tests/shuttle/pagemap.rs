//! A pagemap reader against zaps of what it reads: one thread asks
//! `/proc/self/pagemap` about four pages while another zaps two of them
//! (`MADV_DONTNEED`) and unmaps the other two (a munmap zaps under its
//! downgraded mmap_lock, beside readers). Every present answer must name
//! a folio the page is still mapped into (mapcount and refcount at least
//! one): the reader holds the entry's table lock, as
//! `pagemap_pmd_range` does, so it never sees an entry whose folio the
//! zap has half unmapped. Once the zapper is done, nothing is present.

use super::{assert_clean, machine, map, write_and_check, K};
use foliomm::internals::machine::VmaLockDesign;
use foliomm::internals::mm::Advice;
use shuttle::thread;

fn pagemap_race() {
    let m = machine(VmaLockDesign::VmaRefcount, false);
    let mm = m.new_mm().unwrap();
    let a = map(&mm, 16 * K);
    write_and_check(&mut m.new_cpu(), &mm, a, 16 * K, 0x5a);
    let zapper = {
        let mm = mm.clone();
        thread::spawn(move || {
            mm.madvise(a, 8 * K, Advice::DontNeed).unwrap();
            mm.munmap(a + 8 * K, 8 * K).unwrap();
        })
    };
    for _ in 0..2 {
        for page in 0..4 {
            let info = mm.page_info(a + page * 4 * K);
            if info.present {
                assert!(
                    info.folio_mapcount >= 1 && info.refcount >= 1,
                    "page {page}: present, but its folio has mapcount {} and refcount {}",
                    info.folio_mapcount,
                    info.refcount
                );
            }
        }
    }
    zapper.join().unwrap();
    for page in 0..4 {
        assert!(!mm.page_info(a + page * 4 * K).present, "page {page} is still present after its zap");
    }
    assert_clean(&m);
}

#[test]
fn shuttle_pagemap_reads_beside_zaps_see_whole_mappings() {
    shuttle::check_random(pagemap_race, super::schedules());
    shuttle::check_pct(pagemap_race, super::schedules(), 3);
}
