//! Why the model's relative effect differs from a seed's, from deterministic
//! counts rather than a guess: each machine's time per 4K page is fitted
//! (least squares) as a fixed cost plus a price per zap batch plus a price
//! per folio freed, the two counts that change with the folio size and the
//! zap strategy. Two machines whose changes differ pay different shares of
//! a page's time for the work batching saves.

/// One configuration: zap batches and folios freed per 4K page (the
/// deterministic counts), and its time per 4K page.
#[derive(Clone, Copy)]
pub(super) struct Point {
    pub batches: f64,
    pub folios: f64,
    pub time: f64,
}

/// A machine's fitted prices, in seconds per 4K page.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(super) struct Prices {
    pub fixed: f64,
    pub per_batch: f64,
    pub per_folio: f64,
    /// The share of the variance of the times the fit explains.
    pub r2: f64,
}

/// Fits `time = fixed + per_batch * batches + per_folio * folios`; `None`
/// if the points do not determine the three prices.
pub(super) fn fit(points: &[Point]) -> Option<Prices> {
    // Normal equations X'X p = X'y, solved by Cramer's rule.
    let rows: Vec<([f64; 3], f64)> = points.iter().map(|p| ([1.0, p.batches, p.folios], p.time)).collect();
    let mut a = [[0.0; 3]; 3];
    let mut b = [0.0; 3];
    for (x, y) in &rows {
        for i in 0..3 {
            b[i] += x[i] * y;
            for j in 0..3 {
                a[i][j] += x[i] * x[j];
            }
        }
    }
    let det = |m: [[f64; 3]; 3]| {
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    };
    let d = det(a);
    if d.abs() < 1e-12 * a[0][0].powi(3) {
        return None;
    }
    let solve = |k: usize| {
        let mut m = a;
        (0..3).for_each(|i| m[i][k] = b[i]);
        det(m) / d
    };
    let mut p = Prices { fixed: solve(0), per_batch: solve(1), per_folio: solve(2), r2: 0.0 };
    let mean = rows.iter().map(|r| r.1).sum::<f64>() / rows.len() as f64;
    let total: f64 = rows.iter().map(|r| (r.1 - mean).powi(2)).sum();
    let resid: f64 = points.iter().map(|q| (q.time - p.time(q.batches, q.folios)).powi(2)).sum();
    p.r2 = if total > 0.0 { 1.0 - resid / total } else { 1.0 };
    Some(p)
}

impl Prices {
    fn time(&self, batches: f64, folios: f64) -> f64 {
        self.fixed + self.per_batch * batches + self.per_folio * folios
    }

    /// The change in % that batching makes for folios of `n` pages: one
    /// batch per folio instead of one per page.
    pub(super) fn change(&self, n: f64) -> f64 {
        100.0 * (self.time(1.0 / n, 1.0 / n) / self.time(1.0, 1.0 / n) - 1.0)
    }

    /// Shares in % of a page's time under per-page zap for folios of `n`
    /// pages: the fixed cost, the zap batch, the folio freed.
    fn shares(&self, n: f64) -> [f64; 3] {
        let t = self.time(1.0, 1.0 / n);
        [self.fixed / t, self.per_batch / t, self.per_folio / n / t].map(|s| 100.0 * s)
    }
}

/// Why a row's model change (`model_pct`, 95% interval `interval`) differs
/// from the seed's `seed_pct` for folios of `n` pages, given both fits.
pub(super) fn reason(
    model: &Prices,
    seed: &Prices,
    n: f64,
    model_pct: f64,
    interval: (f64, f64),
    seed_pct: f64,
) -> String {
    if (interval.0..=interval.1).contains(&seed_pct) {
        return format!(
            "the seed's {seed_pct:+.0}% lies inside the model's interval [{:+.0},{:+.0}]: not a measured difference",
            interval.0, interval.1
        );
    }
    if model.r2 < 0.5 {
        return format!(
            "the model's times do not follow its counts here (R^2 {:.2}): noise dominates this run; rerun on a quiet machine or with more --runs",
            model.r2
        );
    }
    let (m, s) = (model.shares(n), seed.shares(n));
    let mut why = format!(
        "the fits predict {:+.0}% (model) and {:+.0}% (seed): per-page zap spends {:.0}% of a page's time per batch in the model, {:.0}% in the seed; freeing the folio {:.0}% and {:.0}%; the fixed rest {:.0}% and {:.0}%",
        model.change(n),
        seed.change(n),
        m[1],
        s[1],
        m[2],
        s[2],
        m[0],
        s[0]
    );
    let off = (model.change(n) - model_pct).abs();
    if off > 10.0 {
        why += &format!(
            " (the model's fit misses its own {model_pct:+.0}% by {off:.0} points: noise or work the counts miss)"
        );
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fit_recovers_the_prices_behind_exact_times() {
        let prices = Prices { fixed: 2.0, per_batch: 3.0, per_folio: 7.0, r2: 1.0 };
        let points: Vec<Point> = [1.0, 4.0, 16.0, 512.0]
            .iter()
            .flat_map(|&n| [1.0, 1.0 / n].map(|batches| (batches, 1.0 / n)))
            .map(|(batches, folios)| Point { batches, folios, time: prices.time(batches, folios) })
            .collect();
        let got = fit(&points).unwrap();
        for (g, w) in [(got.fixed, 2.0), (got.per_batch, 3.0), (got.per_folio, 7.0), (got.r2, 1.0)] {
            assert!((g - w).abs() < 1e-9, "{got:?}");
        }
        // Batching 4-page folios saves 3/4 of the batch price: (2+0.75+1.75)/(2+3+1.75).
        assert!((got.change(4.0) - 100.0 * (4.5 / 6.75 - 1.0)).abs() < 1e-9);
        assert!(fit(&points[..2]).is_none(), "two points cannot fix three prices");
    }
}
