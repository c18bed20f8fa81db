//! `foliomm bench seed-000`: the 8 micro benchmarks of the "precise mapped
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

use super::harness::{interleaved, metric};
use super::published::{SEED_000_AMD, SEED_000_COLUMNS, SEED_000_INTEL, SEED_000_MICRO, SEED_000_VMSCAL};
use super::saved::{Row as SavedRow, SavedRun, Series, Table};
use super::seed_000_host::{host_once, print_against_host};
use super::stats::{change, summarize, Change};
use super::{model_populate, model_split_pmds, new_table, progress, secs, Seed000Args};

/// Time and the mapcount design's costs over the measured action.
#[derive(Clone, Copy, Default)]
struct Measured {
    seconds: f64,
    rmap_ops: u64,
    rmw: u64,
    lines: u64,
    /// Exclusive seqcount entries lost to another writer.
    lost: u64,
}

/// The counters a measurement brackets.
fn costs(m: &Machine) -> [u64; 4] {
    let s = &m.stats;
    let ops = [&s.rmap_add_new, &s.rmap_add, &s.rmap_dup, &s.rmap_remove].iter().map(|c| c.load(Relaxed)).sum();
    [ops, s.rmap_atomic_rmw.load(Relaxed), s.rmap_cache_lines.load(Relaxed), s.rmap_seq_lost.load(Relaxed)]
}

/// One row of the tables: a design, at a stage of seed 000's series, or
/// the host kernel.
#[derive(Clone, Copy)]
struct Row {
    label: &'static str,
    design: Design,
    stage: RmapIdStage,
    host: bool,
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
    let staged = RmapIdStage::ALL.iter().map(|&stage| row(stage.name(), Design::RmapId, stage));
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

pub(super) fn run(a: &Seed000Args, size: u64) -> Result<()> {
    a.common.refuse("mapcount", "seed-000 runs every design (--stages: rmap-id at each stage)")?;
    let rounds = a.common.runs_or(3);
    let instances = vm_scalability_instances(a);
    let all_rows = rows(a.stages, !a.common.no_host);
    let all_rows = &all_rows[..];
    // The model's rows (the tables of changes against nr-mapped).
    let designs = &all_rows[..all_rows.iter().take_while(|r| !r.host).count()];
    let mut host_note = None;
    let orders = [(9u32, "2 MiB THP"), (4, "64 KiB mTHP")];
    let columns = SEED_000_COLUMNS.len();
    let bar = progress((orders.len() * all_rows.len() * columns) as u64 * (rounds as u64 + 1));
    // samples[order][bench][design]: every kept round's time and costs
    // (None where the benchmark does not apply).
    let mut samples = Vec::new();
    for (order, oname) in orders {
        let mut per_bench = Vec::new();
        for (bi, bname) in SEED_000_COLUMNS.iter().enumerate() {
            // The designs in interleaved rounds, so that load on the machine
            // lands on all of them; a fresh machine for each sample (built
            // outside the timed part), so that only one holds memory at once.
            let label = |r: &Row| format!("{oname} {bname} {}", r.label);
            let got = interleaved(all_rows, rounds, &bar, label, |r| {
                if r.host {
                    // The micro benchmarks only; a host that cannot is skipped, with why.
                    let t = match (bi < SEED_000_MICRO && host_note.is_none())
                        .then(|| host_once(size as usize, order, bname))
                    {
                        Some(Ok(t)) => t,
                        Some(Err(e)) => {
                            host_note = Some(format!("host kernel skipped: {e:#}"));
                            None
                        }
                        None => None,
                    };
                    return Ok([t.unwrap_or(f64::NAN), 0.0, 0.0, 0.0, 0.0]);
                }
                // Room for a copy of everything per child (cow, vm-scalability).
                let memory = (1 + instances as u64) * size + (256 << 20);
                let mut config = Config { memory, rmap_id_stage: r.stage, ..a.common.config(r.design) };
                if a.stages {
                    // The seed's v6.7 zapped and forked PTE by PTE.
                    config.zap = foliomm::internals::machine::ZapStrategy::PerPage;
                }
                let m = Machine::new(config)?;
                let r = seed_000_once(&m, &mut m.new_cpu(), size, order, bi, instances)?;
                let costs = r.map_or([0.0; 4], |r| [r.rmap_ops as f64, r.rmw as f64, r.lines as f64, r.lost as f64]);
                Ok([r.map_or(f64::NAN, |r| r.seconds), costs[0], costs[1], costs[2], costs[3]])
            })?;
            per_bench.push(got);
        }
        samples.push(per_bench);
    }
    bar.finish_and_clear();
    let base = designs.iter().position(|r| r.design == Design::NrMapped).unwrap();
    // Times of (order, bench, design), None where the benchmark does not apply.
    let times = |oi: usize, bi: usize, di: usize| -> Option<Vec<f64>> {
        let t = metric(&samples[oi][bi][di], 0);
        (!t.iter().any(|v| v.is_nan())).then_some(t)
    };
    // The comparisons of a micro-benchmark table (each design but the
    // baseline, each benchmark) and of the vm-scalability table form a
    // family each.
    let micro_family = (designs.len() - 1) * SEED_000_MICRO;
    let vm_family = (designs.len() - 1) * orders.len() * (columns - SEED_000_MICRO);
    let family = |bi: usize| if bi < SEED_000_MICRO { micro_family } else { vm_family };
    let change_of =
        |oi: usize, di: usize, bi: usize| Some(change(&times(oi, bi, base)?, &times(oi, bi, di)?, family(bi)));
    // The deterministic costs: of the last round.
    let costs_of = |oi: usize, di: usize, bi: usize| {
        samples[oi][bi][di].last().map(|s| Measured {
            seconds: s[0],
            rmap_ops: s[1] as u64,
            rmw: s[2] as u64,
            lines: s[3] as u64,
            lost: s[4] as u64,
        })
    };
    let series_name = |r: &Row| match (r.host, a.stages && r.design.has_stages()) {
        (true, _) => "host".to_string(),
        // With --stages, the design and its stage ("rmap-id 123").
        (false, true) => format!("{} {}", r.design, r.stage),
        (false, false) => r.design.to_string(),
    };
    let printed = a.common.out.emit(|| {
        let mut settings = a.common.settings();
        for (k, v) in [("size", size.into()), ("rounds", rounds.into()), ("instances", instances.into())] {
            settings[k] = v;
        }
        settings["stages"] = a.stages.into();
        let series = |oi, bi, di, r: &Row| {
            let c = costs_of(oi, di, bi).filter(|_| !r.host).unwrap_or_default();
            let counters =
                [("rmap_ops", c.rmap_ops), ("atomic_rmw", c.rmw), ("cache_lines", c.lines), ("lost_exclusive", c.lost)];
            let counters = if r.host { Vec::new() } else { counters.map(|(n, v)| (n.to_string(), v as f64)).to_vec() };
            Some(Series { name: series_name(r), samples: times(oi, bi, di)?, counters })
        };
        let tables = orders.iter().enumerate().map(|(oi, (_, oname))| Table {
            name: format!("seed 000, {oname}"),
            unit: "s".into(),
            higher_is_better: false,
            rows: SEED_000_COLUMNS
                .iter()
                .enumerate()
                .map(|(bi, bname)| SavedRow {
                    label: bname.to_string(),
                    series: all_rows.iter().enumerate().filter_map(|(di, r)| series(oi, bi, di, r)).collect(),
                    // The seed publishes changes, not times.
                    published: Vec::new(),
                })
                .collect(),
        });
        SavedRun::new("seed-000", settings, tables.collect())
    })?;
    if printed {
        return Ok(());
    }
    // A table of the micro benchmarks (1)..(8), a row per design or stage.
    let micro = |label: &str| {
        new_table(std::iter::once(label.to_string()).chain((1..=SEED_000_MICRO).map(|i| format!("({i})"))))
    };
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}%"));
    // A change inside the noise (its interval holds 0) is marked '~'.
    let cell = |c: Option<Change>| match c {
        Some(c) if !c.significant() => format!("~{:.0}%", c.pct),
        c => pct(c.map(|c| c.pct)),
    };
    let row = |label: &str, cells: Vec<String>| std::iter::once(label.to_string()).chain(cells).collect::<Vec<_>>();
    println!(
        "Seed 000 micro benchmarks on the model, {} MiB of PTE-mapped folios, mean of {rounds} interleaved rounds.",
        size >> 20
    );
    println!("(1) remap (2) munmap (3) fork (4) cow (5) cow-byte (6) cow-reuse (7) cow-reuse-byte (8) pte-dontneed");
    println!("% change in runtime against nr-mapped (Linux 6.2-6.9, the seed's baseline v6.7); negative is faster;");
    if a.stages {
        println!("the stages run the rmap-id design (set rmap_id_stage), zap and fork per page as on v6.7;");
        println!("the seed's rows beside (2 MiB THP);");
    }
    println!("'~' where the change's interval holds 0 (noise): Welch's t, 95% for the {micro_family} changes of a");
    println!("table together (Bonferroni).\n");
    // The seed's published row of `label` on each machine (2 MiB THP).
    let published = |label: &'static str| {
        [("  Intel", &SEED_000_INTEL), ("  AMD", &SEED_000_AMD)]
            .into_iter()
            .filter_map(move |(cpu, rows)| rows.iter().find(|(n, _)| *n == label).map(|(_, v)| (cpu, v)))
    };
    let first = if a.stages { "stage" } else { "design" };
    for (oi, (_, oname)) in orders.iter().enumerate() {
        let mut t = micro(first);
        for (di, r) in designs.iter().enumerate() {
            t.add_row(row(r.label, (0..SEED_000_MICRO).map(|bi| cell(change_of(oi, di, bi))).collect()));
            if a.stages && oi == 0 {
                for (cpu, vals) in published(r.label) {
                    t.add_row(row(cpu, vals.iter().map(|v| pct(Some(*v))).collect()));
                }
            }
        }
        let base_t = (0..SEED_000_MICRO)
            .map(|bi| times(oi, bi, base).map_or("-".into(), |t| format!("{:.3}s", summarize(&t).mean)));
        t.add_row(row("nr-mapped time", base_t.collect()));
        println!("{oname}:\n{t}\n");
    }
    if let Some(h) = all_rows.iter().position(|r| r.host) {
        let mm_id = designs.iter().position(|r| r.design == Design::MmId).expect("mm-id is a design");
        print_against_host(&orders, |oi, bi| Some((times(oi, bi, mm_id)?, times(oi, bi, h)?)));
    }
    if let Some(n) = &host_note {
        println!("{n}\n");
    }
    println!("Costs per rmap operation on 2 MiB THP (atomic RMW / memmap cache lines), and the exclusive");
    println!("seqcount entries lost to another writer in all (after a '+'); deterministic but for the losses:");
    let mut t = micro(first);
    for (di, design) in designs.iter().enumerate() {
        let cells = (0..SEED_000_MICRO).map(|bi| match costs_of(0, di, bi) {
            Some(r) if r.rmap_ops > 0 => {
                let per = |v: u64| {
                    let x = v as f64 / r.rmap_ops as f64;
                    if x < 10.0 {
                        format!("{x:.1}")
                    } else {
                        format!("{x:.0}")
                    }
                };
                let lost = if r.lost > 0 { format!(" +{}", r.lost) } else { String::new() };
                format!("{}/{}{lost}", per(r.rmw), per(r.lines))
            }
            _ => "-".into(),
        });
        t.add_row(row(design.label, cells.collect()));
    }
    println!("{t}\n");
    // Per design, the seed's stage rows follow apart.
    let machines = [("Intel Xeon Silver 4210R", &SEED_000_INTEL), ("AMD EPYC 7313", &SEED_000_AMD)];
    for (cpu, rows) in machines.iter().filter(|_| !a.stages) {
        let mut t = micro("stage");
        for (name, vals) in rows.iter() {
            t.add_row(row(name, vals.iter().map(|v| pct(Some(*v))).collect()));
        }
        println!("Seed 000, {cpu} (2 MiB THP):\n{t}\n");
    }
    // vm-scalability: the seed reports throughput, so positive is good.
    let rates = |oi, bi, di| times(oi, bi, di).map(|t| t.iter().map(|v| 1.0 / v).collect::<Vec<f64>>());
    let gain = |oi: usize, di: usize, bi: usize| Some(change(&rates(oi, bi, base)?, &rates(oi, bi, di)?, vm_family));
    println!(
        "vm-scalability anon-cow-seq / anon-cow-rand, {} COWing the same {} MiB at once:",
        if instances == 1 { "1 child".to_string() } else { format!("{instances} children") },
        size >> 20
    );
    println!("% change in throughput against nr-mapped; positive is better.");
    let mut head = vec![first, "2 MiB THP seq", "2 MiB THP rand", "64 KiB mTHP seq", "64 KiB mTHP rand"];
    if a.stages {
        head.extend(["Intel seq", "Intel rand", "AMD seq", "AMD rand"]);
    }
    let mut t = new_table(head);
    for (di, r) in designs.iter().enumerate() {
        let mut cells: Vec<String> =
            (0..orders.len()).flat_map(|oi| [cell(gain(oi, di, 8)), cell(gain(oi, di, 9))]).collect();
        if let Some((_, intel, amd)) = SEED_000_VMSCAL.iter().find(|(n, ..)| a.stages && *n == r.label) {
            cells.extend([intel, amd].iter().flat_map(|v| [pct(Some(v[0])), pct(Some(v[1]))]));
        }
        t.add_row(row(r.label, cells));
    }
    if a.stages {
        println!("{t}");
        return Ok(());
    }
    println!("{t}\n\nSeed 000's vm-scalability, one instance per core, 2 MiB THP:");
    let mut t = new_table(["stage", "Intel seq", "Intel rand", "AMD seq", "AMD rand"]);
    for (name, intel, amd) in SEED_000_VMSCAL {
        t.add_row(row(name, [intel, amd].iter().flat_map(|v| [pct(Some(v[0])), pct(Some(v[1]))]).collect()));
    }
    println!("{t}");
    Ok(())
}
