//! `foliomm bench mapped-shared`: the 8 micro benchmarks of the "precise mapped
//! shared" series on PTE-mapped 2M THP and 64K mTHP, for every mapcount
//! design, as % change against nr-mapped, with the seed's published rows
//! beside; then its two vm-scalability cases (usemem children COWing the
//! memory they share with their parent, all at once).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use foliomm::internals::mapcount::{Design, RmapIdStage};
use foliomm::internals::mm::Advice;
use foliomm::{Config, Cpu, Machine, Mm};

use super::published::{SEED_000_COLUMNS, SEED_000_MICRO};
use super::runner::{Benchmark, Measurement};
use super::saved::{Row as SavedRow, SavedRun, Table};
use super::seed_000_host::host_once;
use super::seed_000_results::{series_name, Measured, Results, Row, COUNTERS, ORDERS};
use super::{model_populate, model_split_pmds, secs, Seed000Args};

/// The counters a measurement brackets.
fn costs(m: &Machine) -> [u64; 4] {
    let s = &m.stats;
    let ops = [&s.rmap_add_new, &s.rmap_add, &s.rmap_dup, &s.rmap_remove].iter().map(|c| c.load(Relaxed)).sum();
    [ops, s.rmap_atomic_rmw.load(Relaxed), s.rmap_cache_lines.load(Relaxed), s.rmap_seq_lost.load(Relaxed)]
}

/// The rows: every design, or (`--stages`) the seed's code stages: its
/// v6.7 baseline (nr-mapped), then the RFC's rmap-id design at each stage
/// from "mapcount" (a total mapcount, "shared" guessed) to "all"; then,
/// with `host` and without stages, the host kernel (against mm-id).
fn rows(stages: bool, host: bool) -> Vec<Row> {
    let row = |label, design, stage| Row { label, design, stage, host: false };
    if !stages {
        let host = host.then_some(Row { host: true, ..row("host", Design::MmId, RmapIdStage::All) });
        return Design::ALL.iter().map(|&d| row(d.name(), d, RmapIdStage::All)).chain(host).collect();
    }
    let baseline = row("baseline", Design::NrMapped, RmapIdStage::All);
    // `all-auto` is `all` on the host's CPU (only simulated CPUs say their
    // atomics are cheap): see `bench rmap-scaling --sim-profile cheap-atomics`.
    let stages = RmapIdStage::ALL.iter().filter(|&&s| s != RmapIdStage::AllAuto);
    let staged = stages.map(|&stage| row(stage.name(), Design::RmapId, stage));
    std::iter::once(baseline).chain(staged).collect()
}

/// Runs benchmark `which` (an index into SEED_000_COLUMNS) once on a
/// fresh MM of `m`: `size` bytes of folios of `order`. The micro benchmarks
/// PTE-map every folio before the measured action, as the seed does; the
/// vm-scalability cases (usemem --prealloc --prefault, then one child per
/// CPU writes every byte, page by page in address or in random order, all at
/// once) leave 2 MiB THPs PMD-mapped, so a child's first write to each
/// PTE-remaps it and every page is then copied, while the other children
/// (un)map pages of the same folios. Returns the action's time and costs,
/// or None where it does not apply (remap without PMDs).
fn seed_000_once(
    m: &Arc<Machine>,
    cpu: &mut Cpu,
    size: u64,
    order: u32,
    which: usize,
    children: usize,
) -> Result<Option<Measured>> {
    let name = SEED_000_COLUMNS[which];
    let (mm, a, _) = model_populate(m, cpu, size, order)?;
    if name == "remap" && order != 9 {
        mm.munmap(a, size)?;
        return Ok(None);
    }
    let vm_scalability = which >= SEED_000_MICRO;
    if name != "remap" && order == 9 && !vm_scalability {
        model_split_pmds(&mm, a, size)?;
    }
    // (4)-(7): a child shares everything; the reuse cases let it go first.
    let mut child = name.starts_with("cow").then(|| mm.fork()).transpose()?;
    // vm-scalability: one child per CPU, all COWing the same folios, each
    // with its page order made before the clock starts.
    let instances: Vec<(Arc<Mm>, Vec<u64>)> = if vm_scalability {
        (0..children)
            .map(|i| Ok((mm.fork()?, usemem_page_order(size, name == "anon-cow-rand", i as u64))))
            .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    if name.starts_with("cow-reuse") {
        child = None;
    }
    let (before, t) = (costs(m), Instant::now());
    match name {
        "remap" => model_split_pmds(&mm, a, size)?,
        "munmap" => mm.munmap(a, size)?,
        "fork" => child = Some(mm.fork()?),
        "cow" | "cow-reuse" => cpu.fill(&mm, a, size, 2)?,
        "cow-byte" | "cow-reuse-byte" => cpu.write_byte_per_page(&mm, a, size, 2)?,
        "anon-cow-seq" | "anon-cow-rand" => vm_scalability_run(m, &instances, a)?,
        _ => {
            for off in (0..size).step_by(4096) {
                mm.madvise(a + off, 4096, Advice::DontNeed)?;
            }
        }
    }
    let seconds = secs(t.elapsed());
    let after = costs(m);
    // Every MM that wrote reads its 2 back; every other one still reads the
    // 1 each page was populated with.
    let readers: Vec<(&Mm, u8)> = match child.as_ref().filter(|_| name != "fork") {
        Some(c) => vec![(&mm, 2), (c, 1)],
        None if vm_scalability => std::iter::once((&*mm, 1)).chain(instances.iter().map(|(c, _)| (&**c, 2))).collect(),
        None => Vec::new(),
    };
    let mut byte = [0u8; 1];
    for (who, want) in readers {
        for off in (0..size).step_by(4096) {
            cpu.read(who, a + off, &mut byte)?;
            if byte[0] != want {
                bail!("{name}: byte at offset {off:#x} reads {:#x}, expected {want:#x}: a COW leak", byte[0]);
            }
        }
    }
    drop(child);
    drop(instances);
    if name != "munmap" {
        mm.munmap(a, size)?;
    }
    Ok(Some(Measured {
        seconds,
        rmap_ops: after[0] - before[0],
        rmw: after[1] - before[1],
        lines: after[2] - before[2],
        lost: after[3] - before[3],
    }))
}

/// How many vm-scalability instances run at once: `--instances`, or one per
/// CPU as the seed ran them.
fn vm_scalability_instances(a: &Seed000Args) -> usize {
    a.instances.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), usize::from)
}

/// The order in which usemem's instance `i` writes the pages of `size`
/// bytes: by address, or shuffled from seed `USEMEM_SEED + i` (fixed, so
/// that every design meets the same orders).
fn usemem_page_order(size: u64, random: bool, i: u64) -> Vec<u64> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let mut pages: Vec<u64> = (0..size / 4096).collect();
    if random {
        pages.shuffle(&mut rand::rngs::StdRng::seed_from_u64(USEMEM_SEED + i));
    }
    pages
}

/// The seed of the first usemem instance's random page order.
const USEMEM_SEED: u64 = 0x5eed;

/// usemem's write pass in every instance at once, each on its own CPU
/// thread, page by page in the instance's order, from `a`.
fn vm_scalability_run(m: &Arc<Machine>, instances: &[(Arc<Mm>, Vec<u64>)], a: u64) -> Result<()> {
    std::thread::scope(|s| {
        let workers: Vec<_> = instances
            .iter()
            .map(|(mm, pages)| {
                s.spawn(move || -> Result<()> {
                    let mut cpu = m.new_cpu();
                    for p in pages {
                        cpu.fill(mm, a + p * 4096, 4096, 2)?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().expect("vm-scalability worker panicked"))
    })
}

/// One configuration: a folio size (an index into [`ORDERS`]), a benchmark
/// (into [`SEED_000_COLUMNS`]) and a row (a design, a stage or the host).
type Setup = (usize, usize, usize);

/// `bench mapped-shared` as the runner drives it.
pub(super) struct Seed000<'a> {
    args: &'a Seed000Args,
    size: u64,
    /// The vm-scalability cases' children.
    instances: usize,
    /// The designs or stages, then the host (unless --no-host).
    rows: Vec<Row>,
}

impl<'a> Seed000<'a> {
    pub(super) fn new(args: &'a Seed000Args) -> Result<Seed000<'a>> {
        args.common.refuse("mapcount", "seed-000 runs every design (--stages: rmap-id at each stage)")?;
        let (size, instances) = (args.common.size_or("1G")?, vm_scalability_instances(args));
        Ok(Seed000 { args, size, instances, rows: rows(args.stages, !args.common.no_host) })
    }
}

impl Benchmark for Seed000<'_> {
    type Config = Setup;
    const NAME: &'static str = "mapped-shared";

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "size": self.size, "instances": self.instances, "stages": self.args.stages })
    }

    /// A table per folio size, a row per benchmark (one that does not
    /// apply, remap without PMDs, has no series), a series per design (with
    /// its costs) and the host. The seed publishes changes, not times.
    fn tables(&self) -> Vec<Table> {
        let row = |label: &&str| SavedRow { label: label.to_string(), series: Vec::new(), published: Vec::new() };
        let table = |(_, oname)| Table {
            name: format!("seed 000, {oname}"),
            unit: "s".into(),
            higher_is_better: false,
            rows: SEED_000_COLUMNS.iter().map(row).collect(),
        };
        ORDERS.map(table).into()
    }

    /// Per folio size and benchmark, the rows in interleaved rounds, so
    /// that load on the machine lands on all of them; the host runs the
    /// micro benchmarks only.
    fn plan(&self, host: bool) -> Vec<Vec<Setup>> {
        let mut groups = Vec::new();
        for oi in 0..ORDERS.len() {
            for bi in 0..SEED_000_COLUMNS.len() {
                let on = |r: &Row| !r.host || (host && bi < SEED_000_MICRO);
                groups.push(self.rows.iter().enumerate().filter(|(_, r)| on(r)).map(|(di, _)| (oi, bi, di)).collect());
            }
        }
        groups
    }

    fn place(&self, &(_, bi, di): &Setup) -> (String, String) {
        (SEED_000_COLUMNS[bi].into(), series_name(&self.rows[di], self.args.stages))
    }

    fn label(&self, &(oi, bi, di): &Setup) -> String {
        format!("{} {} {}", ORDERS[oi].1, SEED_000_COLUMNS[bi], self.rows[di].label)
    }

    fn on_host(&self, &(_, _, di): &Setup) -> bool {
        self.rows[di].host
    }

    /// A fresh machine for each sample (built outside the timed part), so
    /// that only one holds memory at once.
    fn measure(&mut self, &(oi, bi, di): &Setup) -> Result<Measurement> {
        let (size, order, r) = (self.size, ORDERS[oi].0, self.rows[di]);
        if r.host {
            let t = host_once(size as usize, order, SEED_000_COLUMNS[bi])?;
            return Ok(Measurement { samples: t.map(|t| (oi, t)).into_iter().collect(), ..Measurement::default() });
        }
        // Room for a copy of everything per child (cow, vm-scalability).
        let memory = (1 + self.instances as u64) * size + (256 << 20);
        let mut config = Config { memory, rmap_id_stage: r.stage, ..self.args.common.config(r.design) };
        if self.args.stages {
            // The seed's v6.7 zapped and forked PTE by PTE.
            config.zap = foliomm::internals::machine::ZapStrategy::PerPage;
        }
        let m = super::new_machine(config)?;
        let Some(got) = seed_000_once(&m, &mut m.new_cpu(), size, order, bi, self.instances)? else {
            return Ok(Measurement::default());
        };
        let counts = [got.rmap_ops, got.rmw, got.lines, got.lost].map(|v| v as f64);
        Ok(Measurement { samples: vec![(oi, got.seconds)], ..Measurement::default() }
            .counting(COUNTERS.into_iter().zip(counts)))
    }

    fn print(&self, run: &SavedRun) {
        let res = Results::new(run, &self.rows, self.args.stages);
        super::seed_000_tables::print(&res, self.size, &run.settings["rounds"], self.instances);
    }
}
