//! `bench seed-000`'s tables: the micro benchmarks' changes per design
//! (or per stage of the seed's series) with the seed's rows, the host
//! kernel against mm-id, the rmap costs, and the vm-scalability cases.

use foliomm::internals::mapcount::Design;

use super::new_table;
use super::published::{SEED_000_AMD, SEED_000_INTEL, SEED_000_MICRO, SEED_000_VMSCAL};
use super::seed_000_host::print_against_host;
use super::seed_000_results::{Results, ORDERS};
use super::stats::{change, summarize, Change};

/// Prints every table of a run of `size` bytes, `rounds` rounds and
/// `instances` vm-scalability children.
pub(super) fn print(res: &Results, size: u64, rounds: &serde_json::Value, instances: usize) {
    let orders = ORDERS;
    let (designs, all_rows, base) = (res.designs, res.all_rows, res.base);
    let (micro_family, vm_family) = (res.micro_family, res.vm_family);
    let times = |oi, bi, di| res.times(oi, bi, di);
    let change_of = |oi, di, bi| res.change_of(oi, di, bi);
    let costs_of = |oi, di, bi| res.costs_of(oi, di, bi);
    let stages = res.stages;
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
    if stages {
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
    let first = if stages { "stage" } else { "design" };
    for (oi, (_, oname)) in orders.iter().enumerate() {
        let mut t = micro(first);
        for (di, r) in designs.iter().enumerate() {
            t.add_row(row(r.label, (0..SEED_000_MICRO).map(|bi| cell(change_of(oi, di, bi))).collect()));
            if stages && oi == 0 {
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
    for (cpu, rows) in machines.iter().filter(|_| !stages) {
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
    if stages {
        head.extend(["Intel seq", "Intel rand", "AMD seq", "AMD rand"]);
    }
    let mut t = new_table(head);
    for (di, r) in designs.iter().enumerate() {
        let mut cells: Vec<String> =
            (0..orders.len()).flat_map(|oi| [cell(gain(oi, di, 8)), cell(gain(oi, di, 9))]).collect();
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
