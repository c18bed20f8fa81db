//! `foliomm report RUN.json... -o report.html`: one self-contained HTML
//! file (no network, no script) of saved runs: a header with each run's
//! machine, commit and settings; for every table, the table itself (each
//! run's mean with its 95% interval, per row and series, and the seed's
//! published figures) and an SVG plot of the same with error bars, drawn
//! with plotters.

use std::fmt::Write;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;

use super::saved::{SavedRun, Table};
use super::stats::{mean_interval, summarize};

/// `report`'s arguments.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// Saved runs (`bench ... --save NAME`).
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short, long, default_value = "report.html")]
    output: PathBuf,
}

/// A line of the plot: its name and, per row, (mean, low, high).
type Line = (String, Vec<Option<(f64, f64, f64)>>);

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
            esc(&r.settings.to_string())
        )?;
    }
    let (_, first) = &runs[0];
    for table in &first.tables {
        let lines = lines(table, &runs);
        write_table(&mut html, table, &lines)?;
        html += &plot(table, &lines).map_err(|e| anyhow!("plotting {}: {e}", table.name))?;
    }
    html += "</body></html>\n";
    std::fs::write(&a.output, html).with_context(|| format!("cannot write {}", a.output.display()))?;
    eprintln!("wrote {}", a.output.display());
    Ok(())
}

/// Every (run, series) of `table` as a line over its rows, then each of
/// the seed's published columns.
fn lines(table: &Table, runs: &[(String, SavedRun)]) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for (name, r) in runs {
        let Some(t) = r.tables.iter().find(|t| t.name == table.name) else { continue };
        let names: Vec<&String> = t.rows.iter().flat_map(|row| row.series.iter().map(|s| &s.name)).collect();
        let mut seen = Vec::new();
        for series in names.into_iter().filter(|n| {
            !seen.contains(n) && {
                seen.push(*n);
                true
            }
        }) {
            let points = table
                .rows
                .iter()
                .map(|row| {
                    let samples = &t
                        .rows
                        .iter()
                        .find(|x| x.label == row.label)?
                        .series
                        .iter()
                        .find(|s| &s.name == series)?
                        .samples;
                    (!samples.is_empty()).then(|| {
                        let mean = summarize(samples).mean;
                        // One sample (a count, not a timing) has no interval to draw.
                        let (lo, hi) = Some(mean_interval(samples))
                            .filter(|(lo, hi)| lo.is_finite() && hi.is_finite())
                            .unwrap_or((mean, mean));
                        (mean, lo, hi)
                    })
                })
                .collect();
            out.push((format!("{name}: {series}"), points));
        }
    }
    let columns: Vec<String> =
        table.rows.first().map(|r| r.published.iter().map(|(c, _)| c.clone()).collect()).unwrap_or_default();
    for c in columns {
        let points =
            table.rows.iter().map(|r| r.published.iter().find(|(n, _)| *n == c).map(|&(_, v)| (v, v, v))).collect();
        out.push((format!("seed: {c}"), points));
    }
    out
}

fn write_table(html: &mut String, table: &Table, lines: &[Line]) -> Result<()> {
    writeln!(html, "<h2>{} ({})</h2><table><tr><th></th>", esc(&table.name), esc(&table.unit))?;
    for (name, _) in lines {
        write!(html, "<th>{}</th>", esc(name))?;
    }
    html.push_str("</tr>\n");
    for (i, row) in table.rows.iter().enumerate() {
        write!(html, "<tr><th>{}</th>", esc(&row.label))?;
        for (name, points) in lines {
            match points[i] {
                Some((m, lo, hi)) if !name.starts_with("seed:") && lo < hi => {
                    write!(html, "<td>{m:.6}<small> [{lo:.6}, {hi:.6}]</small></td>")?
                }
                Some((m, _, _)) => write!(html, "<td>{m:.6}</td>")?,
                None => html.push_str("<td>-</td>"),
            }
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    Ok(())
}

/// The table as an SVG line plot over its rows, with error bars.
fn plot(table: &Table, lines: &[Line]) -> Result<String, Box<dyn std::error::Error>> {
    let labels: Vec<&str> = table.rows.iter().map(|r| r.label.as_str()).collect();
    let values = || lines.iter().flat_map(|(_, p)| p.iter().flatten().flat_map(|&(m, lo, hi)| [m, lo, hi]));
    let top = values().fold(0.0, f64::max);
    let bottom = values().filter(|v| *v > 0.0).fold(top, f64::min);
    // Figures spanning more than 20x (the seed's machine against this one)
    // are drawn on a log scale: each value as its log10.
    let log = bottom > 0.0 && top / bottom > 20.0;
    let scale = move |v: f64| if log { v.max(bottom).log10() } else { v };
    let (y0, y1) = if log { (scale(bottom) - 0.1, scale(top) + 0.1) } else { (0.0, top * 1.1) };
    let y_label = move |v: &f64| if log { format!("{:.3e}", 10f64.powf(*v)) } else { format!("{v:.4}") };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 440)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&table.name, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5f64..labels.len() as f64 - 0.5, y0..y1.max(y0 + f64::EPSILON))?;
        let label_of = |x: &f64| labels.get(x.round().max(0.0) as usize).map_or(String::new(), |l| l.to_string());
        let unit = if log { format!("{} (log scale)", table.unit) } else { table.unit.clone() };
        chart
            .configure_mesh()
            .x_labels(labels.len())
            .x_label_formatter(&label_of)
            .y_label_formatter(&y_label)
            .y_desc(unit)
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
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}small{color:#777}p.run{font-size:90%}\
</style></head><body><h1>foliomm benchmark report</h1>\n";
