//! `bench mapped-shared`'s results: the rows (designs or stages, and the host),
//! and what its tables derive from a run's samples.

use foliomm::internals::mapcount::{Design, RmapIdStage};

use super::published::{SEED_000_COLUMNS, SEED_000_MICRO};
use super::saved::SavedRun;
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

/// A run's samples with the rows they belong to, and what the tables
/// derive from them.
pub(super) struct Results<'a> {
    run: &'a SavedRun,
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
    pub(super) fn new(run: &'a SavedRun, all_rows: &'a [Row], stages: bool) -> Results<'a> {
        let designs = &all_rows[..all_rows.iter().take_while(|r| !r.host).count()];
        let base = designs.iter().position(|r| r.design == Design::NrMapped).unwrap();
        let micro_family = (designs.len() - 1) * SEED_000_MICRO;
        let vm_family = (designs.len() - 1) * ORDERS.len() * (SEED_000_COLUMNS.len() - SEED_000_MICRO);
        Results { run, all_rows, designs, base, stages, micro_family, vm_family }
    }

    /// Times of (order, bench, row), None where the benchmark does not apply.
    pub(super) fn times(&self, oi: usize, bi: usize, di: usize) -> Option<Vec<f64>> {
        let name = series_name(&self.all_rows[di], self.stages);
        self.run.tables[oi].samples(SEED_000_COLUMNS[bi], &name).map(<[f64]>::to_vec)
    }

    /// The change of row `di` against nr-mapped, in its family.
    pub(super) fn change_of(&self, oi: usize, di: usize, bi: usize) -> Option<Change> {
        let family = if bi < SEED_000_MICRO { self.micro_family } else { self.vm_family };
        Some(change(&self.times(oi, bi, self.base)?, &self.times(oi, bi, di)?, family))
    }

    /// The deterministic costs: of the last round.
    pub(super) fn costs_of(&self, oi: usize, di: usize, bi: usize) -> Option<Measured> {
        let name = series_name(&self.all_rows[di], self.stages);
        let s = self.run.tables[oi].series(SEED_000_COLUMNS[bi], &name)?;
        let [rmap_ops, rmw, lines, lost] = COUNTERS.map(|c| s.counter(c).unwrap_or(0.0) as u64);
        Some(Measured { seconds: 0.0, rmap_ops, rmw, lines, lost })
    }
}

/// The names of [`Measured`]'s counts in a saved run.
pub(super) const COUNTERS: [&str; 4] = ["rmap_ops", "atomic_rmw", "cache_lines", "lost_exclusive"];

/// A row's series name: the design, with `stages` its stage too
/// ("rmap-id 123"), or "host".
pub(super) fn series_name(r: &Row, stages: bool) -> String {
    match (r.host, stages && r.design.has_stages()) {
        (true, _) => "host".to_string(),
        (false, true) => format!("{} {}", r.design, r.stage),
        (false, false) => r.design.to_string(),
    }
}
