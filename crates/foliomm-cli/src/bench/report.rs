//! `foliomm report RUN... -o report.html`: one self-contained HTML file
//! (no network, no script) of saved runs: each run's machine, commit and
//! reproducing command; the settings as a table, a column per run, those
//! that differ marked; and for every benchmark table, the table itself
//! (each run's geometric mean with its 95% interval, both on logarithms so
//! that a time cannot reach below zero, and the seed's published figures),
//! the % change of every run against the first (Welch's t on logarithms,
//! 95% for the table's changes together), and an SVG plot drawn with
//! plotters. Times of runs that name their region size are given per GiB,
//! the seed's published ones per GiB of the size they were measured on, so
//! that runs and seed of different sizes share an axis; values are written
//! in readable units (ms, µs, k/s).

use std::fmt::Write;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;

use super::saved::{SavedRun, Table};
use super::stats::{change, log_mean_interval};

/// `report`'s arguments.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// Saved runs (`bench ... --save NAME`), by file or by NAME.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short, long, default_value = "report.html")]
    output: PathBuf,
}

/// A line of the plot: its name and, per row, (mean, low, high).
type Line = (String, Vec<Option<(f64, f64, f64)>>);

const GIB: f64 = (1u64 << 30) as f64;

/// Writes the report.
pub fn run(a: &ReportArgs) -> Result<()> {
    let runs: Vec<(String, SavedRun)> = a
        .runs
        .iter()
        .map(|p| Ok((p.file_stem().unwrap_or_default().to_string_lossy().into_owned(), SavedRun::load(p)?)))
        .collect::<Result<_>>()?;
    let mut html = String::from(HEAD);
    for (name, r) in &runs {
        let m = &r.machine;
        writeln!(
            html,
            "<p class=run><b>{}</b>: foliomm bench {} at commit {}, {} ({} cores), Linux {}, THP {}, shmem THP {}<br><code>{}</code></p>",
            esc(name), esc(&r.bench), esc(&r.commit), esc(&m.cpu), m.cores, esc(&m.kernel), esc(&m.thp), esc(&m.shmem_thp),
            esc(&r.command)
        )?;
    }
    write_settings(&mut html, &runs)?;
    let (_, first) = &runs[0];
    for table in &first.tables {
        let unit = unit_of(table, &runs);
        let lines = lines(table, &runs);
        write_table(&mut html, table, &unit, &lines)?;
        write_changes(&mut html, table, &runs)?;
        html += &plot(table, &unit, &lines).map_err(|e| anyhow!("plotting {}: {e}", table.name))?;
    }
    html += "</body></html>\n";
    std::fs::write(&a.output, html).with_context(|| format!("cannot write {}", a.output.display()))?;
    eprintln!("wrote {}", a.output.display());
    Ok(())
}

/// The factor that turns a time of `run` into a time per GiB: for a table
/// in seconds of a run that names its `size` (or, for the seed's figures,
/// its `published_size`); 1 otherwise.
fn per_gib(table: &Table, run: &SavedRun, key: &str) -> f64 {
    let size = run.settings.get(key).or_else(|| run.settings.get("size")).and_then(|s| s.as_u64());
    match (table.unit.as_str(), size) {
        ("s", Some(size)) if size > 0 => GIB / size as f64,
        _ => 1.0,
    }
}

/// The unit the report gives `table` in: seconds per GiB where its times
/// are normalized.
fn unit_of(table: &Table, runs: &[(String, SavedRun)]) -> String {
    match runs.iter().any(|(_, r)| per_gib(table, r, "size") != 1.0) {
        true => format!("{} per GiB", table.unit),
        false => table.unit.clone(),
    }
}

/// `v` in `unit` with three significant digits and a readable prefix:
/// `31.6 ms`, `412 µs`, `1.25 M/s`, `2.05 KiB`.
fn readable(v: f64, unit: &str) -> String {
    let (base, rest) = unit.split_once(' ').map_or((unit, ""), |(b, r)| (b, r));
    let rest = if rest.is_empty() { String::new() } else { format!(" {rest}") };
    let scaled = |steps: &[(f64, &'static str)]| {
        let fallback = if v == 0.0 { &(1.0, "") } else { steps.last().unwrap() };
        let &(f, p) = steps.iter().find(|(f, _)| v.abs() >= *f).unwrap_or(fallback);
        (v / f, p)
    };
    let (x, prefix) = match base {
        "s" => scaled(&[(1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n")]),
        b if b.ends_with("/s") => scaled(&[(1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]),
        _ => (v, ""),
    };
    let digits = if x == 0.0 { 0 } else { (2 - x.abs().log10().floor() as i32).clamp(0, 6) as usize };
    format!("{x:.digits$} {prefix}{base}{rest}")
}

/// A size in bytes as a power-of-two unit where it is a whole one:
/// `16 MiB`, `1 GiB`, `1536 KiB`.
fn readable_bytes(b: u64) -> String {
    let units = [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    units
        .iter()
        .find(|(u, _)| b >= *u && b.is_multiple_of(*u))
        .map_or(format!("{b} B"), |(u, n)| format!("{} {n}", b / u))
}

/// The settings of every run, a row each, marked where they differ.
fn write_settings(html: &mut String, runs: &[(String, SavedRun)]) -> Result<()> {
    let mut keys: Vec<&String> =
        runs.iter().filter_map(|(_, r)| r.settings.as_object()).flat_map(|o| o.keys()).collect();
    keys.sort();
    keys.dedup();
    html.push_str("<h2>Settings</h2><table><tr><th></th>");
    for (name, _) in runs {
        write!(html, "<th>{}</th>", esc(name))?;
    }
    html.push_str("</tr>\n");
    let value = |r: &SavedRun, k: &str| match r.settings.get(k) {
        None | Some(serde_json::Value::Null) => "-".to_string(),
        Some(v) if k.ends_with("size") && v.is_u64() => readable_bytes(v.as_u64().unwrap_or(0)),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    for k in keys {
        let values: Vec<String> = runs.iter().map(|(_, r)| value(r, k)).collect();
        let differs = values.iter().any(|v| *v != values[0]);
        write!(html, "<tr{}><th>{}</th>", if differs { " class=differs" } else { "" }, esc(k))?;
        for v in values {
            write!(html, "<td>{}</td>", esc(&v))?;
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table><p class=note>Rows in bold differ between the runs.</p>\n");
    Ok(())
}

/// Every (run, series) of `table` as a line over its rows, then each of
/// the seed's published columns, normalized as [`per_gib`] says.
fn lines(table: &Table, runs: &[(String, SavedRun)]) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for (name, r) in runs {
        let Some(t) = r.tables.iter().find(|t| t.name == table.name) else { continue };
        let factor = per_gib(table, r, "size");
        let mut names: Vec<&String> = Vec::new();
        for n in t.rows.iter().flat_map(|row| row.series.iter().map(|s| &s.name)) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        for series in names {
            let points = table
                .rows
                .iter()
                .map(|row| {
                    let samples = &t.series(&row.label, series)?.samples;
                    (!samples.is_empty()).then(|| {
                        let (m, lo, hi) = log_mean_interval(samples);
                        // One sample (a count, not a timing) has no interval to draw.
                        let (lo, hi) = if lo.is_finite() && hi.is_finite() { (lo, hi) } else { (m, m) };
                        (m * factor, lo * factor, hi * factor)
                    })
                })
                .collect();
            out.push((format!("{name}: {series}"), points));
        }
    }
    let factor = per_gib(table, &runs[0].1, "published_size");
    let columns: Vec<String> =
        table.rows.first().map(|r| r.published.iter().map(|(c, _)| c.clone()).collect()).unwrap_or_default();
    for c in columns {
        let value = |r: &super::saved::Row| r.published.iter().find(|(n, _)| *n == c).map(|&(_, v)| v * factor);
        let points = table.rows.iter().map(|r| value(r).map(|v| (v, v, v))).collect();
        out.push((format!("seed: {c}"), points));
    }
    out
}

fn write_table(html: &mut String, table: &Table, unit: &str, lines: &[Line]) -> Result<()> {
    writeln!(html, "<h2>{} ({})</h2><table><tr><th></th>", esc(&table.name), esc(unit))?;
    for (name, _) in lines {
        write!(html, "<th>{}</th>", esc(name))?;
    }
    html.push_str("</tr>\n");
    for (i, row) in table.rows.iter().enumerate() {
        write!(html, "<tr><th>{}</th>", esc(&row.label))?;
        for (name, points) in lines {
            match points[i] {
                Some((m, lo, hi)) if !name.starts_with("seed:") && lo < hi => write!(
                    html,
                    "<td>{}<small> [{}, {}]</small></td>",
                    esc(&readable(m, &table.unit)),
                    esc(&readable(lo, &table.unit)),
                    esc(&readable(hi, &table.unit))
                )?,
                Some((m, _, _)) => write!(html, "<td>{}</td>", esc(&readable(m, &table.unit)))?,
                None => html.push_str("<td>-</td>"),
            }
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    Ok(())
}

/// The % change of each later run against the first, per row and series,
/// with its interval; `~` where the interval holds 0.
fn write_changes(html: &mut String, table: &Table, runs: &[(String, SavedRun)]) -> Result<()> {
    if runs.len() < 2 {
        return Ok(());
    }
    let family = table.rows.iter().map(|r| r.series.len()).sum::<usize>() * (runs.len() - 1);
    let better = if table.higher_is_better { "higher" } else { "lower" };
    writeln!(
        html,
        "<p class=note>% change against {} ({better} is better; '~': inside the noise)</p><table><tr><th></th>",
        esc(&runs[0].0)
    )?;
    for (name, _) in &runs[1..] {
        write!(html, "<th>{}</th>", esc(name))?;
    }
    html.push_str("</tr>\n");
    for row in &table.rows {
        for series in row.series.iter().filter(|s| !s.samples.is_empty()) {
            write!(html, "<tr><th>{} {}</th>", esc(&row.label), esc(&series.name))?;
            for (_, r) in &runs[1..] {
                let other =
                    r.tables.iter().find(|t| t.name == table.name).and_then(|t| t.series(&row.label, &series.name));
                match other.filter(|s| !s.samples.is_empty()) {
                    // Sizes cancel in a change of times per GiB of one size each.
                    Some(s) => {
                        let scale = per_gib(table, r, "size") / per_gib(table, &runs[0].1, "size");
                        let scaled: Vec<f64> = s.samples.iter().map(|v| v * scale).collect();
                        write!(html, "<td>{}</td>", esc(&change(&series.samples, &scaled, family).to_string()))?
                    }
                    None => html.push_str("<td>-</td>"),
                }
            }
            html.push_str("</tr>\n");
        }
    }
    html.push_str("</table>\n");
    Ok(())
}

/// The table as an SVG line plot over its rows, with error bars.
fn plot(table: &Table, unit: &str, lines: &[Line]) -> Result<String, Box<dyn std::error::Error>> {
    let labels: Vec<&str> = table.rows.iter().map(|r| r.label.as_str()).collect();
    let values = || lines.iter().flat_map(|(_, p)| p.iter().flatten().flat_map(|&(m, lo, hi)| [m, lo, hi]));
    let top = values().fold(0.0, f64::max);
    let bottom = values().filter(|v| *v > 0.0).fold(top, f64::min);
    // Figures spanning more than 20x (the seed's machine against this one)
    // are drawn on a log scale: each value as its log10.
    let log = bottom > 0.0 && top / bottom > 20.0;
    let scale = move |v: f64| if log { v.max(bottom).log10() } else { v };
    let (y0, y1) = if log { (scale(bottom) - 0.1, scale(top) + 0.1) } else { (0.0, top * 1.1) };
    let y_label = move |v: &f64| readable(if log { 10f64.powf(*v) } else { *v }, &table.unit);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 440)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&table.name, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(110)
            .build_cartesian_2d(-0.5f64..labels.len() as f64 - 0.5, y0..y1.max(y0 + f64::EPSILON))?;
        let label_of = |x: &f64| labels.get(x.round().max(0.0) as usize).map_or(String::new(), |l| l.to_string());
        let desc = if log { format!("{unit} (log scale)") } else { unit.to_string() };
        chart
            .configure_mesh()
            .x_labels(labels.len())
            .x_label_formatter(&label_of)
            .y_label_formatter(&y_label)
            .y_desc(desc)
            .draw()?;
        for (k, (name, points)) in lines.iter().enumerate() {
            let color = Palette99::pick(k).to_rgba();
            let xy = || {
                let scaled = |(m, lo, hi)| (scale(m), scale(lo), scale(hi));
                points.iter().enumerate().filter_map(move |(i, p)| p.map(|p| (i as f64, scaled(p))))
            };
            let style = if name.starts_with("seed:") { color.stroke_width(1) } else { color.stroke_width(2) };
            chart
                .draw_series(LineSeries::new(xy().map(|(x, (m, _, _))| (x, m)), style))?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
            chart.draw_series(xy().map(|(x, (m, lo, hi))| ErrorBar::new_vertical(x, lo, m, hi, color.filled(), 8)))?;
        }
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.85)).draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// `s` escaped for HTML text.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

const HEAD: &str = "<!DOCTYPE html><html><head><meta charset=utf-8><title>foliomm benchmark report</title><style>\
body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:1em 0}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}small{color:#777}p.run,p.note{font-size:90%}\
tr.differs th,tr.differs td{font-weight:bold;background:#fff4d6}\
</style></head><body><h1>foliomm benchmark report</h1>\n";

#[cfg(test)]
mod tests {
    use super::readable;

    #[test]
    fn values_read_in_their_units() {
        assert_eq!(readable(0.03162, "s"), "31.6 ms");
        assert_eq!(readable(0.000412, "s per GiB"), "412 µs per GiB");
        assert_eq!(readable(1.25e6, "ops/s"), "1.25 Mops/s");
        assert_eq!(readable(2.5, "s"), "2.50 s");
        assert_eq!(readable(0.0, "s"), "0 s");
        assert_eq!(readable(123.0, "KiB"), "123 KiB");
        assert_eq!(super::readable_bytes(16 << 20), "16 MiB");
        assert_eq!(super::readable_bytes(1536 << 10), "1536 KiB");
    }
}
