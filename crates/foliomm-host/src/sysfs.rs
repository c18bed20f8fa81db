//! THP settings in `/sys/kernel/mm/transparent_hugepage`, the huge page
//! pool's size and the swap device's ([`crate::swap`]), changed only with a record of the old value, in memory and
//! in a state file ([`state_path`]), and put back when the backend is
//! dropped, when the process is interrupted (SIGINT, SIGTERM, SIGHUP), or by
//! [`restore_all`]; what a killed run left changed, the next `foliomm` puts
//! back ([`restore_left_behind`]).

use std::sync::Mutex;

use crate::signals::{alive, on_signal};

use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::machine::{HugeCounts, HugeSize};

pub const THP: &str = "/sys/kernel/mm/transparent_hugepage";

/// (path, value before our first change), oldest first.
static SAVED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// A setting changed and not yet put back, as the state file keeps it: so
/// that a run killed without a chance to restore (`kill -9`) can be undone
/// by the next `foliomm` or by `foliomm host restore`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Changed {
    pub path: String,
    /// The value before the change.
    pub value: String,
    /// The process that changed it.
    pub pid: u32,
}

/// The state file of changed host settings.
pub fn state_path() -> std::path::PathBuf {
    std::env::temp_dir().join("foliomm-host-settings.json")
}

fn load_state() -> Vec<Changed> {
    std::fs::read(state_path()).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// Writes the state file whole (through a rename, so a reader never sees
/// half of it), or removes it when nothing is left.
fn store_state(entries: &[Changed]) {
    let path = state_path();
    if entries.is_empty() {
        let _ = std::fs::remove_file(path);
        return;
    }
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    if std::fs::write(&tmp, serde_json::to_vec_pretty(entries).unwrap()).is_ok() {
        let _ = std::fs::rename(tmp, path);
    }
}

/// Puts back what processes that are gone left changed (all of it with
/// `force`, live processes' changes too); returns what was put back.
pub fn restore_left_behind(force: bool) -> Vec<Changed> {
    let state = load_state();
    let (gone, kept): (Vec<Changed>, Vec<Changed>) = state.into_iter().partition(|c| force || !alive(c.pid));
    // Newest first, as restore_all does.
    for c in gone.iter().rev() {
        put_back(&c.path, &c.value);
    }
    store_state(&kept);
    gone
}

/// Writes `value` back to `path`. A huge page pool may hold pages a killed
/// worker still maps a moment longer, and keeps a gigantic page in use (a
/// 1 GiB one) as a surplus page that, once free, Linux 6.18 was seen to
/// keep (free 1, surplus 1): the pool is written again, a free surplus page
/// first made persistent so that the write frees it, until it holds
/// `value` or 5 s have passed.
fn put_back(path: &str, value: &str) {
    if path == ZRAM_DISKSIZE {
        return reset_zram();
    }
    let _ = std::fs::write(path, value);
    let Some(dir) = path.strip_suffix("/nr_hugepages") else { return };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while read_selected(path).is_ok_and(|v| v != value) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let surplus = read_selected(&format!("{dir}/surplus_hugepages")).is_ok_and(|s| s != "0");
        if let Some(now) = read_selected(path).ok().filter(|_| surplus) {
            let _ = std::fs::write(path, now);
        }
        let _ = std::fs::write(path, value);
    }
}

/// zram0's size, the setting a run with a swap device changes
/// ([`crate::swap`]; 0 when unused).
pub const ZRAM_DISKSIZE: &str = "/sys/block/zram0/disksize";

/// Puts zram0 back to unused: swapped off (its pages read back into the
/// processes that still map them) and reset, which frees its memory and
/// sets its size to 0.
fn reset_zram() {
    let _ = crate::sys::swap_device(c"/dev/zram0", false);
    let _ = std::fs::write("/sys/block/zram0/reset", "1");
}

/// The selected value of a sysfs "a \[b\] c" file, or the value of a file
/// holding one word (`nr_hugepages`).
pub fn read_selected(path: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.iter().find(|w| w.starts_with('[')) {
        Some(w) => Ok(w.trim_matches(['[', ']']).to_string()),
        None if words.len() == 1 => Ok(words[0].to_string()),
        None => Err(format!("cannot parse {path}: '{}'", text.trim())),
    }
}

/// The file `name` (`nr_hugepages`, `free_hugepages`, ...) of the huge
/// page pool of `size`.
pub fn hugetlb_path(size: HugeSize, name: &str) -> String {
    format!("/sys/kernel/mm/hugepages/hugepages-{}kB/{name}", size.bytes() >> 10)
}

/// `nr_hugepages` of node `nid`'s pool of `size`.
pub fn node_hugetlb_path(nid: u64, size: HugeSize) -> String {
    format!("/sys/devices/system/node/node{nid}/hugepages/hugepages-{}kB/nr_hugepages", size.bytes() >> 10)
}

/// The counts of the pool of `size` (zero where unreadable).
pub fn huge_counts(size: HugeSize) -> HugeCounts {
    HugeCounts { resv: read_count(&hugetlb_path(size, "resv_hugepages")), ..counts_in(&hugetlb_path(size, "")) }
}

/// Ok unless `path` is the `nr_hugepages` of a huge page pool (global or a
/// node's) whose reservation count has underflowed. A kernel that once gave back
/// more reservations than it took (the race `tests/hugetlb_truncate_race.rs`
/// shows) holds a negative `resv_huge_pages`, read as a number near 2^64,
/// until it reboots; it then refuses to shrink a pool it has grown
/// (`set_max_huge_pages` counts the reservations as pages in use), so a
/// run could not put the pool back.
pub fn pool_accounting_sound(path: &str) -> Result<(), String> {
    let Some(pool) = pool_of(path) else { return Ok(()) };
    let resv_path = format!("/sys/kernel/mm/hugepages/{pool}/resv_hugepages");
    let resv = read_count(&resv_path);
    if resv > u64::MAX / 2 {
        return Err(format!(
            "the host kernel's count of reserved huge pages has underflowed ({resv_path}: {resv}, \
             that is {}): it could not shrink the pool back after the run; a reboot clears it",
            resv as i64
        ));
    }
    Ok(())
}

/// The pool (`hugepages-2048kB`) whose `nr_hugepages`, global or a
/// node's, `path` is; None for any other file (THP's per-size
/// `transparent_hugepage/hugepages-*` directories among them).
fn pool_of(path: &str) -> Option<&str> {
    let pools = path.starts_with("/sys/kernel/mm/hugepages/") || path.starts_with("/sys/devices/system/node/");
    let pool = path.strip_suffix("/nr_hugepages").and_then(|dir| dir.rsplit('/').next());
    pool.filter(|p| pools && p.starts_with("hugepages-"))
}

/// The counts of node `nid`'s part of the pool of `size` (zero where
/// unreadable; no reservations per node).
pub fn node_huge_counts(nid: usize, size: HugeSize) -> HugeCounts {
    counts_in(&node_hugetlb_path(nid as u64, size).replace("nr_hugepages", ""))
}

/// `nr_hugepages`, `free_hugepages` and `surplus_hugepages` of the pool
/// directory `dir` (ending in `/`).
fn counts_in(dir: &str) -> HugeCounts {
    let read = |name: &str| read_count(&format!("{dir}{name}"));
    HugeCounts {
        total: read("nr_hugepages"),
        free: read("free_hugepages"),
        resv: 0,
        surplus: read("surplus_hugepages"),
    }
}

/// The number in the file `path` (0 where unreadable).
fn read_count(path: &str) -> u64 {
    std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0)
}

/// `vm.hugetlb_optimize_vmemmap` (HVO); absent where the kernel cannot
/// optimize (no `CONFIG_HUGETLB_PAGE_OPTIMIZE_VMEMMAP`, or
/// `memory_hotplug.memmap_on_memory`).
pub const HVO_PATH: &str = "/proc/sys/vm/hugetlb_optimize_vmemmap";

/// Writes [`HVO_PATH`] (restored afterwards); an error where it is missing.
pub fn set_hvo(on: bool) -> Result<(), String> {
    if !std::path::Path::new(HVO_PATH).exists() {
        return Err(format!("{HVO_PATH} is missing: no HVO in this kernel"));
    }
    set(HVO_PATH, if on { "1" } else { "0" })
}

/// The host's `vm.max_map_count`, if readable.
pub fn max_map_count() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count").ok()?.trim().parse().ok()
}

/// Writes `value` to `path`, remembering the old value the first time;
/// refuses a huge page pool the kernel could not put back (see
/// [`pool_accounting_sound`]).
pub fn set(path: &str, value: &str) -> Result<(), String> {
    pool_accounting_sound(path)?;
    on_signal(restore_all);
    let old = read_selected(path)?;
    let mut saved = SAVED.lock().unwrap();
    // Checked under the lock the undo takes: either the undo comes after
    // this change and puts it back, or this change sees the signal.
    if crate::signals::interrupted() {
        return Err(format!("not writing '{value}' to {path}: interrupted, the host is being put back"));
    }
    if !saved.iter().any(|(p, _)| p == path) {
        // Recorded before the change: a kill at any later instant leaves
        // the original value on disk. A setting another live run changed
        // first keeps that run's original.
        let mut state = load_state();
        if !state.iter().any(|c| c.path == path) {
            state.push(Changed { path: path.to_string(), value: old.clone(), pid: std::process::id() });
            store_state(&state);
        }
        saved.push((path.to_string(), old));
    }
    std::fs::write(path, value)
        .map_err(|e| format!("cannot write '{value}' to {path}: {e} (changing host settings needs root)"))?;
    Ok(())
}

/// Puts every setting this process changed back, newest first, and takes
/// them off the state file.
pub fn restore_all() {
    restore_where(|_| true);
}

/// Puts the settings at `paths` back, if this process changed them, and
/// takes them off the state file (a scope that is done with its settings).
pub fn restore(paths: &[String]) {
    restore_where(|p| paths.iter().any(|q| q == p));
}

fn restore_where(chosen: impl Fn(&str) -> bool) {
    let mut saved = SAVED.lock().unwrap();
    let (back, kept): (Vec<_>, Vec<_>) = saved.drain(..).partition(|(p, _)| chosen(p));
    *saved = kept;
    if back.is_empty() {
        return;
    }
    for (p, v) in back.into_iter().rev() {
        put_back(&p, &v);
    }
    let pid = std::process::id();
    store_state(&load_state().into_iter().filter(|c| c.pid != pid || !chosen(&c.path)).collect::<Vec<_>>());
}

/// The path of the top-level mode or of one folio order's mode.
pub fn thp_path(order: Option<u32>) -> String {
    match order {
        None => format!("{THP}/enabled"),
        Some(o) => format!("{THP}/hugepages-{}kB/enabled", 4u64 << o),
    }
}

/// The path of `shmem_enabled` or of one folio order's shmem mode.
pub fn shmem_path(order: Option<u32>) -> String {
    match order {
        None => format!("{THP}/shmem_enabled"),
        Some(o) => format!("{THP}/hugepages-{}kB/shmem_enabled", 4u64 << o),
    }
}

pub fn mode_name(m: ThpMode) -> &'static str {
    m.name()
}

/// Sets the per-size mode file `size` of folio `order` to `mode`. A kernel
/// without per-size files (before Linux `since`, as the guest's 6.1) has
/// the PMD size only, under the top-level mode file `top`: `inherit` is
/// what it does there, another mode is set at the top; other sizes cannot
/// be had.
pub fn set_per_size(
    order: u32,
    size: &str,
    top: &str,
    mode: &str,
    inherit: bool,
    what: &str,
    since: &str,
) -> Result<(), String> {
    if std::path::Path::new(size).exists() {
        return set(size, mode);
    }
    match (order, inherit) {
        (9, true) => Ok(()),
        (9, false) => set(top, mode),
        _ => Err(format!("this kernel has no {} KiB {what} size (per-size {what} came in Linux {since})", 4 << order)),
    }
}

#[cfg(test)]
mod tests {
    use super::pool_of;

    #[test]
    fn only_a_pool_s_nr_hugepages_names_a_pool() {
        let global = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
        let node = "/sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages";
        assert_eq!(pool_of(global), Some("hugepages-2048kB"));
        assert_eq!(pool_of(node), Some("hugepages-1048576kB"));
        assert_eq!(pool_of("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_overcommit_hugepages"), None);
        assert_eq!(pool_of("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled"), None);
        assert_eq!(pool_of("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/nr_hugepages"), None);
    }
}
