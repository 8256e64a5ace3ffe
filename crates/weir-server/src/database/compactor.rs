//! Background compaction of delta chains into bases.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tracing::{debug, warn};

use super::*;

impl Database {
    /// Merges delta chains into bases in the background: after each
    /// commit, every table the store says is due is written as a new base
    /// (from its committed snapshot, or merged from the store for operator
    /// state; on a blocking thread, as this is CPU work), which the next
    /// commit names in place of the chain.
    pub(super) async fn run_compactor(self: Arc<Self>) {
        let mut committed = self.committed_epoch.subscribe();
        while committed.changed().await.is_ok() {
            let jobs = {
                let mut store = self.store.lock().await;
                // The committed snapshot is the newest manifest's epoch:
                // both change together, under the store's lock.
                let committed = self.committed();
                store.compaction_jobs(|id| committed.tables.get(&id).cloned())
            };
            for job in jobs {
                let table = job.table;
                let compactor = self.store.lock().await.compactor();
                let runtime = tokio::runtime::Handle::current();
                let started = Instant::now();
                let merged =
                    tokio::task::spawn_blocking(move || runtime.block_on(compactor.compact(&job)))
                        .await;
                match merged {
                    Ok(Ok(base)) => {
                        debug!(
                            table = base.table,
                            deltas = base.merged,
                            bytes = base.base.len,
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "compacted"
                        );
                        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
                        self.store.lock().await.install(base).await;
                    }
                    Ok(Err(e)) => {
                        warn!(error = %e, "compaction failed; it will be tried again");
                        self.store.lock().await.release(table).await;
                    }
                    Err(e) => {
                        warn!(error = %e, "compaction task failed");
                        self.store.lock().await.release(table).await;
                    }
                }
            }
        }
    }
}
