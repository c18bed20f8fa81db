//! The host's khugepaged, driven as the kernel's selftest
//! (tools/testing/selftests/mm/khugepaged.c `wait_for_scan`) drives it:
//! its sleeps shortened to 10 ms (restored after the run, as every
//! setting), then waited for until `khugepaged/full_scans` has grown past
//! the scans asked for. The thread runs only while a PMD THP mode is on
//! (`start_stop_khugepaged`): with none, there is nothing to wait for.
//! Between those runs it is kept [`quiet`], as the model's khugepaged,
//! which scans only when a scenario asks.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::sys::{Advice, Map, Mapping};
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
/// 10 s, shorter than a long run), and returns once the thread is asleep.
///
/// Two wake-ups would still start a scan at any moment, and a scan that
/// reaches a scenario's MM between its steps collapses memory the model
/// leaves alone: writing either knob wakes the thread for one scan
/// (`scan_sleep_millisecs_store` clears `khugepaged_sleep_expire`), so the
/// scans this call starts are waited for; and the first MM to get a slot
/// wakes a thread that sleeps for want of one (`__khugepaged_enter` wakes
/// it when `khugepaged_scan.mm_head` was empty), so this process keeps a
/// slot of its own (`hold_a_slot`) and a scenario's MM never comes first.
pub fn quiet() -> Result<(), String> {
    // A kernel without THP has no khugepaged to keep quiet.
    if !std::path::Path::new(&path("scan_sleep_millisecs")).exists() {
        return Ok(());
    }
    if !pmd_enabled()? {
        // The thread is stopped; one started later scans once at once
        // (`khugepaged` begins with a scan), while the knobs are set.
        return set_sleeps(QUIET_MS);
    }
    hold_a_slot()?;
    // A write while a scan runs starts none (the scan's end sets the next
    // wake-up), so once a full scan ends after a write that no scan's end
    // preceded, none is pending; a scan that ended around the write
    // leaves that open, and the write is made again. A scan of the few
    // MMs with a slot takes milliseconds; one that does not end in a
    // second (many large MMs elsewhere on the machine, or no slot for
    // this process: PMD THPs on for shmem alone) is left to go on.
    for knob in SLEEPS {
        for _ in 0..5 {
            let scans = read("full_scans")?;
            sysfs::set(&path(knob), QUIET_MS)?;
            if read("full_scans")? != scans {
                continue;
            }
            let started = Instant::now();
            while read("full_scans")? == scans && started.elapsed() < Duration::from_secs(1) {
                std::thread::sleep(Duration::from_millis(2));
            }
            break;
        }
    }
    Ok(())
}

/// Gives this process's MM a khugepaged slot (`khugepaged_enter_vma` from
/// `MADV_HUGEPAGE`) through a region of its own. A VMA is given a slot
/// only once it has an anon_vma (`__thp_vma_allowable_orders` refuses one
/// without, short of a fault), so a byte is written there and zapped
/// again: khugepaged then finds the range empty and leaves it (more none
/// PTEs than `max_ptes_none` allows, or no page table at all). Advised
/// again on every call, as a slot is given only while PMD THPs are on
/// for anonymous memory (with them on for shmem alone, none is).
fn hold_a_slot() -> Result<(), String> {
    static REGION: OnceLock<Mapping> = OnceLock::new();
    const PMD: usize = 2 << 20;
    let fail = |what: &str, e: std::io::Error| format!("khugepaged slot: {what}: {e}");
    let region = match REGION.get() {
        Some(region) => region,
        None => {
            let region = Map::anon().aligned(PMD).map(PMD).map_err(|e| fail("mmap", e))?;
            region.write(0, 1);
            region.advise(0..PMD, Advice::DontNeed).map_err(|e| fail("MADV_DONTNEED", e))?;
            REGION.get_or_init(|| region)
        }
    };
    region.advise(0..PMD, Advice::HugePage).map_err(|e| fail("MADV_HUGEPAGE", e))
}

/// The knobs of khugepaged's sleeps: between scans, and after a failed
/// allocation.
const SLEEPS: [&str; 2] = ["scan_sleep_millisecs", "alloc_sleep_millisecs"];

fn set_sleeps(ms: &str) -> Result<(), String> {
    for knob in SLEEPS {
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
