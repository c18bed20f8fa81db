//! The step a run in this process is at, for the message of a run that is
//! interrupted (Ctrl-C): which line it was doing.

use std::sync::Mutex;

static AT: Mutex<Option<(usize, String)>> = Mutex::new(None);

/// Notes that a run is at the step of line `line`, `text`.
pub(super) fn enter(line: usize, text: &str) {
    *AT.lock().unwrap_or_else(|e| e.into_inner()) = Some((line, text.to_string()));
}

/// The line and text of the step a run of this process is at (or was at
/// last), if one has run.
pub fn step() -> Option<(usize, String)> {
    AT.lock().unwrap_or_else(|e| e.into_inner()).clone()
}
