//! `bench seed-000`'s results: the rows (designs or stages, and the host),
//! the samples of a run, and what its tables and saved run derive from them.

use foliomm::internals::mapcount::{Design, RmapIdStage};

use super::harness::metric;
use super::published::{SEED_000_COLUMNS, SEED_000_MICRO};
use super::saved::{Row as SavedRow, SavedRun, Series, Table};
use super::stats::{change, Change};

/// Time and the mapcount design's costs over the measured action.
#[derive(Clone, Copy, Default)]
pub(super) struct Measured {
    pub(super) seconds: f64,
    pub(super) rmap_ops: u64,
    pub(super) rmw: u64,
    pub(super) lines: u64,
    /// Exclusive seqcount entries lost to another writer.
    pub(super) lost: u64,
}

/// One row of the tables: a design, at a stage of seed 000's series, or
/// the host kernel.
#[derive(Clone, Copy)]
pub(super) struct Row {
    pub(super) label: &'static str,
    pub(super) design: Design,
    pub(super) stage: RmapIdStage,
    pub(super) host: bool,
}

/// The folio sizes the benchmarks run on: order and name.
pub(super) const ORDERS: [(u32, &str); 2] = [(9, "2 MiB THP"), (4, "64 KiB mTHP")];

/// `samples[order][bench][row]`: every kept round's time and costs (NaN
/// where the benchmark does not apply).
pub(super) type Samples = Vec<Vec<Vec<Vec<[f64; 5]>>>>;

/// A run's samples with the rows they belong to, and what the tables
/// derive from them.
pub(super) struct Results<'a> {
    samples: Samples,
    /// Every row; the model's come first.
    pub(super) all_rows: &'a [Row],
    /// The model's rows (the tables of changes against nr-mapped).
    pub(super) designs: &'a [Row],
    /// The row of nr-mapped, the baseline.
    pub(super) base: usize,
    pub(super) stages: bool,
    /// The comparisons of a micro-benchmark table (each design but the
    /// baseline, each benchmark) and of the vm-scalability table form a
    /// family each.
    pub(super) micro_family: usize,
    pub(super) vm_family: usize,
}

impl<'a> Results<'a> {
    pub(super) fn new(samples: Samples, all_rows: &'a [Row], stages: bool) -> Results<'a> {
        let designs = &all_rows[..all_rows.iter().take_while(|r| !r.host).count()];
        let base = designs.iter().position(|r| r.design == Design::NrMapped).unwrap();
        let micro_family = (designs.len() - 1) * SEED_000_MICRO;
        let vm_family = (designs.len() - 1) * ORDERS.len() * (SEED_000_COLUMNS.len() - SEED_000_MICRO);
        Results { samples, all_rows, designs, base, stages, micro_family, vm_family }
    }

    /// Times of (order, bench, row), None where the benchmark does not apply.
    pub(super) fn times(&self, oi: usize, bi: usize, di: usize) -> Option<Vec<f64>> {
        let t = metric(&self.samples[oi][bi][di], 0);
        (!t.iter().any(|v| v.is_nan())).then_some(t)
    }

    /// The change of row `di` against nr-mapped, in its family.
    pub(super) fn change_of(&self, oi: usize, di: usize, bi: usize) -> Option<Change> {
        let family = if bi < SEED_000_MICRO { self.micro_family } else { self.vm_family };
        Some(change(&self.times(oi, bi, self.base)?, &self.times(oi, bi, di)?, family))
    }

    /// The deterministic costs: of the last round.
    pub(super) fn costs_of(&self, oi: usize, di: usize, bi: usize) -> Option<Measured> {
        self.samples[oi][bi][di].last().map(|s| Measured {
            seconds: s[0],
            rmap_ops: s[1] as u64,
            rmw: s[2] as u64,
            lines: s[3] as u64,
            lost: s[4] as u64,
        })
    }

    /// A row's series name: the design, with --stages its stage too
    /// ("rmap-id 123"), or "host".
    fn series_name(&self, r: &Row) -> String {
        match (r.host, self.stages && r.design.has_stages()) {
            (true, _) => "host".to_string(),
            (false, true) => format!("{} {}", r.design, r.stage),
            (false, false) => r.design.to_string(),
        }
    }

    /// The run as a saved run: a table per folio size, a row per
    /// benchmark, a series per design (with its costs) and the host.
    pub(super) fn saved(&self, settings: serde_json::Value) -> SavedRun {
        let series = |oi, bi, di, r: &Row| {
            let c = self.costs_of(oi, di, bi).filter(|_| !r.host).unwrap_or_default();
            let counters =
                [("rmap_ops", c.rmap_ops), ("atomic_rmw", c.rmw), ("cache_lines", c.lines), ("lost_exclusive", c.lost)];
            let counters = if r.host { Vec::new() } else { counters.map(|(n, v)| (n.to_string(), v as f64)).to_vec() };
            Some(Series { name: self.series_name(r), samples: self.times(oi, bi, di)?, counters })
        };
        let tables = ORDERS.iter().enumerate().map(|(oi, (_, oname))| Table {
            name: format!("seed 000, {oname}"),
            unit: "s".into(),
            higher_is_better: false,
            rows: SEED_000_COLUMNS
                .iter()
                .enumerate()
                .map(|(bi, bname)| SavedRow {
                    label: bname.to_string(),
                    series: self.all_rows.iter().enumerate().filter_map(|(di, r)| series(oi, bi, di, r)).collect(),
                    // The seed publishes changes, not times.
                    published: Vec::new(),
                })
                .collect(),
        });
        SavedRun::new("seed-000", settings, tables.collect())
    }
}
