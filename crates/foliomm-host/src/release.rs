//! The running kernel's release, and the era it belongs to.

use foliomm::mapcount::Design;

/// The mapcount design of the running kernel's era, by its release: up to
/// 6.1 `subpage`, 6.2-6.9 `nr-mapped`, 6.10-6.14 `large-mapcount`, then
/// `mm-id` (per-design `expect` lines follow it).
pub fn design() -> Design {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    match (v.next().unwrap_or(0), v.next().unwrap_or(0)) {
        (major, minor) if (major, minor) <= (6, 1) => Design::Subpage,
        (6, 2..=9) => Design::NrMapped,
        (6, 10..=14) => Design::LargeMapcount,
        _ => Design::MmId,
    }
}
