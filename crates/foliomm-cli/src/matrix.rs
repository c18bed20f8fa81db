//! A design matrix: one scenario under every configuration that flags
//! given `all` span (`run --mapcount all --vma-lock all`), each
//! configuration's verdict on a row, then every observed field and counter
//! whose value differs between configurations, side by side.

use foliomm_scenario::interp::{FailureKind, Outcome};
use foliomm_scenario::Observation;

use crate::overrides::Configuration;

/// One configuration's run of a file.
pub struct Cell<'a> {
    pub config: &'a Configuration,
    pub outcome: Outcome,
}

/// What one row of the differences shows: a name and each configuration's
/// value (`-` where its run never got there).
#[derive(serde::Serialize)]
pub struct Difference {
    pub what: String,
    pub values: Vec<String>,
}

/// The verdict of a run in a few words: `PASS (N steps)`, `SKIP ...`,
/// `FAIL at line N: ...` (with how many more `expect` lines failed).
pub fn verdict(out: &Outcome) -> String {
    let more = out.failed_expects.iter().filter(|f| out.failure.as_ref().is_none_or(|g| g.line != f.line)).count();
    let more = if more > 0 { format!(" (and {more} more failed expect lines)") } else { String::new() };
    match &out.failure {
        None => format!("PASS ({} steps)", out.steps.len()),
        Some(f) if f.kind == FailureKind::Unsupported => format!("SKIP at line {}: {}", f.line, f.message),
        Some(f) if f.kind == FailureKind::Backend => format!("FAIL (backend) at line {}: {}{more}", f.line, f.message),
        Some(f) => format!("FAIL at line {}: {}{more}", f.line, f.message),
    }
}

/// The observations of a run by name, a name observed again getting `#2`,
/// `#3`... so that the runs' observations pair up.
fn named_observations(out: &Outcome) -> Vec<(String, Observation)> {
    let mut seen: Vec<&str> = Vec::new();
    let mut named = Vec::new();
    for (name, o) in &out.observations {
        let n = seen.iter().filter(|s| **s == name.as_str()).count();
        seen.push(name);
        named.push((if n == 0 { name.clone() } else { format!("{name}#{}", n + 1) }, *o));
    }
    named
}

/// Every observed field (but the raw frame number, which differs between
/// any two runs) and every counter whose values are not all the same.
pub fn differences(cells: &[Cell]) -> Vec<Difference> {
    let observations: Vec<Vec<(String, Observation)>> = cells.iter().map(|c| named_observations(&c.outcome)).collect();
    let mut names: Vec<&String> = Vec::new();
    for (name, _) in observations.iter().flatten() {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let mut out = Vec::new();
    for name in names {
        let of = |obs: &Vec<(String, Observation)>| obs.iter().find(|(n, _)| n == name).map(|(_, o)| *o);
        let found: Vec<Option<Observation>> = observations.iter().map(of).collect();
        for field in Observation::field_names().filter(|f| *f != "frame") {
            let value = |o: &Option<Observation>| match o {
                Some(o) if field == "maybe_shared" && o.page.sharers_unknown => "n/a".into(),
                Some(o) if o.knows(field) => o.field(field).map_or("-".into(), |v| v.to_string()),
                Some(_) => "n/a".into(),
                None => "-".into(),
            };
            let values: Vec<String> = found.iter().map(value).collect();
            if values.iter().any(|v| *v != values[0]) {
                out.push(Difference { what: format!("{name}.{field}"), values });
            }
        }
    }
    let mut counters: Vec<&str> = Vec::new();
    for (name, _) in cells.iter().flat_map(|c| &c.outcome.counters) {
        if !counters.contains(&name.as_str()) {
            counters.push(name);
        }
    }
    for name in counters {
        let value = |c: &Cell| c.outcome.counters.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v).to_string();
        let values: Vec<String> = cells.iter().map(value).collect();
        if values.iter().any(|v| *v != values[0]) {
            out.push(Difference { what: format!("counter {name}"), values });
        }
    }
    out
}

/// Prints a file's matrix: its verdicts, then its differences with one
/// column per configuration.
pub fn print(file: &std::path::Path, axes: &[&str], cells: &[Cell]) {
    let passed = cells.iter().filter(|c| c.outcome.failure.is_none()).count();
    println!(
        "== {} ({} configurations of {}): {passed} pass, {} do not",
        file.display(),
        cells.len(),
        axes.join(" × "),
        cells.len() - passed
    );
    let width = cells.iter().map(|c| c.config.name.len()).max().unwrap_or(0).max("configuration".len());
    println!("  {:<width$}  verdict", "configuration");
    for c in cells {
        println!("  {:<width$}  {}", c.config.name, verdict(&c.outcome));
    }
    let diffs = differences(cells);
    if diffs.is_empty() {
        println!("  every observed field and counter is the same in every configuration");
        return;
    }
    println!("  what differs:");
    let first = diffs.iter().map(|d| d.what.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cells.len())
        .map(|i| diffs.iter().map(|d| d.values[i].len()).chain([cells[i].config.name.len()]).max().unwrap_or(1))
        .collect();
    let header: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{:>w$}", c.config.name)).collect();
    println!("    {:<first$}  {}", "", header.join("  "));
    for d in &diffs {
        let row: Vec<String> = d.values.iter().zip(&widths).map(|(v, w)| format!("{v:>w$}")).collect();
        println!("    {:<first$}  {}", d.what, row.join("  "));
    }
}

/// A file's matrix as JSON: each configuration's settings and outcome,
/// and the differences.
pub fn json(file: &std::path::Path, cells: &[Cell]) -> serde_json::Value {
    let configurations: Vec<serde_json::Value> = cells
        .iter()
        .map(|c| {
            serde_json::json!({
                "configuration": c.config.name,
                "verdict": verdict(&c.outcome),
                "outcome": c.outcome,
            })
        })
        .collect();
    serde_json::json!({
        "file": file.display().to_string(),
        "configurations": configurations,
        "differences": differences(cells),
    })
}
