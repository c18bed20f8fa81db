//! Which pages a PMD maps, on kernels without `PAGEMAP_SCAN` (before 6.7,
//! as the guest's 6.1): pagemap cannot tell a PMD-mapped THP from a
//! PTE-mapped one, but `/proc/self/smaps` counts each VMA's PMD-mapped
//! bytes (`AnonHugePages`, `ShmemPmdMapped`). And the page size of a
//! hugetlb VMA, which kpageflags cannot always tell (see `procfs`).

/// Each VMA of `/proc/self/smaps`: start, end, and the sum of its lines
/// that `kb` gives a value for.
fn vma_kb(kb: impl Fn(&str) -> Option<u64>) -> Vec<(u64, u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    for line in text.lines() {
        let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
        let range = range.and_then(|(s, e)| Some((u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?)));
        if let Some((start, end)) = range.filter(|_| !line.ends_with(" kB")) {
            out.push((start, end, 0));
        } else if let (Some(last), Some(kb)) = (out.last_mut(), kb(line)) {
            last.2 += kb;
        }
    }
    out
}

/// Each VMA of `/proc/self/smaps`: start, end, and its PMD-mapped KiB.
fn pmd_mapped_kb() -> Vec<(u64, u64, u64)> {
    vma_kb(pmd_kb)
}

/// The `KernelPageSize` of the VMA holding `addr`, in KiB: the size of
/// every folio a hugetlb VMA maps (one of its hstate).
pub fn kernel_page_kb(addr: u64) -> Option<u64> {
    let size = |line: &str| line.strip_prefix("KernelPageSize:")?.trim().trim_end_matches(" kB").parse().ok();
    vma_kb(size).into_iter().find(|&(s, e, _)| (s..e).contains(&addr)).map(|v| v.2)
}

/// The KiB of an `AnonHugePages:` or `ShmemPmdMapped:` line.
fn pmd_kb(line: &str) -> Option<u64> {
    let (key, value) = line.split_once(':')?;
    matches!(key, "AnonHugePages" | "ShmemPmdMapped").then(|| value.trim().trim_end_matches(" kB").parse().ok())?
}

/// Whether each page of `[addr, addr + len)` is mapped by a PMD, given
/// `candidate(w)`: whether the 2 MiB window at `w` maps one THP in order
/// (what a PMD would map; a PTE-mapped THP looks the same). Exact where a
/// VMA's PMD-mapped bytes cover all its candidate windows or none; an
/// error where they cover some, since smaps cannot say which.
pub fn pmd_mapped(addr: u64, len: u64, candidate: impl Fn(u64) -> bool) -> Result<Vec<bool>, String> {
    const PMD: u64 = 2 << 20;
    let mut out = vec![false; (len / 4096) as usize];
    for (start, end, kb) in pmd_mapped_kb().into_iter().filter(|&(s, e, _)| s < addr + len && addr < e) {
        if kb == 0 {
            continue;
        }
        let windows: Vec<u64> = (start.next_multiple_of(PMD)..end)
            .step_by(PMD as usize)
            .filter(|w| w + PMD <= end && candidate(*w))
            .collect();
        if kb != windows.len() as u64 * (PMD >> 10) {
            return Err(format!(
                "this kernel has no PAGEMAP_SCAN (Linux 6.7+), and smaps cannot tell which THPs of the VMA at {start:#x} a PMD maps ({kb} kB of {} candidates)",
                windows.len()
            ));
        }
        for w in windows {
            for p in (w.max(addr)..(w + PMD).min(addr + len)).step_by(4096) {
                out[((p - addr) / 4096) as usize] = true;
            }
        }
    }
    Ok(out)
}
