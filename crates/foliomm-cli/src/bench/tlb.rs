//! `foliomm bench tlb`: what the software TLB costs the model, faulting and
//! writing a region with and without it, in interleaved rounds.

use std::time::Instant;

use anyhow::Result;
use foliomm::{Config, Design};

use super::harness::{interleaved, metric};
use super::saved::{Row, SavedRun, Series, Table};
use super::stats::{change, summarize};
use super::{machine_for, model_populate, new_table, progress, secs, CommonArgs};

pub(super) fn run(a: &CommonArgs, size: u64) -> Result<()> {
    let rounds = a.runs_or(3);
    let configs = [("TLB on (2048 entries)", 2048usize), ("TLB off (walk every access)", 0)];
    let machines = configs
        .iter()
        .map(|&(name, entries)| {
            Ok((name, machine_for(size, Config { tlb_entries: entries, ..a.config(Design::MmId) })?))
        })
        .collect::<Result<Vec<_>>>()?;
    let bar = progress(configs.len() as u64 * (rounds as u64 + 1));
    let samples = interleaved(
        &machines,
        rounds,
        &bar,
        |(name, _)| name.to_string(),
        |(_, m)| {
            let mut cpu = m.new_cpu();
            let (mm, addr, fault) = model_populate(m, &mut cpu, size, 0)?;
            let t = Instant::now();
            cpu.fill(&mm, addr, size, 0x33)?;
            let write = t.elapsed();
            mm.munmap(addr, size)?;
            Ok([secs(fault), secs(write)])
        },
    )?;
    bar.finish_and_clear();
    let [fault, write] = [0, 1].map(|k| samples.iter().map(|s| metric(s, k)).collect::<Vec<_>>());
    let (fault_change, write_change) = (change(&fault[1], &fault[0], 2), change(&write[1], &write[0], 2));
    let printed = a.out.emit(|| {
        let row = |label: &str, samples: &[Vec<f64>]| Row {
            label: label.into(),
            series: configs.iter().zip(samples).map(|((n, _), s)| Series::timed(*n, s.clone())).collect(),
            published: Vec::new(),
        };
        let rows = vec![row("fault, one write per page", &fault), row("write every byte", &write)];
        let table = Table {
            name: format!("software TLB, {} MiB", size >> 20),
            unit: "s".into(),
            higher_is_better: false,
            rows,
        };
        let mut settings = a.settings();
        settings["size"] = size.into();
        settings["rounds"] = rounds.into();
        SavedRun::new("tlb", settings, vec![table])
    })?;
    if printed {
        return Ok(());
    }
    println!(
        "Faulting {} MiB with 4K pages (one write per page), then writing every byte; mean of {rounds} interleaved rounds:\n",
        size >> 20
    );
    let mut t = new_table(["configuration", "fault", "write all bytes"]);
    for (i, (name, _)) in configs.iter().enumerate() {
        t.add_row([
            name.to_string(),
            format!("{:.4}s", summarize(&fault[i]).mean),
            format!("{:.4}s", summarize(&write[i]).mean),
        ]);
    }
    println!("{t}");
    println!("\nTLB on against off (interval 95% for both together, '~' = noise): fault {fault_change}, write {write_change}");
    Ok(())
}
