//! The library's structure, checked: every `crate::X` path a source file
//! names (in `use` lines and in code, not in comments) must point to its own
//! folder or one below it in [`foliomm::internals::LAYERS`]; no source file is over 500
//! lines. Set `FOLIOMM_LAYERING_EXTRA=folder:path` to check one more
//! (pretend) import, e.g. `pgtable:crate::mm::Advice`, and see it fail.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn layer(name: &str) -> Option<usize> {
    foliomm::internals::LAYERS.iter().position(|l| *l == name)
}

/// The folders a line of code names as `crate::X` (after stripping `//` comments).
fn targets(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap();
    code.match_indices("crate::")
        .filter(|(i, _)| !code[..*i].ends_with('$'))
        .map(|(i, m)| code[i + m.len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
        .collect()
}

/// Violations of the layer rule among (file, folder, line) triples.
fn upward(lines: &[(String, String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (file, folder, line) in lines {
        let Some(own) = layer(folder) else { continue };
        for t in targets(line) {
            if let Some(l) = layer(&t) {
                if l > own {
                    bad.push(format!("{file}: {folder} (layer {own}) uses crate::{t} (layer {l}): {}", line.trim()));
                }
            }
        }
    }
    bad
}

#[test]
fn folders_only_use_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut lines = Vec::new();
    let mut folders = std::collections::BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let Some(folder) = rel.components().next().filter(|_| rel.components().count() > 1) else { continue };
        let folder = folder.as_os_str().to_string_lossy().to_string();
        folders.insert(folder.clone());
        for line in std::fs::read_to_string(f).unwrap().lines() {
            lines.push((rel.display().to_string(), folder.clone(), line.to_string()));
        }
    }
    for folder in &folders {
        assert!(layer(folder).is_some(), "folder {folder} is missing from foliomm::internals::LAYERS");
    }
    if let Ok(extra) = std::env::var("FOLIOMM_LAYERING_EXTRA") {
        let (folder, path) = extra.split_once(':').expect("FOLIOMM_LAYERING_EXTRA=folder:crate::path");
        lines.push(("(FOLIOMM_LAYERING_EXTRA)".into(), folder.into(), format!("use {path};")));
    }
    let bad = upward(&lines);
    assert!(bad.is_empty(), "imports pointing up the layers:\n{}", bad.join("\n"));
}

#[test]
fn the_rule_catches_an_upward_import() {
    let lines = [("pgtable/walk.rs".to_string(), "pgtable".to_string(), "use crate::mm::Advice;".to_string())];
    assert_eq!(upward(&lines).len(), 1);
    let fine =
        [("mm/fork.rs".to_string(), "mm".to_string(), "use crate::pgtable::walk_pmd; // crate::machine".to_string())];
    assert!(upward(&fine).is_empty(), "downward uses and comments pass");
}

#[test]
fn no_source_file_is_over_500_lines() {
    let mut files = Vec::new();
    for krate in ["foliomm", "foliomm-scenario", "foliomm-host", "foliomm-cli"] {
        sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(krate).join("src"), &mut files);
    }
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > 500).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these by concept: {long:?}");
}
