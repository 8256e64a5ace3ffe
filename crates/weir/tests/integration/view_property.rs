//! The view invariant as a test: after random DML and a FLUSH, every
//! materialized view holds exactly what its query returns when run as a
//! plain SELECT over the tables, read in one transaction (one epoch).
//!
//! The suite runs a fixed seed. For a longer hunt:
//! `WEIR_PROP_SEED=random WEIR_PROP_ROUNDS=200 cargo test -p weir --test integration view_property`
//! (a number as the seed replays a run; the seed is printed).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::common::{sorted_rows as rows, TestServer};

/// A view under test: its query, and the same query over base tables only
/// (different from the view's query only for views on views).
struct Case {
    name: &'static str,
    view: &'static str,
    batch: Option<&'static str>,
}

const fn case(name: &'static str, view: &'static str) -> Case {
    Case {
        name,
        view,
        batch: None,
    }
}

const fn on_views(name: &'static str, view: &'static str, batch: &'static str) -> Case {
    Case {
        name,
        view,
        batch: Some(batch),
    }
}

const AGG_A: &str = "SELECT k, count(*) AS n, count(v) AS nv, sum(v) AS sv, min(v) AS mn, max(v) AS mx FROM a GROUP BY k";

/// Every operator: projection, filter, each aggregate, each join kind,
/// subqueries, set operations, top-N, `OVER` window functions, views on
/// views.
const CASES: &[Case] = &[
    case("p_project", "SELECT id, v * 2 + 1 AS x, upper(s) AS us FROM a WHERE v > 3"),
    case("p_case", "SELECT id, CASE WHEN b THEN 'yes' WHEN NOT b THEN 'no' ELSE 'unknown' END AS bb, coalesce(s, '-') AS s2 FROM a"),
    case("p_strings", "SELECT s, length(s) AS len, substr(s, 1, 1) AS pre FROM a WHERE s LIKE 'a%'"),
    case("p_const", "SELECT 1 AS one, 'x' AS x"),
    case("g_basic", AGG_A),
    case("g_global", "SELECT count(*) AS n, count(v) AS nv, sum(v) AS s, min(v) AS mn, max(v) AS mx FROM a"),
    case("g_avg", "SELECT k, avg(v) AS av FROM a GROUP BY k"),
    case("g_distinct", "SELECT k, count(DISTINCT v) AS d FROM a GROUP BY k"),
    case("g_bool", "SELECT k, bool_and(b) AS ba, bool_or(b) AS bo FROM a GROUP BY k"),
    case("g_string_agg", "SELECT k, string_agg(s, ',' ORDER BY s) AS ss FROM a GROUP BY k"),
    case("g_array_agg", "SELECT k, array_agg(v ORDER BY v) AS vs FROM a WHERE v IS NOT NULL GROUP BY k"),
    case("g_filter", "SELECT k, count(*) FILTER (WHERE v > 5) AS big, sum(v) FILTER (WHERE b) AS sb FROM a GROUP BY k"),
    case("g_having", "SELECT k, sum(v) AS s FROM a GROUP BY k HAVING count(*) > 1"),
    case("g_text_key", "SELECT s, max(v) AS mx, min(s) AS ms FROM a GROUP BY s"),
    case("g_dups", "SELECT k, v, count(*) AS n FROM c GROUP BY k, v"),
    case("g_spread", "SELECT k, max(v) - min(v) AS spread FROM c GROUP BY k"),
    case("g_global_c", "SELECT count(*) AS n, sum(v) AS s FROM c"),
    case("j_inner", "SELECT a.id, a.v, b.w FROM a JOIN b ON a.k = b.k"),
    case("j_inner_residual", "SELECT a.id, b.id AS bid FROM a JOIN b ON a.k = b.k AND a.v < b.w"),
    case("j_left", "SELECT a.id, b.id AS bid, b.w FROM a LEFT JOIN b ON a.k = b.k"),
    case("j_right", "SELECT a.id, b.id AS bid FROM a RIGHT JOIN b ON a.k = b.k"),
    case("j_full", "SELECT a.id, b.id AS bid FROM a FULL JOIN b ON a.k = b.k"),
    case("j_left_residual", "SELECT a.id, b.id AS bid FROM a LEFT JOIN b ON a.k = b.k AND b.w > a.v"),
    case("j_full_residual", "SELECT a.id, b.id AS bid FROM a FULL JOIN b ON a.id = b.id AND a.v > b.w"),
    case("j_dups", "SELECT a.k, c.v FROM a JOIN c ON a.k = c.k WHERE c.v IS NOT NULL"),
    case("j_agg", "SELECT b.k, count(*) AS n, sum(a.v) AS sv FROM a JOIN b ON a.k = b.k GROUP BY b.k"),
    case("j_full_agg", "SELECT coalesce(a.k, b.k) AS k, count(*) AS n FROM a FULL JOIN b ON a.k = b.k GROUP BY coalesce(a.k, b.k)"),
    case("j_subqueries", "SELECT t.k, t.total FROM (SELECT k, sum(v) AS total FROM c GROUP BY k) t JOIN (SELECT k FROM b GROUP BY k) u ON t.k = u.k"),
    case("s_in", "SELECT id FROM a WHERE k IN (SELECT k FROM b)"),
    case("s_exists", "SELECT id FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.w > a.v)"),
    case("s_not_exists", "SELECT id FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k)"),
    case("s_not_in", "SELECT id, k FROM a WHERE k NOT IN (SELECT k FROM b WHERE w > 3)"),
    case("s_scalar_filter", "SELECT id, v FROM a WHERE v > (SELECT avg(w) FROM b)"),
    case("s_scalar_select", "SELECT id, (SELECT max(w) FROM b) AS mw FROM a"),
    case("s_scalar_self", "SELECT id, v FROM a WHERE v = (SELECT max(v) FROM a)"),
    case("u_all", "SELECT k FROM a UNION ALL SELECT k FROM b"),
    case("u_distinct", "SELECT k FROM a UNION SELECT k FROM c"),
    case("u_grouped", "SELECT k, count(*) AS n FROM (SELECT k FROM a UNION ALL SELECT k FROM c) u GROUP BY k"),
    case("d_distinct", "SELECT DISTINCT k, b FROM a"),
    case("d_except", "SELECT k FROM a EXCEPT SELECT k FROM b"),
    case("d_intersect", "SELECT k FROM a INTERSECT SELECT k FROM c"),
    case("t_top", "SELECT id, v FROM a ORDER BY v DESC, id LIMIT 5"),
    case("t_offset", "SELECT id, v FROM a ORDER BY v, id LIMIT 3 OFFSET 2"),
    case("t_dups", "SELECT k, v FROM c ORDER BY k NULLS FIRST, v LIMIT 4"),
    case("t_agg", "SELECT k, count(*) AS n FROM a WHERE v BETWEEN 2 AND 8 GROUP BY k ORDER BY n DESC, k LIMIT 3"),
    case("t_per_key", "SELECT * FROM (SELECT id, k, v, row_number() OVER (PARTITION BY k ORDER BY v DESC NULLS LAST, id) AS rn FROM a) t WHERE rn <= 2"),
    case("t_dedup", "SELECT k, v FROM (SELECT k, v, row_number() OVER (PARTITION BY k ORDER BY id DESC) AS rn FROM a) t WHERE rn = 1"),
    case("o_rank", "SELECT id, k, rank() OVER (PARTITION BY k ORDER BY v) AS r, dense_rank() OVER (PARTITION BY k ORDER BY v) AS dr FROM a"),
    case("o_row_number", "SELECT id, row_number() OVER (PARTITION BY k ORDER BY v, id) AS rn FROM a"),
    case("o_lag_lead", "SELECT id, lag(v) OVER (PARTITION BY k ORDER BY id) AS prev, lead(v, 2) OVER (PARTITION BY k ORDER BY id) AS next2 FROM a"),
    case("o_first_last", "SELECT id, first_value(v) OVER (PARTITION BY k ORDER BY id) AS fv, last_value(v) OVER (PARTITION BY k ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS lv FROM a"),
    case("o_frames", "SELECT id, sum(v) OVER (PARTITION BY k ORDER BY id ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS s3, count(*) OVER (PARTITION BY k) AS n, avg(v) OVER (ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS run FROM a"),
    case("o_rank_top", "SELECT * FROM (SELECT id, k, v, rank() OVER (PARTITION BY k ORDER BY v DESC) AS r FROM a) t WHERE r <= 2"),
    case("o_dups", "SELECT k, v, dense_rank() OVER (PARTITION BY k ORDER BY v) AS dr, count(*) OVER (PARTITION BY k) AS n FROM c"),
    case("g_distinct_filter", "SELECT k, count(DISTINCT v) FILTER (WHERE b) AS db, count(DISTINCT s) AS ds FROM a GROUP BY k"),
    on_views(
        "w_filter",
        "SELECT k, sv FROM g_basic WHERE sv > 10",
        "SELECT k, sv FROM (SELECT k, sum(v) AS sv FROM a GROUP BY k) t WHERE sv > 10",
    ),
    on_views(
        "w_level2",
        "SELECT count(*) AS groups, sum(sv) AS total FROM w_filter",
        "SELECT count(*) AS groups, sum(sv) AS total FROM (SELECT k, sum(v) AS sv FROM a GROUP BY k) t WHERE sv > 10",
    ),
    on_views(
        "w_join_table",
        "SELECT g.k, g.n, b.w FROM g_basic g JOIN b ON g.k = b.k",
        "SELECT g.k, g.n, b.w FROM (SELECT k, count(*) AS n FROM a GROUP BY k) g JOIN b ON g.k = b.k",
    ),
    on_views(
        "w_two_views",
        "SELECT x.k, x.n, y.d FROM g_basic x JOIN g_distinct y ON x.k = y.k",
        "SELECT x.k, x.n, y.d FROM (SELECT k, count(*) AS n FROM a GROUP BY k) x JOIN (SELECT k, count(DISTINCT v) AS d FROM a GROUP BY k) y ON x.k = y.k",
    ),
];

fn pick<T: Copy>(rng: &mut StdRng, values: &[T]) -> T {
    values[rng.random_range(0..values.len())]
}

fn maybe_int(rng: &mut StdRng, range: std::ops::Range<i32>) -> String {
    if rng.random_bool(0.15) {
        "NULL".into()
    } else {
        rng.random_range(range).to_string()
    }
}

fn text(rng: &mut StdRng) -> &'static str {
    pick(rng, &["NULL", "'a'", "'ab'", "'b'", "'ba'", "'c'", "'abc'"])
}

/// One random statement: inserts (with key reuse and duplicates), upserts,
/// updates of values and keys, deletes of present and absent rows.
fn statement(rng: &mut StdRng) -> String {
    let r = rng.random_range(0..8);
    match rng.random_range(0..12) {
        0 | 1 => {
            let rows: Vec<String> = (0..rng.random_range(1..6))
                .map(|_| {
                    format!(
                        "({}, {}, {}, {}, {})",
                        rng.random_range(0..40),
                        maybe_int(rng, 0..6),
                        maybe_int(rng, 0..11),
                        text(rng),
                        pick(rng, &["NULL", "true", "false"])
                    )
                })
                .collect();
            format!("INSERT INTO a VALUES {} ON CONFLICT (id) DO NOTHING", rows.join(", "))
        }
        2 => format!(
            "INSERT INTO a VALUES ({}, {}, {}, {}, true) ON CONFLICT (id) DO UPDATE SET v = excluded.v, k = excluded.k",
            rng.random_range(0..40),
            maybe_int(rng, 0..6),
            maybe_int(rng, 0..11),
            text(rng)
        ),
        3 => format!("UPDATE a SET v = v + 1 WHERE id % 7 = {r}"),
        4 => format!("UPDATE a SET k = {} WHERE id = {}", maybe_int(rng, 0..6), rng.random_range(0..40)),
        5 => format!("DELETE FROM a WHERE id IN ({}, {}, 999)", rng.random_range(0..40), rng.random_range(0..40)),
        6 => {
            let rows: Vec<String> = (0..rng.random_range(1..4))
                .map(|_| {
                    format!(
                        "({}, {}, {}, {})",
                        rng.random_range(0..25),
                        maybe_int(rng, 0..6),
                        maybe_int(rng, 0..13),
                        text(rng)
                    )
                })
                .collect();
            format!("INSERT INTO b VALUES {} ON CONFLICT (id) DO NOTHING", rows.join(", "))
        }
        7 => format!("UPDATE b SET w = {} WHERE k = {r}", maybe_int(rng, 0..13)),
        8 => format!("DELETE FROM b WHERE id % 5 = {} OR id = 999", r % 5),
        9 => {
            let row = format!("({}, {})", maybe_int(rng, 0..6), maybe_int(rng, 0..5));
            let copies = rng.random_range(1..4);
            format!("INSERT INTO c VALUES {}", vec![row; copies].join(", "))
        }
        10 => format!("DELETE FROM c WHERE k = {} AND v = {}", r % 6, rng.random_range(0..5)),
        _ => format!("UPDATE c SET v = v + 1 WHERE k = {}", r % 6),
    }
}

async fn create_views(client: &Client, cases: &[Case]) {
    for case in cases {
        client
            .batch_execute(&format!(
                "CREATE MATERIALIZED VIEW {} AS {}",
                case.name, case.view
            ))
            .await
            .unwrap_or_else(|e| panic!("{}: {e} {:?}", case.name, e.as_db_error()));
    }
}

/// A group-by over a table runs as one instance per worker.
async fn assert_instances(client: &Client, workers: usize) {
    let sql = "SELECT max(instances) FROM weir_view_operators WHERE view = 'g_basic' AND name <> 'Output'";
    let mut seen = Vec::new();
    for _ in 0..100 {
        client.batch_execute("CHECKPOINT").await.unwrap();
        seen = crate::common::column(client, sql).await;
        if seen == vec![Some(workers.to_string())] {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("g_basic runs as {seen:?} instances, not {workers}");
}

async fn check(client: &Client, round: usize, seed: u64) {
    client.batch_execute("FLUSH; BEGIN").await.unwrap();
    for case in CASES {
        let view = rows(client, &format!("SELECT * FROM {}", case.name)).await;
        let batch = rows(client, case.batch.unwrap_or(case.view)).await;
        assert_eq!(
            view, batch,
            "view {} differs from its query after round {round} (seed {seed})",
            case.name
        );
    }
    client.batch_execute("COMMIT").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_property() {
    assert!(CASES.len() >= 40, "the suite covers at least 40 views");
    let seed = match std::env::var("WEIR_PROP_SEED").as_deref() {
        Ok("random") => rand::random(),
        Ok(n) => n.parse().expect("WEIR_PROP_SEED is a number or 'random'"),
        Err(_) => 7,
    };
    let rounds: usize = std::env::var("WEIR_PROP_ROUNDS")
        .ok()
        .map(|n| n.parse().expect("WEIR_PROP_ROUNDS is a number"))
        .unwrap_or(12);
    eprintln!("view_property: seed {seed}, {rounds} rounds");
    let mut rng = StdRng::seed_from_u64(seed);
    // Two workers: views over tables run partitioned on timely workers;
    // halfway, a restart with three.
    let mut server = TestServer::start_with(&["--workers", "2"]).await;
    let mut client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE a (id INT PRIMARY KEY, k INT, v INT, s TEXT, b BOOLEAN);
             CREATE TABLE b (id INT PRIMARY KEY, k INT, w INT, t TEXT);
             CREATE TABLE c (k INT, v INT)",
        )
        .await
        .unwrap();
    // Half the views start over empty tables, the others are backfilled
    // from rows already there.
    let (early, late) = CASES.split_at(CASES.len() / 2);
    create_views(&client, early).await;
    let (mut tried, mut applied) = (0usize, 0usize);
    for round in 0..rounds {
        if round == 1 {
            create_views(&client, late).await;
            assert_instances(&client, 2).await;
        }
        // Halfway, a restart with three workers; at three quarters, with
        // one (the views then run in a single instance each).
        let restart_with = if round == rounds / 2 {
            Some(3)
        } else if round == rounds * 3 / 4 {
            Some(1)
        } else {
            None
        };
        if let Some(workers) = restart_with {
            server.set_arg("--workers", &workers.to_string());
            server.restart_after_kill().await;
            client = server.client().await;
            assert_instances(&client, workers).await;
        }
        for _ in 0..rng.random_range(4..12) {
            let sql = statement(&mut rng);
            tried += 1;
            // A key update may collide; that statement fails and changes nothing.
            if client.batch_execute(&sql).await.is_ok() {
                applied += 1;
            }
        }
        if round >= 1 {
            check(&client, round, seed).await;
        }
    }
    // The checks compared views that writes actually changed.
    assert!(
        applied * 2 >= tried,
        "only {applied} of {tried} random statements succeeded"
    );
}
