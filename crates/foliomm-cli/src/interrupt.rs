//! Ctrl-C (SIGINT), SIGTERM or SIGHUP during `run`, or any command with a
//! kernel referee: the run says which file and step it was at before it
//! ends, and the processes it started (a guest's qemu) end with it. A host
//! run has its own handler (`foliomm_host::handles_signals`), which ends
//! the workers, puts the host back and exits; this one then only prints.

use std::path::Path;
use std::sync::{Mutex, Once};

static INSTALLED: Once = Once::new();

static FILE: Mutex<String> = Mutex::new(String::new());

/// Notes the scenario file (and configuration) now running.
pub fn at_file(file: &Path) {
    *FILE.lock().unwrap_or_else(|e| e.into_inner()) = file.display().to_string();
}

/// Installs the handler, once per process whoever asks.
pub fn install() {
    INSTALLED.call_once(install_once);
}

fn install_once() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else { return };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let file = FILE.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let step = foliomm_scenario::interp::now::step();
            let at = step.map_or(String::new(), |(line, text)| format!(", at line {line}: {text}"));
            let name = match sig {
                SIGINT => "SIGINT",
                SIGTERM => "SIGTERM",
                _ => "SIGHUP",
            };
            let file = if file.is_empty() { file } else { format!(" while running {file}") };
            eprintln!("foliomm: interrupted by {name}{file}{at}");
            if !foliomm_host::handles_signals() {
                foliomm_host::end_descendants();
                std::process::exit(128 + sig);
            }
        }
    });
}
