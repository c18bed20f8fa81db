//! `foliomm bench`: fixed workloads timed on the model and, where permitted,
//! on the host kernel in the same run; reported as times and ratios, with a
//! seed's published figures beside where the workload comes from a seed.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use foliomm::machine::ZapStrategy;
use foliomm::mm::Advice;
use foliomm::thp::ThpMode;
use foliomm::{Config, Cpu, Machine, Mm, MmapFlags, Prot};
use indicatif::{ProgressBar, ProgressStyle};

use crate::host;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// `fault`: fault and munmap with 4K pages, 64K mTHP and 2M THP, model
    /// against host kernel, memset as the zeroing baseline.
    /// `seed-001`: munmap of a region populated with PTE-mapped folios of
    /// each size, zap strategies per-page and batched, host kernel beside
    /// (the table of the "optimize unmap/zap with PTE-mapped THP" series).
    /// `tlb`: faulting and writing a region with and without the software TLB.
    /// `seed-000`: the 8 micro benchmarks of the "precise mapped shared"
    /// series on PTE-mapped 2M THP and 64K mTHP, for every mapcount design,
    /// as % change against nr-mapped, with the seed's published rows beside.
    #[arg(value_parser = ["fault", "seed-001", "tlb", "seed-000"])]
    which: String,
    /// Region size (a multiple of 2M, like 256M or 1G).
    #[arg(long, default_value = "1G")]
    size: String,
    /// Repetitions; the fastest is reported.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Skip the host-kernel measurements.
    #[arg(long)]
    no_host: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Print CSV instead of a table.
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// seed-000's vm-scalability cases: how many children COW at once, each
    /// on its own thread [default: one per CPU, as the seed ran them].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    instances: Option<u16>,
}

pub fn run(a: BenchArgs) -> Result<()> {
    let size = foliomm_scenario::lang::parse_size(&a.size).filter(|s| s % (2 << 20) == 0 && *s > 0);
    let Some(size) = size else { bail!("--size: expected a multiple of 2M like 256M or 1G, found '{}'", a.size) };
    match a.which.as_str() {
        "fault" => fault(&a, size),
        "seed-001" => seed_001(&a, size),
        "seed-000" => seed_000(&a, size),
        _ => tlb_cost(&a, size),
    }
}

fn progress(steps: u64) -> ProgressBar {
    let bar = ProgressBar::new(steps);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}").unwrap());
    bar
}

/// The fastest of `runs` runs of `f`, by the sum of its durations.
fn best<const N: usize>(
    runs: u32,
    bar: &ProgressBar,
    mut f: impl FnMut() -> Result<[Duration; N]>,
) -> Result<[Duration; N]> {
    let mut best: Option<[Duration; N]> = None;
    for _ in 0..runs.max(1) {
        let t = f()?;
        bar.inc(1);
        let sum = |d: &[Duration; N]| d.iter().sum::<Duration>();
        if best.as_ref().is_none_or(|b| sum(&t) < sum(b)) {
            best = Some(t);
        }
    }
    Ok(best.unwrap())
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A machine for one region of `size` with room to spare.
fn machine_for(size: u64, config: Config) -> Result<Arc<Machine>> {
    Ok(Machine::new(Config { memory: size + (256 << 20), ..config })?)
}

/// Maps `size` bytes in a new MM of `m` so that write faults use folios of
/// `order` (PMD order through MADV_HUGEPAGE), and faults every page in with
/// one write each. Returns the MM, the address and the fault time.
fn model_populate(m: &Arc<Machine>, cpu: &mut Cpu, size: u64, order: u32) -> Result<(Arc<Mm>, u64, Duration)> {
    for o in foliomm::thp::anon_orders().filter(|&o| o != 9) {
        m.thp.set_order(o, if o == order { ThpMode::Always } else { ThpMode::Never })?;
    }
    let mm = Mm::new(m)?;
    let a = mm.mmap(0, size, Prot::RW, MmapFlags::default())?;
    match order {
        9 => mm.madvise(a, size, Advice::HugePage)?,
        0 => mm.madvise(a, size, Advice::NoHugePage)?,
        _ => {}
    }
    let t = Instant::now();
    cpu.write_byte_per_page(&mm, a, size, 1)?;
    let fault = t.elapsed();
    let got = mm.page_info(a).folio_order;
    if got != order {
        bail!("model: expected folios of order {order}, got {got}");
    }
    Ok((mm, a, fault))
}

/// Splits every PMD mapping of `[a, a+size)` into PTEs by an mprotect round
/// trip on the first page of each 2 MiB, as the host side does.
fn model_split_pmds(mm: &Mm, a: u64, size: u64) -> Result<()> {
    for off in (0..size).step_by(2 << 20) {
        mm.mprotect(a + off, 4096, Prot(Prot::READ))?;
        mm.mprotect(a + off, 4096, Prot::RW)?;
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct FaultRow {
    folio: &'static str,
    model_fault_s: f64,
    model_munmap_s: f64,
    host_fault_s: Option<f64>,
    host_munmap_s: Option<f64>,
    host_share_of_size: Option<f64>,
}

fn fault(a: &BenchArgs, size: u64) -> Result<()> {
    const SIZES: [(&str, u32); 3] = [("4K", 0), ("64K", 4), ("2M", 9)];
    let runs = a.runs.max(1);
    let bar = progress(SIZES.len() as u64 * runs as u64 * (1 + !a.no_host as u64) + 2 * runs as u64);
    let mut rows = Vec::new();
    let mut note = None;
    for (name, order) in SIZES {
        bar.set_message(format!("{name} model"));
        // One machine for all runs: after the first, model frames are warm
        // host memory, so the best run measures the model's own work.
        let m = machine_for(size, Config::default())?;
        let mut cpu = Cpu::new(&m);
        let model = best(runs, &bar, || {
            let (mm, addr, fault) = model_populate(&m, &mut cpu, size, order)?;
            let t = Instant::now();
            mm.munmap(addr, size)?;
            Ok([fault, t.elapsed()])
        })?;
        let mut host_row = None;
        if !a.no_host {
            bar.set_message(format!("{name} host"));
            let mut share = 1.0;
            match best(runs, &bar, || {
                let (f, u, got) = host::fault_munmap(size as usize, order, false)?;
                share = got;
                Ok([f, u])
            }) {
                Ok(h) => host_row = Some((h, share)),
                Err(e) => note = Some(format!("host kernel skipped: {e:#}")),
            }
        }
        rows.push(FaultRow {
            folio: name,
            model_fault_s: secs(model[0]),
            model_munmap_s: secs(model[1]),
            host_fault_s: host_row.map(|(h, _)| secs(h[0])),
            host_munmap_s: host_row.map(|(h, _)| secs(h[1])),
            host_share_of_size: host_row.map(|(_, s)| s),
        });
    }
    bar.set_message("memset");
    let memset = secs(best(runs, &bar, || Ok([host::memset_fresh(size as usize)?]))?[0]);
    let memset_warm = secs(best(runs, &bar, || Ok([host::memset_warm(size as usize)?]))?[0]);
    bar.finish_and_clear();
    if a.json {
        let j = serde_json::json!({ "size": size, "rows": rows, "memset_fresh_s": memset, "memset_warm_s": memset_warm, "note": note });
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
    }
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
    let ratio = |m: f64, h: Option<f64>| h.map_or("-".to_string(), |h| format!("{:.2}x", m / h));
    if a.csv {
        println!("folio,model_fault_s,host_fault_s,model_munmap_s,host_munmap_s");
        for r in &rows {
            println!(
                "{},{:.6},{},{:.6},{}",
                r.folio,
                r.model_fault_s,
                opt(r.host_fault_s),
                r.model_munmap_s,
                opt(r.host_munmap_s)
            );
        }
        return Ok(());
    }
    println!("Fault (one write per page) and munmap of {} MiB, best of {runs} (model on a warm arena):\n", size >> 20);
    println!("Folio | model fault | host fault | model/host | model munmap | host munmap | model/host | model ns/page: fault | munmap");
    println!("------|-------------|------------|------------|--------------|-------------|------------|---------------------|-------");
    let pages = (size / 4096) as f64;
    for r in &rows {
        println!(
            "{:>5} | {:>10.4}s | {:>9}s | {:>10} | {:>11.4}s | {:>10}s | {:>10} | {:>19.0} | {:>6.0}",
            r.folio,
            r.model_fault_s,
            opt(r.host_fault_s),
            ratio(r.model_fault_s, r.host_fault_s),
            r.model_munmap_s,
            opt(r.host_munmap_s),
            ratio(r.model_munmap_s, r.host_munmap_s),
            r.model_fault_s * 1e9 / pages,
            r.model_munmap_s * 1e9 / pages,
        );
    }
    println!("\nmemset of {} MiB on this host: {memset:.4}s into fresh memory, {memset_warm:.4}s into memory already faulted", size >> 20);
    if let Some(thp) = rows.iter().find(|r| r.folio == "2M") {
        println!("model 2M THP fault: {:.2}x of warm memset", thp.model_fault_s / memset_warm);
    }
    print_host_notes(rows.iter().map(|r| (r.folio.to_string(), r.host_share_of_size)), note);
    Ok(())
}

/// Seed 001's published munmap times (Intel Xeon Silver 4210R, 1 GiB):
/// (folio KiB, mm-unstable s, with the series s, change %).
const SEED_001: [(u64, f64, f64, i32); 9] = [
    (4, 0.058110, 0.057715, -1),
    (16, 0.044198, 0.035469, -20),
    (32, 0.034216, 0.023522, -31),
    (64, 0.029207, 0.018434, -37),
    (128, 0.026579, 0.014026, -47),
    (256, 0.025130, 0.011756, -53),
    (512, 0.024292, 0.010703, -56),
    (1024, 0.023812, 0.010294, -57),
    (2048, 0.023785, 0.009910, -58),
];

#[derive(serde::Serialize)]
struct ZapRow {
    folio_kb: u64,
    per_page_s: f64,
    batched_s: f64,
    change_pct: f64,
    host_s: Option<f64>,
    host_share_of_size: Option<f64>,
    seed_before_s: f64,
    seed_after_s: f64,
    seed_change_pct: i32,
}

fn seed_001(a: &BenchArgs, size: u64) -> Result<()> {
    let runs = a.runs.max(1);
    let bar = progress(SEED_001.len() as u64 * runs as u64 * (2 + !a.no_host as u64));
    let mut rows = Vec::new();
    let mut note = None;
    for (kb, before, after, change) in SEED_001 {
        let order = (kb / 4).trailing_zeros();
        let mut times = [0.0; 2];
        for (i, zap) in [ZapStrategy::PerPage, ZapStrategy::Batched].into_iter().enumerate() {
            bar.set_message(format!("{kb}K {}", zap.name()));
            let m = machine_for(size, Config { zap, ..Config::default() })?;
            let mut cpu = Cpu::new(&m);
            times[i] = secs(
                best(runs, &bar, || {
                    let (mm, addr, _) = model_populate(&m, &mut cpu, size, order)?;
                    if order == 9 {
                        model_split_pmds(&mm, addr, size)?;
                    }
                    let t = Instant::now();
                    mm.munmap(addr, size)?;
                    Ok([t.elapsed()])
                })?[0],
            );
        }
        let mut host = None;
        if !a.no_host {
            bar.set_message(format!("{kb}K host"));
            let mut share = 1.0;
            match best(runs, &bar, || {
                let (_, unmap, got) = host::fault_munmap(size as usize, order, order == 9)?;
                share = got;
                Ok([unmap])
            }) {
                Ok(h) => host = Some((secs(h[0]), share)),
                Err(e) => note = Some(format!("host kernel skipped: {e:#}")),
            }
        }
        rows.push(ZapRow {
            folio_kb: kb,
            per_page_s: times[0],
            batched_s: times[1],
            change_pct: 100.0 * (times[1] - times[0]) / times[0],
            host_s: host.map(|h| h.0),
            host_share_of_size: host.map(|h| h.1),
            seed_before_s: before,
            seed_after_s: after,
            seed_change_pct: change,
        });
    }
    bar.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "size": size, "rows": rows, "note": note }))?);
        return Ok(());
    }
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.6}"));
    if a.csv {
        println!("folio_kb,per_page_s,batched_s,change_pct,host_s,seed_before_s,seed_after_s,seed_change_pct");
        for r in &rows {
            println!(
                "{},{:.6},{:.6},{:.1},{},{},{},{}",
                r.folio_kb,
                r.per_page_s,
                r.batched_s,
                r.change_pct,
                opt(r.host_s),
                r.seed_before_s,
                r.seed_after_s,
                r.seed_change_pct
            );
        }
        return Ok(());
    }
    println!(
        "munmap() of a {} MiB VMA backed by PTE-mapped folios of one size, best of {runs}, in seconds:\n",
        size >> 20
    );
    println!("           |               model                |      host      |   seed 001 (Xeon 4210R, 1 GiB)");
    println!("Folio Size | per-page |  batched | Change | batched/host |    host  | mm-unstable |      New | Change");
    println!("-----------|----------|----------|--------|--------------|----------|-------------|----------|-------");
    for r in &rows {
        println!(
            "{:>7}KiB | {:.6} | {:.6} | {:>+5.0}% | {:>12} | {:>8} | {:>11.6} | {:.6} | {:>+5}%",
            r.folio_kb,
            r.per_page_s,
            r.batched_s,
            r.change_pct,
            r.host_s.map_or("-".into(), |h| format!("{:.2}x", r.batched_s / h)),
            opt(r.host_s),
            r.seed_before_s,
            r.seed_after_s,
            r.seed_change_pct
        );
    }
    print_host_notes(rows.iter().map(|r| (format!("{}K", r.folio_kb), r.host_share_of_size)), note);
    Ok(())
}

/// Prints each folio size (label, share) the host backed less than the whole
/// run with, then why the host was skipped, if it was.
fn print_host_notes(shares: impl Iterator<Item = (String, Option<f64>)>, note: Option<String>) {
    for (label, share) in shares {
        if let Some(share) = share.filter(|&s| s < 0.99) {
            println!("note: the host backed only {:.0}% of the {label} run with folios of that size", 100.0 * share);
        }
    }
    if let Some(n) = note {
        println!("{n}");
    }
}

fn tlb_cost(a: &BenchArgs, size: u64) -> Result<()> {
    let runs = a.runs.max(1);
    let configs = [("TLB on (2048 entries)", 2048usize), ("TLB off (walk every access)", 0)];
    let bar = progress(configs.len() as u64 * runs as u64);
    let mut rows = Vec::new();
    for (name, entries) in configs {
        bar.set_message(name);
        let m = machine_for(size, Config { tlb_entries: entries, ..Config::default() })?;
        let mut cpu = Cpu::new(&m);
        let t = best(runs, &bar, || {
            let (mm, addr, fault) = model_populate(&m, &mut cpu, size, 0)?;
            let t = Instant::now();
            cpu.fill(&mm, addr, size, 0x33)?;
            let write = t.elapsed();
            mm.munmap(addr, size)?;
            Ok([fault, write])
        })?;
        rows.push(serde_json::json!({ "config": name, "fault_s": secs(t[0]), "write_all_bytes_s": secs(t[1]) }));
    }
    bar.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "Faulting {} MiB with 4K pages (one write per page), then writing every byte, best of {runs}:\n",
        size >> 20
    );
    println!("{:<28} | fault     | write all bytes", "configuration");
    println!("{:-<28}-|-----------|----------------", "");
    for r in &rows {
        println!(
            "{:<28} | {:>8.4}s | {:>13.4}s",
            r["config"].as_str().unwrap(),
            r["fault_s"].as_f64().unwrap(),
            r["write_all_bytes_s"].as_f64().unwrap()
        );
    }
    let (on, off) = (&rows[0], &rows[1]);
    let ratio = |k: &str| on[k].as_f64().unwrap() / off[k].as_f64().unwrap();
    println!("\nTLB on / off: fault {:.2}x, write {:.2}x", ratio("fault_s"), ratio("write_all_bytes_s"));
    Ok(())
}

/// Seed 000's micro benchmarks, in the seed's order, then its two
/// vm-scalability cases.
const SEED_000_COLUMNS: [&str; 10] = [
    "remap",
    "munmap",
    "fork",
    "cow",
    "cow-byte",
    "cow-reuse",
    "cow-reuse-byte",
    "pte-dontneed",
    "anon-cow-seq",
    "anon-cow-rand",
];

/// How many of SEED_000_COLUMNS are micro benchmarks.
const SEED_000_MICRO: usize = 8;

/// Seed 000's published % change against v6.7-rc1 (Intel Xeon Silver 4210R).
const SEED_000_INTEL: [(&str, [f64; 8]); 7] = [
    ("mapcount", [13.4, 0.3, 14.2, 0.5, 0.2, -0.2, -0.4, 2.8]),
    ("rmap-id", [123.7, 48.8, 105.9, 3.0, 3.2, -30.0, -64.2, 14.8]),
    ("123", [108.7, 42.1, 93.3, 1.7, 2.7, -30.0, -64.3, 12.9]),
    ("batch", [-8.1, 41.4, 95.5, 1.5, 2.2, -29.7, -64.2, 5.7]),
    ("exclusive", [-8.8, 15.1, 40.5, 1.1, 0.9, -29.6, -64.0, 1.1]),
    ("nocmpxchg", [-10.4, 12.6, 46.4, 0.9, 1.4, -30.0, -64.3, 0.8]),
    ("all", [-34.8, 1.0, 27.8, 0.7, 0.4, -30.0, -63.9, -0.5]),
];

/// The same on AMD EPYC 7313.
const SEED_000_AMD: [(&str, [f64; 8]); 7] = [
    ("mapcount", [24.3, 1.8, 25.9, 1.5, 2.6, 1.4, 1.9, 4.5]),
    ("rmap-id", [55.4, 12.5, 27.9, 2.6, 4.3, -50.4, -60.9, 6.3]),
    ("123", [45.6, 6.3, 30.4, 2.9, 4.1, -51.1, -60.5, 6.7]),
    ("batch", [-9.6, 7.2, 31.5, 2.1, 3.0, -51.1, -60.7, 4.0]),
    ("exclusive", [-10.8, 14.0, 48.4, 0.5, 2.3, -51.4, -61.0, 5.0]),
    ("nocmpxchg", [-11.3, 25.9, 55.7, 2.0, 3.3, -50.9, -60.2, 3.4]),
    ("all", [-21.8, 16.1, 43.0, 3.2, 4.8, -50.2, -60.8, 5.8]),
];

/// Seed 000's published vm-scalability % change in throughput (seq, rand),
/// Intel Xeon Silver 4210R and AMD EPYC 7313, one instance per core.
const SEED_000_VMSCAL: [(&str, [f64; 2], [f64; 2]); 7] = [
    ("mapcount", [-8.2, -0.1], [-2.1, -0.1]),
    ("rmap-id", [-16.2, -0.3], [-10.4, -0.1]),
    ("123", [-12.3, -0.3], [-10.8, -0.7]),
    ("batch", [-8.3, -0.4], [-3.8, -0.1]),
    ("exclusive", [-7.1, 0.4], [-4.2, 0.0]),
    ("nocmpxchg", [-6.6, -0.3], [-4.6, 0.0]),
    ("all", [-5.6, -0.3], [-4.5, -0.5]),
];

/// Time and the mapcount design's costs over the measured action.
#[derive(Clone, Copy, Default)]
struct Measured {
    seconds: f64,
    rmap_ops: u64,
    rmw: u64,
    lines: u64,
}

/// The counters a measurement brackets.
fn costs(m: &Machine) -> [u64; 3] {
    let s = &m.stats;
    let ops = [&s.rmap_add_new, &s.rmap_add, &s.rmap_dup, &s.rmap_remove].iter().map(|c| c.load(Relaxed)).sum();
    [ops, s.rmap_atomic_rmw.load(Relaxed), s.rmap_cache_lines.load(Relaxed)]
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
    }))
}

/// How many vm-scalability instances run at once: `--instances`, or one per
/// CPU as the seed ran them.
fn vm_scalability_instances(a: &BenchArgs) -> usize {
    a.instances.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), usize::from)
}

/// The order in which usemem's instance `i` writes the pages of `size`
/// bytes: by address, or shuffled with a seed of its own.
fn usemem_page_order(size: u64, random: bool, i: u64) -> Vec<u64> {
    let mut pages: Vec<u64> = (0..size / 4096).collect();
    if random {
        let mut next = foliomm::xorshift(0x5eed + i);
        for j in (1..pages.len()).rev() {
            pages.swap(j, (next() % (j as u64 + 1)) as usize);
        }
    }
    pages
}

/// usemem's write pass in every instance at once, each on its own CPU
/// thread, page by page in the instance's order, from `a`.
fn vm_scalability_run(m: &Arc<Machine>, instances: &[(Arc<Mm>, Vec<u64>)], a: u64) -> Result<()> {
    std::thread::scope(|s| {
        let workers: Vec<_> = instances
            .iter()
            .map(|(mm, pages)| {
                s.spawn(move || -> Result<()> {
                    let mut cpu = Cpu::new(m);
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

fn seed_000(a: &BenchArgs, size: u64) -> Result<()> {
    let runs = a.runs.max(1);
    let instances = vm_scalability_instances(a);
    let designs = foliomm::mapcount::DESIGN_NAMES;
    let orders = [(9u32, "2 MiB THP"), (4, "64 KiB mTHP")];
    let columns = SEED_000_COLUMNS.len();
    let bar = progress((orders.len() * designs.len() * columns) as u64 * runs as u64);
    // runs[order][design][bench]: the fastest run's time and costs
    let mut best_runs = vec![vec![[None::<Measured>; SEED_000_COLUMNS.len()]; designs.len()]; orders.len()];
    for (oi, (order, oname)) in orders.iter().enumerate() {
        for (di, design) in designs.iter().enumerate() {
            // Room for a copy of everything per child (cow, vm-scalability).
            let m = Machine::new(Config {
                memory: (1 + instances as u64) * size + (256 << 20),
                mapcount: design.to_string(),
                ..Config::default()
            })?;
            let mut cpu = Cpu::new(&m);
            for (bi, bname) in SEED_000_COLUMNS.iter().enumerate() {
                bar.set_message(format!("{oname} {design} {bname}"));
                let mut best: Option<Measured> = None;
                for _ in 0..runs {
                    if let Some(r) = seed_000_once(&m, &mut cpu, size, *order, bi, instances)? {
                        if best.is_none_or(|b| r.seconds < b.seconds) {
                            best = Some(r);
                        }
                    }
                    bar.inc(1);
                }
                best_runs[oi][di][bi] = best;
            }
        }
    }
    bar.finish_and_clear();
    let times: Vec<Vec<[Option<f64>; SEED_000_COLUMNS.len()]>> =
        best_runs.iter().map(|o| o.iter().map(|d| d.map(|r| r.map(|r| r.seconds))).collect()).collect();
    let base = designs.iter().position(|d| *d == "nr-mapped").unwrap();
    let change = |oi: usize, di: usize, bi: usize| -> Option<f64> {
        Some(100.0 * (times[oi][di][bi]? - times[oi][base][bi]?) / times[oi][base][bi]?)
    };
    if a.json || a.csv {
        // The children COWing at once, for the vm-scalability rows.
        let children = |bench: &str| bench.starts_with("anon-cow").then_some(instances);
        let mut rows = Vec::new();
        for (oi, (_, oname)) in orders.iter().enumerate() {
            for (di, design) in designs.iter().enumerate() {
                for (bi, bname) in SEED_000_COLUMNS.iter().enumerate() {
                    rows.push((
                        oname.to_string(),
                        design.to_string(),
                        bname.to_string(),
                        times[oi][di][bi],
                        change(oi, di, bi),
                        best_runs[oi][di][bi].unwrap_or_default(),
                    ));
                }
            }
        }
        if a.json {
            let j: Vec<_> = rows
                .iter()
                .map(|(o, d, b, t, c, r)| {
                    serde_json::json!({ "folio": o, "design": d, "benchmark": b, "seconds": t, "change_pct": c,
                        "rmap_ops": r.rmap_ops, "atomic_rmw": r.rmw, "cache_lines": r.lines,
                        "instances": children(b) })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&j)?);
        } else {
            println!("folio,design,benchmark,seconds,change_pct,rmap_ops,atomic_rmw,cache_lines,instances");
            for (o, d, b, t, c, r) in rows {
                let f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
                let n = children(&b).map_or(String::new(), |n| n.to_string());
                println!("{o},{d},{b},{},{},{},{},{},{n}", f(t), f(c), r.rmap_ops, r.rmw, r.lines);
            }
        }
        return Ok(());
    }
    let header = |label: &str| {
        let cols: Vec<String> = (1..=SEED_000_MICRO).map(|i| format!("{:>7}", format!("({i})"))).collect();
        println!("{label:<16}|{}|", cols.join(" |"));
        println!("{}", "-".repeat(16 + 9 * SEED_000_MICRO + 1));
    };
    let pct = |v: Option<f64>| v.map_or(format!("{:>7}", "-"), |v| format!("{v:>6.1}%"));
    println!("Seed 000 micro benchmarks on the model, {} MiB of PTE-mapped folios, best of {runs}.", size >> 20);
    println!("(1) remap (2) munmap (3) fork (4) cow (5) cow-byte (6) cow-reuse (7) cow-reuse-byte (8) pte-dontneed");
    println!("% change in runtime against nr-mapped (Linux 6.2-6.9, the seed's baseline v6.7); negative is faster.\n");
    for (oi, (_, oname)) in orders.iter().enumerate() {
        println!("{oname}:");
        header("design");
        for (di, design) in designs.iter().enumerate() {
            let cells: Vec<String> = (0..SEED_000_MICRO).map(|bi| pct(change(oi, di, bi))).collect();
            println!("{design:<16}|{}|", cells.join(" |"));
        }
        let base_t: Vec<String> = (0..SEED_000_MICRO)
            .map(|bi| times[oi][base][bi].map_or(format!("{:>7}", "-"), |t| format!("{:>6.3}s", t)))
            .collect();
        println!("{:<16}|{}|\n", "nr-mapped time", base_t.join(" |"));
    }
    println!("Costs per rmap operation on 2 MiB THP (atomic RMW / memmap cache lines); deterministic:");
    header("design");
    for (di, design) in designs.iter().enumerate() {
        let cells: Vec<String> = (0..SEED_000_MICRO)
            .map(|bi| match best_runs[0][di][bi] {
                Some(r) if r.rmap_ops > 0 => {
                    let per = |v: u64| {
                        let x = v as f64 / r.rmap_ops as f64;
                        if x < 10.0 {
                            format!("{x:.1}")
                        } else {
                            format!("{x:.0}")
                        }
                    };
                    format!("{:>7}", format!("{}/{}", per(r.rmw), per(r.lines)))
                }
                _ => format!("{:>7}", "-"),
            })
            .collect();
        println!("{design:<16}|{}|", cells.join(" |"));
    }
    println!();
    for (title, rows) in [
        ("Seed 000, Intel Xeon Silver 4210R (2 MiB THP)", &SEED_000_INTEL),
        ("Seed 000, AMD EPYC 7313 (2 MiB THP)", &SEED_000_AMD),
    ] {
        println!("{title}:");
        header("stage");
        for (name, vals) in rows.iter() {
            let cells: Vec<String> = vals.iter().map(|v| pct(Some(*v))).collect();
            println!("{name:<16}|{}|", cells.join(" |"));
        }
        println!();
    }
    // vm-scalability: the seed reports throughput, so positive is good.
    let gain = |oi: usize, di: usize, bi: usize| -> Option<f64> {
        Some(100.0 * (times[oi][base][bi]? / times[oi][di][bi]? - 1.0))
    };
    println!(
        "vm-scalability anon-cow-seq / anon-cow-rand, {} COWing the same {} MiB at once:",
        if instances == 1 { "1 child".to_string() } else { format!("{instances} children") },
        size >> 20
    );
    println!("% change in throughput against nr-mapped; positive is better.\n");
    println!("{:<16}|{}|", "design", orders.map(|(_, o)| format!("{:^21}", o)).join("|"));
    println!("{:<16}|{}|", "", ["    seq   |   rand   "; 2].join("|"));
    println!("{}", "-".repeat(16 + 2 * 22 + 1));
    for (di, design) in designs.iter().enumerate() {
        let cells: Vec<String> =
            (0..orders.len()).map(|oi| format!("{:>9} |{:>9} ", pct(gain(oi, di, 8)), pct(gain(oi, di, 9)))).collect();
        println!("{design:<16}|{}|", cells.join("|"));
    }
    println!("\nSeed 000's vm-scalability, one instance per core, 2 MiB THP (Intel / AMD):");
    println!("{:<16}|{:^21}|{:^21}|", "stage", "Intel", "AMD");
    println!("{}", "-".repeat(16 + 2 * 22 + 1));
    for (name, intel, amd) in SEED_000_VMSCAL {
        let cells: Vec<String> =
            [intel, amd].iter().map(|v| format!("{:>9} |{:>9} ", pct(Some(v[0])), pct(Some(v[1])))).collect();
        println!("{name:<16}|{}|", cells.join("|"));
    }
    Ok(())
}
