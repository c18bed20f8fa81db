//! debugfs for a run that splits folios (`split PLACE`): the kernel's
//! `split_huge_pages` file, at `/sys/kernel/debug` when debugfs is mounted
//! there, else on a mount of the run's own (under its directory, taken
//! down when the run ends; `foliomm host restore` unmounts one a killed
//! run left).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run_dir::PREFIX as RUN_DIR;

const SYSTEM: &str = "/sys/kernel/debug";

/// A debugfs the run can write to.
pub struct Debugfs {
    dir: PathBuf,
    mounted_here: bool,
}

impl Debugfs {
    /// The system's debugfs, or a new mount at `dir`.
    pub fn open(dir: &Path) -> Result<Debugfs, String> {
        if Path::new(SYSTEM).join("split_huge_pages").exists() {
            return Ok(Debugfs { dir: SYSTEM.into(), mounted_here: false });
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        crate::signals::on_signal(unmount_own);
        run(Command::new("mount").args(["-t", "debugfs", "none"]).arg(dir))?;
        Ok(Debugfs { dir: dir.into(), mounted_here: true })
    }

    /// `split_huge_pages` over `[start, end)` of a process's addresses or
    /// a file's pages, to `order`, around page `at` of each folio if given
    /// (the kernel's own format; the order is left out for 0 without an
    /// offset, which kernels before 6.8 understand).
    pub fn split_huge_pages(
        &self,
        target: &SplitTarget,
        (start, end): (u64, u64),
        order: u32,
        at: Option<u64>,
    ) -> std::io::Result<()> {
        let who = match target {
            SplitTarget::Pid(pid) => pid.to_string(),
            SplitTarget::File(path) => path.clone(),
        };
        let mut text = format!("{who},{start:#x},{end:#x}");
        if order > 0 || at.is_some() {
            text += &format!(",{order}");
        }
        if let Some(at) = at {
            text += &format!(",{at}");
        }
        std::fs::write(self.dir.join("split_huge_pages"), text)
    }
}

/// What `split_huge_pages` splits in: a process's range of addresses, or
/// a file's range of pages named by a path (one starting with `/`).
pub enum SplitTarget {
    Pid(u32),
    File(String),
}

impl Drop for Debugfs {
    fn drop(&mut self) {
        if self.mounted_here {
            let _ = run(Command::new("umount").arg(&self.dir));
        }
    }
}

fn run(c: &mut Command) -> Result<(), String> {
    match c.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("{c:?}: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Err(format!("{c:?}: {e}")),
    }
}

/// Unmounts the debugfs mounts of runs whose process is gone (or of every
/// run, with `force`); returns the mount points.
pub fn unmount_left_behind(force: bool) -> Vec<String> {
    let me = std::process::id().to_string();
    unmount_where(|pid| force || pid == me || !Path::new("/proc").join(pid).exists())
}

/// Unmounts this process's run debugfs, if it mounted one (on a signal).
pub(crate) fn unmount_own() {
    let me = std::process::id().to_string();
    unmount_where(|pid| pid == me);
}

/// Unmounts the run debugfs mounts whose run's process id `chosen` picks;
/// returns the mount points.
fn unmount_where(chosen: impl Fn(&str) -> bool) -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut done = Vec::new();
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(at), Some("debugfs")) = (f.nth(1), f.next()) else { continue };
        let Some(dir) = at.split('/').find_map(|c| c.strip_prefix(RUN_DIR)) else { continue };
        if chosen(dir.split('-').next().unwrap_or("")) && run(Command::new("umount").arg(at)).is_ok() {
            done.push(at.to_string());
        }
    }
    done
}
