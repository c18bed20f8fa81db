//! DAMON on the host: a kdamond running a DAMOS scheme (this machine's
//! pages out what it finds cold, `pageout` over physical addresses) acts on
//! the run's memory at moments of its own choosing, so what a run observes
//! would depend on when it ran (a page swapped out, a folio split or moved
//! between LRU lists). Every kdamond that is on is turned off for the run
//! and on again afterwards, as the THP knobs are put back.

/// The kdamonds of DAMON's sysfs interface (`CONFIG_DAMON_SYSFS`).
const KDAMONDS: &str = "/sys/kernel/mm/damon/admin/kdamonds";

/// Turns off every kdamond that is on (`kdamonds/N/state`), recorded to
/// be turned on again; nothing where DAMON's sysfs interface is missing.
pub fn pause() -> Result<(), String> {
    let Ok(dirs) = std::fs::read_dir(KDAMONDS) else { return Ok(()) };
    for dir in dirs.flatten() {
        let state = dir.path().join("state");
        let Some(path) = state.to_str() else { continue };
        if crate::sysfs::read_selected(path).is_ok_and(|s| s == "on") {
            crate::sysfs::set(path, "off")?;
        }
    }
    Ok(())
}
