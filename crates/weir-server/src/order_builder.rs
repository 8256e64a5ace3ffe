//! Keeps the lookup orders that reads use built for every new chunk.
//!
//! A relation's rows live in immutable chunks, and a lookup by a key or
//! an index binary-searches each chunk's order by its columns
//! (`weir-state` `order.rs`), sorting a chunk the first time a lookup
//! needs it. Each commit adds chunks (an epoch's changes) and compaction
//! replaces several with one; left alone, the first read after it would
//! sort the new chunk, which for a merged chunk of a large relation is a
//! pause that read's client sees. This task sorts them after each commit
//! instead, for every order reads have used since the server started or
//! that recovery loaded with a base (`weir-state`'s compaction stores the
//! orders in use with each base; an order no read uses costs nothing: 4
//! bytes per row once built).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::warn;
use weir_state::{TableId, TableSnapshot};

use crate::database::{Database, DbSnapshot};

/// The shortest time between two passes, so that a burst of commits
/// (group commit) costs one pass.
const PAUSE: Duration = Duration::from_millis(20);

/// An order of one relation: its table's id and the order's columns.
type OrderOf = (TableId, Vec<usize>);

/// Runs until `shutdown`: after each commit, sorts the new chunks of
/// every order in use.
pub async fn run(db: Arc<Database>, mut shutdown: watch::Receiver<bool>) {
    let mut committed = db.subscribe_committed();
    let mut in_use: BTreeSet<OrderOf> = BTreeSet::new();
    loop {
        let work = orders_of(&db.committed());
        let kept = std::mem::take(&mut in_use);
        let pass = tokio::task::spawn_blocking(move || build(work, &kept));
        match pass.await {
            Ok((used, sorted)) => {
                in_use = used;
                db.chunks_sorted_ahead
                    .fetch_add(sorted as u64, Ordering::Relaxed);
            }
            Err(e) => warn!(error = %e, "building lookup orders failed"),
        }
        tokio::time::sleep(PAUSE).await;
        tokio::select! {
            changed = committed.changed() => if changed.is_err() { break },
            _ = shutdown.changed() => break,
        }
    }
}

/// Every order of every table and materialized view of `snapshot`, with
/// the relation's rows.
fn orders_of(snapshot: &DbSnapshot) -> Vec<(OrderOf, TableSnapshot)> {
    let catalog = &snapshot.catalog;
    let tables = catalog.tables.values().map(|def| (&def.name, def.id));
    let views = catalog
        .materialized_views
        .values()
        .filter(|view| view.sink.is_none())
        .map(|view| (&view.name, view.id));
    tables
        .chain(views)
        .filter_map(|(name, id)| Some((name, id, snapshot.tables.get(&id)?)))
        .flat_map(|(name, id, rows)| {
            catalog
                .orders(name)
                .into_iter()
                .map(move |order| ((id, order.columns), rows.clone()))
        })
        .collect()
}

/// Sorts the unsorted chunks of each order of `work` that was in use in
/// the last pass (`in_use`) or has a chunk sorted by a read since;
/// returns the orders in use now and how many chunks it sorted.
fn build(
    work: Vec<(OrderOf, TableSnapshot)>,
    in_use: &BTreeSet<OrderOf>,
) -> (BTreeSet<OrderOf>, usize) {
    let mut used = BTreeSet::new();
    let mut sorted = 0;
    for (order, rows) in work {
        if !(in_use.contains(&order) || rows.has_orders(&order.1)) {
            continue;
        }
        match rows.build_orders(&order.1) {
            Ok(chunks) => sorted += chunks,
            Err(e) => {
                warn!(table = order.0, error = %e, "cannot sort a chunk for lookups");
                continue;
            }
        }
        used.insert(order);
    }
    (used, sorted)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use weir_state::{KeySelection, TableSpec};

    use super::*;

    fn rows(values: Vec<i64>) -> TableSnapshot {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(values))])
            .expect("rows");
        TableSnapshot::from_rows(TableSpec::with_primary_key(schema, vec![0]), batch)
    }

    #[test]
    fn orders_reads_used_are_built_for_new_chunks() {
        let order: OrderOf = (7, vec![0]);
        let first = rows(vec![3, 1, 2]);
        // No read has used the order: nothing is sorted.
        let (used, sorted) = build(vec![(order.clone(), first.clone())], &BTreeSet::new());
        assert!(used.is_empty());
        assert_eq!(sorted, 0);
        assert!(!first.has_orders(&[0]));
        // A lookup sorts its chunk; the next pass counts the order in use.
        let probe = KeySelection::Equal(vec![Arc::new(Int64Array::from(vec![2]))]);
        let found = first.select(&[0], &probe, None, false).expect("read");
        assert_eq!(
            found
                .expect("an order")
                .iter()
                .map(|b| b.num_rows())
                .sum::<usize>(),
            1
        );
        let (used, sorted) = build(vec![(order.clone(), first)], &BTreeSet::new());
        assert_eq!(used, BTreeSet::from([order.clone()]));
        assert_eq!(sorted, 0);
        // A later snapshot's new chunk (here: a whole new one, as after a
        // compaction) is sorted before any read asks.
        let merged = rows(vec![5, 4]);
        assert!(!merged.has_orders(&[0]));
        let (used, sorted) = build(vec![(order.clone(), merged.clone())], &used);
        assert!(merged.has_orders(&[0]));
        assert_eq!(used, BTreeSet::from([order]));
        assert_eq!(sorted, 1);
        // A relation gone from the catalog drops out.
        assert!(build(Vec::new(), &used).0.is_empty());
    }
}
