//! `foliomm fuzz --feedback`: generation steered by what the model did.
//! A workload's features are the model counters it moved, each with its
//! order of magnitude (`zap_batches>=2^3`: a batch count, a split, a COW
//! copy per folio size, PMD sharing...). A workload that reaches features
//! no earlier workload of the run reached raises the weight of the kinds
//! of step ([`super::generate::KINDS`]) it drew more of than the weights
//! made likely, and lowers the others', so a long run keeps going where
//! new behaviour was found; weights drift back towards the defaults while
//! nothing new turns up.
//!
//! A steered run depends on the order of its seeds: its shards are not one
//! run split (each finding keeps its full workload, `original.fmm`).

use std::collections::BTreeSet;

use super::generate::{kind_weight, KINDS};

/// The weights learned so far and the features seen.
pub struct Feedback {
    bias: Vec<f64>,
    seen: BTreeSet<String>,
}

/// The most a kind's weight moves from its default, either way.
const SPAN: f64 = 5.0;

impl Feedback {
    pub fn new() -> Feedback {
        Feedback { bias: vec![1.0; KINDS.len()], seen: BTreeSet::new() }
    }

    /// The multipliers of the kinds' weights, for the generator.
    pub fn bias(&self) -> &[f64] {
        &self.bias
    }

    /// Learns from one workload that drew `drawn` steps of each kind and reached
    /// `features`; returns how many of them were new. With new features,
    /// each kind's weight is multiplied by how much more (or less) of the
    /// workload it made up than its weight predicted, damped; without,
    /// every weight moves a little back towards 1.
    pub fn learn(&mut self, features: &BTreeSet<String>, drawn: &[u32]) -> usize {
        let new = features.iter().filter(|f| self.seen.insert((*f).clone())).count();
        let total = f64::from(drawn.iter().sum::<u32>());
        let weight = |i: usize, b: f64| kind_weight(i) * b;
        let sum: f64 = self.bias.iter().enumerate().map(|(i, b)| weight(i, *b)).sum();
        for (i, b) in self.bias.iter_mut().enumerate() {
            if new == 0 || total == 0.0 {
                *b = b.powf(0.99);
                continue;
            }
            let ratio = (f64::from(drawn[i]) / total) / (weight(i, *b) / sum);
            *b = (*b * ratio.clamp(0.5, 2.0).powf(0.2 * (new as f64).min(5.0))).clamp(1.0 / SPAN, SPAN);
        }
        new
    }

    /// The weights in words (`mmap 1.20 write 0.80 ...`).
    pub fn describe(&self) -> String {
        KINDS.iter().zip(&self.bias).map(|((k, ..), b)| format!("{k} {b:.2}")).collect::<Vec<_>>().join(" ")
    }
}

/// The features of a model run: every counter that moved, with the power
/// of two at or below its value; but the counters that threads running at
/// once make depend on timing (TLB contents and shootdowns, lock spins,
/// lost seqcount rounds, busy readers), so that a run's features are the
/// same on every run of its seeds.
pub fn features(counters: &[(String, u64)]) -> BTreeSet<String> {
    let timed = |n: &str| n.starts_with("tlb_") || ["spins", "lost", "busy", "retry"].iter().any(|t| n.contains(t));
    let moved = counters.iter().filter(|(n, v)| *v > 0 && !timed(n));
    moved.map(|(n, v)| format!("{n}>=2^{}", v.ilog2())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_features_raise_the_kinds_drawn_and_old_ones_do_not() {
        let mut fb = Feedback::new();
        let mut drawn = vec![0; KINDS.len()];
        drawn[4] = 3; // fork
        let f = features(&[("fork".into(), 3), ("cow_copy".into(), 0)]);
        assert_eq!(f.iter().collect::<Vec<_>>(), ["fork>=2^1"]);
        assert_eq!(fb.learn(&f, &drawn), 1);
        assert!(fb.bias()[4] > 1.0 && fb.bias()[0] < 1.0, "{}", fb.describe());
        let before = fb.bias()[4];
        assert_eq!(fb.learn(&f, &drawn), 0, "a feature is new once");
        assert!(fb.bias()[4] < before, "nothing new: back towards 1");
        for _ in 0..100 {
            let f = features(&[(format!("c{}", fb.seen.len()), 1)]);
            fb.learn(&f, &drawn);
        }
        assert!(fb.bias().iter().all(|b| (1.0 / SPAN..=SPAN).contains(b)), "{}", fb.describe());
    }
}
