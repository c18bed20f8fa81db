//! `bench vma-lock-scaling --sim-cpus 1,2 --validate`: the simulated figures
//! against the model's own on threads and the host kernel's, measured in
//! the same interleaved rounds, as ratios with their 95% intervals. A
//! profile predicts the machine whose costs it holds: the calibrated one
//! (`sim calibrate`) the host kernel's. Where the simulation and its
//! reference disagree by more than the noise at 1 CPU, a private cost of
//! the profile (a fault's, a page's zeroing, a system call's) is off; where
//! they agree at 1 CPU but not at 2, a shared one (a transfer, a lock wait,
//! or what the simulation leaves out, like memory bandwidth) is.

use super::new_table;
use super::saved::Table;
use super::stats::change;

/// A design's series: its name, its simulated one and its one on threads.
pub(super) struct Series {
    pub design: String,
    pub simulated: String,
    pub threads: String,
}

/// Prints, per CPU count (its row of `table`) and design, faults per
/// CPU-second simulated, on threads and on the host (series `host`), and
/// the ratios simulated/threads, simulated/host and threads/host (the
/// changes' intervals; `~` inside the noise).
pub(super) fn print(table: &Table, rows: &[(usize, String)], designs: &[Series], host: &str) {
    println!("\nValidation: faults per CPU-second, simulated against the model on threads and the host kernel");
    println!("(ratios as % change with the 95% interval over the rounds; ~ where it is inside the noise)\n");
    let head =
        ["CPUs", "design", "simulated", "on threads", "host", "simulated/threads", "simulated/host", "threads/host"];
    let mut t = new_table(head);
    let family = rows.len() * designs.len() * 3;
    for (n, row) in rows {
        let host = table.samples(row, host);
        for d in designs {
            let sim = table.samples(row, &d.simulated);
            let threads = table.samples(row, &d.threads);
            let mean =
                |v: Option<&[f64]>| v.map_or("-".into(), |v| format!("{:.0}", v.iter().sum::<f64>() / v.len() as f64));
            let ratio = |a: Option<&[f64]>, b: Option<&[f64]>| match (a, b) {
                (Some(a), Some(b)) => change(a, b, family).to_string(),
                _ => "-".into(),
            };
            t.add_row([
                n.to_string(),
                d.design.clone(),
                mean(sim),
                mean(threads),
                mean(host),
                ratio(threads, sim),
                ratio(host, sim),
                ratio(host, threads),
            ]);
        }
    }
    println!("{t}");
}
