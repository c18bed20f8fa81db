//! The worker's memory as /proc/self/status counts it (`VmPTE`, `RssAnon`,
//! `RssFile`, `RssShmem`, `HugetlbPages`, `VmSwap`), and the VMA holding an address
//! as /proc/self/smaps shows it (range, permissions, `VmFlags`).

use foliomm::internals::mm::VmaInfo;
use foliomm_scenario::observation::ProcessInfo;

/// The KiB of line `key` of /proc/self/status text; 0 if absent.
fn kb(status: &str, key: &str) -> u64 {
    let line = status.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')));
    line.and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// This process's `VmPTE` in KiB: its page tables below the PGD; 0 if it
/// cannot be read.
pub fn vm_pte_kb() -> u64 {
    kb(&std::fs::read_to_string("/proc/self/status").unwrap_or_default(), "VmPTE")
}

/// The status lines, and the VMA holding `addr` (zeros in a hole).
pub fn process_info(addr: u64) -> ProcessInfo {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    ProcessInfo {
        rss_anon_kb: kb(&status, "RssAnon"),
        rss_file_kb: kb(&status, "RssFile"),
        rss_shmem_kb: kb(&status, "RssShmem"),
        hugetlb_kb: kb(&status, "HugetlbPages"),
        swap_kb: kb(&status, "VmSwap"),
        ksm_merging_pages: std::fs::read_to_string("/proc/self/ksm_merging_pages")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0),
        vma: vma_info(addr).unwrap_or_default(),
    }
}

/// Which sum of `v` the smaps line starting with `key` gives.
fn sum_of<'v>(v: &'v mut VmaInfo, key: &str) -> Option<&'v mut u64> {
    Some(match key {
        "Shared_Clean:" => &mut v.shared_clean_kb,
        "Shared_Dirty:" => &mut v.shared_dirty_kb,
        "Private_Clean:" => &mut v.private_clean_kb,
        "Private_Dirty:" => &mut v.private_dirty_kb,
        "Shared_Hugetlb:" => &mut v.shared_hugetlb_kb,
        "Private_Hugetlb:" => &mut v.private_hugetlb_kb,
        "Swap:" => &mut v.swap_kb,
        "SwapPss:" => &mut v.swap_pss_kb,
        "LazyFree:" => &mut v.lazyfree_kb,
        _ => return None,
    })
}

/// The smaps entry of the VMA holding `addr`: the header's range and
/// permissions, the sums foliomm models and the `VmFlags` it knows.
fn vma_info(addr: u64) -> Option<VmaInfo> {
    let text = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut found: Option<VmaInfo> = None;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if let Some((s, e)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
            if found.is_some() {
                break;
            }
            let (start, end) = (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?);
            if (start..end).contains(&addr) {
                let perms = words.next()?.as_bytes();
                let bits = [
                    (b'r', 0, VmaInfo::READ),
                    (b'w', 1, VmaInfo::WRITE),
                    (b'x', 2, VmaInfo::EXEC),
                    (b's', 3, VmaInfo::SHARED),
                ];
                let flags = bits.iter().filter(|(c, i, _)| perms.get(*i) == Some(c)).fold(0, |a, (_, _, b)| a | b);
                found = Some(VmaInfo { start, end, flags, ..VmaInfo::default() });
            }
        } else if let Some(sum) = found.as_mut().and_then(|v| sum_of(v, first)) {
            *sum += words.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        } else if let (Some(v), "VmFlags:") = (found.as_mut(), first) {
            let bits = [
                ("lo", VmaInfo::LOCKED),
                ("hg", VmaInfo::HUGEPAGE),
                ("nh", VmaInfo::NOHUGEPAGE),
                ("dc", VmaInfo::DONTCOPY),
            ];
            v.flags |= words.filter_map(|w| bits.iter().find(|(n, _)| *n == w)).fold(0, |a, (_, b)| a | b);
        }
    }
    found
}
