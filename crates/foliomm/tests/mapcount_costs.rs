//! What each design's rmap operations cost, as the kernel's code for that
//! era performs them (the `Cost` its `add` returns).

use foliomm::mapcount::{Design, Level};
use foliomm::{Config, Machine};

/// (rmw, locks, lines) of adding a batch of 512 PTEs of an order-9 folio,
/// then a single PTE of page 5.
fn costs(design: Design) -> [(u64, u64, u64); 2] {
    let m = Machine::new(Config { memory: 16 << 20, mapcount: design, ..Config::default() }).unwrap();
    let f = m.alloc_folio(9).unwrap();
    let d = design.implementation();
    let batch = d.add(f, 0, 512, Level::Pte, 1);
    let single = d.add(f, 5, 1, Level::Pte, 1);
    d.remove(f, 5, 1, Level::Pte, 1);
    d.remove(f, 0, 512, Level::Pte, 1);
    m.folio_put_refs(f, 1);
    [(batch.rmw, batch.locks, batch.lines), (single.rmw, single.locks, single.lines)]
}

#[test]
fn costs_follow_each_era_s_fields() {
    assert_eq!(costs(Design::Subpage), [(512, 0, 512), (1, 0, 1)], "per-page mapcounts only");
    assert_eq!(costs(Design::NrMapped), [(513, 0, 512), (2, 0, 2)], "+ _nr_pages_mapped in page 1");
    assert_eq!(costs(Design::LargeMapcount), [(514, 0, 512), (3, 0, 2)], "+ _large_mapcount");
    assert_eq!(costs(Design::CompoundLocked), [(514, 1, 512), (3, 1, 2)], "+ the compound lock and subpages_mapcount");
    assert_eq!(costs(Design::MmId), [(514, 1, 512), (3, 1, 2)], "the bit lock replaces the large-mapcount atomic");
    assert_eq!(
        costs(Design::RmapIdPowersum),
        [(515, 1, 512), (4, 1, 3)],
        "alone in the seqcount: its entry and exit, plain sums; page 2 too"
    );
}
