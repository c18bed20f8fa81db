//! THP settings in `/sys/kernel/mm/transparent_hugepage` and the huge page
//! pool's size, changed only with a
//! record of the old value, and put back when the backend is dropped, when the
//! process is interrupted (SIGINT, SIGTERM, SIGHUP), or by [`restore_all`].

use std::sync::{Mutex, Once};

use foliomm::folio::thp::ThpMode;

pub const THP: &str = "/sys/kernel/mm/transparent_hugepage";

/// (path, value before our first change), oldest first.
static SAVED: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
static SIGNALS: Once = Once::new();

/// The selected value of a sysfs "a [b] c" file, or the value of a file
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

/// The 2 MiB huge page pool's size.
pub fn hugetlb_path() -> String {
    "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages".to_string()
}

/// Writes `value` to `path`, remembering the old value the first time.
pub fn set(path: &str, value: &str) -> Result<(), String> {
    SIGNALS.call_once(|| {
        if let Ok(mut signals) = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP]) {
            std::thread::spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    restore_all();
                    std::process::exit(128 + sig);
                }
            });
        }
    });
    let old = read_selected(path)?;
    let mut saved = SAVED.lock().unwrap();
    std::fs::write(path, value)
        .map_err(|e| format!("cannot write '{value}' to {path}: {e} (changing THP settings needs root)"))?;
    if !saved.iter().any(|(p, _)| p == path) {
        saved.push((path.to_string(), old));
    }
    Ok(())
}

/// Puts every changed setting back, newest first.
pub fn restore_all() {
    let mut saved = SAVED.lock().unwrap();
    while let Some((p, v)) = saved.pop() {
        let _ = std::fs::write(&p, v);
    }
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
