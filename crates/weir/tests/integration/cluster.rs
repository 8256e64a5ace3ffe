//! Two processes of one timely cluster on loopback: process 0 serves
//! clients with its state on the S3 test server, process 1 only
//! computes. Every view over the sources runs as one instance per worker
//! of both processes; each process reads its own splits and holds the
//! state of its own partitions; a view that fails in the workers of both
//! processes fails alone with PostgreSQL's SQLSTATE. When process 1 dies
//! mid-stream, process 0
//! exits too, and the restarted cluster resumes from the last checkpoint:
//! the views end equal to a one-process run of the same sources.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio_postgres::error::SqlState;

use crate::common::{column, sorted_rows, TestServer};
use crate::s3::s3_server_with;

const ROWS: u64 = 300_000;

// The sources take 24 s to read, so that the kill lands mid-stream even
// on a loaded machine (at 25,000 rows/s, creating the views sometimes took
// longer than reading everything).

const SOURCES: &[&str] = &[
    "CREATE SOURCE bids (id BIGINT, auction INT, price INT) WITH (connector = 'datagen', \
     rows_per_second = '12500', total_rows = '300000', seed = '5', fields.id.kind = 'sequence', \
     fields.auction.min = '1', fields.auction.max = '500', fields.price.min = '1', \
     fields.price.max = '100000')",
    "CREATE SOURCE auctions (id BIGINT, category INT) WITH (connector = 'datagen', \
     rows_per_second = '12500', total_rows = '300000', seed = '9', fields.id.kind = 'sequence', \
     fields.category.min = '1', fields.category.max = '20')",
];

const VIEWS: &[(&str, &str)] = &[
    (
        "by_auction",
        "SELECT auction, count(*) AS n, sum(price) AS total, max(price) AS top FROM bids GROUP BY auction",
    ),
    (
        "by_category",
        "SELECT a.category, count(*) AS n, sum(b.price) AS total FROM bids b JOIN auctions a \
         ON b.auction = a.id GROUP BY a.category",
    ),
    ("dearest", "SELECT id, price FROM bids ORDER BY price DESC, id LIMIT 10"),
    (
        "by_label",
        "SELECT l.label, count(*) AS n FROM auctions a JOIN labels l ON a.category = l.category \
         GROUP BY l.label",
    ),
];

/// A table the last view reads, its rows and a change made while the
/// sources stream (which reaches the workers through process 0's worker 0).
const TABLE: &[&str] = &[
    "CREATE TABLE labels (category INT PRIMARY KEY, label TEXT)",
    "INSERT INTO labels SELECT g, 'label ' || (g % 7) FROM generate_series(1, 20) AS g",
];
const TABLE_CHANGE: &str = "UPDATE labels SET label = 'changed' WHERE category % 3 = 0";

/// Process 1 of a cluster: no clients, no store; killed when dropped.
struct Compute {
    child: Child,
}

impl Compute {
    fn spawn(cluster: &str) -> Compute {
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["--cluster", cluster, "--process", "1", "--workers", "1"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start process 1");
        Compute { child }
    }

    fn kill(&mut self) {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Compute {
    fn drop(&mut self) {
        self.kill();
    }
}

fn loopback_address() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string()
}

async fn create(server: &TestServer) {
    let client = server.client().await;
    for sql in TABLE.iter().chain(SOURCES) {
        client.batch_execute(sql).await.unwrap();
    }
    crate::common::create_views(&client, VIEWS).await;
    client.batch_execute(TABLE_CHANGE).await.unwrap();
}

/// Waits until every view has read every row of its sources.
async fn caught_up(server: &TestServer) {
    let client = server.client().await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let behind = column(
            &client,
            &format!(
                "SELECT count(*) FROM weir_source_readers WHERE position < {ROWS} AND view <> 'broken'"
            ),
        )
        .await;
        let readers = column(
            &client,
            "SELECT count(*) FROM weir_source_readers WHERE view <> 'broken'",
        )
        .await;
        if behind == vec![Some("0".into())] && readers == vec![Some("5".into())] {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "views did not catch up: {behind:?} of {readers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn contents(server: &TestServer) -> Vec<Vec<Vec<Option<String>>>> {
    let client = server.client().await;
    let mut all = Vec::new();
    for (name, _) in VIEWS {
        all.push(sorted_rows(&client, &format!("SELECT * FROM {name}")).await);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_run_the_views_as_one_process_does() {
    // The reference: one process, one worker.
    let single = TestServer::start_with(&["--workers", "1"]).await;
    create(&single).await;
    caught_up(&single).await;
    let expected = contents(&single).await;
    drop(single);
    assert_eq!(expected[0].len(), 500, "every auction has bids");

    let cluster = [loopback_address(), loopback_address()].join(",");
    let mut compute = Compute::spawn(&cluster);
    let flags = [
        "--cluster",
        cluster.as_str(),
        "--process",
        "0",
        "--workers",
        "1",
    ];
    let (mut server, _moto) = s3_server_with(&flags).await;
    create(&server).await;
    // A view that fails in its workers (of both processes) fails alone,
    // with PostgreSQL's SQLSTATE, and the cluster goes on.
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW broken AS SELECT id, price / (auction % 1) AS x FROM bids",
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client.simple_query("SELECT count(*) FROM broken").await {
            Err(e) if e.code() == Some(&SqlState::DIVISION_BY_ZERO) => break,
            Err(e) => panic!("the broken view failed with {e:?}"),
            Ok(_) => {}
        }
        assert!(Instant::now() < deadline, "the broken view did not fail");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(client);

    // Process 1 dies mid-stream: process 0 exits rather than run on
    // without it.
    read_some(&server).await;
    compute.kill();
    let status = server
        .wait_exit(Duration::from_secs(30))
        .expect("process 0 exits when process 1 dies");
    assert!(!status.success(), "{status}");

    // The restarted cluster resumes from the last checkpoint and ends
    // with the views of one process: nothing lost, nothing counted twice.
    let _compute = Compute::spawn(&cluster);
    server.restart_after_kill().await;
    caught_up(&server).await;
    assert_eq!(contents(&server).await, expected);

    // Both processes read their own splits since the restart and hold
    // their own partitions.
    let client = server.client().await;
    client.batch_execute("CHECKPOINT").await.unwrap();
    for (view, _) in VIEWS {
        let shares = sorted_rows(
            &client,
            &format!(
                "SELECT worker, process, rows_read, state_rows FROM weir_view_workers WHERE view = '{view}'"
            ),
        )
        .await;
        assert_eq!(shares.len(), 2, "{view}: {shares:?}");
        if *view == "by_auction" {
            // Each auction's group is held in exactly one process: the
            // partitions are disjoint and together hold every group.
            let state: u64 = shares
                .iter()
                .map(|s| s[3].as_ref().unwrap().parse::<u64>().unwrap())
                .sum();
            assert_eq!(state, 500, "{shares:?}");
        }
        if *view == "by_label" {
            // It reads a table (fed by worker 0) and a source.
            let state: u64 = shares
                .iter()
                .map(|s| s[3].as_ref().unwrap().parse::<u64>().unwrap())
                .sum();
            assert!(state > 0, "{shares:?}");
        }
        for (i, share) in shares.iter().enumerate() {
            assert_eq!(share[0].as_deref(), Some(i.to_string().as_str()), "{view}");
            assert_eq!(share[1].as_deref(), Some(i.to_string().as_str()), "{view}");
            let rows_read: u64 = share[2].as_ref().unwrap().parse().unwrap();
            assert!(rows_read > 0, "{view}: worker {i} read nothing: {shares:?}");
            if !["dearest", "by_label"].contains(view) {
                // A top-N runs in one instance; the others are
                // partitioned by key (the labels' 8 groups may all fall
                // in one worker's partitions).
                let state: u64 = share[3].as_ref().unwrap().parse().unwrap();
                assert!(state > 0, "{view}: worker {i} holds no state: {shares:?}");
            }
        }
    }
    let instances = column(
        &client,
        "SELECT max(instances) FROM weir_view_operators WHERE view = 'by_auction' AND name <> 'Output'",
    )
    .await;
    assert_eq!(instances, vec![Some("2".into())]);
}

/// Waits until a checkpoint holds some of the sources' rows, but not all.
async fn read_some(server: &TestServer) {
    let client = server.client().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let least = column(
            &client,
            "SELECT min(position) FROM weir_source_readers WHERE view <> 'broken'",
        )
        .await;
        let least: u64 = least[0].as_deref().unwrap_or("0").parse().unwrap();
        if least > 0 {
            assert!(
                least < ROWS,
                "the sources were read to the end before the kill"
            );
            return;
        }
        assert!(Instant::now() < deadline, "the views read nothing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
