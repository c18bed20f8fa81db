//! What each design's rmap operations cost, as the kernel's code for that
//! era performs them (the `Cost` its `add` returns).

use foliomm::internals::mapcount::{Design, Level, RmapIdStage};
use foliomm::{Config, Machine};

/// (rmw, locks, lines) of adding a batch of 512 PTEs of an order-9 folio,
/// then a single PTE of page 5.
fn costs(design: Design) -> [(u64, u64, u64); 2] {
    staged(design, RmapIdStage::All)
}

/// [`costs`] of an rmap-ID design at one of seed 000's stages.
fn staged(design: Design, stage: RmapIdStage) -> [(u64, u64, u64); 2] {
    let config = Config { memory: 16 << 20, mapcount: design, rmap_id_stage: stage, ..Config::default() };
    let m = Machine::new(config).unwrap();
    let f = m.alloc_folio(9).unwrap();
    let d = design.implementation_at(stage);
    let mm = foliomm::internals::mapcount::RmapMm::new(1);
    let (batch, single) = (d.add(f, 0, 512, Level::Pte, mm), d.add(f, 5, 1, Level::Pte, mm));
    // NR_ANON_MAPPED's deltas: every page newly mapped, then none; none
    // unmapped while page 5 keeps a PTE, then all.
    assert_eq!((batch.newly_mapped, single.newly_mapped), (512, 0), "{design} newly mapped");
    assert_eq!(d.remove(f, 5, 1, Level::Pte, mm).unmapped_pages, 0, "{design}: page 5 stays mapped");
    assert_eq!(d.remove(f, 0, 512, Level::Pte, mm).unmapped_pages, 512, "{design}: all unmapped");
    m.folio_put_refs(f, 1);
    let (batch, single) = (batch.cost, single.cost);
    [(batch.rmw, batch.locks, batch.lines), (single.rmw, single.locks, single.lines)]
}

#[test]
fn costs_follow_each_era_s_fields() {
    assert_eq!(costs(Design::Subpage), [(512, 0, 512), (1, 0, 1)], "per-page mapcounts only");
    assert_eq!(costs(Design::NrMapped), [(513, 0, 512), (2, 0, 2)], "+ _nr_pages_mapped in page 1");
    assert_eq!(costs(Design::LargeMapcount), [(514, 0, 512), (3, 0, 2)], "+ _large_mapcount");
    assert_eq!(
        costs(Design::CompoundLocked),
        [(1, 1, 512), (1, 1, 2)],
        "+ the compound lock and subpages_mapcount; under the lock the counters' updates are plain"
    );
    assert_eq!(costs(Design::MmId), [(514, 1, 512), (3, 1, 2)], "the bit lock replaces the large-mapcount atomic");
    assert_eq!(
        costs(Design::RmapIdPowersum),
        [(2, 1, 512), (2, 1, 3)],
        "all: alone in the seqcount, only its entry and exit are atomic; page 2 (sums) too"
    );
    for stage in [RmapIdStage::Exclusive, RmapIdStage::NoCmpxchg] {
        assert_eq!(
            staged(Design::RmapIdPowersum, stage),
            [(515, 1, 512), (4, 1, 3)],
            "{stage}: plain mapcount and sums, atomic per-page counts and _nr_pages_mapped"
        );
    }
    for stage in [RmapIdStage::RmapId, RmapIdStage::OneTwoThree, RmapIdStage::Batch, RmapIdStage::AllShared] {
        assert_eq!(
            staged(Design::RmapIdPowersum, stage),
            [(518, 1, 512), (7, 1, 3)],
            "{stage}: a shared writer: seqcount 2, mapcount 1, sums 2, pages, _nr_pages_mapped"
        );
    }
    assert_eq!(
        staged(Design::RmapId, RmapIdStage::Mapcount),
        costs(Design::LargeMapcount),
        "the mapcount stage: a total mapcount, no rmap IDs"
    );
    // The RFC's sub-IDs: 4 values for order 9 before patch 11 (in pages 1-4,
    // beside the page mapped and page 1), 3 after.
    assert_eq!(staged(Design::RmapId, RmapIdStage::RmapId)[1], (1 + 1 + 2 + 1 + 4, 1, 5));
    assert_eq!(staged(Design::RmapId, RmapIdStage::OneTwoThree)[1], (1 + 1 + 2 + 1 + 3, 1, 4));
}
