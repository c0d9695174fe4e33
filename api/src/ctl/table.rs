//! Plain-text output: aligned tables and `field: value` blocks, no colours, no trailing spaces,
//! rows in the order given (callers sort them), so output is stable enough to diff and grep.

use std::borrow::Cow;

/// Printed for an absent value, so every row has every column.
pub const NONE: &str = "-";

/// `text` safe to print on a terminal: control characters (a newline would forge a row, an
/// escape sequence would reach the operator's terminal) and the bidirectional overrides that
/// reorder what a terminal shows are written as Rust escapes (`\n`, `\u{1b}`). Executors choose
/// their names and addresses, so every cell and field goes through this.
pub fn printable(text: &str) -> Cow<'_, str> {
    let unsafe_char =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Columns separated by two spaces, each as wide as its widest cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print as [`NONE`], extra cells are an error in the caller and
    /// are dropped rather than misaligning the table.
    pub fn push(&mut self, cells: Vec<String>) {
        let mut row: Vec<String> = cells
            .into_iter()
            .take(self.headers.len())
            .map(|cell| printable(&cell).into_owned())
            .collect();
        row.resize(self.headers.len(), NONE.to_owned());
        for cell in &mut row {
            if cell.is_empty() {
                NONE.clone_into(cell);
            }
        }
        self.rows.push(row);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (column, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if column > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                let pad = width.saturating_sub(cell.chars().count());
                line.extend(std::iter::repeat_n(' ', pad));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `field: value` lines with the values aligned, for one object (`executor show`).
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs
        .iter()
        .map(|(name, _)| name.chars().count() + 1)
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (name, value) in pairs {
        let label = format!("{name}:");
        let value = if value.is_empty() {
            Cow::Borrowed(NONE)
        } else {
            printable(value)
        };
        out.push_str(format!("{label:<width$}  {value}").trim_end());
        out.push('\n');
    }
    out
}

/// A duration in milliseconds for people: `450ms`, `12.3s`, `4m05s`.
pub fn human_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{}.{}s", ms / 1_000, (ms % 1_000) / 100),
        _ => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1_000),
    }
}

/// An optional number, or [`NONE`].
pub fn opt<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| NONE.to_owned(), |v| v.to_string())
}

/// A load or utilisation for people: three significant figures (`0.00312`, `41.7`, `1250`), or
/// [`NONE`] when the answering manager does not know it (only the leader knows loads).
pub fn human_load(value: Option<f64>) -> String {
    match value {
        None => NONE.to_owned(),
        Some(0.0) => "0".to_owned(),
        Some(value) => {
            let digits = 2 - value.abs().log10().floor().clamp(-9.0, 2.0) as i32;
            format!(
                "{value:.prec$}",
                prec = usize::try_from(digits).unwrap_or(0)
            )
        }
    }
}

/// Compact shard list: `0-3,7,9-10`.
pub fn shard_ranges(shards: impl IntoIterator<Item = u32>) -> String {
    let mut sorted: Vec<u32> = shards.into_iter().collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut iter = sorted.into_iter().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end.saturating_add(1))) {
            end = iter.next().unwrap_or(end);
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    if parts.is_empty() {
        NONE.to_owned()
    } else {
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_without_trailing_spaces() {
        let mut table = Table::new(&["ID", "ADDRESS", "ROLE"]);
        table.push(vec![
            "1".into(),
            "http://127.0.0.1:7001".into(),
            "voter".into(),
        ]);
        table.push(vec!["10".into(), "http://h:2".into(), String::new()]);
        assert_eq!(
            table.render(),
            "ID  ADDRESS                ROLE\n\
             1   http://127.0.0.1:7001  voter\n\
             10  http://h:2             -\n"
        );
    }

    #[test]
    fn short_rows_are_padded_and_long_rows_cut() {
        let mut table = Table::new(&["A", "B"]);
        table.push(vec!["x".into()]);
        table.push(vec!["1".into(), "2".into(), "3".into()]);
        assert_eq!(table.render(), "A  B\nx  -\n1  2\n");
    }

    #[test]
    fn an_empty_table_is_its_header() {
        assert_eq!(Table::new(&["SHARD", "OWNER"]).render(), "SHARD  OWNER\n");
    }

    #[test]
    fn fields_align_values() {
        assert_eq!(
            fields(&[
                ("id", "ex-4".into()),
                ("address", "http://h:1".into()),
                ("name", String::new())
            ]),
            "id:       ex-4\naddress:  http://h:1\nname:     -\n"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_ms(0), "0ms");
        assert_eq!(human_ms(999), "999ms");
        assert_eq!(human_ms(1_000), "1.0s");
        assert_eq!(human_ms(12_345), "12.3s");
        assert_eq!(human_ms(60_000), "1m00s");
        assert_eq!(human_ms(245_000), "4m05s");
    }

    #[test]
    fn shard_lists_collapse_into_ranges() {
        assert_eq!(shard_ranges([]), "-");
        assert_eq!(shard_ranges([3]), "3");
        assert_eq!(shard_ranges([0, 1, 2, 3, 7, 9, 10]), "0-3,7,9-10");
        assert_eq!(
            shard_ranges([5, 4, 4, u32::MAX]),
            format!("4-5,{}", u32::MAX)
        );
    }

    /// A name with a newline cannot forge a row, nor an escape sequence reach the terminal.
    #[test]
    fn executor_supplied_text_is_printed_escaped() {
        let forged = "a\n ex-9  10.0.0.9:1  99\u{1b}[2J\u{202e}evil\r";
        let mut table = Table::new(&["NAME", "SHARDS"]);
        table.push(vec![forged.to_owned(), "3".to_owned()]);
        let rendered = table.render();
        assert_eq!(rendered.lines().count(), 2, "{rendered:?}");
        assert!(!rendered.contains('\u{1b}') && !rendered.contains('\u{202e}'));
        assert!(rendered.contains(r"a\n ex-9  10.0.0.9:1  99\u{1b}[2J\u{202e}evil\r"));
        let block = fields(&[("name", forged.to_owned())]);
        assert_eq!(block.lines().count(), 1, "{block:?}");
        assert_eq!(printable("plain ünïcode"), Cow::Borrowed("plain ünïcode"));
    }
}
