//! `foliomm bench shmem-rmap`: Hugh Dickins' measurement from the seed 003
//! thread (the compound mapcount of shmem THPs under a bit spinlock):
//! `munmap(mmap(SIZE, MAP_SHARED|MAP_POPULATE, shmem fd))` repeated, with
//! 4K pages and with 2M folios, and two 2M variants: the file already mapped
//! by PMDs elsewhere (PMD-mapped a second time), and already mapped by PTEs
//! elsewhere (PMD-mapped after PTE-mapped, when the 6.2-rc design scans);
//! and 2M folios mapped by PTEs (the mapping 4 KiB off a PMD boundary).
//! Under the `subpage`, `compound-locked`, `nr-mapped` and `mm-id` mapcount
//! designs, in interleaved rounds; with the rmap cost per PMD map and unmap
//! each design's kernel code pays (atomic RMWs, memmap cache lines), the
//! seed's figures, and the host kernel (a memfd, `shmem_enabled` set to
//! `always` or `never` and restored).

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use foliomm::internals::folio::thp::ShmemHuge;
use foliomm::internals::mapcount::Design;
use foliomm::internals::sync::atomic::Ordering::Relaxed;
use foliomm::{Config, Machine, MmapFlags, Prot};
use foliomm_host::sys::{memfd, Map};

use super::new_table;
use super::progress::Progress;
use super::runner::{Benchmark, Measurement};
use super::saved::{SavedRun, Table};
use super::stats::{change, summarize, Change};

#[derive(clap::Args)]
pub(super) struct Seed003Args {
    /// The common options (--size: the shmem file mapped, the seed's 2G by
    /// default; the benchmark compares four designs, so no --mapcount).
    #[command(flatten)]
    pub(super) common: super::CommonArgs,
    /// Timed munmap(mmap()) pairs per round, after one that fills the file
    /// (the seed made 100, the first of which filled it); 1 to 10000.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    iterations: u32,
}

const DESIGNS: [Design; 4] = [Design::Subpage, Design::CompoundLocked, Design::NrMapped, Design::MmId];

const PMD: u64 = 2 << 20;

/// The five cases, with the seed's times per 100 pairs of 2 GiB before and
/// after the series (the 4K case was only measured before; for 2M folios
/// mapped by PTEs the seed gave no times: "largely unaffected but variable:
/// between 5% faster and 5% slower").
const CASES: [(&str, Case, Option<f64>, Option<f64>); 5] = [
    ("4K pages", Case::Small, Some(18.0), None),
    ("2M folios", Case::Huge, Some(1.0), Some(0.115)),
    ("2M, PMD-mapped a second time", Case::Again, Some(0.860), Some(0.086)),
    ("2M, PMD-mapped after PTE-mapped", Case::AfterPte, Some(0.870), Some(0.495)),
    ("2M folios mapped by PTEs", Case::ByPte, None, None),
];

/// The seed's change for 2M folios mapped by PTEs, in %: from -5 to +5.
const BY_PTE_CHANGE: (f64, f64) = (-5.0, 5.0);

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
enum Case {
    Small,
    Huge,
    Again,
    AfterPte,
    /// The timed mapping lies 4 KiB off a PMD boundary: THPs mapped by PTEs.
    ByPte,
}

/// What one configuration's sample measured: seconds per munmap(mmap())
/// pair, and (model) the rmap cost per pair.
#[derive(Clone, Copy, Default)]
struct Figure {
    seconds: f64,
    rmw: f64,
    lines: f64,
    locks: f64,
}

/// One configuration: a case (an index into [`CASES`]) under a design, or
/// on the host kernel.
#[derive(Clone, Copy)]
pub(super) enum Setup {
    Model(usize, Design),
    Host(usize),
}

/// One case's results: the mean time per design (then the host's), the
/// deterministic costs, and each design's change against `subpage` (6.1,
/// the seed's "before").
struct CaseRow {
    case: &'static str,
    mean_s: Vec<Option<f64>>,
    costs: Vec<Figure>,
    change_against_subpage: Vec<Option<Change>>,
}

/// `bench shmem-rmap` as the runner drives it.
pub(super) struct Seed003<'a> {
    args: &'a Seed003Args,
    size: u64,
    iterations: u32,
    /// A machine per design, for every case.
    machines: Vec<Arc<Machine>>,
}

impl<'a> Seed003<'a> {
    pub(super) fn new(args: &'a Seed003Args) -> Result<Seed003<'a>> {
        args.common.refuse("mapcount", "seed-003 compares subpage, compound-locked, nr-mapped and mm-id")?;
        Ok(Seed003 { args, size: args.common.size_or("2G")?, iterations: args.iterations.max(1), machines: Vec::new() })
    }
}

/// Each design against subpage, in every case: one family.
const FAMILY: usize = CASES.len() * (DESIGNS.len() - 1);

const COUNTERS: [&str; 3] = ["rmap_rmw", "memmap_lines", "locks"];

impl Benchmark for Seed003<'_> {
    type Config = Setup;
    const NAME: &'static str = "shmem-rmap";
    const RUNS: u32 = 5;

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "size": self.size, "iterations": self.iterations })
    }

    fn tables(&self) -> Vec<Table> {
        vec![Table {
            name: "munmap(mmap()) of a shmem file".into(),
            unit: "s".into(),
            higher_is_better: false,
            rows: Vec::new(),
        }]
    }

    fn plan(&self, host: bool) -> Vec<Vec<Setup>> {
        let case = |i| DESIGNS.iter().map(move |&d| Setup::Model(i, d)).chain(host.then_some(Setup::Host(i)));
        (0..CASES.len()).map(|i| case(i).collect()).collect()
    }

    fn prepare(&mut self, _: &[Setup], _: &Progress) -> Result<()> {
        if self.machines.is_empty() {
            let config = |d| Config { memory: self.size + (256 << 20), ..self.args.common.config(d) };
            self.machines = DESIGNS.iter().map(|&d| super::new_machine(config(d))).collect::<Result<_>>()?;
        }
        Ok(())
    }

    fn place(&self, c: &Setup) -> (String, String) {
        match *c {
            Setup::Model(i, d) => (CASES[i].0.into(), d.name().into()),
            Setup::Host(i) => (CASES[i].0.into(), "host".into()),
        }
    }

    fn on_host(&self, c: &Setup) -> bool {
        matches!(c, Setup::Host(_))
    }

    fn measure(&mut self, c: &Setup) -> Result<Measurement> {
        match *c {
            Setup::Model(i, d) => {
                let m = &self.machines[DESIGNS.iter().position(|&x| x == d).unwrap()];
                let f = model_case(m, CASES[i].1, self.size, self.iterations)?;
                Ok(Measurement::of([f.seconds]).counting(COUNTERS.into_iter().zip([f.rmw, f.lines, f.locks])))
            }
            Setup::Host(i) => Ok(Measurement::of([host_case(CASES[i].1, self.size as usize, self.iterations)?])),
        }
    }

    /// The seed's times per pair, scaled to this size.
    fn published(&self, _: usize, row: &str) -> Vec<(String, f64)> {
        let Some(&(_, _, before, after)) = CASES.iter().find(|c| c.0 == row) else { return Vec::new() };
        let per_pair = |s: f64| s / 100.0 * self.size as f64 / (2u64 << 30) as f64;
        [("before (scaled)", before), ("after (scaled)", after)]
            .into_iter()
            .filter_map(|(n, v)| Some((n.to_string(), per_pair(v?))))
            .collect()
    }

    fn print(&self, run: &SavedRun) {
        let rows = case_rows(run);
        print_table(&rows, self.size, self.iterations, &run.settings["rounds"]);
    }
}

/// Each case's figures, from the run's table.
fn case_rows(run: &SavedRun) -> Vec<CaseRow> {
    let t = &run.tables[0];
    CASES
        .iter()
        .map(|&(case, ..)| {
            let names = DESIGNS.iter().map(|d| d.name()).chain(["host"]);
            let times: Vec<&[f64]> = names.map(|n| t.samples(case, n).unwrap_or_default()).collect();
            let costs = DESIGNS
                .iter()
                .map(|d| {
                    let [rmw, lines, locks] =
                        COUNTERS.map(|c| t.series(case, d.name()).and_then(|s| s.counter(c)).unwrap_or(0.0));
                    Figure { seconds: 0.0, rmw, lines, locks }
                })
                .collect();
            CaseRow {
                case,
                mean_s: times.iter().map(|t| (!t.is_empty()).then(|| summarize(t).mean)).collect(),
                costs,
                change_against_subpage: (0..DESIGNS.len())
                    .map(|d| (d > 0).then(|| change(times[0], times[d], FAMILY)))
                    .collect(),
            }
        })
        .collect()
}

/// Sets the machine's shmem policy for `case`, maps what the case keeps
/// mapped beside, then times `iterations` munmap(mmap(populate)) pairs.
fn model_case(m: &Arc<Machine>, case: Case, size: u64, iterations: u32) -> Result<Figure> {
    m.thp.set_shmem_enabled(if case == Case::Small { ShmemHuge::Never } else { ShmemHuge::Always });
    let f = m.memfd_create(size)?;
    let mm = m.new_mm()?;
    let shared = MmapFlags { shared: true, ..MmapFlags::default() };
    // The mapping a variant keeps: by PMDs (populated first), or by PTEs.
    let keep = match case {
        Case::Again => Some(mm.mmap_file(0, size, Prot::RW, MmapFlags { populate: true, ..shared }, Some((&f, 0)))?),
        Case::AfterPte => {
            // Fill the file with THPs through a PMD mapping, then map them
            // by PTEs through a mapping 4 KiB off a PMD boundary, which no
            // release maps by PMDs (MADV_NOHUGEPAGE would do only from
            // 6.12 on, see KernelVersion::pmd_maps_only_where_thp_allowed).
            let first = mm.mmap_file(0, size, Prot::RW, MmapFlags { populate: true, ..shared }, Some((&f, 0)))?;
            mm.munmap(first, size)?;
            let room = mm.mmap(0, size + PMD, Prot::RW, MmapFlags::default())?;
            mm.munmap(room, size + PMD)?;
            let at = room.next_multiple_of(PMD) + 4096;
            let k = mm.mmap_file(at, size, Prot::RW, MmapFlags { fixed: true, ..shared }, Some((&f, 0)))?;
            m.new_cpu().read_byte_per_page(&mm, k, size)?;
            Some(k)
        }
        Case::Small | Case::Huge | Case::ByPte => None,
    };
    if let (Case::AfterPte, Some(k)) = (case, keep) {
        let info = mm.page_info(k);
        ensure!(!info.pmd_mapped && info.folio_order == 9, "model: the kept mapping does not map THPs by PTEs");
    }
    // One pair fills the file (for the variants, the kept mapping did).
    let a = mm.mmap_file(0, size, Prot::RW, MmapFlags { populate: true, ..shared }, Some((&f, 0)))?;
    mm.munmap(a, size)?;
    // ByPte's pairs map 4 KiB off a PMD boundary, where no PMD can map.
    let at = match case {
        Case::ByPte => {
            let room = mm.mmap(0, size + PMD, Prot::RW, MmapFlags::default())?;
            mm.munmap(room, size + PMD)?;
            room.next_multiple_of(PMD) + 4096
        }
        _ => 0,
    };
    let populate = MmapFlags { populate: true, fixed: at != 0, ..shared };
    let stats = &m.stats;
    let before =
        (stats.rmap_atomic_rmw.load(Relaxed), stats.rmap_cache_lines.load(Relaxed), stats.rmap_locks.load(Relaxed));
    let t = Instant::now();
    for _ in 0..iterations {
        let a = mm.mmap_file(at, size, Prot::RW, populate, Some((&f, 0)))?;
        let info = mm.page_info(a);
        match case {
            Case::Small => {}
            Case::ByPte => ensure!(!info.pmd_mapped && info.folio_order == 9, "model: THPs not mapped by PTEs"),
            _ => ensure!(info.pmd_mapped, "model: the file is not PMD-mapped"),
        }
        mm.munmap(a, size)?;
    }
    let seconds = t.elapsed().as_secs_f64() / iterations as f64;
    let per = |now: u64, then: u64| (now - then) as f64 / iterations as f64;
    let fig = Figure {
        seconds,
        rmw: per(stats.rmap_atomic_rmw.load(Relaxed), before.0),
        lines: per(stats.rmap_cache_lines.load(Relaxed), before.1),
        locks: per(stats.rmap_locks.load(Relaxed), before.2),
    };
    drop(mm);
    let violations = m.check();
    ensure!(violations.is_empty(), "model: the checker found {violations:?}");
    Ok(fig)
}

/// The same on the host: a memfd, `shmem_enabled` for the case (restored
/// afterwards, also on interruption), the kept mapping, the timed pairs.
fn host_case(case: Case, size: usize, iterations: u32) -> Result<f64> {
    use foliomm_host::sysfs;
    let mode = if case == Case::Small { "never" } else { "always" };
    sysfs::set(&sysfs::shmem_path(None), mode).map_err(anyhow::Error::msg)?;
    let r = host_pairs(case, size, iterations);
    sysfs::restore_all();
    r
}

fn host_pairs(case: Case, size: usize, iterations: u32) -> Result<f64> {
    let fd = memfd(c"foliomm-seed-003", size as u64, false).context("memfd_create")?;
    let file = Map::file(Some((fd.as_fd(), 0))).shared(true);
    let map = |populate: bool| {
        let how = if populate { file.populate() } else { file };
        how.map(size).context("host mmap")
    };
    let _keep = match case {
        Case::Again => Some(map(true)?),
        Case::AfterPte => {
            // A populated mapping made and unmapped at once fills the file;
            // then a mapping 4 KiB off a PMD boundary that reads it page by
            // page maps it with PTEs (as on the model).
            drop(map(true)?);
            let room = Map::anon().aligned(PMD as usize).map(size + PMD as usize).context("host mmap")?.addr();
            let k = file.at(room + 4096).map(size).context("host mmap")?;
            k.read_every(0..size, 4096);
            Some(k)
        }
        Case::Small | Case::Huge | Case::ByPte => None,
    };
    // One pair fills the file.
    drop(map(true)?);
    // ByPte's pairs map 4 KiB off a PMD boundary, as on the model.
    let by_pte = match case {
        Case::ByPte => Some(Map::anon().aligned(PMD as usize).map(size + PMD as usize).context("host mmap")?.addr()),
        _ => None,
    };
    let t = Instant::now();
    for _ in 0..iterations {
        match by_pte {
            Some(room) => drop(file.populate().at(room + 4096).map(size).context("host mmap")?),
            None => drop(map(true)?),
        }
    }
    Ok(t.elapsed().as_secs_f64() / iterations as f64)
}

fn print_table(rows: &[CaseRow], size: u64, iterations: u32, rounds: &serde_json::Value) {
    let family = FAMILY;
    let scale = 100.0 * (2u64 << 30) as f64 / size as f64;
    let ms = |s: Option<f64>| s.map_or("-".into(), |s| format!("{:.3}", s * 1e3));
    println!(
        "\nSeed 003: munmap(mmap({} MiB, MAP_SHARED|MAP_POPULATE, memfd)), ms per pair, mean of {rounds} interleaved\n\
         rounds of {iterations} pairs; each design's change against subpage (6.1), '~' where its interval (Welch's t,\n\
         95% for the {family} changes together) holds 0\n",
        size >> 20
    );
    let designs = || std::iter::once("case").chain(DESIGNS.map(|d| d.name()));
    let mut t = new_table(designs().chain(["host", "seed (100 x 2G, before -> after)"]));
    for (r, (name, _, before, after)) in rows.iter().zip(&CASES) {
        let cells = r.mean_s[..DESIGNS.len()].iter().enumerate().map(|(d, mean)| {
            let change = match r.change_against_subpage[d] {
                Some(c) if c.significant() => format!(" {:+.0}%", c.pct),
                Some(c) => format!(" ~{:+.0}%", c.pct),
                None => String::new(),
            };
            ms(*mean) + &change
        });
        let seed = match (before, after) {
            (Some(b), Some(a)) => format!("{b} s -> {a} s"),
            (Some(b), None) => format!("{b} s"),
            _ => format!("{:+.0}% to {:+.0}% (no times)", BY_PTE_CHANGE.0, BY_PTE_CHANGE.1),
        };
        let host = ms(r.mean_s.get(DESIGNS.len()).copied().flatten());
        t.add_row(std::iter::once(name.to_string()).chain(cells).chain([host, seed]).collect::<Vec<_>>());
    }
    println!("{t}");
    println!(
        "\nThe seed's times are for 100 pairs of 2 GiB, the first filling the file; one pair here is {scale:.0}x less work."
    );
    println!(
        "\nrmap cost per pair, as each design's kernel code pays it (atomic RMWs / memmap cache lines / locks):\n"
    );
    let mut t = new_table(designs());
    for r in rows {
        let cells = r.costs.iter().map(|f| format!("{:.0}/{:.0}/{:.0}", f.rmw, f.lines, f.locks));
        t.add_row(std::iter::once(r.case.to_string()).chain(cells).collect::<Vec<_>>());
    }
    println!("{t}");
    print_against_seed(rows);
}

/// The seed's series is compound-locked against subpage: the model's change
/// beside the seed's, and for a row more than 10 points off, why, from the
/// deterministic costs (see [`why_off`]).
fn print_against_seed(rows: &[CaseRow]) {
    println!("\ncompound-locked (the seed's series) against subpage (6.1), model and seed:\n");
    let mut t = new_table(["case", "model", "seed", "model - seed", "why, where more than 10 points off"]);
    let cl = DESIGNS.iter().position(|&d| d == Design::CompoundLocked).unwrap();
    for (r, (name, case, before, after)) in rows.iter().zip(&CASES) {
        let Some(model) = r.change_against_subpage[cl] else { continue };
        let (lo, hi) = match (before, after) {
            (Some(b), Some(a)) => (100.0 * (a / b - 1.0), 100.0 * (a / b - 1.0)),
            _ if *case == Case::ByPte => BY_PTE_CHANGE,
            _ => continue,
        };
        // Points outside the seed's change (a band for ByPte).
        let off = model.pct - model.pct.clamp(lo, hi);
        let seed = if lo == hi { format!("{lo:+.0}%") } else { format!("{lo:+.0}% to {hi:+.0}%") };
        let why = if off.abs() > 10.0 { why_off(&model, lo, r.costs[0], r.costs[cl]) } else { String::new() };
        t.add_row([name.to_string(), model.to_string(), seed, format!("{off:+.0} pt"), why]);
    }
    println!("{t}");
}

/// Splits each machine's time ratio (after/before) between the two costs
/// the designs count: `t = x * rmw_ratio + (1 - x) * line_ratio`, where
/// the ratios are compound-locked's counts over subpage's. `1 - x` is the
/// share of subpage's time that went to the work the series keeps (its
/// memmap cache lines); machines that differ in it differ in the change.
fn why_off(model: &Change, seed: f64, before: Figure, after: Figure) -> String {
    if (model.lo..=model.hi).contains(&seed) {
        return format!("the seed's {seed:+.0}% is inside the model's interval: noise");
    }
    let (rmw, lines) = (after.rmw / before.rmw, after.lines / before.lines);
    if !(rmw.is_finite() && lines.is_finite()) || (lines - rmw).abs() < 0.05 {
        return "the costs counted change alike: not separable".into();
    }
    let kept = |pct: f64| 100.0 * ((1.0 + pct / 100.0) - rmw) / (lines - rmw);
    format!(
        "compound-locked keeps x{lines:.2} of the memmap lines and x{rmw:.3} of the RMWs; the lines' share of subpage's time is {:.0}% in the model, {:.0}% in the seed",
        kept(model.pct),
        kept(seed)
    )
}
