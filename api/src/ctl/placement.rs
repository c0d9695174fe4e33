//! `namespace create|set`'s placement flags (PROTOCOL P18.4): each sets the namespace's own
//! value of a managers' placement flag, or (`default`) returns it to that flag.

use crate::wire::{
    check_namespace_placement, parse_preference, NamespacePlacement, NamespacePlacementChange,
};

/// One placement setting as given: the namespace's own value, or the managers' flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting<T> {
    Own(T),
    ManagersFlag,
}

/// The word that returns a setting to the managers' flag.
const MANAGERS_FLAG: &str = "default";

fn setting<T>(
    text: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<Setting<T>, String> {
    if text == MANAGERS_FLAG {
        Ok(Setting::ManagersFlag)
    } else {
        parse(text).map(Setting::Own)
    }
}

fn load_placement(text: &str) -> Result<Setting<bool>, String> {
    setting(text, |text| match text {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("{text:?} is not true, false or {MANAGERS_FLAG}")),
    })
}

/// A whole percentage, `15` or `15%`, 1 to 100.
fn tolerance_percent(text: &str) -> Result<Setting<u32>, String> {
    setting(text, |text| {
        let number = text.strip_suffix('%').unwrap_or(text).trim();
        let percent: u32 = number
            .parse()
            .map_err(|_| format!("{text:?} is not a whole percentage (15%)"))?;
        let placement = NamespacePlacement {
            balance_tolerance_percent: Some(percent),
            ..NamespacePlacement::default()
        };
        check_namespace_placement(&placement).map_err(|error| error.to_string())?;
        Ok(percent)
    })
}

fn balance_moves(text: &str) -> Result<Setting<u32>, String> {
    setting(text, |text| {
        let moves: u32 = text
            .parse()
            .map_err(|_| format!("{text:?} is not a number of moves"))?;
        let placement = NamespacePlacement {
            max_balance_moves_per_minute: Some(moves),
            ..NamespacePlacement::default()
        };
        check_namespace_placement(&placement).map_err(|error| error.to_string())?;
        Ok(moves)
    })
}

fn preference(text: &str) -> Result<Setting<String>, String> {
    setting(text, |text| {
        parse_preference(text)
            .map(|_| text.to_owned())
            .map_err(|error| error.to_string())
    })
}

/// The placement flags of `namespace create` and `namespace set`.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct PlacementArgs {
    /// Place this namespace's shards by the loads its executors report (`true`) or by count
    /// alone (`false`); `default`: the managers' `--load-placement`.
    #[arg(long, value_name = "true|false|default", value_parser = load_placement)]
    pub load_placement: Option<Setting<bool>>,
    /// How far an executor's load ÷ capacity may stray from the namespace's mean before shards
    /// move for balance: a whole percentage, 1% to 100%; `default`: the managers'
    /// `--balance-tolerance`.
    #[arg(long, value_name = "PERCENT|default", value_parser = tolerance_percent)]
    pub balance_tolerance: Option<Setting<u32>>,
    /// Most of its shards moved for balance per minute; `default`: the managers'
    /// `--max-balance-moves`.
    #[arg(long, value_name = "N|default", value_parser = balance_moves)]
    pub max_balance_moves: Option<Setting<u32>>,
    /// Place its shards on executors with this label while any of them takes shards, on the
    /// others only while none does (e.g. `zone=a`); `default`: no preference.
    #[arg(long, value_name = "KEY=VALUE|default", value_parser = preference)]
    pub prefer: Option<Setting<String>>,
}

impl PlacementArgs {
    /// The change these flags ask for: a value, `null` for `default`, absent if not given.
    pub fn change(&self) -> NamespacePlacementChange {
        fn of<T: Clone>(given: &Option<Setting<T>>) -> Option<Option<T>> {
            given.as_ref().map(|setting| match setting {
                Setting::Own(value) => Some(value.clone()),
                Setting::ManagersFlag => None,
            })
        }
        NamespacePlacementChange {
            load_placement: of(&self.load_placement),
            balance_tolerance_percent: of(&self.balance_tolerance),
            max_balance_moves_per_minute: of(&self.max_balance_moves),
            prefer: of(&self.prefer),
        }
    }

    /// The settings of a new namespace: what was given, the rest following the managers' flags.
    pub fn settings(&self) -> NamespacePlacement {
        self.change().applied_to(&NamespacePlacement::default())
    }
}

/// How `namespace show` prints a namespace's placement: its own settings, or that it follows
/// the managers' flags.
pub fn render_placement(placement: &NamespacePlacement) -> String {
    let mut own = Vec::new();
    if let Some(by_load) = placement.load_placement {
        own.push(format!("load placement {by_load}"));
    }
    if let Some(percent) = placement.balance_tolerance_percent {
        own.push(format!("balance tolerance {percent}%"));
    }
    if let Some(moves) = placement.max_balance_moves_per_minute {
        own.push(format!("max balance moves {moves}/min"));
    }
    if let Some(prefer) = &placement.prefer {
        own.push(format!("prefer {}", super::table::printable(prefer)));
    }
    if own.is_empty() {
        "the managers' flags".to_owned()
    } else {
        format!("{} (the rest: the managers' flags)", own.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p18_4_placement_flags_parse_a_value_or_default() {
        assert_eq!(load_placement("false"), Ok(Setting::Own(false)));
        assert_eq!(load_placement("default"), Ok(Setting::ManagersFlag));
        assert!(load_placement("no").is_err());
        assert_eq!(tolerance_percent("15%"), Ok(Setting::Own(15)));
        assert_eq!(tolerance_percent("100"), Ok(Setting::Own(100)));
        for bad in ["0%", "101%", "0.1", "ten"] {
            assert!(tolerance_percent(bad).is_err(), "{bad}");
        }
        assert_eq!(balance_moves("7"), Ok(Setting::Own(7)));
        assert!(balance_moves("0").is_err());
        assert!(balance_moves("1048577").is_err());
        assert_eq!(preference("zone=a"), Ok(Setting::Own("zone=a".to_owned())));
        assert_eq!(preference("default"), Ok(Setting::ManagersFlag));
        for bad in ["zone", "Zone=a", "zone=", "zone=a,rack=b"] {
            assert!(preference(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn p18_4_default_asks_for_null_and_an_absent_flag_for_nothing() {
        let args = PlacementArgs {
            load_placement: Some(Setting::ManagersFlag),
            prefer: Some(Setting::Own("zone=a".to_owned())),
            ..PlacementArgs::default()
        };
        let change = args.change();
        assert_eq!(change.load_placement, Some(None));
        assert_eq!(change.prefer, Some(Some("zone=a".to_owned())));
        assert_eq!(change.balance_tolerance_percent, None);
        assert_eq!(
            args.settings(),
            NamespacePlacement {
                prefer: Some("zone=a".to_owned()),
                ..NamespacePlacement::default()
            }
        );
    }
}
