//! Statistics over a benchmark's samples: a summary per configuration and
//! the % change between two configurations with a 95% bootstrap confidence
//! interval, so that a change inside the noise is shown as such.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Bootstrap resamples per confidence interval.
const RESAMPLES: usize = 2000;

/// What a configuration's samples (times in seconds) came to.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub mean: f64,
    /// Harmonic mean (mmtests' Hmean, for rates).
    pub hmean: f64,
}

/// Summarizes `samples` (at least one).
pub fn summarize(samples: &[f64]) -> Summary {
    assert!(!samples.is_empty(), "a summary of no samples");
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 };
    let mean = s.iter().sum::<f64>() / n as f64;
    let hmean = n as f64 / s.iter().map(|v| 1.0 / v).sum::<f64>();
    Summary { n, min: s[0], median, mean, hmean }
}

/// The % change of B's mean against A's, with its 95% confidence interval.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Change {
    pub pct: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Change {
    /// Whether the interval excludes 0: the change is more than noise.
    pub fn significant(&self) -> bool {
        self.lo > 0.0 || self.hi < 0.0
    }
}

impl std::fmt::Display for Change {
    /// `-54% [-60,-48]`, or `~+2% [-3,+7]` when the interval contains 0.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let mark = if self.significant() { "" } else { "~" };
        write!(f, "{mark}{:+.0}% [{:+.0},{:+.0}]", self.pct, self.lo, self.hi)
    }
}

/// The % change from `a` to `b` (means), with a percentile bootstrap
/// interval: both sample sets resampled with replacement `RESAMPLES`
/// times from `seed` (printed by the caller, so a run can be redone).
pub fn change(a: &[f64], b: &[f64], seed: u64) -> Change {
    let pct = |a: f64, b: f64| 100.0 * (b - a) / a;
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut resample = |s: &[f64]| (0..s.len()).map(|_| s[rng.gen_range(0..s.len())]).sum::<f64>() / s.len() as f64;
    let mut boot: Vec<f64> = (0..RESAMPLES).map(|_| pct(resample(a), resample(b))).collect();
    boot.sort_by(f64::total_cmp);
    let at = |q: f64| boot[((RESAMPLES - 1) as f64 * q).round() as usize];
    Change { pct: pct(mean(a), mean(b)), lo: at(0.025), hi: at(0.975) }
}

/// The 95% percentile bootstrap interval of the mean of `samples`.
pub fn mean_interval(samples: &[f64], seed: u64) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = samples.len();
    let mut boot: Vec<f64> =
        (0..RESAMPLES).map(|_| (0..n).map(|_| samples[rng.gen_range(0..n)]).sum::<f64>() / n as f64).collect();
    boot.sort_by(f64::total_cmp);
    let at = |q: f64| boot[((RESAMPLES - 1) as f64 * q).round() as usize];
    (at(0.025), at(0.975))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_samples() {
        let s = summarize(&[4.0, 1.0, 2.0, 4.0]);
        assert_eq!((s.n, s.min, s.median, s.mean), (4, 1.0, 3.0, 2.75));
        assert!((s.hmean - 4.0 / (0.25 + 1.0 + 0.5 + 0.25)).abs() < 1e-12);
    }

    #[test]
    fn noise_is_not_a_change_and_a_shift_is() {
        let a = [1.00, 1.10, 0.95, 1.05, 0.98, 1.02, 1.07, 0.93];
        let same = [1.03, 0.97, 1.08, 0.96, 1.01, 1.04, 0.94, 1.06];
        let faster: Vec<f64> = a.iter().map(|v| v * 0.6).collect();
        let c = change(&a, &same, 1);
        assert!(!c.significant(), "{c}");
        assert!(c.to_string().starts_with('~'));
        let (lo, hi) = mean_interval(&a, 1);
        assert!(lo < 1.0125 && 1.0125 < hi && hi - lo < 0.1, "[{lo}, {hi}]");
        let c = change(&a, &faster, 1);
        assert!(c.significant() && c.hi < -30.0 && (c.pct + 40.0).abs() < 1e-9, "{c}");
    }
}
