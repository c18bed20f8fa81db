//! The loop the benchmarks share: configurations run in interleaved rounds
//! (A B C, A B C, ...) after a warm-up round that is not kept, so that a
//! burst of load on a shared machine lands on every configuration, and
//! every sample is kept.

use anyhow::Result;

use super::progress::Progress;

/// Runs each of `configs` once per round, one warm-up round then `rounds`
/// kept ones; `sample` measures one configuration once (`N` metrics),
/// `label` names it in the progress. Returns each configuration's samples
/// in round order. Counts `configs.len() * (rounds + 1)` steps on `bar`.
pub fn interleaved<C, const N: usize>(
    configs: &[C],
    rounds: u32,
    bar: &Progress,
    label: impl Fn(&C) -> String,
    mut sample: impl FnMut(&C) -> Result<[f64; N]>,
) -> Result<Vec<Vec<[f64; N]>>> {
    let mut out = vec![Vec::new(); configs.len()];
    for round in 0..=rounds {
        for (c, kept) in configs.iter().zip(&mut out) {
            let what = if round == 0 { "warm-up".to_string() } else { format!("round {round}/{rounds}") };
            bar.set_message(format!("{} {what}", label(c)));
            let s = sample(c)?;
            if round > 0 {
                kept.push(s);
            }
            bar.inc(1);
        }
    }
    Ok(out)
}

/// Metric `k` of every sample.
pub fn metric<const N: usize>(samples: &[[f64; N]], k: usize) -> Vec<f64> {
    samples.iter().map(|s| s[k]).collect()
}
