//! The epoch coordinator: starts the stream worker, the committer and the
//! compactor, and cuts epochs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use weir_stream::runtime::Command;

use super::*;

impl Database {
    /// Runs the epoch machinery until `shutdown` turns true: starts the
    /// stream worker (on a thread of its own: its operators compute
    /// without yielding) and the committer, and cuts epochs every
    /// checkpoint interval and whenever a statement waits. At shutdown it
    /// cuts what is pending one last time and waits for its commit.
    /// Boxed so that its code is compiled in this crate (see
    /// [`Database::open`]).
    pub fn run_coordinator(
        self: Arc<Self>,
        shutdown: watch::Receiver<bool>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(self.coordinate(shutdown))
    }

    async fn coordinate(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let parts_receiver = self.runtime.start(MAX_EPOCHS_IN_FLIGHT);
        let (tables, tables_receiver) = mpsc::unbounded_channel();
        let committer = tokio::spawn(self.clone().run_committer(tables_receiver, parts_receiver));
        let compactor = tokio::spawn(self.clone().run_compactor());
        tokio::spawn(crate::sink::run_deliveries(self.clone(), shutdown.clone()));

        let periodic = !self.config.checkpoint_interval.is_zero();
        let mut ticker = tokio::time::interval(if periodic {
            self.config.checkpoint_interval
        } else {
            Duration::from_secs(3600)
        });
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick(), if periodic => {}
                _ = self.commit_requested.notified() => {}
                // A source reader read its limit into the open epoch.
                _ = self.runtime.status().cut_wanted() => {}
                _ = shutdown.changed() => break,
            }
            let started = Instant::now();
            self.cut_epoch(&tables).await;
            let elapsed = started.elapsed();
            if elapsed < self.config.min_commit_gap {
                tokio::time::sleep(self.config.min_commit_gap - elapsed).await;
            }
        }
        compactor.abort();
        self.cut_epoch(&tables).await;
        drop(tables);
        if tokio::time::timeout(self.config.commit_timeout, committer)
            .await
            .is_err()
        {
            warn!("the last epoch did not commit before shutdown");
        }
    }

    /// Cuts the open epoch if it holds changes: the tables' part goes to
    /// the committer, their changes and the barrier to the stream worker.
    /// Waits first while too many epochs are in flight.
    async fn cut_epoch(&self, tables: &mpsc::UnboundedSender<TablePart>) {
        let mut committed = self.committed_epoch.subscribe();
        let in_flight = |committed: u64| {
            self.open_epoch.load(Ordering::Relaxed) - 1 - committed >= MAX_EPOCHS_IN_FLIGHT as u64
        };
        if committed.wait_for(|&c| !in_flight(c)).await.is_err() {
            return;
        }
        let mut working = self.working.lock().await;
        if !self.is_dirty(&working) {
            return;
        }
        let locked = Instant::now();
        if self.record_failures(&mut working.catalog) {
            working.catalog_changed();
        }
        let changes = crate::views::take_table_changes(&mut working);
        let epoch = working.epoch;
        // An epoch in which no view can have changed (no table a view
        // reads was written, no source rows arrived, no view started or
        // stopped) commits without a round trip through the worker.
        let through_views = !changes.is_empty()
            || self.stream_dirty()
            || self.control_sent.swap(false, Ordering::SeqCst);
        match working.cut() {
            Ok(mut part) => {
                part.through_views = through_views;
                let ids = part.catalog.sequences.values().map(|s| s.id);
                part.sequences = self.sequences.cut(epoch, ids);
                if through_views {
                    if !changes.is_empty() {
                        self.send_to_worker(Command::Changes(changes));
                    }
                    self.send_to_worker(Command::Barrier(epoch));
                }
                let _ = tables.send(part);
                self.open_epoch.store(working.epoch, Ordering::Relaxed);
                debug!(
                    epoch,
                    cut_ms = locked.elapsed().as_secs_f64() * 1e3,
                    "cut epoch"
                );
            }
            Err(e) => warn!(epoch, error = %e, "could not cut epoch"),
        }
    }

    pub(super) fn is_dirty(&self, working: &WorkingState) -> bool {
        working.is_dirty() || self.stream_dirty() || self.sequences.moved()
    }
}
