//! Statistics over a benchmark's samples: a summary per configuration, the
//! 95% confidence interval of a mean, and the % change between two
//! configurations with its interval (Welch's t, on logarithms), so that a change inside
//! the noise is shown as such. A table makes many comparisons at once, so
//! each change's interval is a 95% one for the whole family of the
//! table's comparisons (Bonferroni): noise in one cell of fifty does not
//! pass as an effect. With few samples the t quantiles are wide too.

use statrs::distribution::{ContinuousCDF, StudentsT};

/// What a configuration's samples came to.
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
    let hmean = n as f64 / s.iter().map(|v| 1.0 / v).sum::<f64>();
    Summary { n, min: s[0], median, mean: mean(&s), hmean }
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
        // Bounds past 1000% say only that the interval is wide.
        let bound = |v: f64| if v.is_finite() && v < 1000.0 { format!("{v:+.0}") } else { ">+999".into() };
        write!(f, "{mark}{:+.0}% [{},{}]", self.pct, bound(self.lo), bound(self.hi))
    }
}

/// The % change from `a` to `b`, with its interval by Welch's t (unequal
/// variances), at the 95% level for a family of `family` such comparisons
/// (each at 1 - 5%/family). Times and rates vary by factors, so positive
/// samples are compared as logarithms: the change is that of the geometric
/// means, and the interval that of their ratio. Otherwise the arithmetic
/// means are compared. Unbounded when either side has a single sample.
pub fn change(a: &[f64], b: &[f64], family: usize) -> Change {
    let p = 1.0 - 0.025 / family.max(1) as f64;
    if a.iter().chain(b).all(|v| *v > 0.0) {
        let ln = |s: &[f64]| s.iter().map(|v| v.ln()).collect::<Vec<f64>>();
        let (d, half) = difference(&ln(a), &ln(b), p);
        let pct = |x: f64| 100.0 * (x.exp() - 1.0);
        return Change { pct: pct(d), lo: pct(d - half), hi: pct(d + half) };
    }
    let (d, half) = difference(a, b, p);
    let pct = |x: f64| 100.0 * x / mean(a);
    Change { pct: pct(d), lo: pct(d - half), hi: pct(d + half) }
}

/// The difference of the means of `b` and `a` and the half width of its
/// Welch interval at quantile `p`.
fn difference(a: &[f64], b: &[f64], p: f64) -> (f64, f64) {
    let se2 = variance(a) / a.len() as f64 + variance(b) / b.len() as f64;
    let half = if se2 == 0.0 {
        0.0
    } else {
        // Welch-Satterthwaite degrees of freedom.
        let part = |s: &[f64]| (variance(s) / s.len() as f64).powi(2) / (s.len() as f64 - 1.0);
        t_quantile(se2 * se2 / (part(a) + part(b)), p) * se2.sqrt()
    };
    (mean(b) - mean(a), half)
}

/// The 95% confidence interval of the mean of `samples` (t-based;
/// unbounded for a single sample).
pub fn mean_interval(samples: &[f64]) -> (f64, f64) {
    let n = samples.len() as f64;
    let half = if n < 2.0 { f64::INFINITY } else { t_quantile(n - 1.0, 0.975) * (variance(samples) / n).sqrt() };
    (mean(samples) - half, mean(samples) + half)
}

/// The geometric mean of positive `samples` and its 95% confidence
/// interval, both computed on logarithms: a time or a rate whose interval
/// cannot reach below zero. The arithmetic mean and [`mean_interval`] for
/// samples that are not all positive.
pub fn log_mean_interval(samples: &[f64]) -> (f64, f64, f64) {
    if samples.iter().any(|v| *v <= 0.0) {
        let (lo, hi) = mean_interval(samples);
        return (mean(samples), lo, hi);
    }
    let ln: Vec<f64> = samples.iter().map(|v| v.ln()).collect();
    let (lo, hi) = mean_interval(&ln);
    (mean(&ln).exp(), lo.exp(), hi.exp())
}

/// Min, max and mean of `v` (of none: infinity, minus infinity and 0).
pub fn min_max_mean(v: &[f64]) -> (f64, f64, f64) {
    let avg = v.iter().sum::<f64>() / v.len().max(1) as f64;
    (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max), avg)
}

fn mean(s: &[f64]) -> f64 {
    s.iter().sum::<f64>() / s.len() as f64
}

/// Sample variance; infinite for fewer than two samples.
fn variance(s: &[f64]) -> f64 {
    if s.len() < 2 {
        return f64::INFINITY;
    }
    let m = mean(s);
    s.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (s.len() - 1) as f64
}

/// The quantile `p` of Student's t with `df` degrees of freedom.
fn t_quantile(df: f64, p: f64) -> f64 {
    if !df.is_finite() || df <= 0.0 {
        return f64::INFINITY;
    }
    StudentsT::new(0.0, 1.0, df).map_or(f64::INFINITY, |t| t.inverse_cdf(p))
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
        let (lo, hi) = mean_interval(&a);
        assert!(lo < 1.0125 && 1.0125 < hi && hi - lo < 0.1, "[{lo}, {hi}]");
        let c = change(&a, &faster, 1);
        assert!(c.significant() && c.hi < -30.0 && (c.pct + 40.0).abs() < 1e-9, "{c}");
    }

    #[test]
    fn an_interval_on_logarithms_stays_above_zero() {
        let wide = [0.001, 0.1, 0.01];
        let (lo, _) = mean_interval(&wide);
        let (gm, llo, lhi) = log_mean_interval(&wide);
        assert!(lo < 0.0 && llo > 0.0 && llo < gm && gm < lhi, "{lo} {llo} {gm} {lhi}");
        assert!((gm - 0.01).abs() < 1e-12);
    }

    #[test]
    fn few_samples_give_wide_intervals() {
        // t with 1 degree of freedom is 12.7: two close pairs are noise.
        let c = change(&[1.0, 1.1], &[0.9, 1.0], 1);
        assert!(!c.significant(), "{c}");
        assert!(!change(&[1.0], &[2.0], 1).significant(), "one sample each proves nothing");
        assert!((t_quantile(1e6, 0.975) - 1.96).abs() < 0.01);
    }

    #[test]
    fn a_family_of_comparisons_widens_each_interval() {
        let a = [1.00, 1.10, 0.95, 1.05, 0.98];
        let b = [0.90, 0.97, 0.88, 0.95, 0.91];
        let (one, fifty) = (change(&a, &b, 1), change(&a, &b, 50));
        assert_eq!(one.pct, fifty.pct);
        assert!(fifty.lo < one.lo && fifty.hi > one.hi, "{one} {fifty}");
    }
}
