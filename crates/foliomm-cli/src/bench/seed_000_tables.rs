//! `bench mapped-shared`'s tables: the micro benchmarks' changes per design
//! (or per stage of the seed's series) with the seed's rows, the host
//! kernel against mm-id, the rmap costs, and the vm-scalability cases.

use foliomm::internals::mapcount::Design;

use super::new_table;
use super::published::{SEED_000_AMD, SEED_000_INTEL, SEED_000_MICRO, SEED_000_VMSCAL};
use super::seed_000_host::print_against_host;
use super::seed_000_results::{Results, ORDERS};
use super::stats::{change, summarize, Change};

/// Prints every table of a run of `size` bytes and `instances`
/// vm-scalability children.
pub(super) fn print(res: &Results, size: u64, rounds: &serde_json::Value, instances: usize) {
    print_micro(res, size, rounds);
    print_costs(res);
    if !res.stages {
        // Per machine, the seed's stage rows apart.
        let machines = [("Intel Xeon Silver 4210R", &SEED_000_INTEL), ("AMD EPYC 7313", &SEED_000_AMD)];
        for (cpu, rows) in machines {
            let mut t = micro("stage");
            for (name, vals) in rows.iter() {
                t.add_row(row(name, vals.iter().map(|v| pct(Some(*v))).collect()));
            }
            println!("Seed 000, {cpu} (2 MiB THP):\n{t}\n");
        }
    }
    print_vm_scalability(res, size, instances);
}

/// A table of the micro benchmarks (1)..(8), a row per design or stage.
fn micro(label: &str) -> comfy_table::Table {
    new_table(std::iter::once(label.to_string()).chain((1..=SEED_000_MICRO).map(|i| format!("({i})"))))
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.1}%"))
}

/// A change, marked '~' inside the noise (its interval holds 0).
fn cell(c: Option<Change>) -> String {
    match c {
        Some(c) if !c.significant() => format!("~{:.0}%", c.pct),
        c => pct(c.map(|c| c.pct)),
    }
}

fn row(label: &str, cells: Vec<String>) -> Vec<String> {
    std::iter::once(label.to_string()).chain(cells).collect()
}

/// The first column's name: a design, or a stage of the seed's series.
fn first(res: &Results) -> &'static str {
    if res.stages {
        "stage"
    } else {
        "design"
    }
}

/// Per folio size, each design's (or stage's) change against nr-mapped in
/// every micro benchmark, with the seed's rows beside the stages; then the
/// host kernel against mm-id.
fn print_micro(res: &Results, size: u64, rounds: &serde_json::Value) {
    let stages = res.stages;
    println!(
        "Seed 000 micro benchmarks on the model, {} MiB of PTE-mapped folios, mean of {rounds} interleaved rounds.",
        size >> 20
    );
    println!("(1) remap (2) munmap (3) fork (4) cow (5) cow-byte (6) cow-reuse (7) cow-reuse-byte (8) pte-dontneed");
    println!("% change in runtime against nr-mapped (Linux 6.2-6.9, the seed's baseline v6.7); negative is faster;");
    if stages {
        println!("the stages run the rmap-id design (set rmap_id_stage), zap and fork per page as on v6.7;");
        println!("the seed's rows beside (2 MiB THP);");
    }
    println!(
        "'~' where the change's interval holds 0 (noise): Welch's t, 95% for the {} changes of a",
        res.micro_family
    );
    println!("table together (Bonferroni).\n");
    // The seed's published row of `label` on each machine (2 MiB THP).
    let published = |label: &'static str| {
        [("  Intel", &SEED_000_INTEL), ("  AMD", &SEED_000_AMD)]
            .into_iter()
            .filter_map(move |(cpu, rows)| rows.iter().find(|(n, _)| *n == label).map(|(_, v)| (cpu, v)))
    };
    for (oi, (_, oname)) in ORDERS.iter().enumerate() {
        let mut t = micro(first(res));
        for (di, r) in res.designs.iter().enumerate() {
            t.add_row(row(r.label, (0..SEED_000_MICRO).map(|bi| cell(res.change_of(oi, di, bi))).collect()));
            if stages && oi == 0 {
                for (cpu, vals) in published(r.label) {
                    t.add_row(row(cpu, vals.iter().map(|v| pct(Some(*v))).collect()));
                }
            }
        }
        let base_t = (0..SEED_000_MICRO)
            .map(|bi| res.times(oi, bi, res.base).map_or("-".into(), |t| format!("{:.3}s", summarize(&t).mean)));
        t.add_row(row("nr-mapped time", base_t.collect()));
        println!("{oname}:\n{t}\n");
    }
    if let Some(h) = res.all_rows.iter().position(|r| r.host) {
        let mm_id = res.designs.iter().position(|r| r.design == Design::MmId).expect("mm-id is a design");
        print_against_host(&ORDERS, |oi, bi| Some((res.times(oi, bi, mm_id)?, res.times(oi, bi, h)?)));
    }
}

/// The rmap costs per operation on 2 MiB THP, per design and micro benchmark.
fn print_costs(res: &Results) {
    println!("Costs per rmap operation on 2 MiB THP (atomic RMW / memmap cache lines), and the exclusive");
    println!("seqcount entries lost to another writer in all (after a '+'); deterministic but for the losses:");
    let mut t = micro(first(res));
    for (di, design) in res.designs.iter().enumerate() {
        let cells = (0..SEED_000_MICRO).map(|bi| match res.costs_of(0, di, bi) {
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
}

/// vm-scalability's two cases: each design's change in throughput against
/// nr-mapped (the seed reports throughput, so positive is good), with the
/// seed's rows.
fn print_vm_scalability(res: &Results, size: u64, instances: usize) {
    let stages = res.stages;
    let rates = |oi, bi, di| res.times(oi, bi, di).map(|t| t.iter().map(|v| 1.0 / v).collect::<Vec<f64>>());
    let gain =
        |oi: usize, di: usize, bi: usize| Some(change(&rates(oi, bi, res.base)?, &rates(oi, bi, di)?, res.vm_family));
    println!(
        "vm-scalability anon-cow-seq / anon-cow-rand, {} COWing the same {} MiB at once:",
        if instances == 1 { "1 child".to_string() } else { format!("{instances} children") },
        size >> 20
    );
    println!("% change in throughput against nr-mapped; positive is better.");
    let mut head = vec![first(res), "2 MiB THP seq", "2 MiB THP rand", "64 KiB mTHP seq", "64 KiB mTHP rand"];
    if stages {
        head.extend(["Intel seq", "Intel rand", "AMD seq", "AMD rand"]);
    }
    let mut t = new_table(head);
    for (di, r) in res.designs.iter().enumerate() {
        let mut cells: Vec<String> =
            (0..ORDERS.len()).flat_map(|oi| [cell(gain(oi, di, 8)), cell(gain(oi, di, 9))]).collect();
        if let Some((_, intel, amd)) = SEED_000_VMSCAL.iter().find(|(n, ..)| stages && *n == r.label) {
            cells.extend([intel, amd].iter().flat_map(|v| [pct(Some(v[0])), pct(Some(v[1]))]));
        }
        t.add_row(row(r.label, cells));
    }
    if stages {
        println!("{t}");
        return;
    }
    println!("{t}\n\nSeed 000's vm-scalability, one instance per core, 2 MiB THP:");
    let mut t = new_table(["stage", "Intel seq", "Intel rand", "AMD seq", "AMD rand"]);
    for (name, intel, amd) in SEED_000_VMSCAL {
        t.add_row(row(name, [intel, amd].iter().flat_map(|v| [pct(Some(v[0])), pct(Some(v[1]))]).collect()));
    }
    println!("{t}");
}
