//! `foliomm bench zap-batching`: munmap of a region populated with PTE-mapped
//! folios of each size, zap strategies per-page and batched, host kernel
//! beside (the table of the "optimize unmap/zap with PTE-mapped THP" series).
//! The configurations run in interleaved rounds; each change comes with its
//! 95% confidence interval. The model runs the `nr-mapped` design by
//! default: the seed measured a 6.8-era kernel. A second table has the
//! same munmap over swap entries (base pages paged out first): one
//! `free_swap_and_cache_nr` per entry against one per batch of
//! consecutive entries, which the series did not measure. With
//! `--tradeoffs` a third table weighs the batched zap against the page cap
//! and `init_on_free` the thread discussed ([`super::zap_tradeoffs`]).

use foliomm::internals::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use foliomm::internals::machine::ZapStrategy;
use foliomm::internals::mapcount::Design;
use foliomm::{Config, Machine};

use super::explain::{self, Point, Prices};
use super::progress::Progress;
use super::published::SEED_001;
use super::runner::{Benchmark, Measurement};
use super::saved::{SavedRun, Table};
use super::stats::{change, summarize, Change, Summary};
use super::zap_tradeoffs::{self, Tradeoff, PAGES_PER_RESCHED};
use super::{host_share_note, model_populate, model_split_pmds, new_table, secs, warm_machine_for, CommonArgs};
use crate::host;

/// `bench zap-batching`'s options: the common ones (the model's design is
/// nr-mapped unless --mapcount says otherwise: the seed measured a 6.8-era
/// kernel).
#[derive(clap::Args)]
pub struct Seed001Args {
    #[command(flatten)]
    pub(super) common: CommonArgs,
    /// Add the table of seed 001's thread's trade-offs: the batched zap
    /// against a gather capped at 512 pages and against init_on_free, with
    /// the pages freed per flush.
    #[arg(long)]
    pub(super) tradeoffs: bool,
}

/// One configuration: a folio size (an index into [`SEED_001`]) zapped by
/// the model with a strategy, or by the host kernel.
#[derive(Clone, Copy)]
pub(super) enum Setup {
    Model(usize, ZapStrategy),
    Host(usize),
    /// The swap row: base pages paged out, then unmapped.
    ModelSwap(ZapStrategy),
    HostSwap,
    /// The batched zap of folio size `i` with a trade-off (`--tradeoffs`).
    Tradeoff(usize, Tradeoff),
}

/// The swap table's only row.
const SWAP_ROW: &str = "4KiB swapped out";

/// `bench zap-batching` as the runner drives it.
pub(super) struct Seed001<'a> {
    args: &'a CommonArgs,
    size: u64,
    design: Design,
    tradeoffs: bool,
    /// The machines of the group under way, by series name.
    machines: Vec<(&'static str, Arc<Machine>)>,
}

impl<'a> Seed001<'a> {
    pub(super) fn new(a: &'a Seed001Args) -> Result<Seed001<'a>> {
        let args = &a.common;
        let design = args.mapcount.unwrap_or(Design::NrMapped);
        Ok(Seed001 { args, size: args.size_or("1G")?, design, tradeoffs: a.tradeoffs, machines: Vec::new() })
    }
}

/// The row of folio size `i`.
fn row_label(i: usize) -> String {
    format!("{}KiB", SEED_001[i].0)
}

/// The folio order of the row of `i`.
fn order(i: usize) -> u32 {
    (SEED_001[i].0 / 4).trailing_zeros()
}

const COUNTERS: [&str; 3] = ["rmap_rmw_per_page", "memmap_lines_per_page", "zap_batches_per_page"];

impl Benchmark for Seed001<'_> {
    type Config = Setup;
    const NAME: &'static str = "zap-batching";

    fn settings(&self) -> serde_json::Value {
        // The seed's figures are for 1 GiB: a report draws both per GiB.
        serde_json::json!({ "size": self.size, "mapcount": self.design.name(), "published_size": 1u64 << 30 })
    }

    fn tables(&self) -> Vec<Table> {
        let table =
            |name: &str| Table { name: name.into(), unit: "s".into(), higher_is_better: false, rows: Vec::new() };
        let mut tables = vec![table("munmap of PTE-mapped folios"), table("munmap of swap entries")];
        if self.tradeoffs {
            tables.push(table("batched zap: gather cap and init_on_free"));
        }
        tables
    }

    fn plan(&self, host: bool) -> Vec<Vec<Setup>> {
        let zaps = [ZapStrategy::PerPage, ZapStrategy::Batched];
        let swap = zaps.iter().map(|&z| Setup::ModelSwap(z)).chain(host.then_some(Setup::HostSwap)).collect();
        let tradeoffs = (0..SEED_001.len())
            .filter(|_| self.tradeoffs)
            .map(|i| Tradeoff::ALL.iter().map(|&w| Setup::Tradeoff(i, w)).collect());
        (0..SEED_001.len())
            .map(|i| zaps.iter().map(|&z| Setup::Model(i, z)).chain(host.then_some(Setup::Host(i))).collect())
            .chain([swap])
            .chain(tradeoffs)
            .collect()
    }

    fn prepare(&mut self, group: &[Setup], _: &Progress) -> Result<()> {
        self.machines.clear();
        for c in group {
            let base = self.args.config(self.design);
            let (name, config) = match *c {
                Setup::Model(_, zap) => (zap.name(), Config { zap, ..base }),
                Setup::ModelSwap(zap) => (zap.name(), Config { zap, swap: self.size + (64 << 20), ..base }),
                Setup::Tradeoff(_, w) => (w.name(), w.config(Config { zap: ZapStrategy::Batched, ..base })),
                _ => continue,
            };
            self.machines.push((name, warm_machine_for(self.size, config)?));
        }
        Ok(())
    }

    fn place(&self, c: &Setup) -> (String, String) {
        match *c {
            Setup::Model(i, zap) => (row_label(i), zap.name().into()),
            Setup::Host(i) => (row_label(i), "host".into()),
            Setup::ModelSwap(zap) => (SWAP_ROW.into(), zap.name().into()),
            Setup::HostSwap => (SWAP_ROW.into(), "host".into()),
            Setup::Tradeoff(i, w) => (row_label(i), w.name().into()),
        }
    }

    fn on_host(&self, c: &Setup) -> bool {
        matches!(c, Setup::Host(_) | Setup::HostSwap)
    }

    fn measure(&mut self, c: &Setup) -> Result<Measurement> {
        let size = self.size;
        let (i, name) = match *c {
            Setup::Model(i, zap) => (i, zap.name()),
            Setup::Tradeoff(i, w) => (i, w.name()),
            Setup::Host(i) => {
                let (_, unmap, share) = host::fault_munmap(size as usize, order(i), order(i) == 9)?;
                let notes = host_share_note(&format!("{}K", SEED_001[i].0), share).into_iter().collect();
                return Ok(Measurement { notes, ..Measurement::of([secs(unmap)]) });
            }
            Setup::ModelSwap(zap) => return self.measure_swap(zap),
            Setup::HostSwap => {
                let (unmap, share) = host::pageout_munmap(size as usize)?;
                let notes =
                    (share < 0.95).then(|| format!("host: only {:.0}% of the region was swapped out", share * 100.0));
                return Ok(Measurement { notes: notes.into_iter().collect(), ..Measurement::on(1, secs(unmap)) });
            }
        };
        let m = &self.machines.iter().find(|(n, _)| *n == name).expect("prepared").1;
        let (mm, addr, _) = model_populate(m, &mut m.new_cpu(), size, order(i))?;
        if order(i) == 9 {
            model_split_pmds(&mm, addr, size)?;
        }
        let counters = || {
            let s = &m.stats;
            [&s.rmap_atomic_rmw, &s.rmap_cache_lines, &s.zap_batches].map(|c| c.load(Relaxed) as f64)
        };
        let (before, points, t) = (counters(), zap_tradeoffs::resched_points(m), Instant::now());
        mm.munmap(addr, size)?;
        let elapsed = secs(t.elapsed());
        let after = counters();
        let pages = (size / 4096) as f64;
        let per_page = (0..3).map(|k| (COUNTERS[k], (after[k] - before[k]) / pages));
        if let Setup::Tradeoff(..) = c {
            let per_point = pages / (zap_tradeoffs::resched_points(m) - points).max(1.0);
            return Ok(Measurement::on(2, elapsed).counting([(PAGES_PER_RESCHED, per_point)]));
        }
        Ok(Measurement::of([elapsed]).counting(per_page))
    }

    fn published(&self, table: usize, row: &str) -> Vec<(String, f64)> {
        if table != 0 {
            return Vec::new();
        }
        let Some(i) = (0..SEED_001.len()).find(|&i| row_label(i) == row) else { return Vec::new() };
        vec![("mm-unstable".into(), SEED_001[i].1), ("New".into(), SEED_001[i].2)]
    }

    fn print(&self, run: &SavedRun) {
        let rows = zap_rows(run);
        print_table(&rows, self.size, &run.settings["rounds"], self.design);
        print_costs(&rows);
        print_why(&explain(&rows, self.size));
        print_swap(run, self.size);
        zap_tradeoffs::print(run, 2, self.size);
    }

    fn conclude(&self, run: &SavedRun) -> Vec<String> {
        let why = explain(&zap_rows(run), self.size);
        why.rows.iter().map(|(kb, off, text)| format!("{kb}KiB, {off:+.0} points off the seed: {text}.")).collect()
    }
}

impl Seed001<'_> {
    /// The swap row on the model: base pages faulted in, paged out to the
    /// machine's swap device, then unmapped (timed), with the zap batches
    /// of swap entries per page.
    fn measure_swap(&mut self, zap: ZapStrategy) -> Result<Measurement> {
        let m = &self.machines.iter().find(|(n, _)| *n == zap.name()).expect("prepared").1;
        let (mm, addr, _) = model_populate(m, &mut m.new_cpu(), self.size, 0)?;
        mm.madvise(addr, self.size, foliomm::Advice::PageOut)?;
        let batches = || m.stats.zap_swap_batches.load(Relaxed) as f64;
        let (before, t) = (batches(), Instant::now());
        mm.munmap(addr, self.size)?;
        let elapsed = secs(t.elapsed());
        let per_page = (batches() - before) / (self.size / 4096) as f64;
        Ok(Measurement::on(1, elapsed).counting([("swap_batches_per_page", per_page)]))
    }
}

/// The swap table: per-page and batched zap of swap entries, the change,
/// and the host beside.
fn print_swap(run: &SavedRun, size: u64) {
    let t = &run.tables[1];
    let samples = |s| t.samples(SWAP_ROW, s).unwrap_or_default().to_vec();
    let (per_page, batched, host) = (samples("per-page"), samples("batched"), samples("host"));
    if per_page.is_empty() || batched.is_empty() {
        return;
    }
    let batches = |s| t.series(SWAP_ROW, s).and_then(|s| s.counter("swap_batches_per_page")).unwrap_or(0.0);
    println!(
        "\nmunmap() of {} MiB of base pages swapped out (MADV_PAGEOUT first): free_swap_and_cache per entry",
        size >> 20
    );
    println!("(per-page, as before 6.9) against per batch of consecutive entries (batched); in seconds.\n");
    let mut table = new_table(["", "per-page", "batched", "Change", "batched/host", "host", "swap batches/page"]);
    let (p, b) = (summarize(&per_page), summarize(&batched));
    let h = (!host.is_empty()).then(|| summarize(&host));
    table.add_row([
        SWAP_ROW.to_string(),
        format!("{:.6}", p.mean),
        format!("{:.6}", b.mean),
        change(&per_page, &batched, 1).to_string(),
        h.map_or("-".into(), |h| format!("{:.2}x", b.mean / h.mean)),
        h.map_or("-".into(), |h| format!("{:.6}", h.mean)),
        format!("{:.3} / {:.3}", batches("per-page"), batches("batched")),
    ]);
    println!("{table}");
}

/// One folio size's figures.
struct ZapRow {
    folio_kb: u64,
    per_page: Summary,
    batched: Summary,
    /// Batched against per-page, with its interval.
    change: Change,
    /// Per 4K page unmapped, per-page then batched (deterministic):
    /// atomic RMWs of the rmap, memmap cache lines, zap batches.
    costs: [[f64; 3]; 2],
    host: Option<Summary>,
    seed_before_s: f64,
    seed_after_s: f64,
    seed_change_pct: i32,
}

/// Each folio size's figures, from the run's table.
fn zap_rows(run: &SavedRun) -> Vec<ZapRow> {
    let t = &run.tables[0];
    SEED_001
        .iter()
        .enumerate()
        .map(|(i, &(kb, before, after, seed_change))| {
            let label = row_label(i);
            let samples = |s| t.samples(&label, s).unwrap_or_default().to_vec();
            let costs = |s| COUNTERS.map(|c| t.series(&label, s).and_then(|s| s.counter(c)).unwrap_or(0.0));
            let (per_page_samples, batched_samples, host_samples) =
                (samples("per-page"), samples("batched"), samples("host"));
            ZapRow {
                folio_kb: kb,
                costs: [costs("per-page"), costs("batched")],
                per_page: summarize(&per_page_samples),
                batched: summarize(&batched_samples),
                change: change(&per_page_samples, &batched_samples, SEED_001.len()),
                host: (!host_samples.is_empty()).then(|| summarize(&host_samples)),
                seed_before_s: before,
                seed_after_s: after,
                seed_change_pct: seed_change,
            }
        })
        .collect()
}

/// Each machine's fitted prices, and the reason for each row whose model
/// change is more than 10 points off the seed's (see [`explain`]).
struct Why {
    model: Option<Prices>,
    seed: Option<Prices>,
    /// Folio size in KiB, model less seed in points, and why.
    rows: Vec<(u64, f64, String)>,
}

fn explain(rows: &[ZapRow], size: u64) -> Why {
    let points = |n: f64, per_page: (f64, f64), batched: (f64, f64)| {
        [per_page, batched].map(|(batches, time)| Point { batches, folios: 1.0 / n, time })
    };
    let pages = (size / 4096) as f64;
    let seed_pages = (1u64 << 30) as f64 / 4096.0;
    let n = |r: &ZapRow| r.folio_kb as f64 / 4.0;
    let model: Vec<Point> = rows
        .iter()
        .flat_map(|r| {
            let [p, b] = r.costs;
            // Medians: a burst of load on a shared machine moves a mean.
            points(n(r), (p[2], r.per_page.median / pages), (b[2], r.batched.median / pages))
        })
        .collect();
    let seed: Vec<Point> = rows
        .iter()
        .flat_map(|r| points(n(r), (1.0, r.seed_before_s / seed_pages), (1.0 / n(r), r.seed_after_s / seed_pages)))
        .collect();
    let (model, seed) = (explain::fit(&model), explain::fit(&seed));
    let mut why = Why { model, seed, rows: Vec::new() };
    let (Some(m), Some(s)) = (model, seed) else { return why };
    for r in rows {
        let off = r.change.pct - r.seed_change_pct as f64;
        if off.abs() > 10.0 {
            let interval = (r.change.lo, r.change.hi);
            let text = explain::reason(&m, &s, n(r), r.change.pct, interval, r.seed_change_pct as f64);
            why.rows.push((r.folio_kb, off, text));
        }
    }
    why
}

fn print_why(why: &Why) {
    let (Some(m), Some(s)) = (why.model, why.seed) else { return };
    let ns = |p: &Prices| {
        format!(
            "fixed {:.1} ns, per zap batch {:.1} ns, per folio freed {:.1} ns (R^2 {:.2})",
            p.fixed * 1e9,
            p.per_batch * 1e9,
            p.per_folio * 1e9,
            p.r2
        )
    };
    println!("\nTime per 4K page fitted to the deterministic counts (least squares):");
    println!("  model: {}\n  seed:  {}", ns(&m), ns(&s));
    if why.rows.is_empty() {
        println!("Every row's change is within 10 points of the seed's.");
    }
}

fn print_table(rows: &[ZapRow], size: u64, rounds: &serde_json::Value, design: Design) {
    println!(
        "munmap() of a {} MiB VMA backed by PTE-mapped folios of one size, model design {design} (the seed ran a\n\
         6.8-era kernel); mean of {rounds} interleaved rounds after a warm-up, in seconds. Change: batched against\n\
         per-page with its interval (Welch's t, 95% for the 9 rows together); '~' marks one holding 0 (noise).\n",
        size >> 20
    );
    let mut t = new_table([
        "Folio Size",
        "per-page",
        "batched",
        "Change",
        "batched/host",
        "host",
        "seed: mm-unstable",
        "seed: New",
        "seed: Change",
        "model - seed",
    ]);
    for r in rows {
        t.add_row([
            format!("{}KiB", r.folio_kb),
            format!("{:.6}", r.per_page.mean),
            format!("{:.6}", r.batched.mean),
            r.change.to_string(),
            r.host.map_or("-".into(), |h| format!("{:.2}x", r.batched.mean / h.mean)),
            r.host.map_or("-".into(), |h| format!("{:.6}", h.mean)),
            format!("{:.6}", r.seed_before_s),
            format!("{:.6}", r.seed_after_s),
            format!("{:+}%", r.seed_change_pct),
            format!("{:+.0} pt", r.change.pct - r.seed_change_pct as f64),
        ]);
    }
    println!("model: per-page, batched, Change; seed 001: Xeon 4210R, 1 GiB\n{t}");
}

/// The deterministic costs behind each row's change: per 4K page, what the
/// rmap updates cost (atomic RMWs, memmap cache lines) and how many zap
/// batches there were, per-page and batched. A folio size whose batched
/// cost falls more than its time did (or less) explains where the model's
/// change departs from the seed's.
fn print_costs(rows: &[ZapRow]) {
    println!("\nPer 4K page unmapped (deterministic): rmap atomic RMWs / memmap cache lines / zap batches");
    let mut t = new_table(["Folio Size", "per-page", "batched", "RMWs saved"]);
    for r in rows {
        let [p, b] = r.costs;
        let cell = |c: [f64; 3]| format!("{:.3} / {:.3} / {:.3}", c[0], c[1], c[2]);
        let saved = if p[0] > 0.0 { format!("{:+.0}%", 100.0 * (b[0] - p[0]) / p[0]) } else { "-".into() };
        t.add_row([format!("{}KiB", r.folio_kb), cell(p), cell(b), saved]);
    }
    println!("{t}");
}
