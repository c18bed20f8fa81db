//! What a run killed without a chance to clean up (SIGKILL) left on the
//! host: changed settings, memory cgroups, debugfs mounts and run
//! directories. Every command but `host restore` puts back what runs
//! whose process is gone left; `host restore` does it for every run
//! (`--force`) or the same ones, and says what it did.

/// Puts back what runs whose process is gone left, saying so on stderr.
pub fn put_back() {
    for c in foliomm_host::sysfs::restore_left_behind(false) {
        eprintln!("foliomm: put back {} = {} (left changed by process {})", c.path, c.value, c.pid);
    }
    for dir in foliomm_host::memcg::remove_left_behind(false) {
        eprintln!("foliomm: removed the memory cgroup {dir} (left by a killed run)");
    }
    for at in foliomm_host::debugfs::unmount_left_behind(false) {
        eprintln!("foliomm: unmounted the debugfs at {at} (left by a killed run)");
    }
    // Quietly: a directory is nothing a user changed.
    foliomm_host::run_dir::remove_left_behind(false);
}

/// `foliomm host restore [--force]`: puts back what killed runs (with
/// `force`, any other run) left, listing each on stdout.
pub fn restore(force: bool) {
    let restored = foliomm_host::sysfs::restore_left_behind(force);
    for c in &restored {
        println!("put back {} = {} (changed by process {})", c.path, c.value, c.pid);
    }
    let cgroups = foliomm_host::memcg::remove_left_behind(force);
    for dir in &cgroups {
        println!("removed the memory cgroup {dir}");
    }
    let mounts = foliomm_host::debugfs::unmount_left_behind(force);
    for at in &mounts {
        println!("unmounted the debugfs at {at}");
    }
    let dirs = foliomm_host::run_dir::remove_left_behind(force);
    for dir in &dirs {
        println!("removed the run directory {dir}");
    }
    if restored.is_empty() && cgroups.is_empty() && mounts.is_empty() && dirs.is_empty() {
        println!(
            "nothing to put back ({} lists no setting of a finished run)",
            foliomm_host::sysfs::state_path().display()
        );
    }
}
