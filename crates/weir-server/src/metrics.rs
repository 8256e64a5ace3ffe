//! Prometheus metrics over HTTP: `GET /metrics` in the text exposition
//! format. A small hand-written responder, since one fixed page needs no
//! HTTP framework.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, info};

use crate::database::Database;
use weir_stream::runtime::ViewCounters;

/// The metrics page.
pub fn render(db: &Database) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: String| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    let counters = &db.counters;
    metric(
        "weir_committed_epoch",
        "gauge",
        "The last committed epoch.",
        db.committed_epoch().to_string(),
    );
    metric(
        "weir_epoch_lag",
        "gauge",
        "Epochs closed but not yet committed (0 or 1 while the store keeps up).",
        db.epoch_lag().to_string(),
    );
    metric(
        "weir_epochs_committed_total",
        "counter",
        "Epochs committed since start.",
        counters.epochs.load(Ordering::Relaxed).to_string(),
    );
    metric(
        "weir_epochs_without_views_total",
        "counter",
        "Epochs committed without a round trip through the stream worker (no view changed).",
        counters
            .epochs_without_views
            .load(Ordering::Relaxed)
            .to_string(),
    );
    metric(
        "weir_oldest_retained_epoch",
        "gauge",
        "The oldest committed epoch the state store keeps (--retained-manifests, --retain-history).",
        counters
            .oldest_retained_epoch
            .load(Ordering::Relaxed)
            .to_string(),
    );
    metric(
        "weir_point_reads_total",
        "counter",
        "Prepared point reads served without the planner since start.",
        db.point_reads.load(Ordering::Relaxed).to_string(),
    );
    metric(
        "weir_plans_reused_total",
        "counter",
        "Executions of prepared queries that reused their kept plan since start.",
        db.plans_reused.load(Ordering::Relaxed).to_string(),
    );
    metric(
        "weir_lookup_chunks_sorted_ahead_total",
        "counter",
        "Chunks of tables and views sorted for key and index lookups after their commit, before a read needed them.",
        db.chunks_sorted_ahead.load(Ordering::Relaxed).to_string(),
    );
    let (sorted, loaded) = weir_state::order_counts();
    metric(
        "weir_lookup_orders_sorted_total",
        "counter",
        "Chunk orders (by a key's or an index's columns) sorted for lookups since start, by reads or ahead of them.",
        sorted.to_string(),
    );
    metric(
        "weir_lookup_orders_loaded_total",
        "counter",
        "Chunk orders loaded with their base from the state store at recovery instead of sorted again.",
        loaded.to_string(),
    );
    metric(
        "weir_session_contexts_released_total",
        "counter",
        "Idle sessions' planner contexts dropped since start (made again by their next statement).",
        db.contexts_released.load(Ordering::Relaxed).to_string(),
    );
    metric(
        "weir_objects_written_total",
        "counter",
        "State objects written since start.",
        counters.objects.load(Ordering::Relaxed).to_string(),
    );
    metric(
        "weir_bytes_written_total",
        "counter",
        "State bytes written since start.",
        counters.bytes.load(Ordering::Relaxed).to_string(),
    );
    if let Some(last) = db.checkpoints().last() {
        metric(
            "weir_checkpoint_duration_seconds",
            "gauge",
            "Duration of the last commit.",
            format!("{:.6}", last.duration.as_secs_f64()),
        );
        metric(
            "weir_checkpoint_bytes",
            "gauge",
            "Bytes written by the last commit.",
            last.bytes.to_string(),
        );
    }
    let snapshot = db.committed();
    let _ = writeln!(
        out,
        "# HELP weir_table_rows Rows of each table at the last committed epoch.\n# TYPE weir_table_rows gauge"
    );
    for def in snapshot.catalog.tables.values() {
        let rows = snapshot.tables.get(&def.id).map_or(0, |t| t.num_rows());
        let name = label(&def.name);
        let _ = writeln!(out, "weir_table_rows{{table=\"{name}\"}} {rows}");
    }
    let views = db.view_counters();
    let per_view = |out: &mut String, metric: &str, help: &str, value: fn(&ViewCounters) -> u64| {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
        for (name, counters) in &views {
            let name = label(name);
            let _ = writeln!(out, "{metric}{{view=\"{name}\"}} {}", value(counters));
        }
    };
    per_view(
        &mut out,
        "weir_view_rows_in_total",
        "Change rows each materialized view consumed since the server started.",
        |c| c.rows_in,
    );
    per_view(
        &mut out,
        "weir_view_rows_out_total",
        "Change rows each materialized view produced since the server started.",
        |c| c.rows_out,
    );
    per_view(
        &mut out,
        "weir_view_source_rows_total",
        "Rows each materialized view's source readers delivered since the server started.",
        |c| c.source_rows,
    );
    let ingests: Vec<(String, crate::cdc::CdcState)> = {
        let statuses = db.cdc.all();
        snapshot
            .catalog
            .tables
            .values()
            .filter_map(|def| Some((label(&def.name), statuses.get(&def.id)?.clone())))
            .collect()
    };
    let per_ingest = |out: &mut String,
                      metric: &str,
                      kind: &str,
                      help: &str,
                      value: fn(&crate::cdc::CdcState) -> u64| {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
        for (name, state) in &ingests {
            let _ = writeln!(out, "{metric}{{table=\"{name}\"}} {}", value(state));
        }
    };
    per_ingest(
        &mut out,
        "weir_cdc_changes_total",
        "counter",
        "Upstream row changes each postgres-cdc table applied since the server started.",
        |s| s.changes,
    );
    per_ingest(
        &mut out,
        "weir_cdc_failures_total",
        "counter",
        "Failed ingest attempts of each postgres-cdc table since the server started.",
        |s| s.failures,
    );
    per_ingest(
        &mut out,
        "weir_cdc_applied_lsn",
        "gauge",
        "The upstream LSN each postgres-cdc table's rows have reached.",
        |s| s.applied_position,
    );
    per_ingest(
        &mut out,
        "weir_cdc_confirmed_lsn",
        "gauge",
        "The LSN each postgres-cdc table's replication slot is confirmed to.",
        |s| s.confirmed_position,
    );
    let metric = "weir_source_bad_records_total";
    let _ = writeln!(
        out,
        "# HELP {metric} Records each Kafka or file source could not parse since the server started.\n# TYPE {metric} counter"
    );
    let counts = weir_connectors::records::bad_record_counts();
    for def in snapshot.catalog.sources.values() {
        if def.decodes_records() {
            let count = counts
                .get(&def.id)
                .map_or(0, |c| c.count.load(std::sync::atomic::Ordering::Relaxed));
            let _ = writeln!(out, "{metric}{{source=\"{}\"}} {count}", label(&def.name));
        }
    }
    let metric = "weir_view_late_rows_total";
    let _ = writeln!(
        out,
        "# HELP {metric} Rows each materialized view dropped as late (behind a watermark) since it was created.\n# TYPE {metric} counter"
    );
    for (name, operators) in db.view_operators() {
        let late: u64 = operators.iter().map(|o| o.late_rows).sum();
        let _ = writeln!(out, "{metric}{{view=\"{}\"}} {late}", label(&name));
    }
    out
}

/// A label value, escaped as the text format wants.
fn label(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Serves `/metrics` on `listener` until `shutdown` turns true (boxed so
/// that its code is compiled in this crate, see [`Database::open`]).
pub fn serve(
    db: Arc<Database>,
    listener: TcpListener,
    shutdown: watch::Receiver<bool>,
) -> BoxFuture<'static, std::io::Result<()>> {
    Box::pin(accept_scrapes(db, listener, shutdown))
}

async fn accept_scrapes(
    db: Arc<Database>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    info!(address = %listener.local_addr()?, "serving Prometheus metrics at /metrics");
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((socket, _)) = accepted else { continue };
                let db = db.clone();
                tokio::spawn(async move {
                    if let Err(e) = respond(socket, &db).await {
                        debug!(error = %e, "metrics request failed");
                    }
                });
            }
            _ = shutdown.changed() => return Ok(()),
        }
    }
}

async fn respond(mut socket: TcpStream, db: &Database) -> std::io::Result<()> {
    // Read the request head (bounded), then answer and close.
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), socket.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let request_line = String::from_utf8_lossy(&head);
    let (status, body) = if request_line.starts_with("GET /metrics ") {
        ("200 OK", render(db))
    } else {
        ("404 Not Found", "try /metrics\n".to_owned())
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(response.as_bytes()).await?;
    socket.shutdown().await
}
