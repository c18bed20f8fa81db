//! The host kernel side of the benchmarks, through real system calls: THP
//! sysfs settings that are restored on drop (and on a signal), anonymous regions, page
//! touching, PMD splitting, and the per-size mTHP fault counters that prove
//! which folio size the kernel really used.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use foliomm_host::sys::{Advice, Map, Mapping};

const THP: &str = "/sys/kernel/mm/transparent_hugepage";
const PMD: usize = 2 << 20;
const PAGE: usize = 4096;

/// THP sysfs settings to put back when dropped, also when a measurement
/// fails. They go through [`foliomm_host::sysfs::set`], so a signal or a
/// later `foliomm` start puts them back too.
pub struct Restore(Vec<String>);

impl Restore {
    fn set(&mut self, path: String, value: &str) -> Result<()> {
        foliomm_host::sysfs::set(&path, value).map_err(anyhow::Error::msg)?;
        self.0.push(path);
        Ok(())
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        foliomm_host::sysfs::restore(&self.0);
    }
}

/// The anonymous mTHP sizes the host offers, as orders.
fn host_orders() -> Result<Vec<u32>> {
    let mut orders = Vec::new();
    for e in std::fs::read_dir(THP).with_context(|| format!("cannot list {THP}"))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        // Sizes without an `enabled` file are not offered to anonymous memory.
        if !e.path().join("enabled").exists() {
            continue;
        }
        if let Some(kb) = name.strip_prefix("hugepages-").and_then(|s| s.strip_suffix("kB")) {
            orders.push((kb.parse::<u64>()? * 1024 / PAGE as u64).trailing_zeros());
        }
    }
    Ok(orders)
}

/// Lets anonymous faults use folios of `order` only (0: base pages only):
/// that size `always` (the PMD size `inherit` under `enabled=madvise`, for
/// regions with MADV_HUGEPAGE), every other size `never`.
pub fn only_order(order: u32) -> Result<Restore> {
    let mut r = Restore(Vec::new());
    r.set(format!("{THP}/enabled"), "madvise")?;
    for o in host_orders()? {
        let mode = match o {
            _ if o != order => "never",
            9 => "inherit",
            _ => "always",
        };
        r.set(format!("{THP}/hugepages-{}kB/enabled", 4u64 << o), mode)?;
    }
    Ok(r)
}

/// `anon_fault_alloc` of one mTHP size (orders 2..=9), if the host has it.
pub fn anon_fault_alloc(order: u32) -> Option<u64> {
    let p = format!("{THP}/hugepages-{}kB/stats/anon_fault_alloc", 4u64 << order);
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// A fault-and-unmap run with folios of `order`: (fault time, munmap time,
/// share of the region the kernel really backed with that order). With
/// `split`, PMD mappings are split into PTEs before the munmap.
pub fn fault_munmap(len: usize, order: u32, split: bool) -> Result<(Duration, Duration, f64)> {
    let _settings = only_order(order)?;
    let mut r = region(len)?;
    if order == 9 {
        r.advise(0..len, Advice::HugePage)?;
    }
    let before = anon_fault_alloc(order);
    let t = Instant::now();
    r.write_every(0..len, PAGE, 1);
    let fault = t.elapsed();
    let got = match (before, anon_fault_alloc(order)) {
        (Some(b), Some(a)) => (a - b) as f64 * (PAGE << order) as f64 / len as f64,
        _ => 1.0,
    };
    if split {
        // An mprotect round trip on the first page of each 2 MiB splits
        // its PMD mapping into PTEs.
        for off in (0..len).step_by(PMD) {
            r.protect_round_trip(off..off + PAGE)?;
        }
    }
    let t = Instant::now();
    r.unmap()?;
    Ok((fault, t.elapsed(), got))
}

/// munmap of `len` bytes of base pages paged out to a zram swap device
/// set up for the measurement (and reset after it): the time of the
/// munmap, which frees the swap entries, and the share of the region that
/// was swapped out (`VmSwap`; pages still in another CPU's LRU batch stay).
pub fn pageout_munmap(len: usize) -> Result<(Duration, f64)> {
    let _settings = only_order(0)?;
    let _swap = Restore(vec![foliomm_host::sysfs::ZRAM_DISKSIZE.to_string()]);
    foliomm_host::swap::start(len as u64 + (64 << 20)).map_err(anyhow::Error::msg)?;
    let r = region(len)?;
    r.write_every(0..len, PAGE, 1);
    r.advise(0..len, Advice::PageOut)?;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let swap_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSwap:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok());
    let t = Instant::now();
    r.unmap()?;
    Ok((t.elapsed(), swap_kb.unwrap_or(0.0) * 1024.0 / len as f64))
}

/// A 2 MiB-aligned anonymous private region of `len` bytes.
pub fn region(len: usize) -> Result<Mapping> {
    Map::anon().aligned(PMD).map(len).with_context(|| format!("host mmap of {len} bytes"))
}

/// memset of fresh anonymous memory (includes the kernel's faults).
pub fn memset_fresh(len: usize) -> Result<Duration> {
    let mut r = region(len)?;
    let t = Instant::now();
    r.fill(0..len, 0x5a);
    Ok(t.elapsed())
}

/// memset of memory already faulted in, `piece` bytes per call: the pure
/// cost of writing it. One call for the whole region lets the C library
/// use non-temporal stores; a call per 2 MiB piece (a THP fault's zeroing)
/// writes through the cache.
pub fn memset_warm(len: usize, piece: usize) -> Result<Duration> {
    let mut r = region(len)?;
    r.fill(0..len, 1);
    let t = Instant::now();
    for start in (0..len).step_by(piece) {
        r.fill(start..(start + piece).min(len), 0x5a);
    }
    Ok(t.elapsed())
}
