//! `foliomm settings`: the scenario language's `set` lines, from the one
//! table the parser reads (`foliomm_scenario::lang::settings`).

use anyhow::Result;
use foliomm_scenario::lang::settings::{When, SETTINGS};

#[derive(clap::Args)]
pub struct SettingsArgs {
    /// Print the table as JSON.
    #[arg(long)]
    json: bool,
}

/// Prints every setting: its syntax, meaning, Linux interface, when it may
/// appear, and what the host and guest backends do with it.
pub fn print(a: &SettingsArgs) -> Result<()> {
    if a.json {
        println!("{}", serde_json::to_string_pretty(SETTINGS)?);
        return Ok(());
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN).set_header(["set line", "meaning", "Linux", "when", "host"]);
    // A bar inside a cell would end it in Markdown.
    let cell = |text: &str| text.replace('|', "\\|");
    for s in SETTINGS {
        let when = match s.when {
            When::Machine => "before the machine",
            When::Anytime => "any time",
        };
        t.add_row([cell(s.syntax), cell(&s.describe()), s.linux.unwrap_or("").into(), when.into(), s.host.into()]);
    }
    println!("{t}");
    Ok(())
}
