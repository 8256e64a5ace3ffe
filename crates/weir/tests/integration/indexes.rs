//! Lookups through keys and indexes against full scans: random writes to
//! a table and to a view over it, each with indexes, and random point,
//! `IN` and range reads through the keys and indexes compared with the
//! same reads written so that they scan (`id + 0 = k`), both at one epoch
//! (inside a transaction block). Prepared point reads, which skip the
//! planner after their first execution (`point_read.rs`), are compared
//! the same way; and indexes through SIGKILL cycles, read while another
//! connection writes.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::common::{counter, outcome, sorted_rows, TestServer};

/// Keys are drawn from a small range so that writes collide and reads hit.
const KEYS: i32 = 200;

/// A random `g` (sometimes NULL) and `s` for a row.
fn group(rng: &mut StdRng) -> String {
    if rng.random_range(0..10) == 0 {
        "NULL".into()
    } else {
        rng.random_range(0..20).to_string()
    }
}

fn label(rng: &mut StdRng) -> String {
    format!("'s{}'", rng.random_range(0..6))
}

/// Runs a random write; returns whether it changed a row.
async fn random_write(client: &Client, rng: &mut StdRng) -> (usize, bool) {
    let id = rng.random_range(0..KEYS);
    let (kind, sql) = match rng.random_range(0..4) {
        0 | 1 => (
            0,
            format!(
                "INSERT INTO t VALUES ({id}, {}, {}, {})",
                group(rng),
                label(rng),
                rng.random_range(-50..50)
            ),
        ),
        2 => (
            1,
            format!(
                "UPDATE t SET g = {}, s = {}, v = v + 1 WHERE id = {id}",
                group(rng),
                label(rng)
            ),
        ),
        _ => (2, format!("DELETE FROM t WHERE id = {id}")),
    };
    match client.execute(sql.as_str(), &[]).await {
        Ok(changed) => (kind, changed > 0),
        // A duplicate key: nothing changes.
        Err(e) if e.code().is_some_and(|c| c.code() == "23505") => (kind, false),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// A random read in two forms: through a key or index, and by scan.
fn random_read(rng: &mut StdRng) -> (String, String) {
    let k = rng.random_range(-5..KEYS + 5);
    let g = rng.random_range(0..21);
    let (a, b) = (rng.random_range(0..KEYS), rng.random_range(0..KEYS));
    let s = format!("'s{}'", rng.random_range(0..7));
    let n = rng.random_range(0..8);
    let pair = |indexed: String, scanned: String| (indexed, scanned);
    let v = rng.random_range(-50..50);
    match rng.random_range(0..15) {
        0 => pair(
            format!("SELECT * FROM t WHERE id = {k}"),
            format!("SELECT * FROM t WHERE id + 0 = {k}"),
        ),
        1 => pair(
            format!("SELECT * FROM t WHERE id IN ({k}, {a}, NULL, {b})"),
            format!("SELECT * FROM t WHERE id + 0 IN ({k}, {a}, {b})"),
        ),
        2 => pair(
            format!("SELECT id, v FROM t WHERE id BETWEEN {a} AND {b}"),
            format!("SELECT id, v FROM t WHERE id + 0 BETWEEN {a} AND {b}"),
        ),
        3 => pair(
            format!("SELECT id FROM t WHERE id > {a} AND id <= {b} AND v > 0"),
            format!("SELECT id FROM t WHERE id + 0 > {a} AND id + 0 <= {b} AND v > 0"),
        ),
        4 => pair(
            format!("SELECT id, s FROM t WHERE g = {g}"),
            format!("SELECT id, s FROM t WHERE g + 0 = {g}"),
        ),
        5 => pair(
            format!("SELECT id FROM t WHERE s = {s} AND g IN ({g}, {a})"),
            format!("SELECT id FROM t WHERE s || '' = {s} AND g + 0 IN ({g}, {a})"),
        ),
        6 => pair(
            format!("SELECT * FROM mv WHERE g = {g}"),
            format!("SELECT * FROM mv WHERE g + 0 = {g}"),
        ),
        7 => pair(
            format!("SELECT g, total FROM mv WHERE n = {n}"),
            format!("SELECT g, total FROM mv WHERE n + 0 = {n}"),
        ),
        // Joins, read through keys and indexes by the other input's keys.
        8 => pair(
            format!("SELECT t.id, mv.total FROM t JOIN mv ON mv.g = t.g WHERE t.id = {k}"),
            format!(
                "SELECT t.id, mv.total FROM t JOIN mv ON mv.g + 0 = t.g + 0 WHERE t.id + 0 = {k}"
            ),
        ),
        9 => pair(
            format!("SELECT t.id, t.s, mv.n FROM mv JOIN t ON t.g = mv.g WHERE mv.n = {n}"),
            format!(
                "SELECT t.id, t.s, mv.n FROM mv JOIN t ON t.g + 0 = mv.g + 0 WHERE mv.n + 0 = {n}"
            ),
        ),
        10 => pair(
            format!("SELECT mv.g, mv.n, t.id FROM mv LEFT JOIN t ON t.id = mv.n WHERE mv.total > {v}"),
            format!(
                "SELECT mv.g, mv.n, t.id FROM mv LEFT JOIN t ON t.id + 0 = mv.n + 0 WHERE mv.total > {v}"
            ),
        ),
        // Ranges through a secondary index, a view's key and an index
        // on a view.
        12 => pair(
            format!("SELECT id, g FROM t WHERE g BETWEEN {} AND {}", g - 5, g),
            format!("SELECT id, g FROM t WHERE g + 0 BETWEEN {} AND {}", g - 5, g),
        ),
        13 => pair(
            format!("SELECT g, n, total FROM mv WHERE g >= {g}"),
            format!("SELECT g, n, total FROM mv WHERE g + 0 >= {g}"),
        ),
        14 => pair(
            format!("SELECT g, n FROM mv WHERE n > {n} AND n <= {}", n + 3),
            format!("SELECT g, n FROM mv WHERE n + 0 > {n} AND n + 0 <= {}", n + 3),
        ),
        _ => pair(
            format!("SELECT g, n FROM mv WHERE g IN (SELECT g FROM t WHERE v > {v})"),
            format!("SELECT g, n FROM mv WHERE g + 0 IN (SELECT g + 0 FROM t WHERE v > {v})"),
        ),
    }
}

/// The rows of a prepared statement's execution as text.
async fn prepared_rows(
    client: &Client,
    statement: &tokio_postgres::Statement,
    keys: &[i32],
) -> Vec<Vec<Option<String>>> {
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = keys
        .iter()
        .map(|k| k as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect();
    let mut rows: Vec<Vec<Option<String>>> = client
        .query(statement, &params)
        .await
        .unwrap()
        .iter()
        .map(|row| {
            (0..row.len())
                .map(|i| match row.columns()[i].type_().name() {
                    "int4" => row.get::<_, Option<i32>>(i).map(|v| v.to_string()),
                    "int8" => row.get::<_, Option<i64>>(i).map(|v| v.to_string()),
                    _ => row.get::<_, Option<String>>(i),
                })
                .collect()
        })
        .collect();
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_match_scans_under_random_writes() {
    let (server, port) = TestServer::start_with_metrics().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE t (id INT PRIMARY KEY, g INT, s TEXT, v BIGINT); \
             CREATE INDEX t_g ON t (g); \
             CREATE INDEX t_s_g ON t (s, g); \
             CREATE MATERIALIZED VIEW mv AS SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g; \
             CREATE INDEX mv_n ON mv (n)",
        )
        .await
        .unwrap();
    // Each indexed form is a lookup (a join a lookup join), so the
    // comparison is not scan against scan; no scanned form is one.
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..64 {
        let (indexed, scanned) = random_read(&mut rng);
        let expected = match indexed.contains("JOIN") || indexed.contains(" IN (SELECT") {
            true => "LookupJoinExec",
            false => "LookupExec",
        };
        let shows = |plan: &[Vec<Option<String>>], node: &str| {
            plan.iter().flatten().flatten().any(|p| p.contains(node))
        };
        let plan = sorted_rows(&client, &format!("EXPLAIN {indexed}")).await;
        assert!(
            shows(&plan, expected),
            "{indexed} should use {expected}: {plan:?}"
        );
        let plan = sorted_rows(&client, &format!("EXPLAIN {scanned}")).await;
        assert!(
            !shows(&plan, "LookupExec") && !shows(&plan, "LookupJoinExec"),
            "{scanned} should scan: {plan:?}"
        );
    }
    let by_key = client
        .prepare("SELECT g, s, v FROM t WHERE id = $1")
        .await
        .unwrap();
    let by_view_key = client
        .prepare("SELECT g, n FROM mv WHERE g = $1")
        .await
        .unwrap();
    let by_index = client
        .prepare("SELECT id, v FROM t WHERE g = $1")
        .await
        .unwrap();
    let by_range = client
        .prepare("SELECT id, v FROM t WHERE id BETWEEN $1 AND $2")
        .await
        .unwrap();
    let by_half_open = client
        .prepare("SELECT id FROM t WHERE $1 < id AND id <= $2")
        .await
        .unwrap();
    // Not a point read: planned once, then its plan is reused.
    let by_join = client
        .prepare("SELECT t.id, mv.n FROM t JOIN mv ON mv.g = t.g WHERE t.id BETWEEN $1 AND $2")
        .await
        .unwrap();
    let reused_before = counter(port, "weir_plans_reused_total");
    let mut changed = [0usize; 3];
    let (mut reads, mut hits, mut prepared) = (0, 0, 0);
    for round in 0..30 {
        for _ in 0..25 {
            let (kind, did) = random_write(&client, &mut rng).await;
            changed[kind] += did as usize;
        }
        client.batch_execute("FLUSH; BEGIN").await.unwrap();
        for _ in 0..12 {
            let (indexed, scanned) = random_read(&mut rng);
            let found = sorted_rows(&client, &indexed).await;
            assert_eq!(
                found,
                sorted_rows(&client, &scanned).await,
                "round {round}: {indexed}"
            );
            reads += 1;
            hits += !found.is_empty() as usize;
        }
        for _ in 0..4 {
            let k = rng.random_range(0..KEYS);
            let g = rng.random_range(0..20);
            let (a, b) = (rng.random_range(0..KEYS), rng.random_range(0..KEYS));
            let reads = [
                (
                    &by_key,
                    vec![k],
                    format!("SELECT g, s, v FROM t WHERE id + 0 = {k}"),
                ),
                (
                    &by_view_key,
                    vec![g],
                    format!("SELECT g, n FROM mv WHERE g + 0 = {g}"),
                ),
                (
                    &by_index,
                    vec![g],
                    format!("SELECT id, v FROM t WHERE g + 0 = {g}"),
                ),
                (
                    &by_range,
                    vec![a, b],
                    format!("SELECT id, v FROM t WHERE id + 0 BETWEEN {a} AND {b}"),
                ),
                (
                    &by_half_open,
                    vec![a, b],
                    format!("SELECT id FROM t WHERE {a} < id + 0 AND id + 0 <= {b}"),
                ),
                (
                    &by_join,
                    vec![a, b],
                    format!(
                        "SELECT t.id, mv.n FROM t JOIN mv ON mv.g + 0 = t.g + 0 \
                         WHERE t.id + 0 BETWEEN {a} AND {b}"
                    ),
                ),
            ];
            for (statement, keys, scan) in reads {
                assert_eq!(
                    prepared_rows(&client, statement, &keys).await,
                    sorted_rows(&client, &scan).await,
                    "round {round}: prepared {scan}"
                );
                prepared += 1;
            }
        }
        client.batch_execute("COMMIT").await.unwrap();
    }
    // The writes and reads happened, and found rows.
    assert!(
        changed.iter().all(|&c| c > 50),
        "inserts, updates, deletes: {changed:?}"
    );
    assert!(hits > reads / 3, "{hits} of {reads} reads found rows");
    assert_eq!(prepared, 30 * 4 * 6);
    // Every execution of a prepared point read but each statement's first
    // went around the planner (simple queries of a known shape may have
    // too); every execution of the join but its first reused its plan.
    let skipped = point_reads(port);
    assert!(skipped >= 30 * 4 * 5 - 5, "{skipped} of {prepared}");
    let reused = counter(port, "weir_plans_reused_total") - reused_before;
    assert_eq!(reused, 30 * 4 - 1);
    // A simple query by constants takes the same shortcut once its shape
    // ran: the first of these is planned, the other 49 are not.
    client.batch_execute("FLUSH").await.unwrap();
    for k in 0..50 {
        assert_eq!(
            sorted_rows(&client, &format!("SELECT g, s, v FROM t WHERE id = {k}")).await,
            sorted_rows(
                &client,
                &format!("SELECT g, s, v FROM t WHERE id + 0 = {k}")
            )
            .await,
            "simple read of {k}"
        );
    }
    assert_eq!(point_reads(port) - skipped, 49);
}

/// Indexes through SIGKILL cycles, read while another connection writes:
/// after each restart the indexes are still there and used, and inside a
/// transaction block every read through a key or index agrees with the
/// same read by scan, and a read repeated at the block's end finds what it
/// found at its start, although the writer committed in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_survive_sigkill_and_reads_in_a_block_see_one_epoch() {
    let mut server = TestServer::start().await;
    server
        .client()
        .await
        .batch_execute(
            "CREATE TABLE t (id INT PRIMARY KEY, g INT, s TEXT, v BIGINT); \
             CREATE INDEX t_g ON t (g); \
             CREATE INDEX t_s_g ON t (s, g); \
             CREATE MATERIALIZED VIEW mv AS SELECT g, count(*) AS n, sum(v) AS total FROM t GROUP BY g; \
             CREATE INDEX mv_n ON mv (n)",
        )
        .await
        .unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let (mut changed, mut written_in_blocks, mut reads) = (0, 0, 0);
    for cycle in 0..4u64 {
        let client = server.client().await;
        for _ in 0..100 {
            changed += random_write(&client, &mut rng).await.1 as usize;
        }
        client.batch_execute("FLUSH; BEGIN").await.unwrap();
        let (first, _) = random_read(&mut rng);
        let at_start = sorted_rows(&client, &first).await;
        // Another connection writes while the block reads.
        let writer = server.client().await;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writing = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut rng = StdRng::seed_from_u64(100 + cycle);
                let mut done = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) || done < 20 {
                    done += random_write(&writer, &mut rng).await.1 as usize;
                    if done % 10 == 0 {
                        writer.batch_execute("FLUSH").await.unwrap();
                    }
                }
                done
            }
        });
        for _ in 0..25 {
            let (indexed, scanned) = random_read(&mut rng);
            assert_eq!(
                sorted_rows(&client, &indexed).await,
                sorted_rows(&client, &scanned).await,
                "cycle {cycle}: {indexed}"
            );
            reads += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        written_in_blocks += writing.await.unwrap();
        assert_eq!(
            sorted_rows(&client, &first).await,
            at_start,
            "cycle {cycle}: {first} moved inside the block"
        );
        client.batch_execute("COMMIT").await.unwrap();
        server.restart_after_kill().await;
        let client = server.client().await;
        let indexes = sorted_rows(
            &client,
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             WHERE c.relname IN ('t_g', 't_s_g', 'mv_n')",
        )
        .await;
        assert_eq!(indexes.len(), 3, "cycle {cycle}: {indexes:?}");
        let plan = sorted_rows(&client, "EXPLAIN SELECT id FROM t WHERE g = 3").await;
        assert!(
            plan.iter()
                .flatten()
                .flatten()
                .any(|p| p.contains("LookupExec")),
            "cycle {cycle}: {plan:?}"
        );
    }
    assert!(changed > 200, "only {changed} writes changed a row");
    assert!(
        written_in_blocks >= 80,
        "only {written_in_blocks} writes during the blocks"
    );
    assert_eq!(reads, 100);
}

/// Reads served without the planner so far (`weir_point_reads_total`).
fn point_reads(port: u16) -> usize {
    counter(port, "weir_point_reads_total")
}

/// Prepared queries keep their plan between executions: each execution
/// reads its own snapshot (newer rows, a transaction block's writes), a
/// changed catalog makes a new plan, and queries of system tables are
/// planned every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_plans_read_each_executions_snapshot() {
    let (server, port) = TestServer::start_with_metrics().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE k (id INT PRIMARY KEY, v TEXT); INSERT INTO k VALUES (1, 'a');              CREATE VIEW kv AS SELECT id, v FROM k WHERE id > 0",
        )
        .await
        .unwrap();
    let reused = || counter(port, "weir_plans_reused_total");
    let from_table = client
        .prepare("SELECT v FROM k WHERE id + 0 >= $1")
        .await
        .unwrap();
    let through_view = client
        .prepare("SELECT v FROM kv WHERE v <> $1")
        .await
        .unwrap();
    let run = |statement| first_column(&client, statement, &0i64);
    assert_eq!(run(&from_table).await, ["a"]);
    let start = reused();
    client
        .batch_execute("INSERT INTO k VALUES (2, 'b'); FLUSH")
        .await
        .unwrap();
    assert_eq!(run(&from_table).await, ["a", "b"]);
    assert_eq!(reused(), start + 1, "the second execution reused the plan");
    assert_eq!(first_column(&client, &through_view, &"x").await, ["a", "b"]);
    client
        .batch_execute("INSERT INTO k VALUES (3, 'c'); FLUSH")
        .await
        .unwrap();
    assert_eq!(first_column(&client, &through_view, &"a").await, ["b", "c"]);
    assert_eq!(reused(), start + 2, "a plan through a view is kept too");
    // A transaction block's own writes, and not after ROLLBACK.
    client
        .batch_execute("BEGIN; INSERT INTO k VALUES (4, 'd')")
        .await
        .unwrap();
    assert_eq!(run(&from_table).await, ["a", "b", "c", "d"]);
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(run(&from_table).await, ["a", "b", "c"]);
    assert_eq!(reused(), start + 4);
    // The table dropped and created again: a new plan reads the new one.
    client
        .batch_execute(
            "DROP VIEW kv; DROP TABLE k; CREATE TABLE k (id INT PRIMARY KEY, v TEXT);              INSERT INTO k VALUES (7, 'z')",
        )
        .await
        .unwrap();
    assert_eq!(run(&from_table).await, ["z"]);
    assert_eq!(reused(), start + 4, "a changed catalog is planned anew");
    assert_eq!(run(&from_table).await, ["z"]);
    assert_eq!(reused(), start + 5);
    // System tables are read as they are when planned: never kept.
    let relations = client
        .prepare("SELECT relname::text FROM pg_class WHERE relname LIKE $1")
        .await
        .unwrap();
    let before = reused();
    assert_eq!(
        first_column(&client, &relations, &"k%").await,
        ["k", "k_pkey"]
    );
    client
        .batch_execute("CREATE TABLE k2 (x INT)")
        .await
        .unwrap();
    assert_eq!(
        first_column(&client, &relations, &"k%").await,
        ["k", "k2", "k_pkey"]
    );
    assert_eq!(reused(), before);
}

/// Once reads look rows up by an order (a primary key, an index), the
/// chunks each later commit makes are sorted by it right after the commit
/// (`order_builder.rs`), before a read asks; and reads find the new rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_in_use_are_sorted_for_each_new_chunk() {
    let (server, port) = TestServer::start_with_metrics().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE acc (id BIGINT PRIMARY KEY, phone BIGINT, v TEXT);
             CREATE INDEX acc_phone ON acc (phone);
             INSERT INTO acc SELECT x, x * 10, 'v' || x FROM generate_series(1, 1000) AS x",
        )
        .await
        .unwrap();
    let sorted = || counter(port, "weir_lookup_chunks_sorted_ahead_total");
    let by_id = client
        .prepare("SELECT v FROM acc WHERE id = $1")
        .await
        .unwrap();
    let by_phone = client
        .prepare("SELECT v FROM acc WHERE phone = $1")
        .await
        .unwrap();
    // The reads sort the first chunk; nothing was sorted ahead of them.
    assert_eq!(first_column(&client, &by_id, &7i64).await, ["v7"]);
    assert_eq!(first_column(&client, &by_phone, &70i64).await, ["v7"]);
    let before = sorted();
    for batch in 0..3i64 {
        let from = 1001 + batch * 100;
        client
            .batch_execute(&format!(
                "INSERT INTO acc SELECT x, x * 10, 'v' || x FROM generate_series({from}, {}) AS x",
                from + 99
            ))
            .await
            .unwrap();
    }
    // Each commit's chunk (or the chunk compaction merged them into) is
    // sorted by both orders in use.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while sorted() < before + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "no chunk sorted ahead of reads: {} then {}",
            before,
            sorted()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(first_column(&client, &by_id, &1250i64).await, ["v1250"]);
    assert_eq!(first_column(&client, &by_phone, &12990i64).await, ["v1299"]);
    assert_eq!(first_column(&client, &by_id, &7i64).await, ["v7"]);
}

/// The first column (text) of a prepared statement's rows for one
/// parameter, sorted.
async fn first_column(
    client: &Client,
    statement: &tokio_postgres::Statement,
    param: &(dyn tokio_postgres::types::ToSql + Sync),
) -> Vec<String> {
    let rows = client.query(statement, &[param]).await.unwrap();
    let mut values: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    values.sort();
    values
}

/// Statements the shortcut must leave to the planner give the same rows
/// the second time (when a shape's point read would serve them) as the
/// first (planned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shortcuts_answer_as_the_planner_does() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE names (id INT PRIMARY KEY, name TEXT, flag BIGINT); \
             CREATE INDEX names_name ON names (name); \
             INSERT INTO names VALUES (1, '5', 10), (2, '05', 20), (3, 'x', 30), (4, '5', 40); \
             CREATE TABLE codes (id INT PRIMARY KEY, code TEXT); \
             CREATE INDEX codes_code ON codes (code); \
             INSERT INTO codes VALUES (1, '5'), (2, '05'), (3, '7')",
        )
        .await
        .unwrap();
    for sql in [
        // A number against a text column compares as the planner coerces
        // (or fails as it does).
        "SELECT id FROM names WHERE name = 5",
        "SELECT id FROM codes WHERE code = 5",
        "SELECT id FROM names WHERE name = '5'",
        // Column aliases in FROM rename the columns.
        "SELECT id FROM names AS n (name, id, f) WHERE id = 'x'",
        "SELECT name FROM names AS n (name, id, f) WHERE name = 3",
        "SELECT name FROM names AS n (flag, name, id) WHERE id = 20",
        // Two equalities on one column.
        "SELECT id FROM names WHERE id = 1 AND id = 2",
        "SELECT id FROM names WHERE id = 1 AND id = 1",
        "SELECT name FROM names WHERE id = -1",
        "SELECT id, name FROM names WHERE id BETWEEN 2 AND 3",
    ] {
        let first = outcome(&client, sql).await;
        for _ in 0..3 {
            assert_eq!(outcome(&client, sql).await, first, "{sql}");
        }
    }
    // The same with a prepared statement whose parameter is typed
    // differently from the column.
    let by_text = client
        .prepare_typed(
            "SELECT id FROM names WHERE flag = $1",
            &[tokio_postgres::types::Type::INT4],
        )
        .await
        .unwrap();
    for _ in 0..3 {
        let rows = client.query(&by_text, &[&20i32]).await.unwrap();
        let ids: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
        assert_eq!(ids, vec![2]);
    }
}

/// The tables' and views' names with orders stored beside their base in
/// the newest manifest of `data_dir` (`TableFiles::base_orders`), as the
/// number of such relations.
fn relations_with_stored_orders(data_dir: &std::path::Path) -> usize {
    let newest = std::fs::read_dir(data_dir.join("manifest"))
        .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).max())
        .ok()
        .flatten();
    let Some(newest) = newest else { return 0 };
    let Ok(bytes) = std::fs::read(&newest) else {
        return 0;
    };
    let Ok(manifest) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return 0;
    };
    manifest["tables"].as_object().map_or(0, |tables| {
        tables
            .values()
            .filter(|t| t.get("base_orders").is_some())
            .count()
    })
}

/// The orders reads use are checkpointed with their relation's base:
/// after SIGKILL the server loads them with the base, so the first
/// lookups by a table's key, a secondary index and a view's key sort
/// nothing, and they answer as scans do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_are_checkpointed_with_their_base_and_loaded_after_sigkill() {
    let (mut server, port) = TestServer::start_with_metrics().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE acc (id BIGINT PRIMARY KEY, phone BIGINT, v TEXT);
             CREATE INDEX acc_phone ON acc (phone);
             CREATE MATERIALIZED VIEW by_digit AS
               SELECT phone % 1000 AS digit, count(*) AS n FROM acc GROUP BY 1;
             INSERT INTO acc SELECT x, (x * 7919) % 50000, 'v' || x
               FROM generate_series(1, 20000) AS x",
        )
        .await
        .unwrap();
    let reads = [
        (
            "SELECT v FROM acc WHERE id = 4242",
            "SELECT v FROM acc WHERE id + 0 = 4242",
        ),
        (
            "SELECT v FROM acc WHERE phone = 7919",
            "SELECT v FROM acc WHERE phone + 0 = 7919",
        ),
        (
            "SELECT n FROM by_digit WHERE digit = 919",
            "SELECT n FROM by_digit WHERE digit + 0 = 919",
        ),
    ];
    for (lookup, _) in reads {
        let plan = sorted_rows(&client, &format!("EXPLAIN {lookup}")).await;
        assert!(
            plan.iter()
                .flatten()
                .flatten()
                .any(|p| p.contains("LookupExec")),
            "{lookup}: {plan:?}"
        );
        assert_eq!(sorted_rows(&client, lookup).await.len(), 1, "{lookup}");
    }
    // Compaction stores the orders in use with a new base of each
    // relation; a commit names it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while relations_with_stored_orders(&server.data_dir) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "no base with its orders was committed"
        );
        client.batch_execute("CHECKPOINT").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(client);
    server.restart_after_kill().await;
    let loaded = counter(port, "weir_lookup_orders_loaded_total");
    assert!(loaded >= 3, "{loaded} orders loaded at recovery");
    let sorted = counter(port, "weir_lookup_orders_sorted_total");
    let client = server.client().await;
    for (lookup, scan) in reads {
        let found = sorted_rows(&client, lookup).await;
        assert_eq!(found.len(), 1, "{lookup}");
        assert_eq!(found, sorted_rows(&client, scan).await, "{lookup}");
    }
    assert_eq!(
        counter(port, "weir_lookup_orders_sorted_total"),
        sorted,
        "a lookup after the restart sorted a chunk"
    );
}
