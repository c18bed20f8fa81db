//! Fields a kernel varies, avoided next time: a host-nondeterministic
//! finding names the fields of the first observation that differed between
//! the kernel's runs, and they go to the findings directory's `avoid.txt`,
//! which later runs read (`observe ... except FIELD...`).

use super::fields;
use foliomm_scenario::Observation;

/// `s` if it names an observation field, else an error listing them.
pub(super) fn parse_field(s: &str) -> Result<String, String> {
    match Observation::field_names().any(|f| f == s) {
        true => Ok(s.to_string()),
        false => Err(format!(
            "'{s}' is not an observation field ({})",
            Observation::field_names().collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The file of a findings directory that lists the fields to avoid.
const AVOID_FILE: &str = "avoid.txt";

/// The fields `avoid.txt` of `findings` lists (none without the file).
pub(super) fn avoided(findings: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let path = findings.join(AVOID_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(Vec::new()) };
    let fields = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
    fields.map(|f| parse_field(f).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))).collect()
}

/// Adds `fields` to `avoid.txt` of `findings` (each once).
pub(super) fn avoid_next_time(findings: &std::path::Path, fields: &[String]) -> anyhow::Result<()> {
    let mut all = avoided(findings)?;
    all.extend(fields.iter().cloned());
    all.sort();
    all.dedup();
    let text = "# Fields a kernel showed differently run after run: `foliomm fuzz` does not observe them.\n";
    std::fs::write(findings.join(AVOID_FILE), text.to_string() + &all.join("\n") + "\n")?;
    Ok(())
}

/// The observation fields that differ at the first observation that
/// differs between two runs of the kernel (later ones may only follow from
/// it), but `byte`: bytes a kernel loses are a data-integrity matter,
/// never avoided.
pub(super) fn first_varying_fields(diffs: &[String]) -> Vec<String> {
    let line = |d: &String| d.strip_prefix("line ")?.split(':').next()?.parse::<usize>().ok().filter(|&l| l > 0);
    let Some(first) = diffs.iter().filter_map(line).min() else { return Vec::new() };
    let at_first: Vec<String> = diffs.iter().filter(|d| line(d) == Some(first)).cloned().collect();
    let observed = |f: &String| f != "byte" && Observation::field_names().any(|n| n == f);
    fields(&at_first).into_iter().filter(observed).collect()
}

/// The fields of `varies` later runs should not observe: none when the
/// page itself came and went (`present` varied: the run went differently,
/// as when the kernel loses a page, which must stay visible), else all.
pub(super) fn avoidable(varies: &[String]) -> Vec<String> {
    match varies.iter().any(|f| f == "present") {
        true => Vec::new(),
        false => varies.to_vec(),
    }
}
