//! Progress of a benchmark on stderr: a bar when stderr is a terminal,
//! whatever stdout is; otherwise plain lines (a step's name when it
//! changes, and the count at most once a second), so that a run whose
//! output goes to files still shows where it is.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How often the plain log repeats the count when no step name changes.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// A benchmark's progress over a known number of steps.
pub struct Progress {
    bar: Option<ProgressBar>,
    len: u64,
    pos: AtomicU64,
    start: Instant,
    /// The plain log's last step name and when it last wrote.
    logged: Mutex<(String, Instant)>,
}

impl Progress {
    /// Progress over `steps` steps, drawn as a bar if stderr is a terminal.
    pub fn new(steps: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(steps);
            bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}").unwrap());
            bar
        });
        let now = Instant::now();
        Progress { bar, len: steps, pos: AtomicU64::new(0), start: now, logged: Mutex::new((String::new(), now)) }
    }

    /// Names the step under way.
    pub fn set_message(&self, msg: impl Into<String>) {
        let msg = msg.into();
        match &self.bar {
            Some(bar) => bar.set_message(msg),
            None => {
                let mut logged = self.logged.lock().unwrap();
                if logged.0 != msg {
                    self.log(&msg);
                    *logged = (msg, Instant::now());
                }
            }
        }
    }

    /// Counts `n` steps done.
    pub fn inc(&self, n: u64) {
        let pos = self.pos.fetch_add(n, Relaxed) + n;
        match &self.bar {
            Some(bar) => bar.inc(n),
            None => {
                let mut logged = self.logged.lock().unwrap();
                if logged.1.elapsed() >= LOG_EVERY || pos == self.len {
                    self.log(&logged.0);
                    logged.1 = Instant::now();
                }
            }
        }
    }

    /// Ends the progress: the bar disappears; the plain log says how long
    /// it took.
    pub fn finish_and_clear(&self) {
        match &self.bar {
            Some(bar) => bar.finish_and_clear(),
            None => eprintln!("done: {} steps in {:.1} s", self.pos.load(Relaxed), self.start.elapsed().as_secs_f64()),
        }
    }

    fn log(&self, msg: &str) {
        let pos = self.pos.load(Relaxed);
        eprintln!("[{pos}/{} {:.1} s] {msg}", self.len, self.start.elapsed().as_secs_f64());
    }
}
