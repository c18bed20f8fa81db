//! `foliomm bench fault`: fault and munmap with 4K pages, 64K mTHP and 2M
//! THP, model against host kernel, memset as the zeroing baseline.

use std::time::Instant;

use anyhow::Result;
use foliomm::Config;

use super::{best, host_best, machine_for, model_best, print_host_notes, print_json, progress, secs, HostArgs};
use crate::host;

#[derive(serde::Serialize)]
struct FaultRow {
    folio: &'static str,
    model_fault_s: f64,
    model_munmap_s: f64,
    host_fault_s: Option<f64>,
    host_munmap_s: Option<f64>,
    host_share_of_size: Option<f64>,
}

pub(super) fn run(a: &HostArgs, size: u64) -> Result<()> {
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
        let model = model_best(&m, runs, &bar, size, order, |_, mm, addr, fault| {
            let t = Instant::now();
            mm.munmap(addr, size)?;
            Ok([fault, t.elapsed()])
        })?;
        let mut host_row = None;
        if !a.no_host {
            bar.set_message(format!("{name} host"));
            host_row = host_best(runs, &bar, size, order, false, |f, u| [f, u], &mut note);
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
        return print_json(&j);
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
