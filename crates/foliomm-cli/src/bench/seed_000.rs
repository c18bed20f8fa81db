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

use super::harness::interleaved;
use super::published::{SEED_000_COLUMNS, SEED_000_MICRO};
use super::saved::SavedRun;
use super::seed_000_host::host_once;
use super::seed_000_results::{Measured, Results, Row, Samples, ORDERS};
use super::{model_populate, model_split_pmds, progress, secs, Seed000Args};

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
    let (samples, host_note) = measure(a, size, rounds, instances, &all_rows)?;
    let res = Results::new(samples, &all_rows, a.stages);
    let printed = a.common.out.emit(|| {
        let mut settings = a.common.settings();
        for (k, v) in [("size", size.into()), ("rounds", rounds.into()), ("instances", instances.into())] {
            settings[k] = v;
        }
        settings["stages"] = a.stages.into();
        SavedRun { notes: host_note.iter().cloned().collect(), ..res.saved(settings) }
    })?;
    if !printed {
        super::seed_000_tables::print(&res, size, rounds, instances, host_note.as_deref());
    }
    Ok(())
}

/// Runs every benchmark at every folio size under every row, the rows in
/// interleaved rounds; returns the samples and why the host was skipped.
fn measure(
    a: &Seed000Args,
    size: u64,
    rounds: u32,
    instances: usize,
    all_rows: &[Row],
) -> Result<(Samples, Option<String>)> {
    let orders = ORDERS;
    let columns = SEED_000_COLUMNS.len();
    let mut host_note = None;
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
    Ok((samples, host_note))
}
