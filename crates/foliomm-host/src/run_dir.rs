//! Each run's directory under the temporary directory,
//! `foliomm-host-<pid>-<n>`: its workers' control socket, and the debugfs
//! it mounts where the system has none. A run removes its own when it
//! ends; a run killed without a chance to (SIGKILL) leaves it behind, and
//! a later one removes it.

use std::path::{Path, PathBuf};

/// The run directories' prefix.
pub(crate) const PREFIX: &str = "foliomm-host-";

/// A new run directory's path for this process (not created).
pub(crate) fn new() -> PathBuf {
    std::env::temp_dir().join(format!("{PREFIX}{}-{}", std::process::id(), crate::unique()))
}

/// Removes the run directories of runs whose process is gone (of every
/// run but this process's, with `force`), but for one a file system is
/// still mounted in (see [`crate::debugfs::unmount_left_behind`], to be
/// called first); returns their paths.
pub fn remove_left_behind(force: bool) -> Vec<String> {
    let me = std::process::id().to_string();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return Vec::new() };
    let mut done = Vec::new();
    for path in entries.filter_map(|e| Some(e.ok()?.path())) {
        // `<pid>-<n>`: not the settings file, nor any other name.
        let name = path.file_name().and_then(|n| n.to_str()?.strip_prefix(PREFIX)?.split_once('-'));
        let Some((pid, _)) = name.filter(|(p, n)| p.parse::<u32>().is_ok() && n.parse::<u64>().is_ok()) else {
            continue;
        };
        let gone = !Path::new("/proc").join(pid).exists();
        let path_text = path.to_string_lossy().into_owned();
        let inside = |at: &str| at == path_text || at.starts_with(&format!("{path_text}/"));
        let mounted = mounts.lines().any(|l| l.split_whitespace().nth(1).is_some_and(inside));
        if (gone || (force && pid != me)) && !mounted && std::fs::remove_dir_all(&path).is_ok() {
            done.push(path_text);
        }
    }
    done
}
