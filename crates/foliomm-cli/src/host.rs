//! The host kernel side of the benchmarks, through real system calls: THP
//! sysfs settings that are restored on drop (and on a signal), anonymous regions, page
//! touching, PMD splitting, and the per-size mTHP fault counters that prove
//! which folio size the kernel really used.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

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

/// A 2 MiB-aligned anonymous private region of the benchmark process.
pub struct Region {
    raw: *mut u8,
    raw_len: usize,
    pub base: *mut u8,
    pub len: usize,
}

impl Region {
    pub fn new(len: usize) -> Result<Region> {
        let raw_len = len + PMD;
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked against MAP_FAILED.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                raw_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            bail!("mmap of {raw_len} bytes failed: {}", std::io::Error::last_os_error());
        }
        let raw = raw.cast::<u8>();
        let base = ((raw as usize).div_ceil(PMD) * PMD) as *mut u8;
        Ok(Region { raw, raw_len, base, len })
    }

    /// `MADV_HUGEPAGE` on the region.
    pub fn hugepage(&self) {
        // SAFETY: advice on a range inside our own mapping; no contents change.
        unsafe { libc::madvise(self.base.cast(), self.len, libc::MADV_HUGEPAGE) };
    }

    /// Writes one byte per page; returns the time taken (the faults).
    pub fn touch(&self) -> Duration {
        let t = Instant::now();
        for off in (0..self.len).step_by(PAGE) {
            // SAFETY: in bounds of our writable mapping.
            unsafe { self.base.add(off).write_volatile(1) };
        }
        t.elapsed()
    }

    /// Splits every PMD mapping into PTEs, by an mprotect round trip on the
    /// first page of each 2 MiB (the VMAs merge back).
    pub fn split_pmds(&self) -> Result<()> {
        for off in (0..self.len).step_by(PMD) {
            for prot in [libc::PROT_READ, libc::PROT_READ | libc::PROT_WRITE] {
                // SAFETY: changes protection of a page inside our mapping that
                // no Rust reference points into.
                if unsafe { libc::mprotect(self.base.add(off).cast(), PAGE, prot) } != 0 {
                    bail!("mprotect failed: {}", std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    /// munmap of the whole region; returns the time taken.
    pub fn unmap(self) -> Duration {
        let t = Instant::now();
        // SAFETY: unmaps exactly our mapping; `self` is consumed, so nothing
        // can use it afterwards (Drop is skipped by forget below).
        unsafe { libc::munmap(self.raw.cast(), self.raw_len) };
        let d = t.elapsed();
        std::mem::forget(self);
        d
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly our mapping; nothing refers to it any more.
        unsafe { libc::munmap(self.raw.cast(), self.raw_len) };
    }
}

/// A fault-and-unmap run with folios of `order`: (fault time, munmap time,
/// share of the region the kernel really backed with that order). With
/// `split`, PMD mappings are split into PTEs before the munmap.
pub fn fault_munmap(len: usize, order: u32, split: bool) -> Result<(Duration, Duration, f64)> {
    let _settings = only_order(order)?;
    let r = Region::new(len)?;
    if order == 9 {
        r.hugepage();
    }
    let before = anon_fault_alloc(order);
    let fault = r.touch();
    let got = match (before, anon_fault_alloc(order)) {
        (Some(b), Some(a)) => (a - b) as f64 * (PAGE << order) as f64 / len as f64,
        _ => 1.0,
    };
    if split {
        r.split_pmds()?;
    }
    Ok((fault, r.unmap(), got))
}

/// memset of fresh anonymous memory (includes the kernel's faults).
pub fn memset_fresh(len: usize) -> Result<Duration> {
    let r = Region::new(len)?;
    let t = Instant::now();
    // SAFETY: the whole writable region.
    unsafe { std::ptr::write_bytes(r.base, 0x5a, len) };
    Ok(t.elapsed())
}

/// memset of memory already faulted in: the pure cost of writing it.
pub fn memset_warm(len: usize) -> Result<Duration> {
    let r = Region::new(len)?;
    // SAFETY: the whole writable region.
    unsafe { std::ptr::write_bytes(r.base, 1, len) };
    let t = Instant::now();
    // SAFETY: as above.
    unsafe { std::ptr::write_bytes(r.base, 0x5a, len) };
    Ok(t.elapsed())
}
