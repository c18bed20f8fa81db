//! `foliomm designs`: the mapcount designs and the memmap space each spends
//! on mapcounts in a large folio, the folio's own fields apart from the
//! per-page `_mapcount`s (seed 000's Q/A: "aren't we consuming a lot of
//! memmap space?"), beside the seed's figures.

use anyhow::Result;
use foliomm::Design;

use crate::bench::new_table;

#[derive(clap::Args)]
pub struct DesignsArgs {
    /// Folio orders to show, comma-separated, 1 to 18 (order 9 is a 2 MiB
    /// THP).
    #[arg(long, value_delimiter = ',', default_values_t = [2u32, 4, 5, 9, 10],
          value_parser = clap::value_parser!(u32).range(1..=18))]
    orders: Vec<u32>,
    /// Print JSON (an array of {design, order, fields: [[name, bytes]],
    /// page_mapcounts}).
    #[arg(long)]
    json: bool,
}

/// Prints the table (or JSON) of every design at every order asked.
pub fn print(a: &DesignsArgs) -> Result<()> {
    // Every design, then mm-id built without per-page mapcounts.
    let space = |d: Design, without: bool, o: u32| match without {
        false => d.memmap_space(o),
        true => d.memmap_space_without_page_mapcount(o).expect("mm-id goes without"),
    };
    let rows: Vec<(Design, bool)> = Design::ALL.iter().map(|&d| (d, false)).chain([(Design::MmId, true)]).collect();
    let label = |d: Design, without: bool| format!("{}{}", d.name(), if without { ", page_mapcount off" } else { "" });
    if a.json {
        let rows: Vec<_> = rows
            .iter()
            .flat_map(|&(d, w)| a.orders.iter().map(move |&o| (d, w, o)))
            .map(|(d, w, o)| {
                let s = space(d, w, o);
                serde_json::json!({"design": label(d, w), "order": o, "fields": s.fields, "page_mapcounts": s.page_mapcounts})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!("Mapcount space in a large folio's memmap, in bytes: the folio's fields + the per-page _mapcounts\n");
    let orders = a.orders.iter().map(|o| format!("order {o}"));
    let mut t = new_table(["design".to_string(), "folio fields".to_string()].into_iter().chain(orders));
    for &(d, without) in &rows {
        let at = |o: u32| space(d, without, o);
        let names = at(a.orders[0]).fields.iter().map(|f| f.0).collect::<Vec<_>>().join(", ");
        let cells = a.orders.iter().map(|&o| format!("{} + {}", at(o).folio_bytes(), at(o).page_mapcounts));
        t.add_row([label(d, without), names].into_iter().chain(cells));
    }
    println!("{t}");
    println!(
        "\nseed 000 (Q/A): rmap values 8 B at order 2, 16 B at order 5, 32 B at order 10, the seqcount apart;\n\
         the per-page mapcounts alone 16 B, 128 B and 4096 B, which CONFIG_NO_PAGE_MAPCOUNT (6.15+, the last row) gives up."
    );
    Ok(())
}
