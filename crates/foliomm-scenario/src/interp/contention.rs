//! The contention report of `parallel` blocks on simulated CPUs: simulated
//! time, cache-line transfers and lock waits by kernel structure (as
//! `perf c2c` and `perf lock` group them), per block and summed over a
//! `measure` block.

use std::collections::BTreeMap;

use foliomm::internals::sync::sim::CpuReport;
use foliomm::internals::sync::structure::Structure;

/// What the simulated CPUs of one or more blocks did.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Contention {
    /// Simulated time of the blocks (each block's last CPU's clock), ns.
    pub simulated_ns: f64,
    /// Transfers of modified lines between CPUs, by structure.
    pub transfers: BTreeMap<String, u64>,
    /// Time CPUs queued for lines others were moving, ns.
    pub queued_ns: f64,
    /// Time CPUs waited for locks, spinning or asleep, ns.
    pub waited_ns: f64,
    /// Of which for locks in lines of each structure, ns.
    pub waited_by: BTreeMap<String, f64>,
}

fn ns(ps: u64) -> f64 {
    ps as f64 / 1000.0
}

impl Contention {
    /// One block's report from its CPUs'.
    pub fn of(reports: &[CpuReport]) -> Contention {
        let mut c =
            Contention { simulated_ns: ns(reports.iter().map(|r| r.clock).max().unwrap_or(0)), ..Default::default() };
        for r in reports {
            c.queued_ns += ns(r.queued);
            c.waited_ns += ns(r.waited);
            for s in Structure::ALL {
                if r.transfers.of(s) > 0 {
                    *c.transfers.entry(s.name().into()).or_default() += r.transfers.of(s);
                }
                if r.transfers.waited_of(s) > 0 {
                    *c.waited_by.entry(s.name().into()).or_default() += ns(r.transfers.waited_of(s));
                }
            }
        }
        c
    }

    /// Adds another block's report to this one.
    pub fn add(&mut self, other: &Contention) {
        self.simulated_ns += other.simulated_ns;
        self.queued_ns += other.queued_ns;
        self.waited_ns += other.waited_ns;
        other.transfers.iter().for_each(|(k, v)| *self.transfers.entry(k.clone()).or_default() += v);
        other.waited_by.iter().for_each(|(k, v)| *self.waited_by.entry(k.clone()).or_default() += v);
    }
}

impl std::fmt::Display for Contention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let moved: Vec<String> = self.transfers.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let waits: Vec<String> = self.waited_by.iter().map(|(k, v)| format!("{k} {v:.1}")).collect();
        write!(
            f,
            "on simulated CPUs: {:.1} ns, transfers [{}], queued for lines {:.1} ns, waited for locks {:.1} ns [{}]",
            self.simulated_ns,
            moved.join(", "),
            self.queued_ns,
            self.waited_ns,
            waits.join(", ")
        )
    }
}
