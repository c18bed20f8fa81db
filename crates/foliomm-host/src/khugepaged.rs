//! The host's khugepaged, driven as the kernel's selftest
//! (tools/testing/selftests/mm/khugepaged.c `wait_for_scan`) drives it:
//! its sleeps shortened to 10 ms (restored after the run, as every
//! setting), then waited for until `khugepaged/full_scans` has grown past
//! the scans asked for. The thread runs only while a PMD THP mode is on
//! (`start_stop_khugepaged`): with none, there is nothing to wait for.
//! Between those runs it is kept [`quiet`], as the model's khugepaged,
//! which scans only when a scenario asks.

use std::time::{Duration, Instant};

use crate::sysfs;

/// The file `name` of khugepaged's sysfs directory.
pub fn path(name: &str) -> String {
    format!("{}/khugepaged/{name}", sysfs::THP)
}

fn read(name: &str) -> Result<u64, String> {
    let p = path(name);
    sysfs::read_selected(&p)?.parse().map_err(|e| format!("{p}: {e}"))
}

/// Whether PMD-sized THPs are on in any mode (`hugepage_pmd_enabled`):
/// the 2 MiB size's own mode, or `inherit` of a top-level one, is not
/// `never`, for anonymous memory or (a kernel with per-size shmem files,
/// whose khugepaged serves shmem alone) for shmem, short of `deny`. A
/// kernel without per-size files (6.1) has the anonymous top level only.
fn pmd_enabled() -> Result<bool, String> {
    let on = |top: &str, pmd: &str| match pmd {
        "inherit" => top != "never" && top != "deny",
        m => m != "never",
    };
    let top = sysfs::read_selected(&sysfs::thp_path(None))?;
    let pmd = sysfs::read_selected(&sysfs::thp_path(Some(9))).unwrap_or_else(|_| "inherit".into());
    let shmem_pmd = format!("{}/hugepages-2048kB/shmem_enabled", sysfs::THP);
    let shmem = match sysfs::read_selected(&shmem_pmd) {
        Ok(pmd) => {
            let top = sysfs::read_selected(&format!("{}/shmem_enabled", sysfs::THP))?;
            top != "deny" && on(&top, &pmd)
        }
        Err(_) => false,
    };
    Ok(on(&top, &pmd) || shmem)
}

/// The sleep between scans while no scan is asked for: a day.
const QUIET_MS: &str = "86400000";

/// Makes khugepaged sleep between scans for a day
/// (`scan_sleep_millisecs`, `alloc_sleep_millisecs`), so that it does not
/// collapse a scenario's memory behind its back (the default sleep is
/// 10 s, shorter than a long run). Writing the knob wakes the thread
/// for one scan (`scan_sleep_millisecs_store` clears
/// `khugepaged_sleep_expire`), then it sleeps.
pub fn quiet() -> Result<(), String> {
    // A kernel without THP has no khugepaged to keep quiet.
    match std::path::Path::new(&path("scan_sleep_millisecs")).exists() {
        true => set_sleeps(QUIET_MS),
        false => Ok(()),
    }
}

fn set_sleeps(ms: &str) -> Result<(), String> {
    for knob in ["scan_sleep_millisecs", "alloc_sleep_millisecs"] {
        sysfs::set(&path(knob), ms)?;
    }
    Ok(())
}

/// How long khugepaged may do no scan at all before it is taken to have
/// no MM to scan (it sleeps while it has no slot: `khugepaged_wait_work`,
/// and then `full_scans` stands still, as on a guest where the run's MMs
/// are the only ones and none has a slot).
const IDLE: Duration = Duration::from_secs(2);

/// Returns once khugepaged has done `passes` full scans that began after
/// the call (the scan under way when it is made counts for nothing), or
/// has done none for [`IDLE`] (nothing to scan); an error if the scans
/// take longer than 10 s each. It is [`quiet`] again afterwards.
pub fn run(passes: u32) -> Result<(), String> {
    if !pmd_enabled()? {
        return Ok(());
    }
    set_sleeps("10")?;
    let waited = wait(passes);
    quiet()?;
    waited
}

fn wait(passes: u32) -> Result<(), String> {
    let start = read("full_scans")?;
    let target = start + passes as u64 + 1;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(10 * (passes as u64 + 1));
    loop {
        let now = read("full_scans")?;
        if now >= target || (now == start && started.elapsed() > IDLE) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("khugepaged did {} of {} full scans in time", now - start, passes + 1));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
