//! State written by an older Weir: read and migrated, or refused.
//!
//! `tests/fixtures/state-format-1` is a data folder written by the Weir of
//! before columnar operator state (state format 1): tables, views over
//! them (a group-by with `max`, a join, a top-N, a view on a view) and a
//! view over a finished datagen source, committed and shut down cleanly.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{assert_views_match, sorted_rows, TestServer};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/state-format-1");

/// The views of the fixture and their queries.
const VIEWS: &[(&str, &str)] = &[
    (
        "per_customer",
        "SELECT customer, count(*) AS n, sum(amount) AS total, max(amount) AS top FROM orders GROUP BY customer",
    ),
    (
        "noted",
        "SELECT o.id, o.amount, n.note FROM orders o JOIN notes n ON o.customer = n.customer",
    ),
    (
        "biggest",
        "SELECT id, amount FROM orders ORDER BY amount DESC, id LIMIT 5",
    ),
    ("on_view", "SELECT sum(n) AS orders FROM per_customer"),
];

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The newest manifest of a data folder, as JSON.
fn newest_manifest(data: &Path) -> (std::path::PathBuf, serde_json::Value) {
    let mut manifests: Vec<_> = std::fs::read_dir(data.join("manifest"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    manifests.sort();
    let path = manifests.pop().expect("a manifest");
    let json = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    (path, json)
}

#[tokio::test]
async fn views_of_an_older_state_format_are_rebuilt_from_their_inputs() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    copy_dir(Path::new(FIXTURE), &data);
    let server = TestServer::start_in(&data).await;
    let client = server.client().await;
    // The source view starts again from the source's first row and reads
    // all 500 rows (the source has ended) within a few epochs.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let position = crate::common::column(
            &client,
            "SELECT position FROM weir_source_readers WHERE view = 'per_click'",
        )
        .await;
        if position == vec![Some("500".to_owned())] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "per_click stands at {position:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_views_match(&client, VIEWS, "after the upgrade").await;
    // What the old server held for the source view, its average now a
    // `numeric` (format 3) with PostgreSQL's 16 significant digits
    // (format 4).
    let per_click = sorted_rows(&client, "SELECT k, n, lo, mean FROM per_click").await;
    let expected: Vec<Vec<Option<String>>> = [
        "0|38|12|442.6578947368421053",
        "1|53|2|505.2830188679245283",
        "2|49|9|501.8979591836734694",
        "3|51|24|482.3333333333333333",
        "4|43|6|516.8139534883720930",
        "5|44|17|511.2045454545454545",
        "6|60|5|517.2166666666666667",
        "7|57|28|523.5087719298245614",
        "8|45|8|498.6666666666666667",
        "9|60|90|550.3666666666666667",
    ]
    .iter()
    .map(|row| row.split('|').map(|c| Some(c.to_owned())).collect())
    .collect();
    assert_eq!(per_click, expected);

    // The views go on with new writes, and the next manifest is of the
    // current format.
    client
        .batch_execute(
            "INSERT INTO orders VALUES (1000, 3, 500), (1001, 42, 1);
             DELETE FROM orders WHERE id = 67;
             UPDATE notes SET note = 'z' WHERE customer = 2;
             CHECKPOINT",
        )
        .await
        .unwrap();
    assert_views_match(&client, VIEWS, "after writes").await;
    let (_, manifest) = newest_manifest(&data);
    assert_eq!(manifest["state_format"], 5);
    drop(client);
    drop(server);
    // And a restart reads its own state back.
    let server = TestServer::start_in(&data).await;
    let client = server.client().await;
    assert_views_match(&client, VIEWS, "after a restart").await;
}

#[tokio::test]
async fn state_of_a_newer_format_is_refused_with_a_clear_message() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    copy_dir(Path::new(FIXTURE), &data);
    let (path, mut manifest) = newest_manifest(&data);
    manifest["state_format"] = 99.into();
    std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run weir");
    assert!(
        !output.status.success(),
        "weir started on state it cannot read"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("newer version of Weir") && stderr.contains("state format 99"),
        "{stderr}"
    );
}
