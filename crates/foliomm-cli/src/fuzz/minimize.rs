//! Delta debugging over a workload's lines (Zeller's ddmin): drops chunks
//! of the step lines, halving the chunk size, while the failure keeps its
//! class; `set` lines and the header stay. A candidate that no longer
//! parses or names something removed simply does not reproduce.

/// The smallest text found whose lines still make `fails` true, and the
/// number of candidates tried. `fails` must hold for `text` itself.
pub fn minimize(text: &str, mut fails: impl FnMut(&str) -> bool, budget: usize) -> (String, usize) {
    let (fixed, mut lines): (Vec<&str>, Vec<&str>) =
        text.lines().partition(|l| l.starts_with('#') || l.starts_with("set "));
    let join = |ls: &[&str]| fixed.iter().chain(ls).copied().collect::<Vec<_>>().join("\n") + "\n";
    let mut tried = 0;
    let mut chunk = lines.len().div_ceil(2).max(1);
    while chunk >= 1 && tried < budget {
        let mut removed_any = false;
        let mut at = 0;
        while at < lines.len() && tried < budget {
            let candidate: Vec<&str> =
                lines[..at].iter().chain(&lines[(at + chunk).min(lines.len())..]).copied().collect();
            tried += 1;
            if !candidate.is_empty() && fails(&join(&candidate)) {
                lines = candidate;
                removed_any = true;
            } else {
                at += chunk;
            }
        }
        if chunk == 1 && !removed_any {
            break;
        }
        if !removed_any {
            chunk /= 2;
        }
    }
    (join(&lines), tried)
}

#[cfg(test)]
mod tests {
    use super::minimize;

    #[test]
    fn keeps_only_the_lines_the_failure_needs() {
        let text = "# h\nset thp enabled=never\na\nb\nc\nd\ne\nf\ng\n";
        let (small, tried) = minimize(text, |t| t.contains("\nc\n") && t.contains("\nf\n"), 1000);
        assert_eq!(small, "# h\nset thp enabled=never\nc\nf\n");
        assert!(tried < 40, "{tried}");
    }
}
