//! `foliomm bench seed-001`: munmap of a region populated with PTE-mapped
//! folios of each size, zap strategies per-page and batched, host kernel
//! beside (the table of the "optimize unmap/zap with PTE-mapped THP" series).
//! The configurations run in interleaved rounds; each change comes with its
//! 95% confidence interval. The model runs the `nr-mapped` design by
//! default: the seed measured a 6.8-era kernel.

use foliomm::internals::sync::atomic::Ordering::Relaxed;
use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use foliomm::internals::machine::ZapStrategy;
use foliomm::internals::mapcount::Design;
use foliomm::{Config, Machine};

use super::explain::{self, Point, Prices};
use super::harness::{interleaved, metric};
use super::published::SEED_001;
use super::saved::{Row, SavedRun, Series, Table};
use super::stats::{change, summarize, Change, Summary};
use super::{machine_for, model_populate, model_split_pmds, new_table, print_host_notes, progress, secs, CommonArgs};
use crate::host;

/// `bench seed-001`'s options: the common ones (the model's design is
/// nr-mapped unless --mapcount says otherwise: the seed measured a 6.8-era
/// kernel).
#[derive(clap::Args)]
pub struct Seed001Args {
    #[command(flatten)]
    common: CommonArgs,
}

/// What one row measures in each round.
enum Setup {
    Model(ZapStrategy, Arc<Machine>),
    Host,
}

struct ZapRow {
    folio_kb: u64,
    /// Every sample, per-page and batched (and host), in round order.
    per_page_samples: Vec<f64>,
    batched_samples: Vec<f64>,
    host_samples: Vec<f64>,
    per_page: Summary,
    batched: Summary,
    /// Batched against per-page, with its interval.
    change: Change,
    /// Per 4K page unmapped, per-page then batched (deterministic):
    /// atomic RMWs of the rmap, memmap cache lines, zap batches.
    costs: [[f64; 3]; 2],
    host: Option<Summary>,
    host_share_of_size: Option<f64>,
    seed_before_s: f64,
    seed_after_s: f64,
    seed_change_pct: i32,
}

pub(super) fn run(a: &Seed001Args) -> Result<()> {
    let a = &a.common;
    let size = a.size_or("1G")?;
    let rounds = a.runs_or(3);
    let design = a.mapcount.unwrap_or(Design::NrMapped);
    let with_host = !a.no_host;
    let bar = progress(SEED_001.len() as u64 * (rounds as u64 + 1) * (2 + with_host as u64));
    let (mut rows, mut note) = (Vec::new(), None);
    let host_failed = Cell::new(!with_host);
    for (kb, before, after, seed_change) in SEED_001 {
        let order = (kb / 4).trailing_zeros();
        let mut setups = Vec::new();
        for zap in [ZapStrategy::PerPage, ZapStrategy::Batched] {
            setups.push(Setup::Model(zap, machine_for(size, Config { zap, ..a.config(design) })?));
        }
        if !host_failed.get() {
            setups.push(Setup::Host);
        }
        let mut share = None;
        let label = |s: &Setup| match s {
            Setup::Model(zap, _) => format!("{kb}K {}", zap.name()),
            Setup::Host => format!("{kb}K host"),
        };
        let samples = interleaved(&setups, rounds, &bar, label, |s| match s {
            Setup::Model(_, m) => {
                let (mm, addr, _) = model_populate(m, &mut m.new_cpu(), size, order)?;
                if order == 9 {
                    model_split_pmds(&mm, addr, size)?;
                }
                let counters = || {
                    let s = &m.stats;
                    [&s.rmap_atomic_rmw, &s.rmap_cache_lines, &s.zap_batches].map(|c| c.load(Relaxed) as f64)
                };
                let (before, t) = (counters(), Instant::now());
                mm.munmap(addr, size)?;
                let elapsed = secs(t.elapsed());
                let after = counters();
                let pages = (size / 4096) as f64;
                Ok([
                    elapsed,
                    (after[0] - before[0]) / pages,
                    (after[1] - before[1]) / pages,
                    (after[2] - before[2]) / pages,
                ])
            }
            Setup::Host if host_failed.get() => Ok([f64::NAN; 4]),
            Setup::Host => match host::fault_munmap(size as usize, order, order == 9) {
                Ok((_, unmap, got)) => {
                    share = Some(got);
                    Ok([secs(unmap), 0.0, 0.0, 0.0])
                }
                Err(e) => {
                    note = Some(format!("host kernel skipped: {e:#}"));
                    host_failed.set(true);
                    Ok([f64::NAN; 4])
                }
            },
        })?;
        let per_page_samples = metric(&samples[0], 0);
        let batched_samples = metric(&samples[1], 0);
        let host_samples: Vec<f64> =
            samples.get(2).map(|s| metric(s, 0)).unwrap_or_default().into_iter().filter(|v| !v.is_nan()).collect();
        let last = |s: &[[f64; 4]]| s.last().map_or([0.0; 3], |l| [l[1], l[2], l[3]]);
        rows.push(ZapRow {
            folio_kb: kb,
            costs: [last(&samples[0]), last(&samples[1])],
            per_page: summarize(&per_page_samples),
            batched: summarize(&batched_samples),
            change: change(&per_page_samples, &batched_samples, SEED_001.len()),
            host: (!host_samples.is_empty()).then(|| summarize(&host_samples)),
            host_share_of_size: share,
            per_page_samples,
            batched_samples,
            host_samples,
            seed_before_s: before,
            seed_after_s: after,
            seed_change_pct: seed_change,
        });
    }
    bar.finish_and_clear();
    let mut settings = a.settings();
    settings["size"] = size.into();
    settings["rounds"] = rounds.into();
    settings["mapcount"] = design.name().into();
    let why = explain(&rows, size);
    let notes = why.rows.iter().map(|(kb, off, text)| format!("{kb}KiB, {off:+.0} points off the seed: {text}"));
    let notes: Vec<String> = notes.chain(note.clone()).collect();
    if a.out.emit(|| SavedRun { notes, ..saved(&rows, settings) })? {
        return Ok(());
    }
    print_table(&rows, size, rounds, design);
    print_costs(&rows);
    print_why(&why);
    print_host_notes(rows.iter().map(|r| (format!("{}K", r.folio_kb), r.host_share_of_size)), note);
    Ok(())
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
    for (kb, off, text) in &why.rows {
        println!("  {kb}KiB, {off:+.0} points off the seed: {text}.");
    }
}

/// The run as a saved run: one table, a row per folio size.
fn saved(rows: &[ZapRow], settings: serde_json::Value) -> SavedRun {
    // Per 4K page unmapped: what the deterministic costs count.
    let counters = |c: [f64; 3]| {
        let names = ["rmap_rmw_per_page", "memmap_lines_per_page", "zap_batches_per_page"];
        names.into_iter().map(String::from).zip(c).collect()
    };
    let series = |name: &str, samples: &[f64], c: Option<[f64; 3]>| Series {
        name: name.into(),
        samples: samples.to_vec(),
        counters: c.map_or_else(Vec::new, counters),
    };
    let rows = rows
        .iter()
        .map(|r| Row {
            label: format!("{}KiB", r.folio_kb),
            series: [
                series("per-page", &r.per_page_samples, Some(r.costs[0])),
                series("batched", &r.batched_samples, Some(r.costs[1])),
            ]
            .into_iter()
            .chain((!r.host_samples.is_empty()).then(|| series("host", &r.host_samples, None)))
            .collect(),
            published: vec![("mm-unstable".into(), r.seed_before_s), ("New".into(), r.seed_after_s)],
        })
        .collect();
    let table = Table { name: "munmap of PTE-mapped folios".into(), unit: "s".into(), higher_is_better: false, rows };
    SavedRun::new("seed-001", settings, vec![table])
}

fn print_table(rows: &[ZapRow], size: u64, rounds: u32, design: Design) {
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
