//! The running kernel's release, and the era it belongs to.

use foliomm::internals::release::KernelVersion;

/// The running kernel's release, clamped to the ones foliomm models (an
/// older kernel behaves as the oldest, a newer one as the newest).
pub fn version() -> KernelVersion {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = release.trim().split(['.', '-']).map(|p| p.parse::<u16>().unwrap_or(0));
    let v = KernelVersion::new(v.next().unwrap_or(0), v.next().unwrap_or(0));
    v.clamp(KernelVersion::OLDEST, KernelVersion::NEWEST)
}
