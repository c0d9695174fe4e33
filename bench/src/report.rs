//! Markdown tables on stdout: every scenario prints rows that paste into docs/BENCHMARKS.md.

use std::io::Write;

/// A markdown table.
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    pub fn render(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut text = line(&self.header);
        text.push_str(&line(&vec!["---".to_owned(); self.header.len()]));
        for row in &self.rows {
            text.push_str(&line(row));
        }
        text
    }

    /// Writes the table and a blank line to stdout.
    pub fn print(&self) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        out.write_all(self.render().as_bytes())?;
        out.write_all(b"\n")?;
        out.flush()
    }
}

pub fn fmt_ms(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

pub fn fmt_rate(per_s: f64) -> String {
    format!("{per_s:.0}")
}

pub fn fmt_bytes(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let b = bytes as f64;
    if b >= MIB {
        format!("{:.1} MiB", b / MIB)
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_render_as_markdown() {
        let mut table = Table::new(&["a", "b"]);
        table.row(vec!["1".into(), "2".into()]);
        assert_eq!(table.render(), "| a | b |\n| --- | --- |\n| 1 | 2 |\n");
    }

    #[test]
    fn units_are_readable() {
        assert_eq!(fmt_ms(1.234), "1.23 ms");
        assert_eq!(fmt_ms(25.0), "25.0 ms");
        assert_eq!(fmt_bytes(2048), "2.0 KiB");
        assert_eq!(fmt_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
