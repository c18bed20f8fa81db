//! Ctrl-C (SIGINT), SIGTERM or SIGHUP during `run`: the run says which file
//! and step it was at before it ends. A host run has its own handler
//! (`foliomm_host::handles_signals`), which puts the host back and exits;
//! this one then only prints.

use std::path::Path;
use std::sync::Mutex;

static FILE: Mutex<String> = Mutex::new(String::new());

/// Notes the scenario file (and configuration) now running.
pub fn at_file(file: &Path) {
    *FILE.lock().unwrap_or_else(|e| e.into_inner()) = file.display().to_string();
}

/// Installs the handler (once per process).
pub fn install() {
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
            eprintln!("foliomm: interrupted by {name} while running {file}{at}");
            if !foliomm_host::handles_signals() {
                std::process::exit(128 + sig);
            }
        }
    });
}
