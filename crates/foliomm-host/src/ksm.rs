//! The host's ksmd, driven much as the kernel's selftests drive it
//! (tools/testing/selftests/mm/ksm_functional_tests.c `ksm_merge`: started
//! with `ksm/run` 1, waited for until `ksm/full_scans` has grown), but so
//! that it does exactly the full scans asked for: `pages_to_scan` larger
//! than any scenario maps, so that one batch of `ksm_do_scan` is one whole
//! scan (`scan_get_next_rmap_item` ends a batch at the end of a scan), and
//! a second between batches, in which the run is stopped once the last
//! scan is counted. Without `smart_scan` (which would skip pages that did
//! not merge before, where the model does not) and `use_zero_pages`. Every
//! setting is restored after the run.

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

/// ksmd's sleep between batches (`sleep_millisecs`), in which a run that
/// has done its scans is stopped.
const BETWEEN_SCANS: Duration = Duration::from_millis(1000);

/// Returns once ksmd has done `passes` full scans, then stops it; an error
/// if the host has no KSM or the scans take longer than 10 s each.
pub fn run(passes: u32) -> Result<(), String> {
    if !std::path::Path::new(KSM).exists() {
        return Err("the host kernel has no KSM (/sys/kernel/mm/ksm; CONFIG_KSM)".into());
    }
    set("sleep_millisecs", &BETWEEN_SCANS.as_millis().to_string())?;
    set("pages_to_scan", "1000000")?;
    set("use_zero_pages", "0")?;
    if std::path::Path::new(&format!("{KSM}/smart_scan")).exists() {
        set("smart_scan", "0")?;
    }
    let start = read("full_scans")?;
    let target = start + passes as u64;
    let deadline = Instant::now() + Duration::from_secs(10 * passes as u64);
    set("run", "1")?;
    let waited = loop {
        let now = read("full_scans")?;
        if now >= target {
            break Ok(());
        }
        if Instant::now() > deadline {
            break Err(format!("ksmd did {} of {passes} full scans in time", now - start));
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    set("run", "0")?;
    waited?;
    match read("full_scans")? - start {
        done if done == passes as u64 => Ok(()),
        done => Err(format!("ksmd did {done} full scans where {passes} were asked for (a batch was not one scan)")),
    }
}
