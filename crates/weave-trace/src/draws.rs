//! Weighted draws the generators share.

use rand::Rng;

/// A value of `table` drawn with its weight's share of the total.
pub(crate) fn weighted<R: Rng, T: Copy>(table: &[(T, u32)], rng: &mut R) -> T {
    let total: u32 = table.iter().map(|(_, w)| w).sum();
    let mut x = rng.random_range(0..total.max(1));
    for &(v, w) in table {
        if x < w {
            return v;
        }
        x -= w;
    }
    table[table.len() - 1].0
}
