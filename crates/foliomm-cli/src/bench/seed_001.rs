//! `foliomm bench seed-001`: munmap of a region populated with PTE-mapped
//! folios of each size, zap strategies per-page and batched, host kernel
//! beside (the table of the "optimize unmap/zap with PTE-mapped THP" series).

use std::time::Instant;

use anyhow::Result;
use foliomm::machine::ZapStrategy;
use foliomm::Config;

use super::published::SEED_001;
use super::{
    host_best, machine_for, model_best, model_split_pmds, print_host_notes, print_json, progress, secs, HostArgs,
};

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

pub(super) fn run(a: &HostArgs, size: u64) -> Result<()> {
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
            times[i] = secs(
                model_best(&m, runs, &bar, size, order, |_, mm, addr, _| {
                    if order == 9 {
                        model_split_pmds(mm, addr, size)?;
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
            host = host_best(runs, &bar, size, order, order == 9, |_, unmap| [unmap], &mut note)
                .map(|(h, share)| (secs(h[0]), share));
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
        return print_json(&serde_json::json!({ "size": size, "rows": rows, "note": note }));
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
