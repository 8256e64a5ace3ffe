//! The orders the source tests produce (Kafka records, files): order `id`
//! of customer `c<id % customers>` for an amount that is a function of
//! its id, each customer's count and total over orders `0..n`, and a
//! producer of them to a Kafka topic.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::kafka::row;
use crate::kafka_broker::Broker;

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

/// Produces orders `0..` to the 3 partitions of `topic` as JSON (`id`,
/// `customer` `c<id % customers>`, `amount`) until `stop`, with a record
/// that is not JSON after every `bad_every`-th order if given; `produced`
/// counts the orders.
pub fn produce(
    broker: &Broker,
    topic: &'static str,
    customers: u64,
    bad_every: Option<u64>,
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicU64>,
) -> JoinHandle<()> {
    let producer = broker.producer();
    tokio::spawn(async move {
        let mut id = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let value = format!(
                r#"{{"id": {id}, "customer": "c{}", "amount": {}}}"#,
                id % customers,
                amount(id)
            );
            let partition = (id % 3) as i32;
            Broker::send(&producer, topic, partition, None, &value).await;
            if bad_every.is_some_and(|every| id.is_multiple_of(every)) {
                Broker::send(&producer, topic, partition, None, "not json {").await;
            }
            id += 1;
            produced.store(id, Ordering::Relaxed);
            if id.is_multiple_of(50) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    })
}
