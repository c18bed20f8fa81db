//! The interpreter: runs parsed steps on a [`Backend`], keeps the reference
//! byte model of every process beside it (every read is compared with it),
//! records observations, evaluates `expect` lines and, when asked, runs the
//! backend's invariant checker after every step. It stops at the first failure.
//!
//! `state` holds what a run keeps between steps and dispatches each step,
//! `process` runs the steps of a process against the backend and the
//! reference, and `expect` records observations and evaluates `expect` lines.

mod expect;
mod process;
mod state;

use crate::backend::{Backend, Observation};
use crate::lang::{Cmd, Step};
use state::State;

/// Options of a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Run the invariant checker after every step (a `set check` line overrides).
    pub check: bool,
}

/// What one step did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepOutcome {
    pub line: usize,
    pub text: String,
    pub result: String,
    /// What an `observe` step recorded.
    pub observed: Option<Observation>,
}

/// Why a run stopped early.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Failure {
    pub line: usize,
    pub message: String,
}

/// The result of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Outcome {
    pub backend: String,
    pub steps: Vec<StepOutcome>,
    pub observations: Vec<(String, Observation)>,
    pub counters: Vec<(String, u64)>,
    pub measures: Vec<Measure>,
    pub failure: Option<Failure>,
}

/// A `measure` block's result: time spent in the backend by its steps.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Measure {
    pub name: String,
    pub seconds: f64,
}

type StepResult = Result<String, String>;

/// Runs `steps` on `backend`.
pub fn run(steps: &[Step], backend: &mut dyn Backend, opts: RunOptions) -> Outcome {
    let mut st = State::new(backend, opts.check);
    let mut outcomes = Vec::new();
    let mut failure = None;
    for step in steps {
        let r = st.step(step).and_then(|msg| {
            if st.check && st.started && st.measure.is_none() {
                let bad = st.backend.check();
                if !bad.is_empty() {
                    return Err(format!("invariant checker after this step:\n  {}", bad.join("\n  ")));
                }
            }
            Ok(msg)
        });
        match r {
            Ok(result) => {
                let observed = matches!(step.cmd, Cmd::Observe { .. } | Cmd::ObservePin { .. })
                    .then(|| st.obs.last().map(|(_, o)| *o))
                    .flatten();
                outcomes.push(StepOutcome { line: step.line, text: step.text.clone(), result, observed })
            }
            Err(message) => {
                failure = Some(Failure { line: st.failed_line.unwrap_or(step.line), message });
                break;
            }
        }
    }
    // Processes still alive at the end exit, so leaks show in the counters.
    let mut live: Vec<String> = st.live.drain().collect();
    live.sort();
    for p in live {
        st.backend.exit(&p);
    }
    if let (Some((name, _)), None) = (&st.measure, &failure) {
        failure =
            Some(Failure { line: steps.last().map_or(0, |s| s.line), message: format!("measure {name} has no 'end'") });
    }
    Outcome {
        backend: st.backend.name().into(),
        steps: outcomes,
        observations: st.obs,
        counters: st.backend.counters(),
        measures: st.measures,
        failure,
    }
}
