//! A memory limit for a run that says `set memory limit SIZE`: its workers
//! run in a memory cgroup of their own, made under the cgroup this process
//! is in and limited to SIZE (cgroup v2 `memory.max`, v1
//! `memory.limit_in_bytes`), so that the kernel reclaims a workload larger
//! than it to the run's swap device as the model reclaims its RAM. The
//! cgroup is named after this process (`foliomm-PID`) and removed when the
//! run ends; `foliomm host restore` removes one a killed run left behind.
//!
//! Differs from the model: the limit counts what the workers are charged
//! (their pages, page tables and some kernel memory), the model's RAM
//! every frame of the machine.

use std::path::{Path, PathBuf};

const V2_ROOT: &str = "/sys/fs/cgroup";
const V1_ROOT: &str = "/sys/fs/cgroup/memory";
const PREFIX: &str = "foliomm-";

/// A memory cgroup for one run's workers.
pub struct Memcg {
    dir: PathBuf,
}

/// The memory cgroup this process is in, as a directory, and the name of
/// its limit file: v1's memory controller if mounted, else the v2 tree's.
fn own_cgroup() -> Result<(PathBuf, &'static str), String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let field = |line: &str| line.splitn(3, ':').nth(2).map(|p| p.trim_start_matches('/').to_string());
    if let Some(line) = text.lines().find(|l| l.split(':').nth(1).is_some_and(|c| c.split(',').any(|c| c == "memory")))
    {
        return Ok((Path::new(V1_ROOT).join(field(line).unwrap_or_default()), "memory.limit_in_bytes"));
    }
    match text.lines().find(|l| l.starts_with("0::")) {
        Some(line) if Path::new(V2_ROOT).join("cgroup.controllers").exists() => {
            Ok((Path::new(V2_ROOT).join(field(line).unwrap_or_default()), "memory.max"))
        }
        _ => Err("no memory cgroup controller is mounted".into()),
    }
}

/// Why the host cannot limit a run's memory, if it cannot.
pub fn unavailable() -> Option<String> {
    match own_cgroup() {
        Err(why) => Some(why),
        Ok((dir, _)) if !dir.is_dir() => Some(format!("{} is not a directory", dir.display())),
        Ok(_) => None,
    }
}

impl Memcg {
    /// Makes the run's cgroup, limited to `bytes`.
    pub fn create(bytes: u64) -> Result<Memcg, String> {
        crate::signals::on_signal(remove_own);
        let (parent, limit) = own_cgroup()?;
        let dir = parent.join(format!("{PREFIX}{}", std::process::id()));
        if let Err(e) = std::fs::create_dir(&dir) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(format!("cannot create the memory cgroup {}: {e}", dir.display()));
            }
        }
        let memcg = Memcg { dir };
        memcg.write(limit, &bytes.to_string())?;
        Ok(memcg)
    }

    /// Moves process `pid` (a worker just started) into the cgroup.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        self.write("cgroup.procs", &pid.to_string())
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        let path = self.dir.join(file);
        std::fs::write(&path, value).map_err(|e| format!("cannot write {value} to {}: {e}", path.display()))
    }
}

impl Drop for Memcg {
    /// Removes the cgroup once its workers are gone (they exit first).
    fn drop(&mut self) {
        remove(&self.dir);
    }
}

/// Removes a cgroup directory, waiting a little for its last processes to
/// leave; returns whether it is gone.
fn remove(dir: &Path) -> bool {
    for _ in 0..50 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// Removes this process's run cgroup, if it made one (on a signal, its
/// workers ended).
pub(crate) fn remove_own() {
    if let Ok((parent, _)) = own_cgroup() {
        remove(&parent.join(format!("{PREFIX}{}", std::process::id())));
    }
}

/// Removes the cgroups of runs whose process is gone (or every one, with
/// `force`); returns the directories removed.
pub fn remove_left_behind(force: bool) -> Vec<String> {
    let Ok((parent, _)) = own_cgroup() else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(&parent) else { return Vec::new() };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix(PREFIX) else { continue };
        let alive = Path::new("/proc").join(pid).exists() && pid != std::process::id().to_string();
        if (force || !alive) && remove(&e.path()) {
            removed.push(e.path().display().to_string());
        }
    }
    removed
}
