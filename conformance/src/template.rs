//! The executor command template of `leasehold-conformance --executor-cmd` (PROTOCOL P16.3): a
//! shell command with placeholders the kit fills in for each executor process it starts.
//!
//! - `{managers}`: the managers' base URLs, comma-separated (through the kit's fault proxies);
//! - `{listen}`: the `host:port` the executor must bind its push listener to;
//! - `{advertise}`: the URL the executor must register as its address (the kit's proxy in front
//!   of `{listen}`, so pushes and revokes pass through the faults);
//! - `{name}`: a name unique to this process, for its logs;
//! - `{event_log}`: where the executor must write its admission log (§9);
//! - `{local}`: a unix socket address, `unix:/path`, unique to this process, for a sidecar's
//!   `--local-listen` and its service's way to it (PROTOCOL §16): the same words reach both, so
//!   one template starts a sidecar and its service. Optional; nothing listens there unless the
//!   template makes something listen.
//!
//! Values are shell-quoted, so a path with spaces stays one word. `{managers}`, `{listen}`,
//! `{advertise}` and `{event_log}` must all appear: an executor that does not bind where it is
//! told, register where pushes reach it, or log where the kit reads cannot be checked.

use std::fmt;

/// The placeholders, in the order the documentation lists them.
pub const PLACEHOLDERS: [&str; 6] = [
    "managers",
    "listen",
    "advertise",
    "name",
    "event_log",
    "local",
];

/// Placeholders every template must use.
const REQUIRED: [&str; 4] = ["managers", "listen", "advertise", "event_log"];

/// A checked template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(String);

/// What one executor process is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub managers: Vec<String>,
    pub listen: String,
    pub advertise: String,
    pub name: String,
    pub event_log: String,
    /// `unix:/path` of a socket for a sidecar's local API.
    pub local: String,
}

/// Why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError(String);

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TemplateError {}

/// The placeholders `text` names, in order of appearance; an unknown or unclosed one is an error.
fn placeholders(text: &str) -> Result<Vec<&str>, TemplateError> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find('}').ok_or_else(|| {
            TemplateError(format!(
                "an unclosed '{{' in the template near {:?}",
                &rest[open..]
            ))
        })?;
        let name = &after[..close];
        if !PLACEHOLDERS.contains(&name) {
            return Err(TemplateError(format!(
                "unknown placeholder {{{name}}}: the placeholders are {}",
                PLACEHOLDERS.map(|p| format!("{{{p}}}")).join(", ")
            )));
        }
        found.push(name);
        rest = &after[close + 1..];
    }
    Ok(found)
}

impl std::str::FromStr for Template {
    type Err = TemplateError;

    fn from_str(text: &str) -> Result<Self, TemplateError> {
        if text.trim().is_empty() {
            return Err(TemplateError("the executor command is empty".into()));
        }
        let used = placeholders(text)?;
        let missing: Vec<String> = REQUIRED
            .iter()
            .filter(|required| !used.contains(required))
            .map(|required| format!("{{{required}}}"))
            .collect();
        if !missing.is_empty() {
            return Err(TemplateError(format!(
                "the executor command must use {}: the kit cannot check an executor it does not \
                 tell where to listen, what to advertise and where to log",
                missing.join(", ")
            )));
        }
        Ok(Template(text.to_owned()))
    }
}

/// `value` as one word for `sh`.
fn shell_quote(value: &str) -> String {
    if !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:,=@+".contains(&b))
    {
        return value.to_owned();
    }
    format!("'{}'", value.replace('\'', r"'\''"))
}

impl Template {
    /// The command for `slot`, for `sh -c`.
    pub fn render(&self, slot: &Slot) -> String {
        let mut command = String::with_capacity(self.0.len() + 128);
        let mut rest = self.0.as_str();
        while let Some(open) = rest.find('{') {
            command.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            // Checked when parsed: every '{' closes on a known name.
            let close = after.find('}').unwrap_or(after.len());
            let value = match &after[..close] {
                "managers" => slot.managers.join(","),
                "listen" => slot.listen.clone(),
                "advertise" => slot.advertise.clone(),
                "name" => slot.name.clone(),
                "local" => slot.local.clone(),
                _ => slot.event_log.clone(),
            };
            command.push_str(&shell_quote(&value));
            rest = after.get(close + 1..).unwrap_or("");
        }
        command.push_str(rest);
        command
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> Slot {
        Slot {
            managers: vec!["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()],
            listen: "127.0.0.1:3".into(),
            advertise: "http://127.0.0.1:4".into(),
            name: "x0-1".into(),
            event_log: "/tmp/a dir/x0-1.jsonl".into(),
            local: "unix:/tmp/lhk/x0-1.sock".into(),
        }
    }

    #[test]
    fn p16_3_the_local_placeholder_gives_a_sidecar_and_its_service_one_socket() {
        let template: Template = "sidecar --m {managers} --l {listen} --a {advertise} \
             --e {event_log} --local-listen {local} & exec service --sidecar {local}"
            .parse()
            .unwrap();
        assert_eq!(
            template.render(&slot()),
            "sidecar --m http://127.0.0.1:1,http://127.0.0.1:2 --l 127.0.0.1:3 \
             --a http://127.0.0.1:4 --e '/tmp/a dir/x0-1.jsonl' \
             --local-listen unix:/tmp/lhk/x0-1.sock & exec service --sidecar unix:/tmp/lhk/x0-1.sock"
        );
    }

    #[test]
    fn p16_3_every_placeholder_is_filled_and_quoted() {
        let template: Template =
            "exec my-executor --m {managers} --l {listen} --a {advertise} --n {name} --e {event_log}"
                .parse()
                .unwrap();
        assert_eq!(
            template.render(&slot()),
            "exec my-executor --m http://127.0.0.1:1,http://127.0.0.1:2 --l 127.0.0.1:3 \
             --a http://127.0.0.1:4 --n x0-1 --e '/tmp/a dir/x0-1.jsonl'"
        );
    }

    #[test]
    fn p16_3_a_template_missing_a_required_placeholder_or_naming_an_unknown_one_is_refused() {
        let missing = "run --m {managers} --l {listen} --e {event_log}".parse::<Template>();
        assert!(missing.unwrap_err().0.contains("{advertise}"));
        let unknown = "run {managers} {listen} {advertise} {event_log} {port}".parse::<Template>();
        assert!(unknown
            .unwrap_err()
            .0
            .contains("unknown placeholder {port}"));
        let unclosed = "run {managers} {listen} {advertise} {event_log".parse::<Template>();
        assert!(unclosed.unwrap_err().0.contains("unclosed"));
        assert!("  ".parse::<Template>().is_err());
    }

    #[test]
    fn quoting_keeps_a_quote_inside_one_word() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
