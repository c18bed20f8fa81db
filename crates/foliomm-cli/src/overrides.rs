//! The command line's overrides of scenario settings: one flag per setting
//! of the language's table (`foliomm_scenario::lang::settings`), named
//! after it (`--vma-lock` for `set vma_lock`), documented by it, its value
//! read by the scenario parser as the `set` line it stands for. Nothing
//! here names a setting.

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use foliomm_scenario::lang::settings::{Setting, SETTINGS};
use foliomm_scenario::lang::{Cmd, MachineSetting, Step};

/// `set` lines given as flags: `--mapcount mm-id` is `set mapcount mm-id`.
#[derive(Clone, Debug, Default)]
pub struct SettingFlags {
    /// The lines, parsed, in the table's order.
    pub lines: Vec<Step>,
}

/// The settings that get a flag: all but `check` (`run --check` is the
/// checker's flag).
fn flagged() -> impl Iterator<Item = &'static Setting> {
    SETTINGS.iter().filter(|s| s.name != "check")
}

/// The `set` line `--NAME VALUE` stands for, parsed; the parser's message
/// if it is not one.
fn parse(name: &str, value: &str) -> Result<Step, String> {
    let line = format!("set {name} {value}");
    match foliomm_scenario::parse(&line) {
        Ok(mut steps) if steps.len() == 1 => {
            let mut step = steps.remove(0);
            (step.line, step.text) = (0, format!("(command line) {line}"));
            Ok(step)
        }
        Ok(_) => Err(format!("'{value}' is not one setting's value")),
        Err(e) => Err(e.msg),
    }
}

impl SettingFlags {
    /// Whether a flag set the kernel release.
    pub fn sets_kernel(&self) -> bool {
        self.lines.iter().any(|s| matches!(s.cmd, Cmd::SetMachine(MachineSetting::Kernel(_))))
    }

    /// The lines with `extra` first (a flag given wins over it).
    pub fn with(&self, extra: Option<Step>) -> SettingFlags {
        SettingFlags { lines: extra.into_iter().chain(self.lines.iter().cloned()).collect() }
    }

    /// Puts the lines into `steps` after the file's leading machine
    /// settings, before the step that builds the machine: they win over
    /// the file's own `set` lines.
    pub fn apply(&self, steps: &mut Vec<Step>) {
        let at = steps.iter().position(|s| !matches!(s.cmd, Cmd::SetMachine(_) | Cmd::SetCheck(_)));
        let at = at.unwrap_or(steps.len());
        steps.splice(at..at, self.lines.iter().cloned());
    }

    /// The line `set kernel V`, as a flag would give it.
    pub fn kernel(v: foliomm::internals::release::KernelVersion) -> Step {
        parse("kernel", &v.to_string()).expect("a modelled release parses")
    }
}

/// `text` with its first letter in upper case, as clap's help lines are.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

impl Args for SettingFlags {
    fn augment_args(cmd: Command) -> Command {
        flagged().fold(cmd, |cmd, s| {
            let name = s.name;
            let value = s.syntax.trim_start_matches("set ").trim_start_matches(name).trim();
            let value = value.split(" |").next().unwrap_or(value).to_string();
            let action = if name == "debug" { ArgAction::Append } else { ArgAction::Set };
            cmd.arg(
                Arg::new(name)
                    .long(name.replace('_', "-"))
                    .value_name(value)
                    .help(format!("{}; overrides the file's `set {name}`", capitalized(&s.describe())))
                    .action(action)
                    .value_parser(move |v: &str| parse(name, v)),
            )
        })
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for SettingFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let lines = flagged().flat_map(|s| m.get_many::<Step>(s.name).into_iter().flatten().cloned()).collect();
        Ok(SettingFlags { lines })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}
