//! `foliomm counters`: what every counter a run prints counts, its Linux
//! name where Linux counts the same event, and what it needs to be other
//! than 0; read from the doc comments where the counters are defined.

use anyhow::Result;
use foliomm::internals::kernel::stats::CounterDoc;
use foliomm_scenario::lang::suggest::did_you_mean;

#[derive(clap::Args)]
pub struct CountersArgs {
    /// Only the counters whose names contain one of these (`swap` finds
    /// pswpout, meminfo_swap_free_kb, ...); every counter without.
    names: Vec<String>,
    /// Print JSON (an array of {name, meaning, linux, needs}).
    #[arg(long)]
    json: bool,
}

/// Prints the glossary, or the entries `a.names` pick; an error for a name
/// that picks none, with the closest counter.
pub fn print(a: &CountersArgs) -> Result<()> {
    let all = foliomm_scenario::model::counter_glossary();
    for want in &a.names {
        if !all.iter().any(|c| c.name.contains(want.as_str())) {
            let hint = did_you_mean(want, all.iter().map(|c| c.name.as_str()));
            anyhow::bail!("no counter's name contains '{want}'{hint} (`foliomm counters` lists them all)");
        }
    }
    let picked: Vec<&CounterDoc> =
        all.iter().filter(|c| a.names.is_empty() || a.names.iter().any(|w| c.name.contains(w.as_str()))).collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&picked)?);
        return Ok(());
    }
    for c in picked {
        let linux = c.linux.as_deref().map_or("model only".to_string(), |l| format!("Linux: {l}"));
        println!("{}  ({linux})", c.name);
        println!("    {}", c.meaning);
        if let Some(needs) = &c.needs {
            println!("    needs: {needs}");
        }
    }
    Ok(())
}
