//! `UNIQUE` constraints under random writes from several sessions, in
//! and out of transaction blocks, and through a SIGKILL: no two live rows
//! ever share a value, refused writes change nothing, and the constraint
//! holds after a restart.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{outcome, sorted_rows, TestServer};

/// Values are drawn from a small range so that writes collide.
const CODES: i32 = 40;

/// What one session's writes came to.
#[derive(Debug, Default)]
struct Tally {
    applied: usize,
    refused: usize,
}

/// Runs `statements` random writes on `conn`: single statements and
/// small blocks of two, each an INSERT, an UPDATE of a code or a DELETE.
async fn write_randomly(conn: String, seed: u64, statements: usize) -> Tally {
    let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tally = Tally::default();
    for i in 0..statements {
        let id = seed as i32 * 100_000 + i as i32;
        let code = |rng: &mut StdRng| match rng.random_range(0..8) {
            0 => "NULL".to_owned(),
            _ => format!("'c{}'", rng.random_range(0..CODES)),
        };
        let one = |rng: &mut StdRng, id: i32| match rng.random_range(0..4) {
            0 | 1 => format!("INSERT INTO coded VALUES ({id}, {})", code(rng)),
            2 => format!(
                "UPDATE coded SET code = {} WHERE id = (SELECT min(id) FROM coded WHERE id >= {})",
                code(rng),
                rng.random_range(0..4) * 100_000
            ),
            _ => format!("DELETE FROM coded WHERE code = {}", code(rng)),
        };
        let sql = if rng.random_range(0..3) == 0 {
            // Distinct ids: a refusal is the constraint's, not the key's.
            let first = one(&mut rng, id);
            format!("BEGIN; {first}; {}; COMMIT", one(&mut rng, id + 50_000))
        } else {
            one(&mut rng, id)
        };
        match outcome(&client, &sql).await {
            Ok(_) => tally.applied += 1,
            // A block that lost a write-write conflict to another
            // session's commit; nothing of it is applied.
            Err(e) if e.starts_with("40001") => {
                let _ = client.batch_execute("ROLLBACK").await;
            }
            Err(e) if e.starts_with("23505") => {
                tally.refused += 1;
                // A block that failed inside is left aborted: end it.
                let _ = client.batch_execute("ROLLBACK").await;
            }
            Err(e) => panic!("{sql}: {e}"),
        }
    }
    tally
}

/// The codes held by more than one live row (none when the constraint
/// holds).
async fn repeated_codes(client: &tokio_postgres::Client) -> Vec<String> {
    let rows = sorted_rows(client, "SELECT code FROM coded WHERE code IS NOT NULL").await;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for row in rows {
        *counts.entry(row[0].clone().unwrap()).or_default() += 1;
    }
    counts
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(code, _)| code)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_values_stay_unique_under_random_writes_and_a_kill() {
    let mut server = TestServer::start().await;
    server
        .client()
        .await
        .batch_execute("CREATE TABLE coded (id INT PRIMARY KEY, code TEXT UNIQUE)")
        .await
        .unwrap();
    let writers: Vec<_> = (1..=3)
        .map(|seed| tokio::spawn(write_randomly(server.conn_string(), seed, 150)))
        .collect();
    let mut applied = 0;
    let mut refused = 0;
    for writer in writers {
        let tally = writer.await.unwrap();
        applied += tally.applied;
        refused += tally.refused;
    }
    // Both outcomes happened, often.
    assert!(applied >= 100, "{applied} writes applied");
    assert!(refused >= 20, "{refused} writes refused");
    let client = server.client().await;
    assert_eq!(repeated_codes(&client).await, Vec::<String>::new());
    let before = sorted_rows(&client, "SELECT id, code FROM coded").await;
    assert!(before.len() >= 10, "{} rows left", before.len());

    // After a SIGKILL the rows and the constraint are as they were.
    server.restart_after_kill().await;
    let client = server.client().await;
    assert_eq!(
        sorted_rows(&client, "SELECT id, code FROM coded").await,
        before
    );
    let taken = before
        .iter()
        .find_map(|row| row[1].clone())
        .expect("a row with a code");
    let again = outcome(
        &client,
        &format!("INSERT INTO coded VALUES (999999, '{taken}')"),
    )
    .await;
    assert!(
        again.as_ref().is_err_and(|e| e.starts_with("23505")),
        "{again:?}"
    );
}
