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
    if a.json {
        let rows: Vec<_> = Design::ALL
            .iter()
            .flat_map(|&d| a.orders.iter().map(move |&o| (d, o, d.memmap_space(o))))
            .map(|(d, o, s)| {
                serde_json::json!({"design": d.name(), "order": o, "fields": s.fields, "page_mapcounts": s.page_mapcounts})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!("Mapcount space in a large folio's memmap, in bytes: the folio's fields + the per-page _mapcounts\n");
    let orders = a.orders.iter().map(|o| format!("order {o}"));
    let mut t = new_table(["design".to_string(), "folio fields".to_string()].into_iter().chain(orders));
    for &d in Design::ALL.iter() {
        let at = |o: u32| d.memmap_space(o);
        let names = at(a.orders[0]).fields.iter().map(|f| f.0).collect::<Vec<_>>().join(", ");
        let cells = a.orders.iter().map(|&o| format!("{} + {}", at(o).folio_bytes(), at(o).page_mapcounts));
        t.add_row([d.name().to_string(), names].into_iter().chain(cells));
    }
    println!("{t}");
    println!(
        "\nseed 000 (Q/A): rmap values 8 B at order 2, 16 B at order 5, 32 B at order 10, the seqcount apart;\n\
         the per-page mapcounts alone 16 B, 128 B and 4096 B. CONFIG_NO_PAGE_MAPCOUNT (6.15+) gives those up."
    );
    Ok(())
}
