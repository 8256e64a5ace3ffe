//! Changefeeds over the wire: `SUBSCRIBE` through a cursor that a
//! consumer drops and resumes (also across a SIGKILL of the server), `COPY
//! (SUBSCRIBE ...) TO STDOUT` and a streamed `SUBSCRIBE` whose rows arrive
//! while the statement runs, and the errors.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::{Client, CopyOutStream, SimpleQueryMessage};

use crate::common::{sorted_rows, sqlstate, TestServer};

/// A consumer of one subscription: it applies an epoch's changes once the
/// epoch's progress row arrives, and drops what it holds of an unclosed
/// epoch when it disconnects.
struct Consumer {
    /// The view's rows as the closed epochs leave them, with counts.
    rows: BTreeMap<Vec<String>, i64>,
    /// Changes of the epoch not closed yet.
    pending: Vec<(Vec<String>, i64)>,
    /// The last closed epoch.
    closed: Option<i64>,
    /// Change rows applied (for the test's own check that it did work).
    changes: usize,
}

impl Consumer {
    /// Reads what the cursor has within `timeout`; returns the rows read.
    async fn fetch(&mut self, client: &Client, timeout: &str) -> usize {
        let messages = client
            .simple_query(&format!("FETCH 1000 feed WITH (TIMEOUT = '{timeout}')"))
            .await
            .expect("FETCH from the subscription");
        let mut read = 0;
        for message in messages {
            let SimpleQueryMessage::Row(row) = message else {
                continue;
            };
            read += 1;
            let epoch: i64 = row.get(0).unwrap().parse().unwrap();
            if let Some(closed) = self.closed {
                assert!(epoch >= closed, "epoch {epoch} after closed {closed}");
            }
            if row.get(1) == Some("t") {
                for (key, diff) in self.pending.drain(..) {
                    *self.rows.entry(key).or_default() += diff;
                }
                self.rows.retain(|_, count| *count != 0);
                self.closed = Some(epoch);
                continue;
            }
            let diff: i64 = row.get(2).unwrap().parse().unwrap();
            let key: Vec<String> = (3..row.len())
                .map(|i| row.get(i).unwrap_or("NULL").to_owned())
                .collect();
            self.pending.push((key, diff));
            self.changes += 1;
        }
        read
    }

    /// Opens the subscription on `client`: from the start, or after the
    /// last closed epoch.
    async fn subscribe(&mut self, client: &Client, view: &str) {
        self.pending.clear();
        let sql = match self.closed {
            None => format!("DECLARE feed CURSOR WITH HOLD FOR SUBSCRIBE {view} WITH (PROGRESS)"),
            Some(epoch) => format!(
                "DECLARE feed CURSOR WITH HOLD FOR SUBSCRIBE {view} WITH (PROGRESS, SNAPSHOT = false) AS OF {epoch}"
            ),
        };
        client
            .batch_execute(&sql)
            .await
            .expect("DECLARE the subscription");
    }
}

/// The newest committed epoch, after committing one now (the history
/// `weir_checkpoints` shows starts empty after a restart).
async fn committed_epoch(client: &Client) -> i64 {
    client.batch_execute("CHECKPOINT").await.unwrap();
    let rows = sorted_rows(client, "SELECT max(epoch) FROM weir_checkpoints").await;
    rows[0][0].as_deref().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_subscription_sees_every_change_once() {
    // The history window, not the count of retained manifests, keeps
    // every epoch of the run.
    let mut server = TestServer::start_with(&["--retain-history", "1h"]).await;
    let admin = server.client().await;
    admin
        .batch_execute(
            "CREATE TABLE acct (id INT PRIMARY KEY, owner TEXT, balance INT);
             CREATE MATERIALIZED VIEW by_owner AS
               SELECT owner, count(*) AS n, sum(balance) AS total FROM acct GROUP BY owner;
             CREATE MATERIALIZED VIEW balances AS SELECT balance FROM acct",
        )
        .await
        .unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let views = ["by_owner", "balances"];
    let mut consumers: Vec<Consumer> = views
        .iter()
        .map(|_| Consumer {
            rows: BTreeMap::new(),
            pending: Vec::new(),
            closed: None,
            changes: 0,
        })
        .collect();
    let mut readers = Vec::new();
    for (consumer, view) in consumers.iter_mut().zip(views) {
        let client = server.client().await;
        consumer.subscribe(&client, view).await;
        readers.push(client);
    }
    let (mut writes, mut resumes, mut restarts) = (0, 0, 0);
    for round in 0..60 {
        let writer = server.client().await;
        for _ in 0..rng.random_range(1..4) {
            let id = rng.random_range(0..30);
            let owner = ["ann", "bob", "cy", "dee"][rng.random_range(0..4)];
            let balance = rng.random_range(0..5) * 10;
            let sql = match rng.random_range(0..3) {
                0 => format!("INSERT INTO acct VALUES ({id}, '{owner}', {balance})"),
                1 => format!("UPDATE acct SET balance = balance + {balance}, owner = '{owner}' WHERE id = {id}"),
                _ => format!("DELETE FROM acct WHERE id = {id}"),
            };
            match writer.batch_execute(&sql).await {
                Ok(()) => writes += 1,
                Err(e) if e.code().is_some_and(|c| c.code() == "23505") => {}
                Err(e) => panic!("{sql}: {e}"),
            }
        }
        for (i, consumer) in consumers.iter_mut().enumerate() {
            consumer.fetch(&readers[i], "50ms").await;
            // Now and then the consumer goes away mid-stream and comes back
            // after the last epoch it closed.
            if rng.random_bool(0.15) {
                readers[i] = server.client().await;
                consumer.subscribe(&readers[i], views[i]).await;
                resumes += 1;
            }
        }
        if round % 20 == 19 {
            // The server dies: the consumers resume from the checkpoints the
            // restarted server kept.
            server.restart_after_kill().await;
            restarts += 1;
            for (i, consumer) in consumers.iter_mut().enumerate() {
                readers[i] = server.client().await;
                consumer.subscribe(&readers[i], views[i]).await;
            }
        }
    }
    let admin = server.client().await;
    admin.batch_execute("FLUSH").await.unwrap();
    let newest = committed_epoch(&admin).await;
    for (i, consumer) in consumers.iter_mut().enumerate() {
        let mut waited = 0;
        while consumer.closed < Some(newest) && waited < 200 {
            consumer.fetch(&readers[i], "100ms").await;
            waited += 1;
        }
        assert_eq!(consumer.closed, Some(newest), "{} caught up", views[i]);
        let mut expected: BTreeMap<Vec<String>, i64> = BTreeMap::new();
        for row in sorted_rows(&admin, &format!("SELECT * FROM {}", views[i])).await {
            let key: Vec<String> = row
                .into_iter()
                .map(|v| v.unwrap_or("NULL".into()))
                .collect();
            *expected.entry(key).or_default() += 1;
        }
        assert_eq!(
            consumer.rows, expected,
            "{}: the changes add up to the view",
            views[i]
        );
        assert!(
            consumer.changes > 20,
            "{}: {} changes",
            views[i],
            consumer.changes
        );
    }
    assert!(writes >= 60, "{writes} writes");
    // Before the view existed (the store keeps every epoch here).
    assert_eq!(
        sqlstate(&admin, "SUBSCRIBE by_owner AS OF 1").await,
        "42P01"
    );
    let oldest = sorted_rows(&admin, "SHOW oldest_retained_epoch").await;
    assert_eq!(oldest, [[Some("1".to_owned())]], "every epoch is kept");
    assert!(resumes >= 5, "{resumes} resumes");
    assert_eq!(restarts, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epochs_stay_resumable_for_the_history_window() {
    let server =
        TestServer::start_with(&["--retained-manifests", "1", "--retain-history", "3s"]).await;
    let client = server.client().await;
    client
        .batch_execute("CREATE TABLE t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let start = committed_epoch(&client).await;
    for id in 2..=4 {
        client
            .batch_execute(&format!("INSERT INTO t VALUES ({id})"))
            .await
            .unwrap();
    }
    committed_epoch(&client).await;
    // Within the window: the epoch of the first row is kept, although
    // only one manifest is retained, and a subscription from it sees the
    // later rows as changes.
    client
        .batch_execute(&format!(
            "DECLARE feed CURSOR WITH HOLD FOR SUBSCRIBE t WITH (SNAPSHOT = false) AS OF {start}"
        ))
        .await
        .unwrap();
    let rows = client
        .simple_query("FETCH 10 feed WITH (TIMEOUT = '2s')")
        .await
        .unwrap();
    let ids: Vec<&str> = rows
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(row.len() - 1),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["2", "3", "4"]);
    client.batch_execute("CLOSE feed").await.unwrap();
    // After the window (and a commit to notice it), the epoch is gone.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let newest = committed_epoch(&client).await;
    let oldest = sorted_rows(&client, "SHOW oldest_retained_epoch").await;
    let oldest: i64 = oldest[0][0].as_deref().unwrap().parse().unwrap();
    assert!(
        oldest > start && oldest <= newest,
        "{start} < {oldest} <= {newest}"
    );
    assert_eq!(
        sqlstate(&client, &format!("SUBSCRIBE t AS OF {start}")).await,
        "55000"
    );
}

/// The next line a COPY sends, within 20 s.
async fn next_line(copy: &mut Pin<Box<CopyOutStream>>) -> String {
    let bytes = tokio::time::timeout(Duration::from_secs(20), copy.try_next())
        .await
        .expect("a row within 20 s")
        .expect("COPY data")
        .expect("the COPY goes on");
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_stream_while_the_statement_runs() {
    let server = TestServer::start().await;
    let admin = server.client().await;
    admin
        .batch_execute(
            "CREATE TABLE t (k INT PRIMARY KEY, v TEXT);
             INSERT INTO t VALUES (1, 'one');
             FLUSH",
        )
        .await
        .unwrap();

    // COPY (SUBSCRIBE ...) TO STDOUT, as psql runs it: the snapshot comes
    // at once, and a later insert while the COPY still runs.
    let copy_reader = server.client().await;
    let copy = copy_reader
        .copy_out("COPY (SUBSCRIBE t WITH (PROGRESS)) TO STDOUT")
        .await
        .expect("COPY (SUBSCRIBE) starts");
    let mut copy = Box::pin(copy);
    let mut lines = vec![next_line(&mut copy).await];
    assert!(lines[0].ends_with("\tf\t1\t1\tone\n"), "{lines:?}");
    admin
        .batch_execute("INSERT INTO t VALUES (2, 'two'); FLUSH")
        .await
        .unwrap();
    loop {
        let line = next_line(&mut copy).await;
        let added = line.ends_with("\tf\t1\t2\ttwo\n");
        lines.push(line);
        if added {
            break;
        }
    }
    // A COPY cannot be stopped but by closing its connection.
    drop(copy);
    drop(copy_reader);

    // A SUBSCRIBE through the extended protocol: described, then streamed.
    let reader = server.client().await;
    let stream = reader
        .query_raw("SUBSCRIBE TO t", std::iter::empty::<i32>())
        .await
        .expect("SUBSCRIBE starts");
    let mut stream = Box::pin(stream);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let row = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("a row within 20 s")
            .expect("the stream goes on")
            .expect("a row");
        assert_eq!(row.columns()[0].name(), "weir_epoch");
        seen.push(row.get::<_, i32>("k"));
    }
    seen.sort();
    assert_eq!(seen, vec![1, 2]);
    admin
        .batch_execute("DELETE FROM t WHERE k = 1")
        .await
        .unwrap();
    let row = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("the delete within 20 s")
        .expect("the stream goes on")
        .expect("a row");
    assert_eq!(
        (row.get::<_, i64>("weir_diff"), row.get::<_, i32>("k")),
        (-1, 1)
    );
    drop(stream);
    drop(reader);

    // The server goes on serving the connection and everyone else.
    let fresh = server.client().await;
    assert_eq!(
        sorted_rows(&fresh, "SELECT k FROM t").await,
        vec![vec![Some("2".to_owned())]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_refuse_what_they_cannot_follow() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE t (k INT PRIMARY KEY);
             CREATE VIEW plain AS SELECT * FROM t;
             CREATE MATERIALIZED VIEW m AS SELECT count(*) AS n FROM t;
             CREATE SINK s AS SELECT * FROM t WITH (connector = 'blackhole')",
        )
        .await
        .unwrap();
    for (sql, code) in [
        ("SUBSCRIBE missing", "42P01"),
        ("SUBSCRIBE plain", "42809"),
        ("SUBSCRIBE s", "42809"),
        ("SUBSCRIBE m AS OF 100000", "22023"),
        ("SUBSCRIBE m WITH (ENVELOPE)", "42601"),
        ("DECLARE c CURSOR FOR SUBSCRIBE m", "25P01"),
    ] {
        assert_eq!(sqlstate(&client, sql).await, code, "{sql}");
    }
    // Epoch 1 was before m existed: 42P01 while the store keeps it, 55000
    // once it does not (the default keeps 3 manifests).
    for _ in 0..4 {
        client.batch_execute("CHECKPOINT").await.unwrap();
    }
    assert_eq!(sqlstate(&client, "SUBSCRIBE m AS OF 1").await, "55000");
    // The session still serves.
    assert_eq!(sorted_rows(&client, "SELECT n FROM m").await.len(), 1);
}
