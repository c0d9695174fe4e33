//! Plain-text output: aligned tables and `field: value` blocks, no colours, no trailing spaces,
//! rows in the order given (callers sort them), so output is stable enough to diff and grep.

use std::borrow::Cow;

/// Printed for an absent value, so every row has every column.
pub const NONE: &str = "-";

/// The characters [`printable`] escapes besides control characters (Cc, `char::is_control`), as
/// ranges of code points (first, last), ascending and disjoint. From the Unicode Character
/// Database 16.0 (`DerivedGeneralCategory.txt`, `DerivedCoreProperties.txt`):
///
/// - `Cf`: every character of general category Cf (format). They show nothing or reorder what
///   follows: U+200B..U+200F, U+202A..U+202E, U+2066..U+2069, U+061C, U+FEFF, tag characters.
/// - `Zl`, `Zp`: U+2028 and U+2029, a line break to many terminals.
/// - `Zs`: every space separator but U+0020, so `ex 1` and `ex\u{a0}1` do not look alike.
/// - `DI`: the rest of Default_Ignorable_Code_Point, which shows nothing either (combining
///   grapheme joiner, Hangul fillers, variation selectors, and the code points reserved as such).
const INVISIBLE_OR_SEPARATOR: [(u32, u32); 42] = [
    (0x00A0, 0x00A0),   // Zs  no-break space
    (0x00AD, 0x00AD),   // Cf  soft hyphen
    (0x034F, 0x034F),   // DI  combining grapheme joiner
    (0x0600, 0x0605),   // Cf  Arabic number signs
    (0x061C, 0x061C),   // Cf  Arabic letter mark
    (0x06DD, 0x06DD),   // Cf  Arabic end of ayah
    (0x070F, 0x070F),   // Cf  Syriac abbreviation mark
    (0x0890, 0x0891),   // Cf  Arabic pound and piastre marks above
    (0x08E2, 0x08E2),   // Cf  Arabic disputed end of ayah
    (0x115F, 0x1160),   // DI  Hangul choseong and jungseong fillers
    (0x1680, 0x1680),   // Zs  Ogham space mark
    (0x17B4, 0x17B5),   // DI  Khmer inherent vowels
    (0x180B, 0x180D),   // DI  Mongolian free variation selectors one to three
    (0x180E, 0x180E),   // Cf  Mongolian vowel separator
    (0x180F, 0x180F),   // DI  Mongolian free variation selector four
    (0x2000, 0x200A),   // Zs  en quad .. hair space
    (0x200B, 0x200F),   // Cf  zero width space and joiners, left-to-right and right-to-left marks
    (0x2028, 0x2028),   // Zl  line separator
    (0x2029, 0x2029),   // Zp  paragraph separator
    (0x202A, 0x202E),   // Cf  bidirectional embeddings and overrides
    (0x202F, 0x202F),   // Zs  narrow no-break space
    (0x205F, 0x205F),   // Zs  medium mathematical space
    (0x2060, 0x2064),   // Cf  word joiner, invisible operators
    (0x2065, 0x2065),   // DI  reserved
    (0x2066, 0x206F),   // Cf  bidirectional isolates, deprecated format characters
    (0x3000, 0x3000),   // Zs  ideographic space
    (0x3164, 0x3164),   // DI  Hangul filler
    (0xFE00, 0xFE0F),   // DI  variation selectors
    (0xFEFF, 0xFEFF),   // Cf  zero width no-break space (byte order mark)
    (0xFFA0, 0xFFA0),   // DI  halfwidth Hangul filler
    (0xFFF0, 0xFFF8),   // DI  reserved
    (0xFFF9, 0xFFFB),   // Cf  interlinear annotation characters
    (0x110BD, 0x110BD), // Cf  Kaithi number sign
    (0x110CD, 0x110CD), // Cf  Kaithi number sign above
    (0x13430, 0x1343F), // Cf  Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3), // Cf  shorthand format controls
    (0x1D173, 0x1D17A), // Cf  musical symbol beams and phrases
    (0xE0000, 0xE0000), // DI  reserved
    (0xE0001, 0xE0001), // Cf  language tag
    (0xE0002, 0xE001F), // DI  reserved
    (0xE0020, 0xE007F), // Cf  tag characters
    (0xE0080, 0xE0FFF), // DI  variation selectors supplement (U+E0100..U+E01EF), reserved
];

/// Whether [`printable`] escapes `c`: a control character, or one of
/// [`INVISIBLE_OR_SEPARATOR`].
fn must_escape(c: char) -> bool {
    if c.is_control() {
        return true;
    }
    let code = u32::from(c);
    INVISIBLE_OR_SEPARATOR
        .binary_search_by(|&(first, last)| {
            if last < code {
                std::cmp::Ordering::Less
            } else if first > code {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// `text` safe to print on a terminal, and unlike any other text there: control characters (a
/// newline would forge a row, an escape sequence would reach the operator's terminal), format
/// characters (invisible, or reordering what a terminal shows), line and paragraph separators
/// and every space but U+0020 are written as Rust escapes (`\n`, `\u{1b}`, `\u{200b}`), so one
/// executor's name cannot pass for another's. Executors choose their names and addresses, so
/// every table cell, `field: value` line and `watch` line goes through this, as does every
/// error the CLI prints.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(must_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if must_escape(c) {
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

    /// Issue 55, finding 10: every format character (Cf), line and paragraph separator and
    /// space but U+0020 is escaped wherever caller-supplied text is printed, so `ex-1` with an
    /// invisible character in it does not pass for `ex-1`; letters of any script are not.
    #[test]
    fn format_and_separator_characters_are_escaped() {
        let named_in_the_finding = [
            '\u{200e}', '\u{200f}', '\u{061c}', '\u{200b}', '\u{feff}', '\u{2028}', '\u{2029}',
        ];
        let other_format_characters = [
            '\u{00ad}',
            '\u{0600}',
            '\u{06dd}',
            '\u{180e}',
            '\u{200c}',
            '\u{200d}',
            '\u{202a}',
            '\u{202e}',
            '\u{2060}',
            '\u{2064}',
            '\u{2066}',
            '\u{2069}',
            '\u{206f}',
            '\u{fff9}',
            '\u{110bd}',
            '\u{1343f}',
            '\u{1bca0}',
            '\u{1d173}',
            '\u{e0001}',
            '\u{e0020}',
            '\u{e0041}',
            '\u{e007f}',
        ];
        let spaces = [
            '\u{00a0}', '\u{1680}', '\u{2000}', '\u{2007}', '\u{200a}', '\u{202f}', '\u{205f}',
            '\u{3000}',
        ];
        let invisible = ['\u{034f}', '\u{3164}', '\u{fe0f}', '\u{ffa0}', '\u{e0100}'];
        let controls = ['\u{0}', '\t', '\u{7f}', '\u{85}', '\u{9f}'];
        for c in named_in_the_finding
            .into_iter()
            .chain(other_format_characters)
            .chain(spaces)
            .chain(invisible)
            .chain(controls)
        {
            let name = format!("ex-1{c}");
            let escaped = format!("ex-1\\u{{{:x}}}", u32::from(c));
            let shown = printable(&name);
            assert!(!shown.contains(c), "U+{:04X}: {shown:?}", u32::from(c));
            assert!(
                shown == escaped || c.is_ascii_control(),
                "U+{:04X}: {shown:?}",
                u32::from(c)
            );
            let mut table = Table::new(&["EXECUTOR", "NAME"]);
            table.push(vec!["ex-1".to_owned(), name.clone()]);
            assert!(!table.render().contains(c), "U+{:04X}", u32::from(c));
            assert!(!fields(&[("name", name.clone())]).contains(c));
        }
        assert_eq!(printable("a\u{2028}b\u{2029}c"), r"a\u{2028}b\u{2029}c");
        assert_eq!(printable("ex\u{200b}-1"), r"ex\u{200b}-1");

        // Letters, marks and symbols of any script, and the one ASCII space, are shown as they are.
        for plain in [
            "é",
            "中",
            "executor 中文 café",
            "e\u{301}",
            "Ωmega",
            "Ελληνικά",
            "עברית",
            "العربية",
            "हिन्दी",
            "日本語のテキスト",
            "한국어",
            "😀",
            "\u{1f468}\u{1f469}",
        ] {
            assert_eq!(printable(plain), Cow::Borrowed(plain), "{plain:?}");
        }
    }

    /// [`must_escape`] looks the table up by binary search: it must be ascending and disjoint.
    #[test]
    fn the_table_of_escaped_ranges_is_ascending_and_disjoint() {
        for (first, last) in INVISIBLE_OR_SEPARATOR {
            assert!(first <= last, "{first:X}..{last:X}");
            assert!(char::from_u32(first).is_some() && char::from_u32(last).is_some());
        }
        for pair in INVISIBLE_OR_SEPARATOR.windows(2) {
            assert!(pair[0].1 < pair[1].0, "{pair:X?}");
        }
        // The edges of a few ranges, and their neighbours.
        assert!(must_escape('\u{2000}') && must_escape('\u{200f}') && !must_escape('\u{2010}'));
        assert!(must_escape('\u{e0000}') && must_escape('\u{e0fff}') && !must_escape('\u{f0000}'));
        assert!(must_escape('\u{a0}') && !must_escape('\u{a1}') && !must_escape(' '));
    }
}
