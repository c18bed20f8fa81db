//! `foliomm bench`: fixed workloads timed on the model and, where permitted,
//! on the host kernel in the same run, reported as times and ratios.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use foliomm::mm::Advice;
use foliomm::thp::ThpMode;
use foliomm::{Config, Cpu, Machine, Mm, MmapFlags, Prot};
use indicatif::ProgressBar;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Which benchmark: `fault` (fault and munmap of a region with 4K pages,
    /// 64K mTHP and 2M THP, model against host kernel, with memset as the
    /// zeroing baseline).
    #[arg(default_value = "fault")]
    which: String,
    /// Region size (like 256M or 1G).
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
}

#[derive(serde::Serialize)]
struct Row {
    folio: &'static str,
    model_fault_s: f64,
    model_munmap_s: f64,
    host_fault_s: Option<f64>,
    host_munmap_s: Option<f64>,
}

const SIZES: [(&str, u32); 3] = [("4K", 0), ("64K", 4), ("2M", 9)];

pub fn run(a: BenchArgs) -> Result<()> {
    if a.which != "fault" {
        bail!("unknown benchmark '{}': expected 'fault'", a.which);
    }
    let size = foliomm_scenario::lang::parse_size(&a.size).filter(|s| s % (2 << 20) == 0 && *s > 0);
    let Some(size) = size else { bail!("--size: expected a multiple of 2M like 256M or 1G, found '{}'", a.size) };
    let runs = a.runs.max(1);
    let steps = SIZES.len() as u64 * (1 + !a.no_host as u64) * runs as u64 + 2 * runs as u64;
    let bar = ProgressBar::new(steps);
    let mut rows = Vec::new();
    let mut host_note = None;
    for (name, order) in SIZES {
        // One machine for all runs: after the first, model frames are warm
        // host memory, so the best run measures the model's own work
        // (zeroing, tables, rmap), as the kernel reuses its free pages.
        let m = Machine::new(Config { memory: size + (256 << 20), ..Config::default() })?;
        let model = best(runs, &bar, || model_fault_munmap(&m, size, order))?;
        let host = if a.no_host {
            None
        } else {
            match best(runs, &bar, || host::fault_munmap(size, order)) {
                Ok(t) => Some(t),
                Err(e) => {
                    host_note = Some(format!("host kernel skipped: {e:#}"));
                    None
                }
            }
        };
        rows.push(Row {
            folio: name,
            model_fault_s: model.0.as_secs_f64(),
            model_munmap_s: model.1.as_secs_f64(),
            host_fault_s: host.map(|h| h.0.as_secs_f64()),
            host_munmap_s: host.map(|h| h.1.as_secs_f64()),
        });
    }
    let memset = best(runs, &bar, || Ok((host::memset_fresh(size), Duration::ZERO)))?.0.as_secs_f64();
    let memset_warm = best(runs, &bar, || Ok((host::memset_warm(size), Duration::ZERO)))?.0.as_secs_f64();
    bar.finish_and_clear();
    if a.json {
        let j = serde_json::json!({ "size": size, "rows": rows, "memset_fresh_s": memset, "memset_warm_s": memset_warm, "note": host_note });
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
    }
    println!("Fault (one write per page) and munmap of {} MiB, best of {runs} (model on a warm arena):", size >> 20);
    println!();
    println!("Folio | model fault | host fault | model/host | model munmap | host munmap | model/host | model ns/page fault | munmap");
    println!("------|-------------|------------|------------|--------------|-------------|------------|---------------------|-------");
    let pages = (size / 4096) as f64;
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}s"));
    let ratio = |m: f64, h: Option<f64>| h.map_or("-".to_string(), |h| format!("{:.2}x", m / h));
    for r in &rows {
        println!(
            "{:>5} | {:>10.4}s | {:>10} | {:>10} | {:>11.4}s | {:>11} | {:>10} | {:>19.0} | {:>6.0}",
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
    println!();
    println!(
        "memset of {} MiB on this host: {memset:.4}s into fresh memory, {memset_warm:.4}s into memory already faulted",
        size >> 20
    );
    if let Some(thp) = rows.iter().find(|r| r.folio == "2M") {
        println!(
            "model 2M THP fault / memset: {:.2}x of warm memset, {:.2}x of fresh memset",
            thp.model_fault_s / memset_warm,
            thp.model_fault_s / memset
        );
    }
    if let Some(n) = host_note {
        println!("{n}");
    }
    Ok(())
}

/// Runs `f` `runs` times and keeps the fastest (fault, munmap) pair.
fn best(
    runs: u32,
    bar: &ProgressBar,
    mut f: impl FnMut() -> Result<(Duration, Duration)>,
) -> Result<(Duration, Duration)> {
    let mut best: Option<(Duration, Duration)> = None;
    for _ in 0..runs {
        let t = f()?;
        bar.inc(1);
        best = Some(match best {
            Some(b) if b.0 + b.1 <= t.0 + t.1 => b,
            _ => t,
        });
    }
    Ok(best.unwrap())
}

/// Faults `size` bytes with folios of `order` in a new address space of `m`, then munmaps.
fn model_fault_munmap(m: &Arc<Machine>, size: u64, order: u32) -> Result<(Duration, Duration)> {
    if order != 0 && order != 9 {
        m.thp.set_order(order, ThpMode::Always)?;
    }
    let mut cpu = Cpu::new(m);
    let mm = Mm::new(m)?;
    let a = mm.mmap(0, size, Prot::RW, MmapFlags::default())?;
    // The 64K size is `always`; the PMD size needs MADV_HUGEPAGE under the
    // default `enabled=madvise`, and 4K pages need neither.
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
    let t = Instant::now();
    mm.munmap(a, size)?;
    Ok((fault, t.elapsed()))
}

/// The host kernel side, through real system calls.
mod host {
    use std::time::{Duration, Instant};

    use anyhow::{bail, Context, Result};

    const THP: &str = "/sys/kernel/mm/transparent_hugepage";

    /// Restores sysfs values on drop, also when a measurement fails.
    struct Restore(Vec<(String, String)>);

    impl Restore {
        fn set(&mut self, path: String, value: &str) -> Result<()> {
            let old = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
            let old = old
                .split_whitespace()
                .find(|w| w.starts_with('['))
                .map(|w| w.trim_matches(|c| c == '[' || c == ']').to_string());
            let old = old.with_context(|| format!("cannot parse {path}"))?;
            std::fs::write(&path, value).with_context(|| format!("cannot write {path} (needs root)"))?;
            self.0.push((path, old));
            Ok(())
        }
    }

    impl Drop for Restore {
        fn drop(&mut self) {
            for (p, v) in self.0.drain(..).rev() {
                let _ = std::fs::write(&p, v);
            }
        }
    }

    fn map(size: u64) -> Result<*mut u8> {
        // SAFETY: an anonymous private mapping with no address hint; checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!("mmap failed: {}", std::io::Error::last_os_error());
        }
        Ok(p.cast())
    }

    /// Faults `size` bytes with folios of `order` on the host kernel, then munmaps.
    pub fn fault_munmap(size: u64, order: u32) -> Result<(Duration, Duration)> {
        let mut restore = Restore(Vec::new());
        restore.set(format!("{THP}/enabled"), "madvise")?;
        restore.set(format!("{THP}/hugepages-64kB/enabled"), if order == 4 { "always" } else { "never" })?;
        restore.set(format!("{THP}/hugepages-2048kB/enabled"), if order == 9 { "inherit" } else { "never" })?;
        // Over-allocate so the region can be 2 MiB-aligned.
        let p = map(size + (2 << 20))?;
        let a = ((p as usize + (2 << 20) - 1) & !((2 << 20) - 1)) as *mut u8;
        let advice = if order == 9 { libc::MADV_HUGEPAGE } else { libc::MADV_NORMAL };
        // SAFETY: the range lies inside the mapping made above.
        unsafe { libc::madvise(a.cast(), size as usize, advice) };
        let t = Instant::now();
        for off in (0..size as usize).step_by(4096) {
            // SAFETY: in bounds of the writable mapping.
            unsafe { a.add(off).write_volatile(1) };
        }
        let fault = t.elapsed();
        let t = Instant::now();
        // SAFETY: unmaps exactly the mapping made above; nothing refers to it.
        unsafe { libc::munmap(p.cast(), (size + (2 << 20)) as usize) };
        Ok((fault, t.elapsed()))
    }

    /// memset of fresh anonymous memory (includes the kernel's faults).
    pub fn memset_fresh(size: u64) -> Duration {
        let Ok(p) = map(size) else {
            return Duration::ZERO;
        };
        let t = Instant::now();
        // SAFETY: the whole writable mapping made above.
        unsafe { std::ptr::write_bytes(p, 0x5a, size as usize) };
        let d = t.elapsed();
        // SAFETY: unmaps exactly that mapping.
        unsafe { libc::munmap(p.cast(), size as usize) };
        d
    }

    /// memset of memory already faulted in (the pure zeroing cost).
    pub fn memset_warm(size: u64) -> Duration {
        let Ok(p) = map(size) else {
            return Duration::ZERO;
        };
        // SAFETY: the whole writable mapping made above.
        unsafe { std::ptr::write_bytes(p, 1, size as usize) };
        let t = Instant::now();
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(p, 0x5a, size as usize) };
        let d = t.elapsed();
        // SAFETY: unmaps exactly that mapping.
        unsafe { libc::munmap(p.cast(), size as usize) };
        d
    }
}
