//! `foliomm prove`: checks the rmap-ID constructions the designs use, by
//! exhaustive and random search.

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct ProveArgs {
    /// Constructions to check: powersum (rmap-id-powersum's),
    /// seed-subids (rmap-id's, the RFC's from patch 11 on),
    /// seed-subids-tables (rmap-id's before patch 11), seed-subids-32 (the
    /// seed's 32-bit-atomics option: 64K IDs, up to 8 sums of 32 bits), or
    /// plain (known wrong). Default: every construction a design uses (all
    /// but plain).
    #[arg(long = "construction")]
    pub constructions: Vec<String>,
    /// Exhaustive search: IDs 1..=N (N from 1 to 64).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub max_id: u64,
    /// Exhaustive search: up to this many mappings (1 to 16).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub max_mappings: u64,
    /// Random search: this many sets of IDs (24-bit; 16-bit for
    /// seed-subids-32), up to 10^10.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(..=10_000_000_000))]
    pub trials: u64,
    /// Random search: up to 2^ORDER mappings (the folio order, 2 to 15:
    /// the seed's largest).
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(2..=15))]
    pub order: u32,
    /// Random seed (printed, so a failure can be replayed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Checks every construction asked for; true if all hold.
pub fn prove(a: ProveArgs) -> Result<bool> {
    use foliomm::internals::mapcount::construction::{check, Construction, SHIPPED};
    let cs: Vec<Construction> = if a.constructions.is_empty() {
        SHIPPED.to_vec()
    } else {
        a.constructions
            .iter()
            .map(|n| {
                Construction::parse(n).with_context(|| {
                    format!("--construction: expected powersum, seed-subids, seed-subids-tables or plain, found '{n}'")
                })
            })
            .collect::<Result<_>>()?
    };
    let mut failed = Vec::new();
    for c in cs.iter().copied() {
        let mut ok = true;
        println!(
            "{}: IDs 1..={}, up to {} mappings exhaustively; {} random sets of up to 2^{} mappings of {}-bit IDs, {}-bit sums (seed {})",
            c.name(),
            a.max_id,
            a.max_mappings,
            a.trials,
            a.order,
            c.id_bits(),
            c.width(),
            a.seed
        );
        // Every order from 2 to the seed's limit, and the one searched.
        let wraps: Vec<u32> = (2..=15).filter(|&o| !c.fits(o)).collect();
        if wraps.is_empty() {
            println!("  no overflow at any order from 2 to 15 (fits up to order {})", c.max_order());
        } else {
            let list: Vec<String> = wraps.iter().map(|o| o.to_string()).collect();
            println!("  OVERFLOW: the {}-bit sums can wrap at orders {}", c.width(), list.join(", "));
            ok = false;
        }
        match check(c, a.max_id, a.max_mappings as usize, a.trials, a.order, a.seed) {
            None => println!("  no counterexample"),
            Some(ce) => {
                ok = false;
                let show = |o: Option<u64>| o.map_or("shared".to_string(), |x| format!("exclusive to ID {x}"));
                let ids: Vec<String> = ce.ids.iter().take(16).map(|x| x.to_string()).collect();
                let more = if ce.ids.len() > 16 { format!(" ... ({} mappings)", ce.ids.len()) } else { String::new() };
                println!("  COUNTEREXAMPLE: mappings by IDs [{}{more}]", ids.join(", "));
                println!("  the construction answers {}, the truth is {}", show(ce.answered), show(ce.truth));
            }
        }
        if !ok {
            failed.push(c.name());
        }
    }
    match failed.is_empty() {
        true => println!("prove: {} constructions checked, none fails", cs.len()),
        false => println!("prove: {} constructions checked; failing: {}", cs.len(), failed.join(", ")),
    }
    Ok(failed.is_empty())
}
