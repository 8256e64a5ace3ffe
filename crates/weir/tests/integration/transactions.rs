//! Transaction blocks through SIGKILL: writers move money between accounts
//! in `BEGIN ... COMMIT` blocks of three statements (two UPDATEs and an
//! INSERT into a transfer log), roll some back on purpose and retry the
//! ones that lose a write-write conflict (40001). After every restart:
//! every acknowledged transfer is there whole, no rolled-back one is, the
//! money is conserved, each balance is what the logged transfers make it
//! (so no block landed in part), and the views equal their queries.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tokio_postgres::error::SqlState;

use crate::common::{assert_views_match, column, sorted_rows, TestServer};

const WRITERS: u64 = 4;
const ACCOUNTS: i64 = 8;
const START_BALANCE: i64 = 1_000;
const CYCLES: usize = 20;

const VIEWS: &[(&str, &str)] = &[
    (
        "money",
        "SELECT sum(balance) AS total, count(*) AS accounts FROM accounts",
    ),
    (
        "flows",
        "SELECT dst, count(*) AS n, sum(amount) AS received FROM transfers GROUP BY dst",
    ),
];

/// What the writers saw happen.
#[derive(Default)]
struct Outcomes {
    /// Transfers whose COMMIT returned.
    committed: Mutex<BTreeSet<i64>>,
    /// Transfers rolled back on purpose.
    rolled_back: Mutex<BTreeSet<i64>>,
    /// COMMITs refused with 40001 (the block is retried under a new id).
    conflicts: AtomicU64,
}

/// Runs transfer blocks until the server goes away.
async fn transfer_until_error(conn: String, writer: u64, first_id: i64, seen: Arc<Outcomes>) {
    let Ok((client, connection)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await
    else {
        return;
    };
    tokio::spawn(connection);
    let mut rng = rand::rngs::StdRng::seed_from_u64(writer);
    let mut id = first_id;
    loop {
        id += 1;
        let src = rng.random_range(0..ACCOUNTS);
        let dst = (src + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
        let amount = rng.random_range(1..50);
        let roll_back = rng.random_range(0..5) == 0;
        let statements = [
            "BEGIN".to_owned(),
            format!("UPDATE accounts SET balance = balance - {amount} WHERE id = {src}"),
            format!("UPDATE accounts SET balance = balance + {amount} WHERE id = {dst}"),
            format!("INSERT INTO transfers VALUES ({id}, {writer}, {src}, {dst}, {amount})"),
        ];
        for sql in &statements {
            if client.simple_query(sql).await.is_err() {
                return;
            }
        }
        if roll_back {
            if client.simple_query("ROLLBACK").await.is_err() {
                return;
            }
            seen.rolled_back.lock().unwrap().insert(id);
            continue;
        }
        match client.simple_query("COMMIT").await {
            Ok(_) => {
                seen.committed.lock().unwrap().insert(id);
            }
            Err(e) if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) => {
                seen.conflicts.fetch_add(1, Ordering::Relaxed);
                seen.rolled_back.lock().unwrap().insert(id);
            }
            Err(_) => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_blocks_survive_sigkill_whole_or_not_at_all() {
    let seed: u64 = std::env::var("WEIR_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL);
             CREATE TABLE transfers (id BIGINT PRIMARY KEY, writer BIGINT NOT NULL,
                 src BIGINT NOT NULL, dst BIGINT NOT NULL, amount BIGINT NOT NULL)",
        )
        .await
        .unwrap();
    let rows: Vec<String> = (0..ACCOUNTS)
        .map(|i| format!("({i}, {START_BALANCE})"))
        .collect();
    client
        .batch_execute(&format!("INSERT INTO accounts VALUES {}", rows.join(", ")))
        .await
        .unwrap();
    crate::common::create_views(&client, VIEWS).await;
    drop(client);
    let seen = Arc::new(Outcomes::default());
    for cycle in 0..CYCLES {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                // Ids never repeat across cycles or writers.
                let first = ((cycle as i64) * WRITERS as i64 + w as i64) * 1_000_000;
                tokio::spawn(transfer_until_error(
                    server.conn_string(),
                    w,
                    first,
                    seen.clone(),
                ))
            })
            .collect();
        let before = seen.committed.lock().unwrap().len();
        crate::common::wait_until(Duration::from_secs(20), || {
            seen.committed.lock().unwrap().len() >= before + 5
        })
        .await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
        server.restart_after_kill().await;
        for w in writers {
            w.await.unwrap();
        }
        let client = server.client().await;
        let context = format!("cycle {cycle} (seed {seed})");
        let present: BTreeSet<i64> = column(&client, "SELECT id FROM transfers")
            .await
            .into_iter()
            .map(|id| id.unwrap().parse().unwrap())
            .collect();
        for id in seen.committed.lock().unwrap().iter() {
            assert!(
                present.contains(id),
                "{context}: committed transfer {id} was lost"
            );
        }
        for id in seen.rolled_back.lock().unwrap().iter() {
            assert!(
                !present.contains(id),
                "{context}: rolled-back transfer {id} is there"
            );
        }
        let total = column(&client, "SELECT sum(balance) FROM accounts").await;
        assert_eq!(
            total,
            vec![Some((ACCOUNTS * START_BALANCE).to_string())],
            "{context}: money was created or destroyed"
        );
        // Each balance is exactly what the logged transfers make it: an
        // UPDATE without its INSERT (or the reverse) would show here.
        let expected = sorted_rows(
            &client,
            &format!(
                "SELECT a.id, {START_BALANCE} - coalesce(o.out, 0) + coalesce(i.inc, 0)
                 FROM accounts a
                 LEFT JOIN (SELECT src, sum(amount) AS out FROM transfers GROUP BY src) o ON o.src = a.id
                 LEFT JOIN (SELECT dst, sum(amount) AS inc FROM transfers GROUP BY dst) i ON i.dst = a.id"
            ),
        )
        .await;
        let balances = sorted_rows(&client, "SELECT id, balance FROM accounts").await;
        assert_eq!(balances, expected, "{context}: a block landed in part");
        assert_views_match(&client, VIEWS, &context).await;
    }
    let committed = seen.committed.lock().unwrap().len();
    let rolled_back = seen.rolled_back.lock().unwrap().len();
    let conflicts = seen.conflicts.load(Ordering::Relaxed);
    println!("{committed} committed, {rolled_back} rolled back, {conflicts} conflicts");
    assert!(
        committed >= 5 * CYCLES,
        "the writers should have committed blocks"
    );
    assert!(rolled_back > 0, "some blocks should have been rolled back");
    assert!(
        conflicts > 0,
        "writers on {ACCOUNTS} accounts should have met write-write conflicts"
    );
}
