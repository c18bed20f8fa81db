//! Seed 000's micro benchmarks on the host kernel (Linux 6.15 and later
//! track mapcounts with MM IDs: the model's `mm-id` design), through the
//! same steps as the model's: a 2 MiB-aligned private anonymous region
//! populated with folios of one size (the THP settings say which, and the
//! kernel's per-size fault counters confirm it), PMDs split by an mprotect
//! round trip, then the measured action. The vm-scalability cases run on
//! the model only.

use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use foliomm_host::sys::{fork_child_that_exits, Advice, Mapping, Workers};

use super::published::SEED_000_MICRO;
use super::stats::{change, summarize};
use super::{new_table, secs};
use crate::host;

const PAGE: usize = 4096;
const PMD: usize = 2 << 20;

/// Splits every PMD mapping of `r` into PTEs (the VMAs merge back).
fn split_pmds(r: &mut Mapping) -> Result<()> {
    for off in (0..r.len()).step_by(PMD) {
        r.protect_round_trip(off..off + PAGE).context("host mprotect")?;
    }
    Ok(())
}

/// Seed 000's micro benchmark `name` once on the host, over `size` bytes
/// of folios of `order`: the measured action's seconds, or None where it
/// does not apply (remap without PMDs). Every MM that wrote reads its 2
/// back and a child that shared reads its 1s, or it fails.
pub(super) fn host_once(size: usize, order: u32, name: &str) -> Result<Option<f64>> {
    if name == "remap" && order != 9 {
        return Ok(None);
    }
    let _settings = host::only_order(order)?;
    let mut r = host::region(size)?;
    match order {
        9 => r.advise(0..size, Advice::HugePage)?,
        0 => r.advise(0..size, Advice::NoHugePage)?,
        _ => {}
    }
    let before = host::anon_fault_alloc(order);
    r.write_every(0..size, PAGE, 1);
    if let (Some(b), Some(a)) = (before, host::anon_fault_alloc(order)) {
        let share = (a - b) as f64 * (PAGE << order) as f64 / size as f64;
        ensure!(share >= 0.9, "the host backed {:.0}% of the region with {}K folios", 100.0 * share, 4 << order);
    }
    if name != "remap" && order == 9 {
        split_pmds(&mut r)?;
    }
    // cow and cow-byte: a child shares everything, and checks its bytes
    // after the measurement; the reuse cases' child went away before it.
    let child = |_| [(0..size).step_by(PAGE).all(|off| r.read(off) == 1) as u64];
    let mut sharer = match name {
        "cow" | "cow-byte" => Some(Workers::fork(1, child).context("host fork")?),
        "cow-reuse" | "cow-reuse-byte" => {
            fork_child_that_exits().context("host fork")?;
            None
        }
        _ => None,
    };
    let t = Instant::now();
    match name {
        "remap" => split_pmds(&mut r)?,
        "munmap" => {
            r.unmap().context("host munmap")?;
            return Ok(Some(secs(t.elapsed())));
        }
        // The child lives on until the workers are dropped, after the clock.
        "fork" => sharer = Some(Workers::fork(1, |_| [1]).context("host fork")?),
        "cow" | "cow-reuse" => r.fill(0..size, 2),
        "cow-byte" | "cow-reuse-byte" => r.write_every(0..size, PAGE, 2),
        _ => {
            for off in (0..size).step_by(PAGE) {
                r.advise(off..off + PAGE, Advice::DontNeed)?;
            }
        }
    }
    let seconds = secs(t.elapsed());
    if name.starts_with("cow") {
        if let Some(off) = (0..size).step_by(PAGE).find(|&off| r.read(off) != 2) {
            bail!("host {name}: the byte at offset {off:#x} reads {:#x}, expected 0x02", r.read(off));
        }
    }
    if let Some(w) = sharer.as_mut() {
        w.start()?;
        let [(_, [ok])] = w.reports()?[..] else { bail!("host: one report expected") };
        ensure!(ok == 1, "host {name}: the child read the parent's writes: a COW leak");
    }
    Ok(Some(seconds))
}

/// The model's `mm-id` design against the host kernel, per micro
/// benchmark and folio size: each one's mean time and the model's change
/// against the host with its interval. `times(oi, bi)` gives the (model,
/// host) samples.
pub(super) fn print_against_host(orders: &[(u32, &str)], times: impl Fn(usize, usize) -> Option<(Vec<f64>, Vec<f64>)>) {
    let family = orders.len() * SEED_000_MICRO;
    println!("The model's mm-id design against the host kernel (Linux 6.15+ counts with MM IDs), seconds:");
    let mut t = new_table(["folio", "benchmark", "model mm-id", "host", "model vs host"]);
    for (oi, (_, oname)) in orders.iter().enumerate() {
        for (bi, bname) in super::published::SEED_000_COLUMNS[..SEED_000_MICRO].iter().enumerate() {
            let Some((model, host)) = times(oi, bi) else { continue };
            let c = change(&host, &model, family);
            t.add_row([
                oname.to_string(),
                bname.to_string(),
                format!("{:.4}", summarize(&model).mean),
                format!("{:.4}", summarize(&host).mean),
                c.to_string(),
            ]);
        }
    }
    println!("{t}\n");
}
