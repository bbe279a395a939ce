//! Plain text tables for terminal output.

use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

pub fn new(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header.iter().copied());
    t
}

/// Right-aligns every column but the first (numbers line up).
pub fn align_numbers(t: &mut Table) {
    let n = t.column_count();
    for i in 1..n {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}
