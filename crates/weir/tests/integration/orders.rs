//! The orders the source tests produce (Kafka records, files): order `id`
//! of customer `c<id % customers>` for an amount that is a function of
//! its id, and each customer's count and total over orders `0..n`.

use std::collections::BTreeMap;

use crate::kafka::row;

/// An order's amount, a function of its id.
pub fn amount(id: u64) -> u64 {
    id * 7919 % 1000
}

/// Each customer's order count and total over orders `0..n` of
/// `customers` customers, by name (`c<k>`).
pub fn totals(n: u64, customers: u64) -> BTreeMap<String, (u64, u64)> {
    let mut totals: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for id in 0..n {
        let entry = totals.entry(format!("c{}", id % customers)).or_default();
        entry.0 += 1;
        entry.1 += amount(id);
    }
    totals
}

/// [`totals`] as a view's rows (customer, count, total), sorted.
pub fn total_rows(n: u64, customers: u64) -> Vec<Vec<Option<String>>> {
    totals(n, customers)
        .iter()
        .map(|(c, (count, total))| row(&[c, &count.to_string(), &total.to_string()]))
        .collect()
}
