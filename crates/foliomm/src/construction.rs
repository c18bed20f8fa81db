//! Constructions of per-MM numbers whose sums tell whether one MM owns every
//! mapping of a folio (seed 000's "rmap IDs"), and the means to check them.
//!
//! A construction turns the IDs of the mappings into a few u64 sums; given
//! the mapcount n and the sums, it names the sole owner, or none. It is
//! correct if it names an owner exactly when all n mappings are that MM's,
//! for every n up to the folio's page count and every ID below 2^24.
//! [`check`] searches for counterexamples exhaustively over small ID ranges
//! and mapping counts, then at random over the full range.

/// A way to derive rmap sums from MM IDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Construction {
    /// Σid and Σid²: n·a and n·a² leave zero squared deviation from a, so
    /// every mapping is a's (DESIGN.md; shipped as `rmap-id-powersum`).
    PowerSum,
    /// Σid alone: known wrong (1 + 3 = 2 + 2), kept to show the check works.
    Plain,
}

/// The constructions foliomm ships.
pub const SHIPPED: &[Construction] = &[Construction::PowerSum];

/// Bits of an rmap ID (the seed supports 16M MMs).
pub const ID_BITS: u32 = 24;

impl Construction {
    pub fn name(self) -> &'static str {
        match self {
            Construction::PowerSum => "powersum",
            Construction::Plain => "plain",
        }
    }

    pub fn parse(s: &str) -> Option<Construction> {
        [Construction::PowerSum, Construction::Plain].into_iter().find(|c| c.name() == s)
    }

    /// The sums for one mapping per entry of `ids`.
    pub fn sums(self, ids: &[u64]) -> Vec<u64> {
        let s1 = ids.iter().fold(0u64, |a, &x| a.wrapping_add(x));
        match self {
            Construction::PowerSum => vec![s1, ids.iter().fold(0u64, |a, &x| a.wrapping_add(x.wrapping_mul(x)))],
            Construction::Plain => vec![s1],
        }
    }

    /// The sole owner of `n` mappings with these sums, if the construction
    /// can name one.
    pub fn owner(self, n: u64, sums: &[u64]) -> Option<u64> {
        if n == 0 || !sums[0].is_multiple_of(n) {
            return None;
        }
        let a = sums[0] / n;
        match self {
            Construction::PowerSum => (sums[1] == n.wrapping_mul(a.wrapping_mul(a))).then_some(a),
            Construction::Plain => Some(a),
        }
    }

    /// The largest folio order whose sums cannot overflow u64 with IDs below
    /// 2^ID_BITS (at most 2^order mappings are looked at).
    pub fn max_order(self) -> u32 {
        let max_id = (1u128 << ID_BITS) - 1;
        let term = match self {
            Construction::PowerSum => max_id * max_id,
            Construction::Plain => max_id,
        };
        (0..=20u32).take_while(|&o| (1u128 << o) * term <= u64::MAX as u128).last().unwrap_or(0)
    }
}

/// A set of mappings for which a construction answers wrongly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counterexample {
    pub ids: Vec<u64>,
    pub answered: Option<u64>,
    pub truth: Option<u64>,
}

fn verdict(c: Construction, ids: &[u64]) -> Option<Counterexample> {
    let truth = ids.iter().all(|&x| x == ids[0]).then_some(ids[0]);
    let answered = c.owner(ids.len() as u64, &c.sums(ids));
    (answered != truth).then(|| Counterexample { ids: ids.to_vec(), answered, truth })
}

/// Every multiset of `n` IDs from `1..=max_id`, for `n` in `1..=max_n`,
/// then `trials` random sets of up to `2^order` IDs below 2^ID_BITS (seeded
/// by `seed`). Returns the first counterexample.
pub fn check(c: Construction, max_id: u64, max_n: usize, trials: u64, order: u32, seed: u64) -> Option<Counterexample> {
    fn multisets(c: Construction, ids: &mut Vec<u64>, from: u64, max_id: u64, left: usize) -> Option<Counterexample> {
        if left == 0 {
            return verdict(c, ids);
        }
        for x in from..=max_id {
            ids.push(x);
            let found = multisets(c, ids, x, max_id, left - 1);
            ids.pop();
            if found.is_some() {
                return found;
            }
        }
        None
    }
    for n in 1..=max_n {
        if let Some(ce) = multisets(c, &mut Vec::new(), 1, max_id, n) {
            return Some(ce);
        }
    }
    // xorshift64*: reproducible from `seed`.
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let id_mask = (1u64 << ID_BITS) - 1;
    for _ in 0..trials {
        let n = 2 + (next() % ((1u64 << order) - 1)) as usize;
        let a = (next() & id_mask).max(1);
        let mut ids = vec![a; n];
        // Mostly near-misses: one owner with a few mappings of others.
        for _ in 0..(1 + next() % 3) {
            let i = (next() % n as u64) as usize;
            ids[i] = (next() & id_mask).max(1);
        }
        if let Some(ce) = verdict(c, &ids) {
            return Some(ce);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powersum_holds_and_plain_fails() {
        assert_eq!(check(Construction::PowerSum, 7, 6, 20_000, 9, 1), None);
        let ce = check(Construction::Plain, 4, 3, 0, 9, 1).expect("plain sums must fail");
        assert_ne!(ce.answered, ce.truth);
        // DESIGN.md bounds the sums by 2^(48+k+1) and says order 15; exactly,
        // 2^16 * (2^24 - 1)^2 < 2^64, so order 16 still fits.
        assert_eq!(Construction::PowerSum.max_order(), 16);
        assert!(Construction::PowerSum.max_order() >= crate::phys::MAX_PAGE_ORDER);
    }
}
