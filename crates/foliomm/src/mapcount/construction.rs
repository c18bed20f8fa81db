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
    /// every mapping is a's (docs/DESIGN.md; shipped as `rmap-id-powersum`).
    PowerSum,
    /// Σid alone: known wrong (1 + 3 = 2 + 2), kept to show the check works.
    Plain,
    /// Seed 000's RFC from patch 11 on (mm/rmap_id.c): the 24-bit ID is cut
    /// into k digits (k by folio order as the seed's table gives: 1, 2 or 3
    /// up to order 9), and each digit d becomes the sub-ID
    /// Σ bit_j(d)·(P+1)^j (`calc_rmap_subid`), P the pages of the largest
    /// order sharing that k: at most P summands never carry between
    /// base-(P+1) places, so the sums count, per bit, how many mappings
    /// have it set. One sum per digit.
    SeedSubIds,
    /// The same before patch 11: 4 values up to order 10, 5 up to 12, 6 up
    /// to 15, from the lookup tables `rmap_subids_4/5/6`.
    SeedSubIdsTables,
    /// The seed's answer for 32-bit architectures ("We would only want to
    /// use 32bit atomics. With 64k rmap IDs we could support order-15
    /// folios with a maximum of 8x 32bit rmap values"): 16-bit IDs, sums
    /// kept in 32 bits, the sub-ID scheme with as many digits as make each
    /// sum fit: 2 values up to order 2, 3 up to 5, 6 up to 10, 8 up to 15.
    SeedSubIds32,
}

/// The constructions foliomm's designs use: `rmap-id-powersum`'s,
/// `rmap-id`'s as the RFC wrote it (from patch 11 on, and before), and the
/// seed's 32-bit option (the `all-32bit` stage).
pub const SHIPPED: &[Construction] =
    &[Construction::PowerSum, Construction::SeedSubIds, Construction::SeedSubIdsTables, Construction::SeedSubIds32];

/// Bits of an rmap ID (the seed supports 16M MMs; its 32-bit variant 64K).
pub const ID_BITS: u32 = 24;

/// The most sums a folio keeps (the 32-bit variant's 8 values for the
/// largest orders; the 64-bit constructions keep at most 6).
pub const MAX_VALUES: usize = 8;

/// One mapping's contribution to each sum; derefs to a slice.
#[derive(Clone, Copy, Debug)]
pub struct Values {
    len: usize,
    v: [u64; MAX_VALUES],
}

impl From<&[u64]> for Values {
    fn from(s: &[u64]) -> Values {
        let mut v = [0; MAX_VALUES];
        v[..s.len()].copy_from_slice(s);
        Values { len: s.len(), v }
    }
}

impl std::ops::Deref for Values {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        &self.v[..self.len]
    }
}

impl Construction {
    /// The construction's name, as `parse` reads it.
    pub fn name(self) -> &'static str {
        match self {
            Construction::PowerSum => "powersum",
            Construction::Plain => "plain",
            Construction::SeedSubIds => "seed-subids",
            Construction::SeedSubIdsTables => "seed-subids-tables",
            Construction::SeedSubIds32 => "seed-subids-32",
        }
    }

    /// Bits of the MM IDs the construction takes.
    pub fn id_bits(self) -> u32 {
        if self == Construction::SeedSubIds32 {
            16
        } else {
            ID_BITS
        }
    }

    /// Bits each sum is kept in (its atomic's width).
    pub fn width(self) -> u32 {
        if self == Construction::SeedSubIds32 {
            32
        } else {
            64
        }
    }

    /// The construction called `s`, or `None` for an unknown name.
    pub fn parse(s: &str) -> Option<Construction> {
        use Construction::*;
        [PowerSum, Plain, SeedSubIds, SeedSubIdsTables, SeedSubIds32].into_iter().find(|c| c.name() == s)
    }

    /// What one mapping by MM `id` adds to each sum, in a folio of `order`,
    /// computed on the stack. The rmap-id design reads an MM's precomputed
    /// values instead where patch 11 keeps them ([`super::RmapMm`]).
    pub fn values(self, id: u64, order: u32) -> Values {
        let mut out = Values { len: 0, v: [0; MAX_VALUES] };
        let mut push = |x| {
            out.v[out.len] = x;
            out.len += 1;
        };
        match self {
            Construction::PowerSum => {
                push(id);
                push(id.wrapping_mul(id));
            }
            Construction::Plain => push(id),
            Construction::SeedSubIds | Construction::SeedSubIdsTables | Construction::SeedSubIds32 => {
                let (k, bits, class) = self.seed_digits(order);
                (0..k).for_each(|v| push(seed_subid(class, (id >> (v * bits)) & ((1 << bits) - 1))));
            }
        }
        out
    }

    /// How many sums a folio of `order` keeps.
    pub fn count(self, order: u32) -> usize {
        self.values(0, order).len()
    }

    /// The sums for one mapping per entry of `ids`, in a folio of `order`,
    /// each wrapping at its [`Construction::width`] as its atomic would.
    pub fn sums(self, ids: &[u64], order: u32) -> Vec<u64> {
        let mask = u64::MAX >> (64 - self.width());
        let mut sums = vec![0u64; self.count(order)];
        for &id in ids {
            for (s, &v) in sums.iter_mut().zip(self.values(id, order).iter()) {
                *s = s.wrapping_add(v) & mask;
            }
        }
        sums
    }

    /// The sole owner of `n` mappings with these sums in a folio of `order`,
    /// if the construction can name one.
    pub fn owner(self, n: u64, sums: &[u64], order: u32) -> Option<u64> {
        if n == 0 || sums.iter().any(|s| !s.is_multiple_of(n)) {
            return None;
        }
        let a = sums[0] / n;
        match self {
            Construction::PowerSum => (sums[1] == n.wrapping_mul(a.wrapping_mul(a))).then_some(a),
            Construction::Plain => Some(a),
            Construction::SeedSubIds | Construction::SeedSubIdsTables | Construction::SeedSubIds32 => {
                // Each sum / n must be one sub-ID: base-(P+1) digits all 0 or 1.
                let (_, bits, class) = self.seed_digits(order);
                let base = (1u64 << class) + 1;
                let mut id = 0;
                for (v, s) in sums.iter().enumerate() {
                    let (mut q, mut digit) = (s / n, 0u64);
                    for j in 0..bits {
                        match q % base {
                            0 => {}
                            1 => digit |= 1 << j,
                            _ => return None,
                        }
                        q /= base;
                    }
                    if q != 0 {
                        return None;
                    }
                    id |= digit << (v as u32 * bits);
                }
                Some(id)
            }
        }
    }

    /// Whether `2^order` mappings (all a folio of that order is looked at
    /// with) keep every sum within its width for IDs of its bits.
    pub fn fits(self, order: u32) -> bool {
        let max_id = (1u128 << self.id_bits()) - 1;
        let term = match self {
            Construction::PowerSum => max_id * max_id,
            Construction::Plain => max_id,
            Construction::SeedSubIds | Construction::SeedSubIdsTables | Construction::SeedSubIds32 => {
                let (_, bits, class) = self.seed_digits(order);
                let base = (1u128 << class) + 1;
                (0..bits).map(|j| base.pow(j)).sum()
            }
        };
        (1u128 << order) * term < 1u128 << self.width()
    }

    /// The largest folio order (up to 15, the seed's limit) from order 2
    /// up to which every order fits.
    pub fn max_order(self) -> u32 {
        (2..=16u32).take_while(|&o| self.fits(o)).last().unwrap_or(0)
    }
}

impl Construction {
    /// Seed 000's table: how many 64-bit rmap values a folio of `order`
    /// gets, how many bits of the 24-bit ID each value's digit holds, and
    /// the order whose page count P the sub-IDs are built for (the largest
    /// of the class). From patch 11: order 2: 1 value; <= 5: 2; <= 9: 3;
    /// 10: 4; <= 12: 5; <= 15: 6. Before, 4 values up to order 10.
    /// The 32-bit variant: 2 values up to order 2, 3 up to 5, 6 up to
    /// 10, 8 up to 15, each digit's sub-ID built for its class's largest
    /// order.
    pub fn seed_digits(self, order: u32) -> (u32, u32, u32) {
        let (k, class) = match order {
            0..=2 if self == Construction::SeedSubIds32 => (2, 2),
            3..=5 if self == Construction::SeedSubIds32 => (3, 5),
            6..=10 if self == Construction::SeedSubIds32 => (6, 10),
            _ if self == Construction::SeedSubIds32 => (8, 15),
            0..=2 if self == Construction::SeedSubIds => (1, 2),
            3..=5 if self == Construction::SeedSubIds => (2, 5),
            6..=9 if self == Construction::SeedSubIds => (3, 9),
            0..=10 => (4, 10),
            11..=12 => (5, 12),
            _ => (6, 15),
        };
        (k, self.id_bits().div_ceil(k), class)
    }
}

/// The sub-ID of digit `d` built for folios of up to 2^`class` pages
/// (`calc_rmap_subid`; the lookup tables hold its values for classes 10,
/// 12 and 15).
pub fn seed_subid(class: u32, d: u64) -> u64 {
    let base = (1u64 << class) + 1;
    let mut place = 1u64;
    let mut id = 0u64;
    for j in 0..64 {
        if d >> j == 0 {
            break;
        }
        if d >> j & 1 == 1 {
            id = id.wrapping_add(place);
        }
        place = place.wrapping_mul(base);
    }
    id
}

/// A set of mappings for which a construction answers wrongly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counterexample {
    /// The MM ID of each mapping.
    pub ids: Vec<u64>,
    /// The owner the construction named; `None` for none.
    pub answered: Option<u64>,
    /// The real sole owner; `None` when the IDs differ.
    pub truth: Option<u64>,
}

fn verdict(c: Construction, ids: &[u64], order: u32) -> Option<Counterexample> {
    let truth = ids.iter().all(|&x| x == ids[0]).then_some(ids[0]);
    let answered = c.owner(ids.len() as u64, &c.sums(ids, order), order);
    (answered != truth).then(|| Counterexample { ids: ids.to_vec(), answered, truth })
}

/// Every multiset of `n` IDs from `1..=max_id`, for `n` in `1..=max_n`,
/// then `trials` random sets of up to `2^order` IDs of the construction's
/// bits (seeded by `seed`). Returns the first counterexample.
pub fn check(c: Construction, max_id: u64, max_n: usize, trials: u64, order: u32, seed: u64) -> Option<Counterexample> {
    fn multisets(
        c: Construction,
        ids: &mut Vec<u64>,
        from: u64,
        max_id: u64,
        left: usize,
        order: u32,
    ) -> Option<Counterexample> {
        if left == 0 {
            return verdict(c, ids, order);
        }
        for x in from..=max_id {
            ids.push(x);
            let found = multisets(c, ids, x, max_id, left - 1, order);
            ids.pop();
            if found.is_some() {
                return found;
            }
        }
        None
    }
    for n in 1..=max_n {
        if let Some(ce) = multisets(c, &mut Vec::new(), 1, max_id, n, order) {
            return Some(ce);
        }
    }
    let mut next = crate::xorshift(seed);
    let id_mask = (1u64 << c.id_bits()) - 1;
    for _ in 0..trials {
        let n = 2 + (next() % ((1u64 << order) - 1)) as usize;
        let a = (next() & id_mask).max(1);
        let mut ids = vec![a; n];
        // Mostly near-misses: one owner with a few mappings of others.
        for _ in 0..(1 + next() % 3) {
            let i = (next() % n as u64) as usize;
            ids[i] = (next() & id_mask).max(1);
        }
        if let Some(ce) = verdict(c, &ids, order) {
            return Some(ce);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_construction_a_design_uses_at_any_stage_is_shipped() {
        let used = super::super::eras::DESIGNS.iter().chain(super::super::eras::RMAP_ID_STAGES.iter().flatten());
        for d in used {
            if let Some(c) = d.construction() {
                assert!(SHIPPED.contains(&c), "{} is used but `prove` does not check it", c.name());
            }
        }
    }

    #[test]
    fn powersum_holds_and_plain_fails() {
        assert_eq!(check(Construction::PowerSum, 7, 6, 20_000, 9, 1), None);
        assert_eq!(
            check(Construction::SeedSubIds, 7, 6, 20_000, 5, 1),
            None,
            "the seed's sub-IDs are exact where they fit"
        );
        // The RFC's own tables: subid_4 (order 10) index 3 is 1 + 1025.
        assert_eq!(seed_subid(10, 3), 1026);
        assert_eq!(seed_subid(10, 63), 1132513103723526);
        assert_eq!(seed_subid(12, 31), 281818741907461);
        assert!(Construction::SeedSubIds.fits(5), "order 5: 2 values of 12-bit digits fit");
        // Patch 11 gives orders 6-9 three values of 8-bit digits (its
        // comment says 7 bits, "128 sub-IDs", and 128^3 == 16M, which is
        // 2M): the largest sub-ID times 2^6 mappings already overflows.
        assert!(!Construction::SeedSubIds.fits(6));
        assert!((10..=15).all(|o| Construction::SeedSubIdsTables.fits(o)), "the tables' classes fit");
        assert!(Construction::SeedSubIdsTables.fits(9), "before patch 11, order 9 used 4 values and fit");
        assert_eq!(
            check(Construction::SeedSubIdsTables, 7, 5, 20_000, 9, 1),
            None,
            "the lookup-table sub-IDs are exact where they fit"
        );
        let ce = check(Construction::Plain, 4, 3, 0, 9, 1).expect("plain sums must fail");
        assert_ne!(ce.answered, ce.truth);
        // docs/DESIGN.md bounds the sums by 2^(48+k+1) and says order 15; exactly,
        // 2^16 * (2^24 - 1)^2 < 2^64, so order 16 still fits.
        assert_eq!(Construction::PowerSum.max_order(), 16);
        assert!(Construction::PowerSum.max_order() >= crate::arch::MAX_PAGE_ORDER);
    }

    #[test]
    fn the_32_bit_variant_fits_32_bits_up_to_order_15_and_is_exact() {
        let c = Construction::SeedSubIds32;
        // The seed: "order-15 folios with a maximum of 8x 32bit rmap values"
        // (order 16 would still fit: 2^16 mappings of the largest sub-ID).
        assert!(c.max_order() >= 15);
        assert_eq!((c.count(2), c.count(5), c.count(9), c.count(10), c.count(15)), (2, 3, 6, 6, 8));
        // The 64-bit scheme's digits for 24-bit IDs overflow 32 bits.
        let wide = Construction::SeedSubIds.sums(&[0xff_ffff; 64], 5);
        assert!(wide.iter().any(|&s| s > u32::MAX as u64));
        // Exact for up to a folio's page count of mappings.
        for order in [2, 5, 9, 15] {
            assert_eq!(check(c, 6, 5.min(1 << order), 20_000, order, 1), None, "order {order}");
        }
        // A sum wraps at 32 bits: with 64K IDs but 24-bit digits it would not fit.
        let ids = [0xffff; 4];
        assert!(c.sums(&ids, 2).iter().all(|&s| s <= u32::MAX as u64));
        assert_eq!(c.owner(4, &c.sums(&ids, 2), 2), Some(0xffff));
    }
}
