//! The kernels a scenario runs on besides the model: this machine's
//! (`--backend host`) or Linux 6.1 in a guest (`--backend guest`, booted on
//! first use and kept for every later file).

use foliomm_host::guest::Guest;
use foliomm_host::HostBackend;
use foliomm_scenario::lang::Step;
use foliomm_scenario::{run, Failure, FailureKind, Outcome, RunOptions};

pub enum Referee {
    Host,
    /// The guest, once booted; or why it could not boot.
    Guest(Option<Result<Guest, String>>),
}

impl Referee {
    /// `host` or `guest`.
    pub fn new(backend: &str) -> Referee {
        // A guest's qemu must not outlive an interrupted run.
        crate::interrupt::install();
        match backend {
            "guest" => Referee::Guest(None),
            _ => Referee::Host,
        }
    }

    /// The release the model follows when held against this referee,
    /// if not its default: the guest's Linux 6.1 (and so its design).
    pub fn release(&self) -> Option<foliomm::internals::release::KernelVersion> {
        match self {
            Referee::Host => None,
            Referee::Guest(_) => Some(foliomm::internals::release::KernelVersion::OLDEST),
        }
    }

    /// The run of `steps`, parsed from `text`, the contents of file `name`.
    /// A guest that cannot start makes every file a skip, with the reason.
    pub fn run(&mut self, name: &str, text: &str, steps: &[Step]) -> Outcome {
        let guest = match self {
            Referee::Host => {
                let exe = std::env::current_exe().expect("the path of this program");
                return run(steps, &mut HostBackend::new(exe), RunOptions::default());
            }
            Referee::Guest(g) => g.get_or_insert_with(|| Guest::boot(|stage| eprintln!("foliomm: {stage}"))),
        };
        let outcome = match guest {
            Err(why) => return failed(FailureKind::Unsupported, why.clone()),
            Ok(g) => g.run(name, text).map(|mut o| {
                o.backend = format!("guest, Linux {}", g.release);
                o
            }),
        };
        outcome.unwrap_or_else(|e| {
            // Out of step with its agent: the guest goes, and later files
            // are skipped with the reason.
            *self = Referee::Guest(Some(Err(format!("the guest failed earlier: {e}"))));
            failed(FailureKind::Backend, e)
        })
    }
}

/// A guest run that did not happen.
fn failed(kind: FailureKind, message: String) -> Outcome {
    Outcome { backend: "guest".into(), failure: Some(Failure { line: 0, kind, message }), ..Outcome::default() }
}
