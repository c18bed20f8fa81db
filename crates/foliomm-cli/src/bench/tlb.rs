//! `foliomm bench tlb`: what the software TLB costs the model, faulting and
//! writing a region with and without it.

use std::time::Instant;

use anyhow::Result;
use foliomm::Config;

use super::{machine_for, model_best, print_json, progress, secs, CommonArgs};

pub(super) fn run(a: &CommonArgs, size: u64) -> Result<()> {
    let runs = a.runs.max(1);
    let configs = [("TLB on (2048 entries)", 2048usize), ("TLB off (walk every access)", 0)];
    let bar = progress(configs.len() as u64 * runs as u64);
    let mut rows = Vec::new();
    for (name, entries) in configs {
        bar.set_message(name);
        let m = machine_for(size, Config { tlb_entries: entries, ..Config::default() })?;
        let t = model_best(&m, runs, &bar, size, 0, |cpu, mm, addr, fault| {
            let t = Instant::now();
            cpu.fill(mm, addr, size, 0x33)?;
            let write = t.elapsed();
            mm.munmap(addr, size)?;
            Ok([fault, write])
        })?;
        rows.push(serde_json::json!({ "config": name, "fault_s": secs(t[0]), "write_all_bytes_s": secs(t[1]) }));
    }
    bar.finish_and_clear();
    if a.json {
        return print_json(&rows);
    }
    if a.csv {
        println!("config,fault_s,write_all_bytes_s");
        for r in &rows {
            println!("{},{},{}", r["config"].as_str().unwrap(), r["fault_s"], r["write_all_bytes_s"]);
        }
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
