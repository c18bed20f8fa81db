//! `foliomm run --trace OUT FILE`: a scenario's steps as a timeline a
//! reader can scroll, each with what every live process's page tables map
//! at the pages the step touched and what the folios' counters say
//! (refcount, page and folio mapcounts, AnonExclusive, pagemap's exclusive
//! bit, the design's "maybe shared" answer). OUT ending in `.json` gets the
//! run's outcome as JSON instead; both are self-contained.

use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;

use anyhow::{Context, Result};
use foliomm_scenario::interp::TracePage;
use foliomm_scenario::Outcome;

/// Writes the trace of `out` (a run of `file`) to `path`.
pub fn write(path: &Path, file: &Path, out: &Outcome) -> Result<()> {
    let text = if path.extension().is_some_and(|e| e == "json") {
        serde_json::to_string_pretty(out)?
    } else {
        html(file, out)?
    };
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn html(file: &Path, out: &Outcome) -> Result<String> {
    let mut h = String::from(HEAD);
    writeln!(h, "<h1>{}</h1><p>backend: {}</p>", esc(&file.display().to_string()), esc(&out.backend))?;
    // Folios get short names in order of first appearance: frame numbers
    // mean nothing to a reader, sameness does.
    let mut names: HashMap<u64, usize> = HashMap::new();
    for s in &out.steps {
        writeln!(
            h,
            "<section><h3><span class=line>{}</span> {}</h3><p class=result>{}</p>",
            s.line,
            esc(&s.text),
            esc(&s.result)
        )?;
        if !s.trace.is_empty() {
            table(&mut h, &s.trace, &mut names)?;
        }
        h.push_str("</section>\n");
    }
    if let Some(f) = &out.failure {
        writeln!(
            h,
            "<section class=failure><h3>failed at line {}</h3><pre>{}</pre></section>",
            f.line,
            esc(&f.message)
        )?;
    }
    h.push_str("</body></html>\n");
    Ok(h)
}

/// One step's pages: a row per process and mapping, a column per offset.
fn table(h: &mut String, pages: &[TracePage], names: &mut HashMap<u64, usize>) -> Result<()> {
    let mut offsets: Vec<(String, u64)> = pages.iter().map(|p| (p.map.clone(), p.offset)).collect();
    offsets.sort();
    offsets.dedup();
    let mut rows: Vec<(String, String)> = pages.iter().map(|p| (p.proc.clone(), p.map.clone())).collect();
    rows.sort();
    rows.dedup();
    h.push_str("<table><tr><th></th>");
    for (map, off) in &offsets {
        write!(h, "<th>{}[{:#x}]</th>", esc(map), off)?;
    }
    h.push_str("</tr>\n");
    for (proc, map) in &rows {
        write!(h, "<tr><th>{}</th>", esc(proc))?;
        // A folio's design fields are shown at its first page in the row.
        let mut shown = std::collections::HashSet::new();
        for (m, off) in &offsets {
            let found = pages.iter().find(|p| &p.proc == proc && &p.map == map && &p.map == m && p.offset == *off);
            match found {
                Some(p) if p.page.present => cell(h, p, names, &mut shown)?,
                Some(_) => h.push_str("<td class=none>not mapped</td>"),
                None => h.push_str("<td></td>"),
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
    Ok(())
}

fn cell(
    h: &mut String,
    p: &TracePage,
    names: &mut HashMap<u64, usize>,
    shown: &mut std::collections::HashSet<usize>,
) -> Result<()> {
    let pg = &p.page;
    if pg.zero_page {
        h.push_str("<td class=zero>zero page</td>");
        return Ok(());
    }
    let head = pg.pfn & !((1u64 << pg.folio_order) - 1);
    let next = names.len() + 1;
    let id = *names.entry(head).or_insert(next);
    let flags: Vec<&str> = [
        (pg.writable, "W"),
        (pg.pmd_mapped, "huge"),
        (pg.anon_exclusive, "AE"),
        (pg.exclusive, "excl"),
        (pg.maybe_shared, "maybe-shared"),
        (pg.pmd_shared, "shared-table"),
        (!pg.anon, "file"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    // The design's own fields (MM-ID slots, _large_mapcount, ...), raw.
    let fields: Vec<String> = p.fields.iter().map(|(n, v)| format!("{} {v}", esc(n))).collect();
    let fields = match () {
        _ if fields.is_empty() => String::new(),
        _ if !shown.insert(id) => format!("<br><small class=fields>fields as F{id} to the left</small>"),
        _ => format!("<br><small class=fields>{}</small>", fields.join(" · ")),
    };
    write!(
        h,
        "<td><b class=f{}>F{id}</b>{}<br>{}<br><small>ref {} map {} folio-map {} · byte {:#04x}</small>{fields}</td>",
        id % 8,
        if pg.folio_order > 0 {
            format!(" page {} of {}", pg.pfn - head, 1u64 << pg.folio_order)
        } else {
            String::new()
        },
        flags.join(" "),
        pg.refcount,
        pg.mapcount,
        pg.folio_mapcount,
        p.byte
    )?;
    Ok(())
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

const HEAD: &str = "<!DOCTYPE html><html><head><meta charset=utf-8><title>foliomm trace</title><style>\
body{font-family:sans-serif;margin:2em;max-width:1400px}section{border-left:3px solid #88a;margin:0 0 1em;padding:0 1em}\
h3{margin:.4em 0;font-size:105%}.line{color:#888;font-weight:normal;margin-right:.5em}.result{color:#555;margin:.2em 0}\
table{border-collapse:collapse;margin:.4em 0 .8em}td,th{border:1px solid #ccc;padding:3px 6px;font-size:85%;vertical-align:top}\
td.none,td.zero{color:#999}.failure{border-color:#c33}small{color:#666}\
.f0{color:#b03}.f1{color:#06a}.f2{color:#080}.f3{color:#a60}.f4{color:#60a}.f5{color:#088}.f6{color:#a08}.f7{color:#555}\
</style></head><body>\n";
