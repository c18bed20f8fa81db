//! Delta debugging over a workload's lines (Zeller's ddmin): drops chunks
//! of the step lines, halving the chunk size, while the failure keeps its
//! class; the header (comments and `set` lines before the first step)
//! stays, a later `set` line (a pool change) is a step like any other. A
//! candidate that no longer parses or names something removed simply does
//! not reproduce.

/// The smallest text found whose lines still make `fails` true, and the
/// number of candidates tried. `fails` must hold for `text` itself.
pub fn minimize(text: &str, mut fails: impl FnMut(&str) -> bool, budget: usize) -> (String, usize) {
    let all: Vec<&str> = text.lines().collect();
    let head = all.iter().take_while(|l| l.starts_with('#') || l.starts_with("set ")).count();
    let (fixed, mut lines) = (all[..head].to_vec(), all[head..].to_vec());
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
        let text = "# h\nset thp enabled=never\na\nb\nc\nset x\nd\ne\nf\ng\n";
        let (small, tried) = minimize(text, |t| t.contains("\nc\n") && t.contains("\nf\n"), 1000);
        assert_eq!(small, "# h\nset thp enabled=never\nc\nf\n");
        assert!(tried < 40, "{tried}");
        // A later `set` line keeps its place among the steps.
        let (small, _) = minimize(text, |t| t.contains("c\nset x\nd"), 1000);
        assert_eq!(small, "# h\nset thp enabled=never\nc\nset x\nd\n");
    }
}
