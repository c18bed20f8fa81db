//! `foliomm bench fault`: fault and munmap with 4K pages, 64K mTHP and 2M
//! THP, model against host kernel, memset as the zeroing baseline.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use foliomm::{Design, Machine};

use super::harness::{interleaved, metric};
use super::saved::{Row as SavedRow, SavedRun, Series, Table};
use super::stats::summarize;
use super::{machine_for, model_populate, new_table, print_host_notes, progress, secs, CommonArgs};
use crate::host;

struct FaultRow {
    folio: &'static str,
    model_fault_s: f64,
    model_munmap_s: f64,
    host_fault_s: Option<f64>,
    host_munmap_s: Option<f64>,
    host_share_of_size: Option<f64>,
}

/// What one row measures in each round.
enum Setup {
    Model(Arc<Machine>),
    Host,
    Memset { warm: bool },
}

pub(super) fn run(a: &CommonArgs, size: u64) -> Result<()> {
    const SIZES: [(&str, u32); 3] = [("4K", 0), ("64K", 4), ("2M", 9)];
    let rounds = a.runs_or(3);
    let with_host = !a.no_host;
    let bar = progress((SIZES.len() as u64 * (1 + with_host as u64) + 2) * (rounds as u64 + 1));
    let (mut rows, mut note) = (Vec::new(), None);
    // Per folio size, every kept sample of (model, host) as (fault, munmap).
    let mut saved_rows: [Vec<SavedRow>; 2] = Default::default();
    // The mean of one metric of every kept sample.
    let mean = |s: &[[f64; 2]], k| summarize(&metric(s, k)).mean;
    for (name, order) in SIZES {
        // One machine for all rounds: after the warm-up, model frames are
        // warm host memory, so the samples measure the model's own work.
        let mut setups = vec![Setup::Model(machine_for(size, a.config(Design::MmId))?)];
        if with_host && note.is_none() {
            setups.push(Setup::Host);
        }
        let mut share = None;
        let label = |s: &Setup| format!("{name} {}", if matches!(s, Setup::Host) { "host" } else { "model" });
        let samples = interleaved(&setups, rounds, &bar, label, |s| match s {
            Setup::Model(m) => {
                let (mm, addr, fault) = model_populate(m, &mut m.new_cpu(), size, order)?;
                let t = Instant::now();
                mm.munmap(addr, size)?;
                Ok([secs(fault), secs(t.elapsed())])
            }
            _ if note.is_some() => Ok([f64::NAN; 2]),
            _ => match host::fault_munmap(size as usize, order, false) {
                Ok((fault, unmap, got)) => {
                    share = Some(got);
                    Ok([secs(fault), secs(unmap)])
                }
                Err(e) => {
                    note = Some(format!("host kernel skipped: {e:#}"));
                    Ok([f64::NAN; 2])
                }
            },
        })?;
        let host = samples.get(1).filter(|s| s.iter().all(|v| !v[0].is_nan()));
        let series = |k| {
            std::iter::once(("model", &samples[0]))
                .chain(host.map(|h| ("host", h)))
                .map(|(n, s)| Series::timed(n, metric(s, k)))
                .collect::<Vec<_>>()
        };
        for (k, rows) in saved_rows.iter_mut().enumerate() {
            rows.push(SavedRow { label: name.into(), series: series(k), published: Vec::new() });
        }
        rows.push(FaultRow {
            folio: name,
            model_fault_s: mean(&samples[0], 0),
            model_munmap_s: mean(&samples[0], 1),
            host_fault_s: host.map(|s| mean(s, 0)),
            host_munmap_s: host.map(|s| mean(s, 1)),
            host_share_of_size: host.and(share),
        });
    }
    let memsets = [Setup::Memset { warm: false }, Setup::Memset { warm: true }];
    let label =
        |s: &Setup| format!("memset {}", if matches!(s, Setup::Memset { warm: true }) { "warm" } else { "fresh" });
    let samples = interleaved(&memsets, rounds, &bar, label, |s| match s {
        Setup::Memset { warm: true } => Ok([secs(host::memset_warm(size as usize)?), 0.0]),
        _ => Ok([secs(host::memset_fresh(size as usize)?), 0.0]),
    })?;
    let (memset, memset_warm) = (mean(&samples[0], 0), mean(&samples[1], 0));
    bar.finish_and_clear();
    let printed = a.out.emit(|| {
        let [fault, munmap] = saved_rows;
        let table = |what: &str, rows| Table {
            name: format!("{what} of {} MiB", size >> 20),
            unit: "s".into(),
            higher_is_better: false,
            rows,
        };
        let memset_series =
            vec![Series::timed("fresh", metric(&samples[0], 0)), Series::timed("warm", metric(&samples[1], 0))];
        let memset_row = SavedRow { label: "memset".into(), series: memset_series, published: Vec::new() };
        let mut settings = a.settings();
        settings["size"] = size.into();
        settings["rounds"] = rounds.into();
        settings["host_note"] = note.clone().into();
        let tables =
            vec![table("fault, one write per page", fault), table("munmap", munmap), table("memset", vec![memset_row])];
        SavedRun::new("fault", settings, tables)
    })?;
    if printed {
        return Ok(());
    }
    print_table(&rows, size, rounds, (memset, memset_warm));
    print_host_notes(rows.iter().map(|r| (r.folio.to_string(), r.host_share_of_size)), note);
    Ok(())
}

/// The table: each folio size's fault and munmap, model against host, and
/// the model's time per page; then memset (fresh, warm) as the baseline.
fn print_table(rows: &[FaultRow], size: u64, rounds: u32, (memset, memset_warm): (f64, f64)) {
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}s"));
    let ratio = |m: f64, h: Option<f64>| h.map_or("-".to_string(), |h| format!("{:.2}x", m / h));
    println!(
        "Fault (one write per page) and munmap of {} MiB, mean of {rounds} interleaved rounds after a warm-up\n\
         (model on a warm arena):\n",
        size >> 20
    );
    let mut t = new_table([
        "Folio",
        "model fault",
        "host fault",
        "model/host",
        "model munmap",
        "host munmap",
        "model/host",
        "model ns/page: fault",
        "munmap",
    ]);
    let pages = (size / 4096) as f64;
    for r in rows {
        t.add_row([
            r.folio.to_string(),
            format!("{:.4}s", r.model_fault_s),
            opt(r.host_fault_s),
            ratio(r.model_fault_s, r.host_fault_s),
            format!("{:.4}s", r.model_munmap_s),
            opt(r.host_munmap_s),
            ratio(r.model_munmap_s, r.host_munmap_s),
            format!("{:.0}", r.model_fault_s * 1e9 / pages),
            format!("{:.0}", r.model_munmap_s * 1e9 / pages),
        ]);
    }
    println!("{t}");
    println!("\nmemset of {} MiB on this host: {memset:.4}s into fresh memory, {memset_warm:.4}s into memory already faulted", size >> 20);
    if let Some(thp) = rows.iter().find(|r| r.folio == "2M") {
        println!("model 2M THP fault: {:.2}x of warm memset", thp.model_fault_s / memset_warm);
    }
}
