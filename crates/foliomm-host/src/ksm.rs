//! The host's ksmd, driven as the kernel's selftests drive it
//! (tools/testing/selftests/mm/ksm_functional_tests.c `ksm_merge`): started
//! (`ksm/run` 1) with no sleep between batches, without `smart_scan` (which
//! would skip pages that did not merge before, where the model does not)
//! and without `use_zero_pages`, waited for until `ksm/full_scans` has
//! grown past the scans asked for, and stopped again, so that nothing
//! merges between the scenario's steps. Every setting is restored after the
//! run.

use std::time::{Duration, Instant};

use crate::sysfs;

const KSM: &str = "/sys/kernel/mm/ksm";

fn read(name: &str) -> Result<u64, String> {
    let p = format!("{KSM}/{name}");
    sysfs::read_selected(&p)?.parse().map_err(|e| format!("{p}: {e}"))
}

fn set(name: &str, value: &str) -> Result<(), String> {
    sysfs::set(&format!("{KSM}/{name}"), value)
}

/// Returns once ksmd has done `passes` full scans that began after the
/// call (the one it stopped in the middle of last time counts for
/// nothing), then stops it; an error if the host has no KSM or the scans
/// take longer than 10 s each.
pub fn run(passes: u32) -> Result<(), String> {
    if !std::path::Path::new(KSM).exists() {
        return Err("the host kernel has no KSM (/sys/kernel/mm/ksm; CONFIG_KSM)".into());
    }
    set("sleep_millisecs", "0")?;
    set("pages_to_scan", "4096")?;
    set("use_zero_pages", "0")?;
    if std::path::Path::new(&format!("{KSM}/smart_scan")).exists() {
        set("smart_scan", "0")?;
    }
    let start = read("full_scans")?;
    let target = start + passes as u64 + 1;
    let deadline = Instant::now() + Duration::from_secs(10 * (passes as u64 + 1));
    set("run", "1")?;
    let waited = loop {
        let now = read("full_scans")?;
        if now >= target {
            break Ok(());
        }
        if Instant::now() > deadline {
            break Err(format!("ksmd did {} of {} full scans in time", now - start, passes + 1));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    set("run", "0")?;
    waited
}
